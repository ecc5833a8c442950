"""api.graph: the attribution graph of a text's next token, on transcoders;
api.open_graph: one read back from its graph.json."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ._model import _model
from ._options import _text, checked

if TYPE_CHECKING:
    from ..core.results.circuits import GraphResult


@checked
def graph(text: str, *, transcoders: str, max_logits: int = 10, logit_prob: float = 0.95,
          targets: Sequence[str] | None = None, max_features: int | None = 7500,
          node_threshold: float = 0.8, edge_threshold: float = 0.98,
          save: str | None = None, truncate: bool = False,
          labels: Sequence[str] | None = None, **model: Any) -> "GraphResult":
    """The attribution graph of `text`'s next token on the transcoder set `transcoders`
    (circuit-tracer's layout): nodes (features, errors, tokens, logits) pruned to
    `node_threshold` / `edge_threshold` of the influence, the two scores, and tensor
    graph.adjacency (targets × sources in result.nodes order). `save`: the unpruned graph
    as safetensors."""
    from ..core.circuits.run import graph as run_graph

    loaded = _model(model)._loaded
    return run_graph(loaded, _text(text), transcoders=str(transcoders),
                     max_logits=max_logits, logit_prob=logit_prob,
                     target=list(targets) if targets else None, max_features=max_features,
                     node_threshold=node_threshold, edge_threshold=edge_threshold,
                     save=None if save is None else str(save), truncate=truncate,
                     labels=[str(x) for x in labels] if labels else None,
                     progress=model.get("progress"))


def open_graph(path: str | Path) -> "GraphResult":
    """A graph file read back (`tfx graph --open`): the graph.json `tfx graph -o` or
    circuit-tracer's create_graph_files wrote (the layout Neuronpedia serves), as the
    result api.graph gives: nodes (a feature's clerp its label), tensor graph.adjacency
    from the links, the paths; the scores where the file holds them (None in
    circuit-tracer's files). Runs no model; draws itself in Jupyter as api.graph's does."""
    from ..core.circuits.graphfile import open_graph as read_graph
    from ..errors import UsageError

    if path is None or not isinstance(path, (str, Path)):
        raise UsageError("api.open_graph needs the path of a graph.json, e.g. "
                         "api.open_graph(\"graph.json\")")
    return read_graph(path)


def feature_edits(model_options: dict, text: str, *, transcoders, set_feature,
                  freeze_attention: bool = True, constrained_layers: str | None = None,
                  truncate: bool = False, no_cache: bool = False,
                  allow_inactive: bool = False):
    """The context in which next's or generate's own first forward pass runs with
    transcoder features set (`set_feature`: LAYER:POS:FEATURE=VALUE strings), as
    circuit-tracer's feature_intervention; positions are the graph's: they count the ids
    `tfx graph` runs (with_bos: a special token first when the text starts with none),
    which next and generate run too when given `transcoders`; a feature not active at its
    position (in the plain run) is refused unless `allow_inactive`. A null context when
    nothing is set (with `transcoders` alone: the set is read and checked, the run is the
    graph's plain one)."""
    from contextlib import nullcontext

    from ..errors import UsageError

    if not set_feature:
        if constrained_layers is not None or allow_inactive:
            raise UsageError("--constrained-layers and --allow-inactive go with "
                             "--set-feature LAYER:POS:FEATURE=VALUE; add one, or drop them")
        if transcoders is not None:  # the graph's plain run: its model and set checked
            _transcoders(model_options, transcoders)
        return nullcontext()
    if transcoders is None:
        raise UsageError("--set-feature needs --transcoders DIR (the transcoders whose "
                         "features it sets)")
    if no_cache:
        raise UsageError("--set-feature changes the prompt's pass, which later steps read "
                         "from the KV cache; drop --no-cache")
    from ..core.analysis.common import encode
    from ..core.circuits.intervene import check_active, intervening, parse_set_feature

    loaded, tc = _transcoders(model_options, transcoders)
    ids = encode(loaded, _text(text), truncate=truncate, bos=True)
    changes = parse_set_feature(list(set_feature), n_layers=tc.n_layers, width=tc.width,
                                n_tokens=len(ids))
    constrained = _layer_range(constrained_layers, tc.n_layers)
    if not allow_inactive:
        check_active(loaded.model, ids, tc, changes, list(set_feature))
    return intervening(loaded.model, ids, tc, changes, freeze_attention=freeze_attention,
                       constrained=constrained)


def _transcoders(model_options: dict, transcoders):
    """The model (one the replacement model is written for) and its transcoder set."""
    from ..core.analysis.replacement import open_transcoders

    loaded = _model(model_options)._loaded
    return loaded, open_transcoders(loaded, transcoders, "--transcoders")


def _layer_range(text: str | None, n_layers: int) -> range | None:
    from ..errors import UsageError

    if text is None:
        return None
    first, sep, last = str(text).partition(":")
    try:
        span = range(int(first), int(last)) if sep else range(int(first), int(first) + 1)
    except ValueError:
        raise UsageError(f"--constrained-layers {text} is not START:END; e.g. "
                         f"--constrained-layers 0:{n_layers}") from None
    if not span or span.start < 0 or span.stop > n_layers:
        raise UsageError(f"--constrained-layers {text} is not a range of this model's "
                         f"{n_layers} layers; e.g. --constrained-layers 0:{n_layers}")
    return span
