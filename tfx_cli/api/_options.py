"""How the API reads what it is given: every keyword checked by its kind (the one
validation layer the CLI goes through too), the model options read into a ModelSpec, and
the checks that refuse a bad value before any model is built or loaded.

`@checked` wraps every API function and Model method: each argument is read by the
checker of its declaration (tfx_cli/option_table.py), as the command of the function's
name reads it (`api.next`'s `candidates` by next's block, `api.report`'s by report's),
before the function runs. So `ablate="blocks.0.attn.out"` is one site,
`select="blocks.*.attn.pattern"` one glob, `scale="4"` the number 4, `b"hello"` the text
"hello", None (`device=None`, `k=None`) the parameter's default, and `ablate=3`,
`scale="x"`, `candidates=0` or `truncate="yes"` raise the tfx_cli.errors class (and
message) the command line gives for the same value. A parameter that needs more than its
declaration passes its own: `@checked(layer=_layers)`; a function named unlike its
command names it: `@checked(command="patch")`.
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable

from ..core.spec import SPEC_DEFAULTS, SPEC_FIELDS, ModelSpec, spec_config
from ..errors import InputTextError, UsageError
from ..option_table import checker, checkers, options_of
from ..values import as_flag, as_float, as_int, as_path, as_text, as_texts


def _whole(value, option):
    return as_int(value, option)


def _finite(value, option):
    """A number that is neither infinite nor NaN (a rate, a fraction, a width factor)."""
    return as_float(value, option, finite=True)


def _hook(value, option):
    """A function tfx calls back (progress, notice), or None for none."""
    if value is None or callable(value):
        return value
    raise UsageError(f"{option.lstrip('-')} takes a function (or None), not "
                     f"{type(value).__name__} {value!r:.60}")


# What the API reads beside the declared options: its hooks, and the options of the
# commands that declare theirs in their own modules (train-transcoder's).
API_KINDS: dict[str, Callable[[Any, str], Any]] = {
    "progress": _hook, "notice": _hook,
    "checkpoint_every": lambda v, o: as_int(v, o, minimum=1),  # the trainers'
    # tfx train-transcoder (its `layer` takes its own kind: a layer, a list of them, a
    # range or "all")
    "input_site": as_text, "skip": as_flag, "jumprelu": _finite,
}
# positional where no declaration says so (api.activations' folder)
_ARGUMENTS = {"collect": "COLLECT_DIR", "path": "DIR"}


def option_kinds(command: str | None = None) -> dict[str, Callable[[Any, str], Any]]:
    """keyword -> its checker, as `command` reads it (None: the shared options)."""
    return {**API_KINDS, **checkers(command)}


def option_name(keyword: str, command: str | None = None) -> str:
    """How the command line spells a keyword: --max-new-tokens, or TEXT."""
    option = options_of(command).get(keyword)
    if option is not None:
        return option.spelled
    return _ARGUMENTS.get(keyword) or "--" + keyword.replace("_", "-")


def read_option(keyword: str, value: Any, kinds: dict | None = None,
                command: str | None = None) -> Any:
    """`value` read by its keyword's kind, as `command` declares it (unchanged when the
    keyword has none)."""
    option = options_of(command).get(keyword)
    kind = (kinds or {}).get(keyword) or (
        API_KINDS.get(keyword) if option is None else checker(option))
    if kind is None:
        return value
    return kind(value, option.spelled if option is not None else option_name(keyword))


def checked(fn: Callable | None = None, *, command: str | None = None,
            **kinds: Callable[[Any, str], Any]):
    """Read every argument of `fn` (and of its **model options) by its kind before `fn`
    runs, as `command` (default: fn's name, train_sae -> train-sae) reads it; `kinds`
    gives a parameter a kind of its own."""
    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        name = command or fn.__name__.replace("_", "-")

        def read(keyword, value):
            return read_option(keyword, value, kinds, name)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs)
            for key, value in bound.arguments.items():
                param = signature.parameters[key]
                if param.kind is param.VAR_KEYWORD:
                    bound.arguments[key] = {k: read(k, v) for k, v in value.items()}
                elif key != "self":
                    if value is None and param.default is not None and \
                            param.default is not param.empty:
                        value = param.default  # None is "not given": the default
                    bound.arguments[key] = read(key, value)
            return fn(*bound.args, **bound.kwargs)

        return call

    return wrap(fn) if fn is not None else wrap


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
    # None is "not given": the default (device=None runs on the CPU)
    options = {k: read_option(k, v) for k, v in options.items()
               if v is not None or SPEC_DEFAULTS[k] is None}
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
    text = as_text(text, what)
    if not text.strip():
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
