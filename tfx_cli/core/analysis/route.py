"""`tfx route TEXT`: the router of every mixture-of-experts layer on the text: the k
experts each token is routed to and their weights, each layer's load (how many tokens
each expert took), how evenly it is spread, and the router's entropy per token."""
from __future__ import annotations

import math

import torch

from ...errors import ConfigError, UsageError
from ..load import Loaded
from ..results import LayerRouting, RouteResult
from ..trace import Trace
from .common import encode, input_info, run


def need_experts(cfg, command: str = "tfx route") -> None:
    """Refuse a dense model: it has no router to show."""
    if not cfg.n_experts:
        raise ConfigError(f"{cfg.name} has no mixture-of-experts layers, so `{command}` has "
                          "no router to show; use an MoE checkpoint (Mixtral, Qwen2-MoE, "
                          "Qwen3-MoE, OLMoE, gpt-oss, DeepSeek-V3) or a config with "
                          "n_experts, e.g. samples/configs/tiny-moe.json")


def check_dense_ffn(cfg, layer: int) -> None:
    """`tfx ffn --layer L` shows a dense FFN: refuse an MoE layer, naming the way to see
    it and the dense layers there are."""
    if not cfg.is_moe_layer(layer):
        return
    dense = [i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)]
    other = f"; its dense layers are {', '.join(map(str, dense))}" if dense else ""
    raise UsageError(f"block {layer} of {cfg.name} is a mixture of experts, not one FFN: see "
                     f"its router with `tfx route`, its output with `tfx trace --select "
                     f"'blocks.{layer}.moe.*'`{other}")


def route(loaded: Loaded, text: str, *, truncate: bool = False) -> RouteResult:
    cfg = loaded.cfg
    need_experts(cfg)
    ids = encode(loaded, text, truncate=truncate)
    layers = cfg.moe_layer_list
    names = [f"blocks.{i}.moe.{leaf}" for i in layers
             for leaf in ("router_probs", "experts", "expert_weights")]
    tr = run(loaded, ids, names, stop_after=layers[-1], validate=False)
    T, E, k = len(ids), cfg.n_experts, cfg.experts_per_token
    experts = torch.stack([tr.raw(f"blocks.{i}.moe.experts") for i in layers]).long()
    weights = torch.stack([tr.raw(f"blocks.{i}.moe.expert_weights") for i in layers]).float()
    probs = torch.stack([tr.raw(f"blocks.{i}.moe.router_probs") for i in layers]).double()
    # best first: the largest weight in column 0 (DeepSeek's top-k is unsorted)
    order = weights.argsort(dim=-1, descending=True, stable=True)
    experts, weights = experts.gather(-1, order), weights.gather(-1, order)
    load = torch.zeros(len(layers), E, dtype=torch.long)
    load.scatter_add_(1, experts.reshape(len(layers), -1),
                      torch.ones(len(layers), T * k, dtype=torch.long))
    # entropy of the router's distribution over every expert: its softmax (a sigmoid
    # router's scores normalised to sum to 1)
    dist = probs / probs.sum(dim=-1, keepdim=True)
    entropy = -(dist * dist.clamp_min(1e-300).log()).sum(dim=-1)  # (L, T)
    routing = []
    for row, layer in enumerate(layers):
        counts = load[row].tolist()
        share = [c / (T * k) for c in counts]
        routing.append(LayerRouting(
            layer=layer, load=counts, load_share=share,
            unused=[e for e, c in enumerate(counts) if c == 0],
            busiest=max(range(E), key=lambda e: (counts[e], -e)),
            entropy=float(entropy[row].mean()), max_entropy=math.log(E),
            balance=E * sum(s * s for s in share)))
    out = Trace()
    out.add("route.experts", experts, ("L", "T", "k"))
    out.add("route.weights", weights, ("L", "T", "k"))
    out.add("route.probs", probs.float(), ("L", "T", "E"))
    out.add("route.load", load, ("L", "E"))
    out.add("route.entropy", entropy.float(), ("L", "T"))
    return RouteResult(model=loaded.info, input=input_info(loaded, text, ids), tensors=out,
                       n_experts=E, experts_per_token=k, router=cfg.router, layers=layers,
                       dense_layers=[i for i in range(cfg.n_layers) if i not in layers],
                       routing=routing, shared_expert=bool(cfg.shared_d_ff))


__all__ = ["route", "need_experts", "check_dense_ffn"]
