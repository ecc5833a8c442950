"""The model options every API function takes, read into a ModelSpec, and the checks that
refuse a bad value before any model is built or loaded."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.spec import SPEC_FIELDS, ModelSpec, spec_config
from ..errors import InputTextError, UsageError


class _Hooks(dict):
    """progress and notice: how a call shows its long work and its notes."""

    @property
    def progress(self):
        return self.get("progress")


def _spec(options: dict[str, Any]) -> tuple[ModelSpec, _Hooks]:
    """The model options of a call -> (ModelSpec, hooks for stages.load); unknown names
    are a TypeError naming the valid ones."""
    options = dict(options)
    hooks = _Hooks(progress=options.pop("progress", None), notice=options.pop("notice", None))
    unknown = sorted(set(options) - set(SPEC_FIELDS))
    if unknown:
        raise TypeError(f"unknown model option(s) {', '.join(unknown)}; valid: "
                        f"{', '.join(SPEC_FIELDS)}, progress, notice")
    for name in ("config", "weights", "tokenizer"):
        if options.get(name) is not None and not str(options[name]).strip():
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is empty; give a value, or leave {flag} out for the "
                             "default")
    if options.get("corpus") is not None:
        options["corpus"] = Path(options["corpus"])
    from ..core.memory import check_device, check_dtype, parse_size

    check_dtype(options.get("dtype", "float32"))
    check_device(options.get("device", "cpu"))
    if options.get("max_memory") is not None:
        parse_size(options["max_memory"])
    return ModelSpec(**options), hooks


def _text(text: str | None, what: str = "text") -> str:
    if text is None:
        raise InputTextError(f"no {what} given; pass it as an argument or '-' to read stdin")
    if not isinstance(text, str) or not text.strip():
        raise InputTextError(f"the {what} is empty; give at least one word, e.g. \"Hello\"")
    return text


def _check_edits(**edits: Any) -> None:
    """Refuse impossible intervention options before a model is loaded (an SAE's
    features among them: core/analysis/feature_sites.py)."""
    if any(v is not None for k, v in edits.items() if k != "sae_used"):
        from ..core.analysis.feature_sites import check_options

        check_options(**edits)


def _target(target: str | None) -> str | None:
    """--target: the decoder's input; empty means the start token alone."""
    if target is not None and not isinstance(target, str):
        raise UsageError("--target must be text")
    return target


def _one_of_text_or_length(text, length) -> None:
    if (text is None) == (length is None):
        raise InputTextError("give TEXT or --length N (one of them), e.g. "
                             "`tfx posenc --length 16`")


def _check_layer(model: dict, layer: int, *, target: str | None = None,
                 stack: str | None = None) -> None:
    """A --layer past the model is refused from its config (a checkpoint's header),
    before any weights are read: a 27 GB checkpoint answers at once. An encoder–decoder
    counts the layers of the stack shown (the decoder's with --target)."""
    from ..core.analysis.common import check_range

    spec, hooks = _spec(model)
    cfg = spec_config(spec, progress=hooks.progress)
    decoder = cfg.is_encoder_decoder and (stack == "decoder" or
                                          (stack is None and target is not None))
    check_range("layer", layer, cfg.n_decoder_layers if decoder else cfg.n_layers, "--layer")


def _needs_head(model: dict, command: str) -> None:
    """Refuse a model without an output head before building or loading it."""
    from ..core.analysis.generate import need_head

    spec, hooks = _spec(model)
    need_head(spec_config(spec, progress=hooks.progress), command)


def _masked_lm_checks(model: dict, command: str, text: str | None = None) -> None:
    """Before building or loading: a masked LM for a command that predicts the token after
    the text (generate, patch, attribute), and a causal model given a mask to fill
    (`text` given: next)."""
    from ..core.analysis.fillmask import check_mask_text, need_causal

    spec, hooks = _spec(model)
    cfg = spec_config(spec, progress=hooks.progress)
    if text is not None:
        check_mask_text(cfg, text)
    else:
        need_causal(cfg, command)
