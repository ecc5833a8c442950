"""Sites of a mixture of experts: the pseudo-site `blocks.{i}.moe.expert:e=E` (routing
around one expert) and the checks that name what to do when a router site is asked of a
model or layer that has none. sites.py calls these; the edit itself is `route_around`.

Routing around expert E sets its router logit to -inf (at every position, or at :p=P
only). The model's own rule then runs unchanged on what is left: softmax gives E nothing
and renormalises the rest, the top k are chosen among the others and weighed as the model
weighs them (renormalised to sum to 1 where it does). The router's other taps
(router_probs, experts, expert_weights) show the run as rerouted.
"""
from __future__ import annotations

import re

import torch

from ...errors import RangeError, SelectError, UsageError
from ...words import counted

EXPERT_SITE = re.compile(r"^blocks\.(\d+)\.moe\.expert$")
_ROUTER = re.compile(r"^blocks\.(\d+)\.moe(\.|$)")
_EXPERT_NARROW = re.compile(r"^(e|p)=(-?\d+)$")
ROUTE_AROUND = "route around"


def moe_why_not(name: str) -> str | None:
    """Why a recorded MoE name is no site (None: it is one)."""
    if name.endswith(".moe.experts"):
        return ("it holds expert indices, not activations; route around an expert with "
                f"{name[:-1]}:e=EXPERT")
    return None


def _moe_layers(cfg) -> str:
    layers = cfg.moe_layer_list
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]} to {layers[-1]}"
    return ", ".join(map(str, layers))


def expert_site(model, spec: str, name: str, narrowing: list[str], option: str, site_cls):
    """The Site of `blocks.{i}.moe.expert:e=E[:p=P]`; a one-line refusal for any
    `blocks.{i}.moe...` name on a dense model or a dense layer; None for other names."""
    cfg = model.cfg
    router = _ROUTER.match(name)
    if router is None:
        return None
    layer = int(router.group(1))
    if not cfg.n_experts:
        raise SelectError(f"{option} {spec!r}: {name} is a router site, and {cfg.name} has no "
                          "mixture-of-experts layers (its FFNs are dense); ablate "
                          f"blocks.{layer}.ffn.out, or use an MoE model (tfx route shows "
                          "its routers)")
    if layer < cfg.n_layers and not cfg.is_moe_layer(layer):
        raise SelectError(f"{option} {spec!r}: block {layer} of {cfg.name} is a dense layer "
                          f"(blocks.{layer}.ffn.*); its MoE layers are {_moe_layers(cfg)}")
    match = EXPERT_SITE.match(name)
    if match is None:
        return None  # router_logits and the others: ordinary sites
    if layer >= cfg.n_layers:
        raise RangeError(f"{option} {spec!r}: block {layer} is out of range: this model has "
                         f"{counted(cfg.n_layers, 'layer')} (0 to {cfg.n_layers - 1})")
    if option != "--ablate":
        raise UsageError(f"{option} {spec!r}: an expert is routed around with --ablate, not "
                         f"steered; steer blocks.{layer}.moe.router_logits or "
                         f"blocks.{layer}.moe.out")
    got: dict[str, int] = {}
    for part in narrowing:
        found = _EXPERT_NARROW.match(part.strip())
        if not found or found.group(1) in got:
            raise UsageError(f"{option} {spec!r}: {part!r} is not a narrowing of an expert; "
                             f"write :e=EXPERT (and :p=POSITION), e.g. {name}:e=0")
        got[found.group(1)] = int(found.group(2))
    E, k = cfg.n_experts, cfg.experts_per_token
    if "e" not in got:
        raise UsageError(f"{option} {spec!r} names no expert; write {name}:e=EXPERT with an "
                         f"expert from 0 to {E - 1}")
    expert, pos = got["e"], got.get("p")
    if not 0 <= expert < E:
        raise RangeError(f"{option} {spec!r}: expert {expert} is out of range: block {layer} "
                         f"has {counted(E, 'expert')} (0 to {E - 1})")
    if E - 1 < k:
        raise UsageError(f"{option} {spec!r}: every token of {cfg.name} goes to {k} of its "
                         f"{E} experts, so none can be routed around")
    if pos is not None and pos < 0:
        raise RangeError(f"{option} {spec!r}: position {pos} is out of range: positions "
                         "count from 0")
    tap = f"blocks.{layer}.moe.router_logits"
    return site_cls(spec=spec, name=tap, dims=tuple(model.taps[tap].dims), pos=pos,
                    option=option, expert=expert)


def check_experts_left(cfg, sites) -> None:
    """Routing around experts must leave every token of a layer k experts to choose from
    (the router never chooses one routed around, and each token goes to k experts): refuse
    --ablate that routes around more than E - k of one layer's experts (at any position)."""
    E, k = cfg.n_experts, cfg.experts_per_token
    removed: dict[int, dict] = {}  # layer -> position (None: every one) -> experts
    for site in sites:
        if site.expert is not None:
            removed.setdefault(site.layer, {}).setdefault(site.pos, set()).add(site.expert)
    for layer, by_pos in sorted(removed.items()):
        everywhere = by_pos.get(None, set())
        for pos in sorted(by_pos, key=lambda p: -1 if p is None else p):
            gone = everywhere | by_pos[pos]
            if len(gone) <= E - k:
                continue
            what = f"all {E} experts" if len(gone) == E else f"{len(gone)} of the {E} experts"
            where = "" if pos is None else f" at position {pos}"
            raise UsageError(f"--ablate routes around {what} of block {layer}{where}, but "
                             f"every token of {cfg.name} goes to {k} experts, so at most "
                             f"{E - k} of a layer's experts can be routed around; ablate "
                             f"fewer, or blocks.{layer}.moe.out for the whole layer")


def route_around(site):
    """The edit of `blocks.{i}.moe.expert:e=E`: expert E's router logit -inf."""

    def edit(x: torch.Tensor) -> torch.Tensor:  # (B, T, E)
        where = list(site.index(x.ndim, site.positions(x.shape[1])))
        where[-1] = site.expert  # the last axis is the experts'
        out = x.clone()
        out[tuple(where)] = float("-inf")
        return out

    return edit


__all__ = ["EXPERT_SITE", "ROUTE_AROUND", "moe_why_not", "expert_site", "route_around",
           "check_experts_left"]
