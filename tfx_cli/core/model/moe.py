"""The mixture-of-experts feed-forward: a router picks k of E experts for each token, and
the token's output is the experts' outputs weighted by the router's scores (plus, in some
families, a shared expert every token goes through). It takes the place of a block's FFN
in the layers the config makes MoE layers; every other layer keeps its dense FFN.

Read in forward order (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, gpt-oss and DeepSeek-V3 as
transformers 5 computes them):

  router_logits = x W_router (+ b)                                   (T, E)
  router_probs  = softmax(router_logits)  or  sigmoid(router_logits)  (T, E)
  experts       = the k experts chosen per token                      (T, k)
      softmax:       the k largest probabilities (Mixtral, Qwen, OLMoE)
      softmax_topk:  the k largest logits (gpt-oss)
      sigmoid:       the k largest of probs + score-correction bias, inside the
                     router_topk_groups groups whose two best experts sum highest
                     (DeepSeek-V3)
  expert_weights = the chosen probabilities, renormalised to sum to 1 where the
                   family does (router_norm), times router_scale; gpt-oss: softmax of
                   the k chosen logits                                (T, k)
  routed = Σ_j expert_weights[:, j] · expert[experts[:, j]](x)        (T, C)
  out    = routed (+ shared expert(x), scaled by sigmoid(x W_gate) in Qwen2-MoE)

An expert is a SwiGLU FFN, act(x W_gate) * (x W_up) W_down; gpt-oss clamps it (gate at
most `limit`, up within ±limit) and computes (up + 1) * gate * sigmoid(alpha * gate).

Only the experts some token is routed to run, one after another on their tokens, as
transformers' eager loop does. A router logit of -inf is never chosen (whatever the
router): that is how `--ablate blocks.{i}.moe.expert:e=E` routes around an expert, and
the model's own rule then weighs the experts it does choose. A token still goes to k
experts, so one left with fewer than k to choose from is refused (UsageError), never
given a routed-around expert with weight 0.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import UsageError
from ..config import ModelConfig
from .feedforward import FeedForward
from .taps import Tap


class Expert(nn.Module):
    """One expert: a gated FFN's three projections, named as FeedForward names them
    (gate_proj, fc1 = up, fc2 = down). It has no taps of its own: it runs on the tokens
    routed to it, a different number in every layer."""

    def __init__(self, cfg: ModelConfig, width: int):
        super().__init__()
        bias = cfg.expert_bias
        self.gate_proj = nn.Linear(cfg.d_model, width, bias=bias)
        self.fc1 = nn.Linear(cfg.d_model, width, bias=bias)
        self.fc2 = nn.Linear(width, cfg.d_model, bias=bias)
        self.limit, self.alpha = cfg.swiglu_limit, cfg.swiglu_alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.fc1(x)  # (n, F) each
        if self.limit is None:
            return self.fc2(F.silu(gate) * up)
        # gpt-oss's clamped SwiGLU
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return self.fc2((up + 1) * (gate * torch.sigmoid(gate * self.alpha)))


class MoE(nn.Module):
    """A block's mixture-of-experts FFN: router, experts (`expert.{e}`) and an optional
    shared expert. Trace names: `moe.router_logits`, `.router_probs`, `.experts`,
    `.expert_weights`, `.routed`, `.shared.*` (and `.shared_scale`), `.out`."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        E, C = cfg.n_experts, cfg.d_model
        self.n_experts, self.k = E, cfg.experts_per_token
        self.router = nn.Linear(C, E, bias=cfg.router_bias)
        if cfg.router_correction:  # DeepSeek-V3: shifts which experts are chosen, not weights
            self.register_buffer("score_correction", torch.zeros(E))
        self.expert = nn.ModuleList(Expert(cfg, cfg.expert_d_ff or cfg.d_ff) for _ in range(E))
        if cfg.shared_d_ff:
            self.shared = FeedForward(cfg, cfg.shared_d_ff)
            if cfg.shared_gate:
                self.shared_gate = nn.Linear(C, 1, bias=False)
                self.shared_scale = Tap("T")
        self.router_logits, self.router_probs = Tap("T", "E"), Tap("T", "E")
        self.experts, self.expert_weights = Tap("T", "k"), Tap("T", "k")
        self.routed, self.out = Tap("T", "C"), Tap("T", "C")
        # streaming (core/model/streaming.py) sets this: expert e's weights are read from
        # disk only while it runs, and only when some token is routed to it
        self.hold = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        logits = self.router_logits(self.router(x))  # (B, T, E)
        chosen, weights = self.route(logits)  # (B, T, k) each
        routed = self.routed(self.run_experts(x, chosen, weights))
        if self.cfg.shared_d_ff:
            shared = self.shared(x)  # (B, T, C)
            if self.cfg.shared_gate:
                scale = self.shared_scale(torch.sigmoid(self.shared_gate(x)).squeeze(-1))
                shared = scale.unsqueeze(-1) * shared
            routed = routed + shared
        return self.out(routed)

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits (B, T, E) -> (experts, expert_weights), each (B, T, k); records
        router_probs on the way. Scores are computed in float32, as transformers does."""
        cfg, k = self.cfg, self.k
        wide = logits.float()
        hidden = torch.isneginf(wide)  # routed around (an ablated expert)
        if cfg.router == "sigmoid":
            probs = self.router_probs(torch.sigmoid(wide))
            choice = probs + self.score_correction.float() if cfg.router_correction else probs
            choice = choice.masked_fill(hidden, float("-inf"))
            if cfg.router_groups > 1:
                choice = self._best_groups(choice)
            chosen = torch.topk(choice, k, dim=-1).indices
            weights = probs.gather(-1, chosen)
            if cfg.router_norm:
                weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        elif cfg.router == "softmax_topk":  # gpt-oss: softmax over the k chosen logits only
            self.router_probs(torch.softmax(wide, dim=-1))
            top, chosen = torch.topk(logits, k, dim=-1)
            weights = torch.softmax(top.float(), dim=-1)
        else:
            probs = self.router_probs(torch.softmax(wide, dim=-1))
            # an expert routed around has probability 0, and so may one whose logit is
            # far below the rest: choose among the experts left, whatever their scores
            chosen = torch.topk(probs.masked_fill(hidden, float("-inf")), k, dim=-1).indices
            weights = probs.gather(-1, chosen)
            if cfg.router_norm:
                weights = weights / weights.sum(dim=-1, keepdim=True)
        if cfg.router_scale != 1.0:
            weights = weights * cfg.router_scale
        if hidden.any() and hidden.gather(-1, chosen).any():
            self._too_few_left(hidden, chosen)
        chosen = self.experts(chosen)
        return chosen, self.expert_weights(weights)

    def _too_few_left(self, hidden: torch.Tensor, chosen: torch.Tensor) -> None:
        """A token whose k experts could not all come from those left (too many routed
        around, or, in grouped routing, too few left in the groups it may use): refused,
        since a routed-around expert is never chosen."""
        left = int((~hidden).sum(dim=-1).min())
        grouped = (" in the router's best groups" if self.cfg.router_groups > 1 and left >= self.k
                   else "")
        raise UsageError(f"--ablate routes around so many experts of block {self.layer} that "
                         f"a token has fewer than the {self.k} it goes to left{grouped} "
                         f"({left} of {self.n_experts}); route around fewer")

    def _best_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """DeepSeek-V3's grouped choice: the experts in groups of E / G; a group's score is
        the sum of its two best choice scores, and only the router_topk_groups best groups'
        experts stay choosable (the others -inf)."""
        G, keep = self.cfg.router_groups, self.cfg.router_topk_groups
        groups = choice.view(*choice.shape[:-1], G, -1)  # (B, T, G, E/G)
        group_scores = groups.topk(min(2, groups.shape[-1]), dim=-1).values.sum(dim=-1)
        best = group_scores.topk(keep, dim=-1).indices  # (B, T, keep)
        open_groups = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, best, True)
        return groups.masked_fill(~open_groups[..., None], float("-inf")).view(choice.shape)

    def run_experts(self, x: torch.Tensor, chosen: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
        """Σ_j weights[..., j] · expert[chosen[..., j]](x): each expert that some token is
        routed to runs once, on its tokens. x (B, T, C) -> (B, T, C)."""
        flat = x.reshape(-1, x.shape[-1])  # (N, C)
        chosen = chosen.reshape(-1, chosen.shape[-1])  # (N, k)
        weights = weights.reshape(-1, weights.shape[-1])
        out = torch.zeros_like(flat)
        for e in torch.unique(chosen).tolist():
            tokens, slots = (chosen == e).nonzero(as_tuple=True)
            with self.hold(e) if self.hold is not None else nullcontext():
                y = self.expert[e](flat[tokens])  # (n_e, C)
            out.index_add_(0, tokens, (y * weights[tokens, slots, None]).to(out.dtype))
        return out.view(x.shape)


__all__ = ["MoE", "Expert"]
