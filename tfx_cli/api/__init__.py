"""The Python API: every command as a function that returns the typed result it prints.

    from tfx_cli import api

    r = api.attend("When you play game of thrones", config="toy")
    r.tensors["blocks.0.attn.pattern"]      # numpy array, dims (H, T, S)
    r.explain, r.heads, r.mask              # the result's fields, by name
    r.to_dict()                             # exactly what `tfx attend ... --json` prints

    m = api.load(config="gpt124m", seed=123)  # build (or load) once, run many stages
    m.attend("Hello, I am", layer=3, head=5)
    m.trace("Hello, I am", select=["blocks.*.attn.pattern"]).arrays()

    api.next("The capital of France is", weights="smollm2",
             ablate=["blocks.3.attn.context:h=5"])   # interventions: README "Interventions"
    api.patch("The capital of France is", corrupt="The capital of Italy is",
              answer=" Paris", wrong=" Rome", weights="smollm2").tensors["patch.effect"]

Keyword arguments are the command-line option names, with '_' for '-' (`max_new_tokens`
for --max-new-tokens). Every function that runs a model also takes the model options:
config, weights, seed, heads, layers, d_model, context, tokenizer, corpus,
no_cache_weights, force, dtype, max_memory, device, `progress` (a context-manager
factory shown while real weights load; the CLI passes its stderr progress bar) and
`notice` (called with one-line notes, such as a checkpoint being streamed from disk; the
CLI prints them on stderr). Bad values raise the same
`tfx_cli.errors.TfxError` subclasses whose one-line messages the CLI prints.

Importing this module does not import torch: the first model does.

Over a corpus: `scan`, `top`, `collect`, `activations(DIR)` and `patch(pairs=...)`
(`_datasets.py`).

Inside: `_options.py` (the model options read into a ModelSpec, and the checks made
before a model is loaded), `_model.py` (`load` and the `Model` whose methods run every
stage on one loaded model), `_commands.py` (one function per command). May import the
core (lazily, where it needs torch), render (to write a report page) and errors.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._commands import (attend, attribute, configs, count_params, embed, ffn, generate,
                        layernorm, lens, model_config, next, patch, posenc, report, tokenize,
                        trace, train)
from ._model import Model, load, report_html, write_report
from ..registry import DRAWERS

if TYPE_CHECKING:  # imported on first use (__getattr__ below); named here for readers
    from ._route import route  # mixtures of experts
    from ._datasets import activations, collect, scan, top, write_top_html
    from ._features import eval_sae, features, train_sae, train_transcoder
    from ._circuits import graph, open_graph  # attribution graphs

# the functions of the modules a stage command does not need, imported when first used,
# so that `tfx tokenize` or `tfx count-params` does not pay for the corpus, SAE and
# circuit modules
_LAZY = {"route": "_route", "activations": "_datasets", "collect": "_datasets",
         "scan": "_datasets", "top": "_datasets", "write_top_html": "_datasets",
         "eval_sae": "_features", "features": "_features", "train_sae": "_features",
         "train_transcoder": "_features", "graph": "_circuits",
         "open_graph": "_circuits"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _html(result) -> str:
    from ..render.notebook import result_html

    return result_html(result)


def _rich(result):
    from ..render.notebook import result_rich

    return result_rich(result)


# Results draw themselves (notebook HTML, Rich) with render's drawers; the core cannot
# import render, so the API hands them in (registry.DRAWERS, read by core/results).
DRAWERS.setdefault("html", _html)
DRAWERS.setdefault("rich", _rich)

__all__ = ["load", "Model", "tokenize", "configs", "count_params", "embed", "posenc",
           "attend", "layernorm", "ffn", "trace", "generate", "next", "lens", "report",
           "report_html", "write_report", "patch", "attribute", "train", "model_config",
           "route", "scan", "top", "collect", "activations", "write_top_html", "features",
           "train_sae", "graph", "open_graph", "eval_sae", "train_transcoder"]
