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
    influence: float  # cumulative share of the influence on the logits (circuit-tracer's)
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
    command: ClassVar[str] = "graph"
    transcoders: str
    feature_input_hook: str
    feature_output_hook: str
    n_layers: int
    n_active_features: int
    n_selected_features: int
    node_threshold: float
    edge_threshold: float
    replacement_score: float
    completeness_score: float
    nodes: list[GraphNode]
    n_edges: int
    seconds: float
    paths: list = internal(default=None)
    saved: str | None = optional()
