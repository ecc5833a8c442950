"""The result of `tfx graph`: an attribution graph's nodes (pruned), its scores and the
pruned adjacency (tensor graph.adjacency, targets × sources in `nodes` order)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import Result, internal, optional


@dataclass
class GraphNode:
    kind: str  # feature | error | embedding | logit
    layer: int | None  # features and errors: 0..L-1
    pos: int
    feature: int | None
    token: int | None  # embedding: the input token; logit: the target token
    text: str | None
    activation: float | None
    # cumulative share of the influence on the logits (circuit-tracer's); a graph file
    # keeps none for its logits
    influence: float | None
    probability: float | None = optional()  # logit targets
    label: str | None = optional()  # features: strongest output tokens or top examples


@dataclass
class PathStep:
    """One node of the terminal's tree: `node` (index into nodes), the edge weight into
    its parent, and its own strongest inputs."""

    node: int
    weight: float
    inputs: list["PathStep"]


@dataclass(kw_only=True)
class GraphResult(Result):
    """A graph computed (`tfx graph TEXT`) or read back (`--open`, then `opened` is the
    file): the unpruned graph `--save` wrote, pruned again, gives all a run gives; a
    graph.json lacks what its writer left out (circuit-tracer's files have no scores,
    transcoders, edge threshold or feature counts), and those are None."""

    command: ClassVar[str] = "graph"
    transcoders: str | None
    feature_input_hook: str | None
    feature_output_hook: str | None
    n_layers: int
    n_active_features: int | None
    n_selected_features: int | None
    node_threshold: float | None
    edge_threshold: float | None
    replacement_score: float | None
    completeness_score: float | None
    nodes: list[GraphNode]
    n_edges: int
    seconds: float = internal(default=0.0)  # wall time of the graph (not in the JSON: runs differ)
    paths: list = internal(default=None)
    saved: str | None = optional()  # the unpruned graph's file (tfx graph --save)
    opened: str | None = optional()  # the file read (tfx graph --open)
    # how many of the text's first tokens --truncate left out (None: none)
    truncated: int | None = optional()


def graph_payload(result: GraphResult) -> dict:
    """The mapping the graph.json writer and the HTML page read: prompt, tokens, ids,
    model, n_layers, nodes (with `probability` on logit targets), the pruned adjacency
    (float32, targets × sources), both scores, both thresholds, the transcoders, their
    hooks, the features' labels ("(layer, feature)" -> text) and the feature counts."""
    import numpy as np

    labels = {f"({n.layer}, {n.feature})": n.label for n in result.nodes
              if n.kind == "feature" and n.label}
    return {"prompt": result.input.text, "tokens": list(result.input.tokens),
            "ids": list(result.input.ids), "model": result.model.config if result.model else "",
            "n_layers": result.n_layers,
            "nodes": [vars(n).copy() for n in result.nodes],
            "adjacency": np.asarray(result.tensors["graph.adjacency"], dtype=np.float32),
            "replacement_score": result.replacement_score,
            "completeness_score": result.completeness_score,
            "node_threshold": result.node_threshold, "edge_threshold": result.edge_threshold,
            "transcoders": result.transcoders, "feature_input_hook": result.feature_input_hook,
            "feature_output_hook": result.feature_output_hook, "labels": labels,
            "n_active_features": result.n_active_features,
            "n_selected_features": result.n_selected_features}
