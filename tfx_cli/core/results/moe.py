"""Results for mixtures of experts: `tfx route` (which experts each token goes to, each
layer's load, the router's entropy) and count-params' active-parameter summary."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from . import Result

if TYPE_CHECKING:
    from .counts import BlockCount


@dataclass
class MoeCount:
    """count-params of a mixture of experts: what one token uses of it."""

    n_experts: int
    experts_per_token: int
    moe_layers: list[int]
    dense_layers: list[int]  # layers with a dense FFN instead (DeepSeek-V3's first three)
    expert_params: int  # one expert
    active_params: int  # per token: the total less the experts a token skips
    active_share: float  # active_params / total
    # less the token-embedding table (a token reads one row of it), as some model cards
    # count (gpt-oss); the same as active_params when the head is that table (tied)
    active_without_embedding: int
    dense_per_block: BlockCount | None  # a dense layer's block (per_block is an MoE one's)
    active_flops_per_token: int  # = flops_per_token: the router, k experts, shared
    every_expert_flops_per_token: int  # were every expert run on every token


@dataclass
class LayerRouting:
    """One MoE layer over the text."""

    layer: int
    load: list[int]  # tokens routed to each expert (sums to T * k)
    load_share: list[float]  # load / (T * k): each expert's share of the layer's routing
    unused: list[int]  # experts no token went to
    busiest: int  # the expert with the largest load (the lowest index on a tie)
    entropy: float  # the router's mean entropy over the tokens, nats
    max_entropy: float  # ln(E): a router that cannot choose
    balance: float  # E * Σ share²: 1 when every expert takes an equal share, E when one takes all


@dataclass(kw_only=True)
class RouteResult(Result):
    """`tfx route TEXT`: the router of every MoE layer on every token.

    tensors: route.experts (L, T, k) the experts chosen, best first; route.weights
    (L, T, k) what each one's output is multiplied by; route.probs (L, T, E) the
    router's score of every expert (softmax, or DeepSeek-V3's sigmoid); route.load
    (L, E) tokens per expert; route.entropy (L, T) the router's entropy per token
    (nats, of its softmax over every expert)."""

    command: ClassVar[str] = "route"
    n_experts: int
    experts_per_token: int
    router: str  # softmax | softmax_topk | sigmoid
    layers: list[int]  # the MoE layers, the rows of every route.* tensor
    dense_layers: list[int]
    routing: list[LayerRouting]
    shared_expert: bool
