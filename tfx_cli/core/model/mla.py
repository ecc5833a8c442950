"""Multi-head latent attention (DeepSeek-V2/V3): how its projections make q, k and v.
The rest is tfx's one attention (attention.py): the same scores, mask, softmax and
context, with query/key heads D = N + R wide and value heads Dv wide.

Keys and values come from one latent per token instead of per-head projections:

  kv_a   = x W_kv_a[:L]                 (S, Ckv) the latent, L = kv_lora_rank wide
  k_pe   = x W_kv_a[L:]                 (S, R)   one rotary key part, shared by all heads
  [k_nope | v] = kv_a_norm(kv_a) W_kv_b  (H, S, N + Dv)
  k      = [k_nope | k_pe]              (H, S, N + R), k_pe rotated (k_rot)

and queries through a latent of their own (q_lora_rank; or one projection without):

  q_a = x W_q_a  (T, Cq);   q = q_a_norm(q_a) W_q_b  (H, T, N + R);   its last R rotated

Only the last R = qk_rope_dim dims of each head are rotated ("decoupled RoPE"): the
rest (N = qk_nope_head_dim) carries no position, so the latent could be cached as it
is. tfx caches the decompressed keys and values (what the attention reads).

DeepSeek's checkpoints lay each rotated part out in interleaved pairs (x0, x1), (x2, x3)
...; the mapping (checkpoints/families/deepseek.py) reorders those weight rows to the
split-halves layout tfx rotates, evens first, which is what transformers' rotation
computes with them: the same q·k, and q_rot/k_rot in transformers' order.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .norms import Norm
from .positions import apply_rope
from .taps import Tap

LATENT_EPS = 1e-6  # the latents' RMSNorms use transformers' default, not rms_norm_eps


def build_latent(attn: nn.Module, cfg: ModelConfig) -> None:
    """Add the latent projections, norms and taps to an Attention module."""
    C, H, D, Dv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.v_dim
    L, R = cfg.kv_lora_rank, cfg.qk_rope_dim
    attn.nope_dim, attn.rope_dim = D - R, R
    if cfg.q_lora_rank:
        attn.W_q_a = nn.Linear(C, cfg.q_lora_rank, bias=cfg.qkv_bias)
        attn.q_a = Tap("T", "Cq")
        attn.q_a_norm = Norm(cfg, cfg.q_lora_rank, ("T", "Cq"))
        attn.q_a_norm.eps = LATENT_EPS
        attn.W_q_b = nn.Linear(cfg.q_lora_rank, H * D, bias=False)
    else:
        attn.W_query = nn.Linear(C, H * D, bias=False)
    attn.W_kv_a = nn.Linear(C, L + R, bias=cfg.qkv_bias)
    attn.kv_a = Tap("S", "Ckv")
    attn.kv_a_norm = Norm(cfg, L, ("S", "Ckv"))
    attn.kv_a_norm.eps = LATENT_EPS
    attn.W_kv_b = nn.Linear(L, H * (D - R + Dv), bias=False)


def latent_qkv(attn: nn.Module, x: torch.Tensor, rot: tuple) -> tuple:
    """(queries (B, H, T, D), keys (B, H, S, D), values (B, H, S, Dv)), q and k rotated
    in their last R dims; records q_a, kv_a (and their norms), q, k and v."""
    B, T, _ = x.shape
    H, D, N, R = attn.n_heads, attn.head_dim, attn.nope_dim, attn.rope_dim
    if hasattr(attn, "W_q_a"):
        q = attn.W_q_b(attn.q_a_norm(attn.q_a(attn.W_q_a(x))))
    else:
        q = attn.W_query(x)
    queries = attn.q(q.view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
    kv_a, k_pe = attn.W_kv_a(x).split([attn.kv_a_norm.scale.shape[0], R], dim=-1)
    kv = attn.W_kv_b(attn.kv_a_norm(attn.kv_a(kv_a)))  # (B, S, H * (N + Dv))
    kv = kv.view(B, T, H, -1).transpose(1, 2)  # (B, H, S, N + Dv)
    k_nope, values = kv.split([N, kv.shape[-1] - N], dim=-1)
    k_pe = k_pe.view(B, 1, T, R)  # one head, shared by every query head
    keys = torch.cat([k_nope, k_pe.expand(B, H, T, R)], dim=-1)  # (B, H, S, D)
    keys = attn.k(keys)
    q_rot = torch.cat([queries[..., :N], apply_rope(queries[..., N:], rot)], dim=-1)
    k_rot = torch.cat([keys[..., :N], apply_rope(keys[..., N:], rot)], dim=-1)
    return q_rot, k_rot, attn.v(values)


__all__ = ["build_latent", "latent_qkv", "LATENT_EPS"]
