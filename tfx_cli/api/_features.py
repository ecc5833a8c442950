"""Features of sparse autoencoders from Python: `api.features(text, sae=DIR)`.

The SAE options of the other commands are keywords of theirs: `sae` and `sae_site` with
`ablate=["features.12"]` on attend, trace, next, generate, lens, report and patch;
`steer_feature="DIR:12"` with `scale` on next, generate and trace; `site="features"`
with `sae` on patch; `sae` on attribute; `sae` on top (README "Features").
`api.train_sae(collect_dir, site=..., output=...)` trains one on a collect folder;
`api.eval_sae(corpus, sae=DIR)` judges one over a corpus (SAEBench's core scores);
`api.train_transcoder(collect_dir, layers="all", output=DIR)` trains per-layer
transcoders in circuit-tracer's layout.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._model import _model
from ..values import as_path
from ._options import checked

if TYPE_CHECKING:
    from ..core.results import (EvalSAEResult, FeaturesResult, TrainSAEResult,
                                TrainTranscoderResult)


@checked
def features(text: str, *, sae: str, sae_site: str | None = None, per_token: int = 5,
             truncate: bool = False, **model: Any) -> FeaturesResult:
    """The SAE in folder `sae` (SAELens, Gemma Scope, Gemma Scope 2 or tfx's format) run on
    `text`: per token the `per_token` most active features, L0 and how well the SAE
    reconstructs its site (FVU, cosine, error norm). `sae_site` names the site when the
    folder does not (a tfx trace name or a TransformerLens hook name).
    tensors["features.acts"] (T, F), ["features.recon"], ["features.error"]."""
    from ..core.analysis.feature_sites import check_feature_options
    from ..errors import UsageError

    if sae is None or (isinstance(sae, str) and not sae.strip()):
        raise UsageError("--sae is missing; tfx features TEXT --sae DIR (an SAE folder: "
                         "SAELens's cfg.json + sae_weights.safetensors, params.npz, ...)")
    check_feature_options(sae=sae, sae_site=sae_site, sae_used=True)
    return _model(model).features(text, sae=sae, sae_site=sae_site, per_token=per_token,
                                  truncate=truncate)


@checked
def train_sae(collect: str | Path, *, site: str, output: str | Path, k: int | None = None,
              latents: int | None = None, expansion: float | None = None,
              l1: float | None = None, lr: float = 4e-4, batch_size: int = 4096,
              steps: int | None = None, epochs: float | None = None, seed: int = 0,
              holdout: float = 0.05, skip_first: int = 0, b_dec_init: str = "median",
              dead_after: int | None = None, aux_k: int | None = None,
              aux_coef: float = 1 / 32, force: bool = False, progress: Any = None,
              checkpoint_every: int = 500,
              score_tokens: int | None = None) -> TrainSAEResult:
    """Train an SAE on the rows of `site` in the collect folder `collect` and write it to
    `output` in SAELens's format (read back with features(..., sae=output)). TopK with
    `k` (32) by default; `l1=` trains a ReLU SAE with that L1 coefficient instead.
    `latents` (4096) or `expansion` (× d_in) set the width; Adam with `lr` over `steps`
    (1000) or `epochs` batches of `batch_size` tokens; the last `holdout` of the tokens
    judge it (fvu, l0, dead). `skip_first`: leave out each window's first positions (an
    attention sink's outsized rows). Resumable: the same call continues a killed one.
    `score_tokens`: the CE-loss score (result.ce_loss_score) of the SAE written, its site
    replaced, on up to this many of the collect folder's last tokens with the model
    rebuilt from its manifest (eval_sae's definition); 0 skips it. Left out (None:
    4096 where the folder allows), a folder whose model cannot be rebuilt trains without
    the score and result.score_note says why; given, such a folder is refused."""
    from ..core.datasets.read import Activations
    from ..core.datasets.train_score import train_sae as run
    from ..errors import InputTextError, UsageError

    if collect is None:
        raise UsageError("COLLECT_DIR is missing: give the folder tfx collect wrote")
    if output is None or not str(output).strip():
        raise UsageError("-o SAE_DIR is missing: train-sae writes a folder, e.g. -o my-sae")
    if site is None or not str(site).strip():
        raise UsageError("--site is missing; name the collected site to train on, e.g. "
                         "--site blocks.3.resid_out")
    path = Path(collect).expanduser()
    if path.exists() and not path.is_dir():
        raise InputTextError(f"{path} is a file, not a tfx collect folder; train-sae reads "
                             f"the folder tfx collect writes: tfx collect {path} --select "
                             "SITE -o acts, then tfx train-sae acts")
    if not path.is_dir():
        raise InputTextError(f"{path}: no such folder; give a folder written by tfx collect")
    return run(Activations(path), score_tokens=score_tokens, site=site, output=Path(output),
               k=k, latents=latents, expansion=expansion, l1=l1, lr=lr,
               batch_size=batch_size, steps=steps, epochs=epochs, seed=seed,
               holdout=holdout, skip_first=skip_first, b_dec_init=b_dec_init,
               dead_after=dead_after, aux_k=aux_k, aux_coef=aux_coef, force=force,
               progress=progress, checkpoint_every=checkpoint_every)


@checked
def eval_sae(source: str | Path, *, sae: str | Path | None = None,
             transcoders: str | Path | None = None, sae_site: str | None = None,
             field: str = "text", max_docs: int | None = None, max_tokens: int | None = None,
             ctx: int | None = None, batch_size: int = 8, output: str | Path | None = None,
             engine: str = "local", ray_address: str | None = None,
             workers: int | None = None, gpus_per_worker: float | None = None,
             verbose: bool = False, **model: Any) -> EvalSAEResult:
    """SAEBench's core scores of the SAE (or transcoder) in folder `sae` over the corpus
    `source`: l0, fvu, explained_variance, cosine, the next-token cross-entropy clean,
    with the site zero-ablated and with it replaced by the reconstruction (ce_loss_score),
    the same for KL (kl_score), dead and dense features; tensors["eval.density"] (F).
    `transcoders` instead of `sae`: a transcoder set in circuit-tracer's layout judged
    whole, every MLP replaced at once; result.layers per layer, eval.density (L, F).
    Corpus and engine keywords as api.scan's; `output` keeps a resumable run's state."""
    from ..core.datasets.evaluate import eval_sae as run
    from ..core.datasets.evaluate_set import eval_transcoders
    from ._datasets import _corpus, _engine, _loaded, _output

    given = _judged(sae, transcoders, sae_site)
    engine = _engine(engine, ray_address, workers, gpus_per_worker, verbose)
    opened = _corpus(source, field, max_docs)
    common = dict(ctx=ctx, batch_size=batch_size, max_tokens=max_tokens,
                  output=_output(output), force=bool(model.get("force")), engine=engine)
    with engine:
        loaded, hooks = _loaded(model)
        if given == "transcoders":
            return eval_transcoders(loaded, opened, transcoders=transcoders,
                                    progress=hooks.progress, **common)
        return run(loaded, opened, sae=sae, sae_site=sae_site, progress=hooks.progress,
                   **common)


def _judged(sae, transcoders, sae_site) -> str:
    """Which of --sae and --transcoders eval-sae was given: exactly one."""
    from ..errors import UsageError

    has = lambda v: v is not None and bool(str(v).strip())
    if has(sae) and has(transcoders):
        raise UsageError("--sae and --transcoders both name what to judge; give one: --sae "
                         "DIR for one SAE or transcoder, --transcoders DIR for a whole set")
    if has(transcoders):
        if sae_site is not None:
            raise UsageError("--sae-site names an --sae folder's site; a transcoder set's "
                             "config.yaml names its own hooks: drop --sae-site")
        return "transcoders"
    if not has(sae):
        raise UsageError("--sae is missing; tfx eval-sae CORPUS --sae DIR (an SAE or "
                         "transcoder folder, e.g. one tfx train-sae wrote), or "
                         "--transcoders DIR for a transcoder set")
    return "sae"


def _collect_folder(collect, command: str) -> Path:
    from ..errors import InputTextError, UsageError

    if collect is None:
        raise UsageError("COLLECT_DIR is missing: give the folder tfx collect wrote")
    path = Path(collect).expanduser()
    if path.exists() and not path.is_dir():
        raise InputTextError(f"{path} is a file, not a tfx collect folder; {command} reads "
                             "the folder tfx collect writes")
    if not path.is_dir():
        raise InputTextError(f"{path}: no such folder; give a folder written by tfx collect")
    return path


def _layers(value: Any, option: str) -> Any:
    """train-transcoder's layers: 3, [0, 3], "0:4", "0,3" or "all" (None: not given)."""
    from ..errors import UsageError

    items = value if isinstance(value, (list, tuple)) else [value]
    if value is None or all(isinstance(v, str) or (isinstance(v, int) and
                                                   not isinstance(v, bool)) for v in items):
        return value
    raise UsageError(f"{option} {value!r} is not a layer, a list of layers, a range such as "
                     "0:4, or all")


@checked(collect=as_path, layer=_layers)
def train_transcoder(collect: str | Path, *, layer: Any = None, output: str | Path,
                     input_site: str = "ln2.out", skip: bool = False, k: int | None = None,
                     latents: int | None = None, expansion: float | None = None,
                     l1: float | None = None, lr: float = 4e-4, batch_size: int = 4096,
                     steps: int | None = None, epochs: float | None = None, seed: int = 0,
                     holdout: float = 0.05, skip_first: int = 0, b_dec_init: str = "median",
                     dead_after: int | None = None, aux_k: int | None = None,
                     aux_coef: float = 1 / 32, jumprelu: float | None = None,
                     force: bool = False, progress: Any = None,
                     checkpoint_every: int = 500,
                     score_tokens: int | None = None) -> TrainTranscoderResult:
    """Per-layer transcoders trained on the collect folder `collect` (each layer's MLP
    input `blocks.{i}.<input_site>` -> its output `blocks.{i}.ffn.out`) and written to
    `output` in circuit-tracer's layout (layer_{i}.safetensors; config.yaml once every
    layer has one). `layer`: 3, [0, 3], "0:4" or "all". `skip`: a W_skip path. TopK
    (`k`), ReLU (`l1`) or JumpReLU (`jumprelu`: its L0 penalty's coefficient). The
    trainer, options and resumption are train_sae's; held-out FVU per layer.
    `score_tokens`: each layer's CE-loss score (its MLP output replaced) and, once the
    whole set exists, the set's (every MLP replaced), as train_sae's; 0 skips them. Left
    out, 4096 tokens shared out among the layers trained (at least 512)."""
    from ..core.datasets.read import Activations
    from ..core.datasets.train_score import train_transcoder as run
    from ..errors import UsageError

    path = _collect_folder(collect, "train-transcoder")
    if output is None or not str(output).strip():
        raise UsageError("-o DIR is missing: train-transcoder writes a folder, e.g. -o "
                         "transcoders")
    return run(Activations(path), score_tokens=score_tokens, layers=layer,
               output=Path(output), input_site=input_site, skip=skip, k=k, latents=latents,
               expansion=expansion, l1=l1, lr=lr, batch_size=batch_size, steps=steps,
               epochs=epochs, seed=seed, holdout=holdout, skip_first=skip_first,
               b_dec_init=b_dec_init, dead_after=dead_after, aux_k=aux_k,
               aux_coef=aux_coef, jumprelu=jumprelu, force=force, progress=progress,
               checkpoint_every=checkpoint_every)
