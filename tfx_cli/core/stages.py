"""One function per stage, each returning a Result; plus the shared load/encode/run steps.

A stage function tokenizes, builds or loads the model (cached per process), runs the
forward pass recording only the names it needs, and packs a Result for render.emit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import torch

from ..errors import ConfigError, InputTextError, RangeError, WeightsError
from .config import ModelConfig, resolve_config, with_overrides
from .model import Transformer, build_model
from .trace import Result, Trace, check_globs

torch.set_grad_enabled(False)  # tfx only ever runs inference


@dataclass
class Loaded:
    """A model ready to run: its config, module, tokenizer, and how it was obtained."""

    cfg: ModelConfig
    model: Transformer
    tokenizer: object
    info: dict  # the envelope's "model" object


_CACHE: dict = {}


def load_config(spec) -> ModelConfig:
    """The config a spec asks for: a preset or JSON file, with size overrides applied."""
    if spec.weights:
        if spec.config:
            raise ConfigError("--config and --weights both given; real weights bring their "
                              "own architecture, so drop --config")
        changed = [f"--{k.replace('_', '-')}" for k, v in spec.overrides.items() if v is not None]
        if changed:
            raise ConfigError(f"{', '.join(changed)} cannot change a checkpoint's shape; "
                              "drop it, or use --config for random weights")
        from .weights import checkpoint_config  # torch-light until tensors are read

        return checkpoint_config(spec.weights)
    return with_overrides(resolve_config(spec.config), **spec.overrides)


def load(spec, *, text: str | None = None, progress=None) -> Loaded:
    """Tokenizer + model for a spec. Random weights come from spec.seed."""
    from .tokenizers import get_tokenizer

    cfg = load_config(spec)
    tokenizer = get_tokenizer(spec.tokenizer, default=cfg.tokenizer, corpus_text=text,
                              corpus_path=spec.corpus, weights=spec.weights)
    if not spec.weights and tokenizer.vocab_size != cfg.vocab_size:
        # word/char/byte vocabularies come from the text: size the random table to fit
        cfg = replace(cfg, vocab_size=tokenizer.vocab_size)
    key = (cfg, spec.weights, None if spec.weights else spec.seed, spec.no_cache_weights)
    if key not in _CACHE:
        _CACHE.clear()  # one model per process is plenty
        if spec.weights:
            from .weights import load_weights

            model = load_weights(spec.weights, cfg, use_cache=not spec.no_cache_weights,
                                 progress=progress)
        else:
            model = build_model(cfg, spec.seed)
        _CACHE[key] = model
    info = {"config": cfg.name, "weights": spec.weights,
            "seed": None if spec.weights else spec.seed, **cfg.to_dict()}
    return Loaded(cfg, _CACHE[key], tokenizer, info)


def encode(loaded: Loaded, text: str, *, truncate: bool = False) -> list[int]:
    ids = loaded.tokenizer.encode(text)
    if not ids:
        raise InputTextError("the text has no tokens; give at least one word")
    limit = loaded.cfg.context_length
    if len(ids) > limit:
        if not truncate:
            raise InputTextError(f"the text is {len(ids)} tokens but the context length is "
                                 f"{limit}; shorten it or pass --truncate to keep the last "
                                 f"{limit} tokens")
        ids = ids[-limit:]  # as seed 004's generate crops its context
    too_big = [i for i in ids if i >= loaded.cfg.vocab_size]
    if too_big:
        raise InputTextError(f"token id {too_big[0]} is outside the model's vocabulary of "
                             f"{loaded.cfg.vocab_size}; use the tokenizer that matches the model")
    return ids


def input_info(loaded: Loaded, text: str, ids: list[int]) -> dict:
    return {"text": text, "tokens": loaded.tokenizer.pieces(ids), "ids": list(ids)}


def check_range(name: str, value: int | None, n: int, option: str) -> None:
    if value is not None and not 0 <= value < n:
        raise RangeError(f"{option} {value} is out of range: this model has {n} {name} "
                         f"(0 to {n - 1})")


def run(loaded: Loaded, ids: list[int], select: Iterable[str], *, keep="auto",
        stop_after: int | None = None, validate: bool = True, **kw) -> Trace:
    """One forward pass recording the names that match `select`."""
    select = list(select)
    if validate:
        check_globs(select, loaded.model.tap_names())
    with loaded.model.record(select) as trace, torch.inference_mode():
        loaded.model(torch.tensor([ids]), keep=keep, stop_after=stop_after, **kw)
    return trace


def result(command: str, loaded: Loaded, text: str, ids: list[int], trace: Trace,
           scalars: dict | None = None, view: str | None = None) -> Result:
    return Result(command=command, model=loaded.info, input=input_info(loaded, text, ids),
                  tensors=trace, result=scalars or {}, view=view)


# -- stages -----------------------------------------------------------------------
def trace(spec, text: str, select: list[str], *, truncate: bool = False) -> Result:
    """The whole forward pass, recording only what the globs select."""
    loaded = load(spec, text=text)
    ids = encode(loaded, text, truncate=truncate)
    tr = run(loaded, ids, select or ["*"])
    return result("trace", loaded, text, ids, tr,
                  {"selected": tr.names(), "n_selected": len(tr)})


__all__ = ["Loaded", "load", "load_config", "encode", "run", "result", "trace",
           "check_range", "input_info", "WeightsError"]
