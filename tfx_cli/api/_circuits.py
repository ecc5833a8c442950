"""api.graph: the attribution graph of a text's next token, on transcoders."""
from __future__ import annotations

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
                     labels=[str(x) for x in labels] if labels else None)
