"""`tfx count-params`: parameters, weight memory and forward FLOPs, from the config alone.

Nothing is built and torch is never imported, unless --verify asks to build the model and
count its parameters for real.
"""
from typing import Annotated, Optional

import typer

from ..options import JsonOpt

ConfigOpt = Annotated[Optional[str], typer.Option(
    "--config", "-c", show_default=False,
    help="Preset name (see `tfx configs`) or a JSON config file. Default: gpt124m.")]
HeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads", min=1, show_default=False, help="Override the head count.")]
LayersOpt = Annotated[Optional[int], typer.Option(
    "--layers", min=1, show_default=False, help="Override the layer count.")]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", min=1, show_default=False,
    help="Override d_model (d_ff follows when it was 4 × d_model).")]
ContextOpt = Annotated[Optional[int], typer.Option(
    "--context", min=1, show_default=False, help="Override the context length.")]
TieOpt = Annotated[Optional[bool], typer.Option(
    "--tie/--no-tie", show_default=False,
    help="Tie the output head to the token embedding (counted once), or untie it. "
         "Default: the config's.")]
SeqLenOpt = Annotated[Optional[int], typer.Option(
    "--seq-len", min=1, show_default=False,
    help="Sequence length T for the FLOP count. Default: the context length.")]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Also build the model (shapes only, no weight memory; imports torch) "
                     "and check its parameter count against the analytic one.")]


def count_params(config: ConfigOpt = None, heads: HeadsOpt = None, layers: LayersOpt = None,
                 d_model: DModelOpt = None, context: ContextOpt = None, tie: TieOpt = None,
                 seq_len: SeqLenOpt = None, verify: VerifyOpt = False,
                 json_out: JsonOpt = False) -> None:
    """Count parameters, weight memory and forward FLOPs per token, from the config alone.

    Tied weights are counted once.
    FLOPs count matmuls only; a multiply-add is 2 FLOPs.
    Attention's QKᵀ and pattern·V are counted as the full T×T product.

    Examples:

      tfx count-params

      tfx count-params --config gpt2-xl --seq-len 128

      tfx count-params --tie --json | jq .result.total

      tfx count-params --config smollm2-135m --verify
    """
    from ..core.config import resolve_config, with_overrides
    from ..core.params import analyse
    from ..core.trace import Result
    from ..errors import RangeError, TfxError
    from ..render.emit import emit

    cfg = with_overrides(resolve_config(config), heads=heads, layers=layers, d_model=d_model,
                         context=context, tie=tie)
    if seq_len is not None and seq_len > cfg.context_length:
        raise RangeError(f"--seq-len {seq_len} is longer than the context length "
                         f"{cfg.context_length:,}; pass a shorter --seq-len or raise --context")
    result = analyse(cfg, seq_len)
    if verify:
        result["verify"] = verify_with_model(cfg, result["total"])
    emit(Result(command="count-params", model={**cfg.to_dict(), "config": cfg.name},
                result=result), json=json_out)
    if verify and not result["verify"]["verified"]:
        check = result["verify"]
        raise TfxError(f"the built model has {check['model_params']:,} parameters, the "
                       f"analytic count expects {check['expected']:,}; please report this")


def verify_with_model(cfg, analytic_total: int) -> dict:
    """Build the model on torch's meta device (every shape, no storage) and compare.

    The meta device makes even gpt2-xl instant and free: parameter counts depend on
    shapes only, and the modules are built by the same code as real ones.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import MissingPackageError

        raise MissingPackageError("--verify builds the model and needs torch: "
                                  "pip install torch") from None
    from ..core.model import build_model
    from ..core.params import count_params

    model = build_model(cfg, device="meta")
    built = {name: p.numel() for name, p in model.named_parameters()}  # tied ones once
    expected = count_params(cfg).named_counts()
    notes = []
    if not any(name.startswith("pooler.") for name in built):
        pooler = {k: v for k, v in expected.items() if k.startswith("pooler.")}
        if pooler:  # counted analytically, but the core does not run BERT's pooler
            notes.append(f"the core builds no pooler: {sum(pooler.values()):,} parameters "
                         "counted but not compared")
            expected = {k: v for k, v in expected.items() if k not in pooler}
    mismatched = sorted(k for k in set(built) | set(expected) if built.get(k) != expected.get(k))
    return {
        "verified": not mismatched and sum(built.values()) == sum(expected.values()),
        "model_params": sum(built.values()),
        "expected": sum(expected.values()),
        "analytic_total": analytic_total,
        "modules": sum(1 for _ in model.modules()),  # Tap identities included
        "modules_with_parameters": sum(
            1 for m in model.modules() if next(m.parameters(recurse=False), None) is not None),
        "parameter_tensors": len(built),
        "mismatched": mismatched,
        "notes": notes,
        "built_on": "meta device (shapes only)",
    }
