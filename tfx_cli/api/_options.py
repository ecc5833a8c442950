"""How the API reads what it is given: every keyword checked by its kind (the one
validation layer the CLI goes through too), the model options read into a ModelSpec, and
the checks that refuse a bad value before any model is built or loaded.

`@checked` wraps every API function and Model method: each argument whose name is in
OPTION_KINDS is read by that kind's checker (tfx_cli/values.py) before the function runs,
so `ablate="blocks.0.attn.out"` is one site, `select="blocks.*.attn.pattern"` one glob,
`scale="4"` the number 4, `b"hello"` the text "hello", None (`device=None`, `k=None`)
the parameter's default, and `ablate=3`, `scale="x"` or `truncate="yes"` raise the
tfx_cli.errors class (and message) the command line gives for the same value. A command's parameters that need more than
their name says pass their own: `@checked(text=as_path)`.
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable

from ..core.spec import SPEC_DEFAULTS, SPEC_FIELDS, ModelSpec, spec_config
from ..errors import InputTextError, UsageError
from ..option_table import OPTIONS, checkers
from ..values import (as_flag, as_float, as_int, as_names, as_path, as_text, as_texts,
                      as_units)


def _positive(value, option):
    return as_int(value, option, minimum=1)


def _whole(value, option):
    return as_int(value, option)


def _count(value, option):
    return as_int(value, option, minimum=0)


def _number(value, option):
    return as_float(value, option)


def _finite(value, option):
    """A number that is neither infinite nor NaN (a rate, a fraction, a width factor)."""
    return as_float(value, option, finite=True)


def _hook(value, option):
    """A function tfx calls back (progress, notice), or None for none."""
    if value is None or callable(value):
        return value
    raise UsageError(f"{option.lstrip('-')} takes a function (or None), not "
                     f"{type(value).__name__} {value!r:.60}")


def _maybe_flag(value, option):
    """A flag whose None means "leave it" (count-params --tie/--no-tie)."""
    return None if value is None else as_flag(value, option)


# keyword -> the checker its value goes through; the message names the option as the
# command line spells it (`max_new_tokens` -> --max-new-tokens; TEXT for the text).
# The shared options (model, edits, corpus, engine, display, --truncate, --target ...)
# take theirs from their declarations (tfx_cli/option_table.py), the ones the command
# line reads too; what follows are the options one command takes.
OPTION_KINDS: dict[str, Callable[[Any, str], Any]] = {
    # the input texts, and options that take one text
    "text": as_text, "prompt": as_text, "clean": as_text, "corrupt": as_text,
    "kv": as_text, "answer": as_text, "wrong": as_text, "mask": as_text, "which": as_text,
    "site": as_text, "show_layers": lambda v, o: v if not isinstance(v, (str, bytes))
    else as_text(v, o),
    # names, one or many, comma lists allowed (a string is one item)
    "select": as_names, "show": as_names,
    # texts, one or many (commas are part of a text)
    "stop": as_texts,
    # numbers
    "layer": _whole, "head": _whole, "query_pos": _whole, "valid_lens": _whole,
    "length": _whole, "max_new_tokens": _whole, "top_k": _whole, "candidates": _count,
    "batch": _positive, "seq_len": _positive, "vocab_size": _whole, "steps": _whole,
    "temperature": _number, "top_p": _number, "lr": _number,
    # flags
    "explain": as_flag, "cross": as_flag, "per_head": as_flag, "no_cache": as_flag,
    "ignore_eos": as_flag, "verify": as_flag, "tie": _maybe_flag,
    # files
    "output": as_path, "pairs": as_path, "inputs": as_path, "collect": as_path,
    "html": as_path,
    # SAEs and their training, top: the type only; each command checks its own ranges,
    # with its own words
    "b_dec_init": as_text, "units": as_units, "k": _whole, "around": _whole,
    "shard_tokens": _whole, "per_token": _whole, "latents": _whole, "aux_k": _whole,
    "dead_after": _whole, "skip_first": _whole, "expansion": _finite, "l1": _finite,
    "holdout": _finite, "aux_coef": _finite, "epochs": _finite, "checkpoint_every": _positive,
    # eval-sae and train-transcoder (train-transcoder's `layer` takes its own kind: a
    # layer, a list of them, a range or "all")
    "input_site": as_text, "skip": as_flag, "jumprelu": _finite,
    # the API's hooks: functions, or None
    "progress": _hook, "notice": _hook,
    # the shared options, from their one declaration
    **checkers(),
}
# positional on the CLI (and api.activations' folder)
_ARGUMENTS = {"text": "TEXT", "prompt": "PROMPT", "clean": "CLEAN", "collect": "COLLECT_DIR",
              "path": "DIR"}


def option_name(keyword: str) -> str:
    """How the command line spells a keyword: --max-new-tokens, or TEXT (a declared
    option as declared: `targets` is --target)."""
    declared = OPTIONS.get(keyword)
    if keyword not in _ARGUMENTS and declared is not None and declared.flags:
        return declared.flags[0].split("/")[0]
    return _ARGUMENTS.get(keyword) or "--" + keyword.replace("_", "-")


def read_option(keyword: str, value: Any, kinds: dict | None = None) -> Any:
    """`value` read by its keyword's kind (unchanged when the keyword has none)."""
    kind = (kinds or {}).get(keyword) or OPTION_KINDS.get(keyword)
    return value if kind is None else kind(value, option_name(keyword))


def checked(fn: Callable | None = None, **kinds: Callable[[Any, str], Any]):
    """Read every argument of `fn` (and of its **model options) by its kind before `fn`
    runs; `kinds` gives a parameter a kind of its own (train's text is a path)."""
    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs)
            for name, value in bound.arguments.items():
                param = signature.parameters[name]
                if param.kind is param.VAR_KEYWORD:
                    bound.arguments[name] = {k: read_option(k, v, kinds)
                                             for k, v in value.items()}
                elif name != "self":
                    if value is None and param.default is not None and \
                            param.default is not param.empty:
                        value = param.default  # None is "not given": the default
                    bound.arguments[name] = read_option(name, value, kinds)
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
