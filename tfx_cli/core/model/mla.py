"""Multi-head latent attention (DeepSeek-V2/V3): LatentAttention, tfx's one Attention
(attention.py) with other projections of q, k and v. The rest is inherited: the same
scores, mask, softmax and context, with query/key heads D = N + R wide and value heads
Dv wide. Blocks take it where the config says kv_lora_rank (transformer.attention_class).

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
from .attention import Attention, KVCache
from .norms import Norm
from .positions import apply_rope
from .taps import Tap

LATENT_EPS = 1e-6  # the latents' RMSNorms use transformers' default, not rms_norm_eps


class LatentAttention(Attention):
    """Attention whose queries, keys and values are decompressed from latents (above).
    Parameter and tap names are the DeepSeek mapping's (checkpoints/families/deepseek.py):
    W_q_a, q_a, q_a_norm, W_q_b (or W_query without a query latent), W_kv_a, kv_a,
    kv_a_norm, W_kv_b; then q, k, v, q_rot, k_rot and the rest as in Attention."""

    def _projections(self, cfg: ModelConfig) -> None:
        C, H, D, Dv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.v_dim
        L, R = cfg.kv_lora_rank, cfg.qk_rope_dim
        self.nope_dim, self.rope_dim, self.kv_rank = D - R, R, L
        self.q_latent = bool(cfg.q_lora_rank)
        if self.q_latent:
            self.W_q_a = nn.Linear(C, cfg.q_lora_rank, bias=cfg.qkv_bias)
            self.q_a = Tap("T", "Cq")
            self.q_a_norm = Norm(cfg, cfg.q_lora_rank, ("T", "Cq"))
            self.q_a_norm.eps = LATENT_EPS
            self.W_q_b = nn.Linear(cfg.q_lora_rank, H * D, bias=False)
        else:
            self.W_query = nn.Linear(C, H * D, bias=False)
        self.W_kv_a = nn.Linear(C, L + R, bias=cfg.qkv_bias)
        self.kv_a = Tap("S", "Ckv")
        self.kv_a_norm = Norm(cfg, L, ("S", "Ckv"))
        self.kv_a_norm.eps = LATENT_EPS
        self.W_kv_b = nn.Linear(L, H * (D - R + Dv), bias=False)

    def separate_qkv(self) -> tuple:
        return ()  # no W_key or W_value: nothing for decoding_layout to fuse

    def _self_attention(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                        rot: tuple | None, cache: KVCache | None, start: int,
                        is_causal: bool, **_) -> torch.Tensor:
        """The latent projections, then Attention's one formula. Keys and values come
        from x itself (no kv_x); a sliding window or a relative bias is not read."""
        queries, keys, values = self._latent_qkv(x, rot)  # (B, H, T|S, D|Dv)
        if cache is not None:
            keys, values = cache.append(self.layer, keys, values, start)
        return self._attend(self.q_rot(queries), self.k_rot(keys), self.v(values), keep,
                            is_causal)

    def _latent_qkv(self, x: torch.Tensor, rot: tuple) -> tuple:
        """(queries (B, H, T, D), keys (B, H, S, D), values (B, H, S, Dv)), q and k
        rotated in their last R dims; records q_a, kv_a (and their norms), q, k and v."""
        B, T, _ = x.shape
        H, D, N, R = self.n_heads, self.head_dim, self.nope_dim, self.rope_dim
        if self.q_latent:
            q = self.W_q_b(self.q_a_norm(self.q_a(self.W_q_a(x))))
        else:
            q = self.W_query(x)
        queries = self.q(q.view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
        kv_a, k_pe = self.W_kv_a(x).split([self.kv_rank, R], dim=-1)
        kv = self.W_kv_b(self.kv_a_norm(self.kv_a(kv_a)))  # (B, S, H * (N + Dv))
        kv = kv.view(B, T, H, -1).transpose(1, 2)  # (B, H, S, N + Dv)
        k_nope, values = kv.split([N, kv.shape[-1] - N], dim=-1)
        k_pe = k_pe.view(B, 1, T, R)  # one head, shared by every query head
        keys = torch.cat([k_nope, k_pe.expand(B, H, T, R)], dim=-1)  # (B, H, S, D)
        keys = self.k(keys)
        q_rot = torch.cat([queries[..., :N], apply_rope(queries[..., N:], rot)], dim=-1)
        k_rot = torch.cat([keys[..., :N], apply_rope(keys[..., N:], rot)], dim=-1)
        return q_rot, k_rot, self.v(values)


__all__ = ["LatentAttention", "LATENT_EPS"]
