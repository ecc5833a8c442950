"""Attention: the KV cache, the one attention formula written out step by step, and the
multi-head (grouped-query, cross, sliding-window) Attention module that uses it; mla.py's
LatentAttention is this module with other projections of q, k and v."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .norms import Norm
from .positions import apply_rope, embedding, relative_bias
from .taps import Tap


class KVCache:
    """Preallocated keys and values per layer; a decoding step writes in place."""

    def __init__(self, cfg: ModelConfig, batch: int = 1, max_len: int | None = None,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        max_len = max_len or cfg.context_length
        shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        v_shape = shape[:-1] + (cfg.v_dim,)  # latent attention's value heads are narrower
        # the decoder's self-attention in an encoder–decoder; every block otherwise
        layers = cfg.n_decoder_layers or cfg.n_layers
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(v_shape, dtype=dtype, device=device) for _ in range(layers)]
        # cross-attention's keys and values of the encoder output, per decoder layer:
        # computed at the first step and read at every later one
        self.memory_kv: dict = {}
        self.length = 0  # positions filled so far
        self.max_len = max_len

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int):
        T = k.shape[2]
        self.k[layer].narrow(2, start, T).copy_(k)
        self.v[layer].narrow(2, start, T).copy_(v)
        return self.k[layer].narrow(2, 0, start + T), self.v[layer].narrow(2, 0, start + T)


def explicit_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       keep: torch.Tensor | None, scale: float, taps=None, *,
                       causal: bool = False, softcap: float | None = None,
                       bias: torch.Tensor | None = None,
                       sinks: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(mask(Q Kᵀ / scale)) V, written out step by step: the one attention formula.

    queries (..., T, D), keys (..., S, D), values (..., S, Dv); keep (T, S) bool or None.
    `taps` has scores/scaled/masked/pattern taps (an Attention module, or the stand-alone
    ones `tfx attend --inputs` uses for hand-made matrices); None records nothing.
    causal: keep is the square causal mask (key j visible to query i when j <= i).
    softcap (Gemma 2): the scaled scores become cap * tanh(scaled / cap) before the mask,
    recorded as `capped`.
    bias (T5's relative position bias, (..., T, S)): added to the scaled scores before the
    mask, so `masked` is scaled + bias with -inf where a key is hidden.
    sinks (gpt-oss): one learned logit per head (H,), appended to every row of the masked
    scores as an extra key column before the softmax and dropped after it, so a pattern
    row sums to less than 1; what the sink took of each row is recorded as `sink` (H, T).

    scores, scaled and masked are recorded lazily: each is a step or two from q and k, so
    the trace computes it again, with the same operations and so the same numbers, when
    it is read. A full trace then keeps one (T, S) matrix per layer (the pattern), not
    four, and the forward pass below works in place on a single buffer.
    """
    tap = taps if taps is not None else _NO_TAPS
    every = slice(None)

    # rows/cols pick query rows and keys: the whole (T, S) matrix, or one causal block
    def scores(rows=every, cols=every):
        return queries[..., rows, :] @ keys[..., cols, :].transpose(-2, -1)  # (..., T, S)

    def scaled(rows=every, cols=every):
        return scores(rows, cols).div_(scale)

    def capped(rows=every, cols=every):
        if softcap is None:
            return scaled(rows, cols)
        return scaled(rows, cols).div_(softcap).tanh_().mul_(softcap)

    def biased(rows=every, cols=every):
        if bias is None:
            return capped(rows, cols)
        return capped(rows, cols).add_(bias[..., rows, cols])

    def masked(rows=every, cols=every):
        if keep is None:
            return biased(rows, cols)
        return biased(rows, cols).masked_fill_(~keep[rows, cols], float("-inf"))

    shape = (*queries.shape[:-1], keys.shape[-2])
    for name, compute in (("scores", scores), ("scaled", scaled), ("capped", capped),
                          ("masked", masked)):
        if getattr(getattr(tap, name, None), "on", False):
            getattr(tap, name).lazy(compute, shape)
    T = queries.shape[-2]
    # an edited pattern must be whole before the context is formed from it
    edited = getattr(tap.pattern, "edit", None) is not None
    if sinks is not None:
        return _attend_with_sinks(masked(), values, sinks, tap)
    if edited or not (causal and keep is not None and T > CAUSAL_BLOCK):
        attn_weights = tap.pattern(softmax_rows(masked()))
        return attn_weights @ values  # (..., T, Dv)
    # Square causal mask, one block of query rows at a time: rows [r0, r1) see keys
    # [0, r1) only, so each block's product, mask and softmax skip the later keys, whose
    # weights are exactly 0 (exp(-inf)). At T = 1024 that is 44% fewer score and context
    # multiply-adds; the pattern is the whole-matrix one bit for bit (test_model.py).
    pattern = queries.new_empty(shape)  # (..., T, T)
    context = queries.new_empty(*queries.shape[:-1], values.shape[-1])  # (..., T, Dv)
    for r0 in range(0, T, CAUSAL_BLOCK):
        r1 = min(r0 + CAUSAL_BLOCK, T)
        weights = softmax_rows(masked(slice(r0, r1), slice(0, r1)))
        pattern[..., r0:r1, :r1] = weights
        pattern[..., r0:r1, r1:] = 0.0
        context[..., r0:r1, :] = weights @ values[..., :r1, :]
    tap.pattern(pattern)
    return context


CAUSAL_BLOCK = 128  # query rows per block of explicit causal attention


def _attend_with_sinks(masked: torch.Tensor, values: torch.Tensor, sinks: torch.Tensor,
                       tap) -> torch.Tensor:
    """softmax over the keys and one more column, the head's sink logit, which is then
    dropped: the sink takes a share of each row and gives back no value."""
    sink_col = sinks.to(masked.dtype).view(-1, 1, 1).expand(*masked.shape[:-1], 1)
    weights = softmax_rows(torch.cat([masked, sink_col], dim=-1))  # (..., T, S + 1)
    if getattr(getattr(tap, "sink", None), "on", False):
        tap.sink(weights[..., -1])  # (..., H, T): the sink's share of each row
    attn_weights = tap.pattern(weights[..., :-1])
    return attn_weights @ values


def softmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the keys, accumulated in float32 for half-precision scores and
    rounded back to their dtype (as transformers' eager attention does); float32 and
    float64 scores as they are."""
    if scores.dtype in (torch.float32, torch.float64):
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)


class _NoTaps:
    scores = scaled = masked = pattern = staticmethod(lambda x: x)


_NO_TAPS = _NoTaps()


class Attention(nn.Module):
    """Multi-head (or grouped-query) attention: the only attention in tfx (latent
    attention, mla.LatentAttention, is this class with its own q, k and v projections).

    The explicit path materialises scores, scaled, masked and pattern; when no tap inside
    needs them it calls the fused scaled_dot_product_attention, held equal by a test.
    Switches of the newer families: per-head q and k norms (Qwen3, Gemma 3), a sliding
    window (Mistral, Gemma), soft-capped scores (Gemma 2), a scale other than sqrt(D)
    (Gemma's query_pre_attn_scalar), and a head width apart from d_model / n_heads.
    """

    def __init__(self, cfg: ModelConfig, layer: int, *, cross: bool = False,
                 bidirectional: bool = True):
        """cross: an encoder–decoder's cross-attention (queries from the decoder, keys and
        values from the encoder output; no mask but the source's padding).
        bidirectional: the queries may see later keys (an encoder), for T5's buckets."""
        super().__init__()
        self.cfg, self.layer, self.is_cross = cfg, layer, cross
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.window = cfg.sliding_window if cfg.is_sliding(layer) and not cross else None
        self.softcap = cfg.attn_softcap
        self.scale = math.sqrt(cfg.attn_scalar or cfg.head_dim)  # scores are divided by it
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self._projections(cfg)
        out_dim = cfg.n_heads * cfg.v_dim  # attn_dim, or latent attention's value heads
        self.out_proj = nn.Linear(out_dim, cfg.d_model, bias=cfg.proj_bias)
        self.q, self.k = Tap("H", "T", "D"), Tap("H", "S", "D")
        self.v = Tap("H", "S", "Dv" if cfg.v_dim != cfg.head_dim else "D")
        if cfg.qk_norm:  # each head's q and k rows normalised over D, before the rotation
            self.q_norm = Norm(cfg, cfg.head_dim, ("H", "T", "D"))
            self.k_norm = Norm(cfg, cfg.head_dim, ("H", "S", "D"))
        if cfg.qk_norm_full:  # OLMo 2: the whole projections, before the split into heads
            self.q_norm = Norm(cfg, cfg.attn_dim, ("T", "A"))
            self.k_norm = Norm(cfg, kv_dim, ("S", "K"))
        if cfg.positional == "rope" and not cross:
            self.q_rot, self.k_rot = Tap("H", "T", "D"), Tap("H", "S", "D")
        self.scores, self.scaled = Tap("H", "T", "S"), Tap("H", "T", "S")
        if self.softcap is not None:
            self.capped = Tap("H", "T", "S")
        # T5: a learned bias per head and bucket of relative distance on every score of
        # self-attention (the stack's table, passed in; UMT5: this layer's own)
        self.relative = cfg.positional == "relative" and not cross
        if self.relative:
            self.bidirectional = bidirectional
            if cfg.relative_per_layer:
                self.rel_bias = embedding(cfg.relative_buckets, cfg.n_heads)
            self.position_bias = Tap("H", "T", "S")
        self.masked, self.pattern = Tap("H", "T", "S"), Tap("H", "T", "S")
        if cfg.attn_sinks and not cross:  # gpt-oss: one learned logit per head
            self.sinks = nn.Parameter(torch.zeros(cfg.n_heads))
            self.sink = Tap("H", "T")
        # A: the heads joined, H * D wide; C (d_model) unless head_dim is set apart
        joined = "C" if out_dim == cfg.d_model else "A"
        self.context = Tap("H", "T", "Dv" if cfg.v_dim != cfg.head_dim else "D")
        self.concat, self.out = Tap("T", joined), Tap("T", "C")

    def _projections(self, cfg: ModelConfig) -> None:
        """The projections that make q, k and v (LatentAttention's are others)."""
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self.W_query = nn.Linear(cfg.d_model, cfg.attn_dim, bias=cfg.qkv_bias)
        self.W_key = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)
        self.W_value = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)

    def separate_qkv(self) -> tuple:
        """W_query, W_key and W_value: what decoding.fuse_qkv puts in one buffer."""
        return self.W_query, self.W_key, self.W_value

    def _project(self, x: torch.Tensor, kv_x: torch.Tensor | None = None) -> tuple:
        """Queries, keys and values before the split into heads: (..., out) each."""
        kv_x = x if kv_x is None else kv_x
        return self.W_query(x), self.W_key(kv_x), self.W_value(kv_x)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, D)

    def share_kv(self, x: torch.Tensor) -> torch.Tensor:
        # grouped-query attention: query head h reads key/value head h // group
        group = self.n_heads // self.n_kv_heads
        return x if group == 1 else x.repeat_interleave(group, dim=1)

    def window_keep(self, T: int, S: int, start: int, device=None) -> torch.Tensor:
        """(T, S): key j is within the window of query start + i (it and the window - 1
        keys before it; in a model that is not causal (ModernBERT's local layers), the
        window - 1 keys on either side)."""
        q_pos = torch.arange(start, start + T, device=device)[:, None]
        distance = q_pos - torch.arange(S, device=device)[None, :]
        return (distance if self.cfg.causal else distance.abs()) < self.window

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                kv_x: torch.Tensor | None = None, rot: tuple | None = None,
                k_rot: tuple | None = None, rot_local: tuple | None = None,
                cache: KVCache | None = None, start: int = 0,
                is_causal: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, C) queries' input; kv_x: keys/values' input (cross-attention), else x.
        keep: (T, S) bool, True where a query may look; None means no mask at all.
        rot: the (cos, sin) tables rotating q (rotary models); k_rot those of k when they
        differ (keys from another text), else rot; rot_local those of a sliding layer that
        rotates with its own base (Gemma 3).
        is_causal: keep is exactly the square causal mask, which the fused kernel can
        apply by skipping the hidden blocks instead of reading a mask.
        position_bias: T5's relative bias of the stack, (1, H, T, S) for these queries and
        every key (a UMT5 layer computes its own)."""
        if self.window is not None and rot_local is not None:
            rot = rot_local
        if self.is_cross:
            return self._cross(x, keep, kv_x, cache)
        return self._self_attention(x, keep, kv_x=kv_x, rot=rot, k_rot=k_rot, cache=cache,
                                    start=start, is_causal=is_causal,
                                    position_bias=position_bias)

    def _self_attention(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                        kv_x: torch.Tensor | None, rot: tuple | None, k_rot: tuple | None,
                        cache: KVCache | None, start: int, is_causal: bool,
                        position_bias: torch.Tensor | None) -> torch.Tensor:
        """Project q, k and v, norm and rotate them as the config says, then the one
        formula (_attend); forward's arguments."""
        q, k, v = self._project(x, kv_x)
        if self.cfg.qk_norm_full:
            q, k = self.q_norm(q), self.k_norm(k)  # (B, T, A), (B, S, K)
        queries = self._heads(q, self.n_heads)  # (B, H, T, D)
        keys = self._heads(k, self.n_kv_heads)  # (B, Hkv, S, D)
        values = self._heads(v, self.n_kv_heads)  # (B, Hkv, S, D)
        plain = rot is None and not self.cfg.qk_norm  # q and k are used as projected
        if not plain:  # record them as projected, then normed (q_norm) and rotated (q_rot)
            queries = self.q(queries)
            if self.k.on:
                self.k(self.share_kv(keys))
            if self.cfg.qk_norm:
                queries, keys = self.q_norm(queries), self._k_normed(keys)
            if rot is not None:
                queries = self.q_rot(apply_rope(queries, rot))
                keys = apply_rope(keys, k_rot if k_rot is not None else rot)
        if cache is not None:
            keys, values = cache.append(self.layer, keys, values, start)
        keys, values = self.share_kv(keys), self.share_kv(values)  # (B, H, S, D)
        # each tap's output is what flows on, so an intervention there reaches attention
        if plain:
            queries = self.q(queries)
            keys = self.k(keys)
        elif rot is not None:
            keys = self.k_rot(keys)
        values = self.v(values)
        if self.window is not None and kv_x is None:
            inside = self.window_keep(queries.shape[-2], keys.shape[-2], start,
                                      device=queries.device)
            keep = inside if keep is None else keep & inside
            is_causal = False  # the mask is no longer the plain causal one
        bias = None
        if self.relative:
            T, S = queries.shape[-2], keys.shape[-2]
            if self.cfg.relative_per_layer:
                position_bias = relative_bias(self.rel_bias.weight, T, S, start,
                                              bidirectional=self.bidirectional, cfg=self.cfg)
            bias = self.position_bias(position_bias)
        return self._attend(queries, keys, values, keep, is_causal, bias)

    def _cross(self, x: torch.Tensor, keep: torch.Tensor | None, memory: torch.Tensor,
               cache: KVCache | None) -> torch.Tensor:
        """Queries from the decoder stream x, keys and values from the encoder output
        `memory` (paper section 3.2.3). A decoding cache keeps each layer's memory keys and
        values after the first step: the encoder output does not change."""
        queries = self._heads(self.W_query(x), self.n_heads)  # (B, H, T, D)
        memo = cache.memory_kv if cache is not None else None
        if memo is not None and self.layer in memo:
            keys, values = memo[self.layer]
        else:
            keys = self.share_kv(self._heads(self.W_key(memory), self.n_kv_heads))
            values = self.share_kv(self._heads(self.W_value(memory), self.n_kv_heads))
            if memo is not None:
                memo[self.layer] = (keys, values)
        queries, keys, values = self.q(queries), self.k(keys), self.v(values)
        return self._attend(queries, keys, values, keep, False)

    def _attend(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                keep: torch.Tensor | None, is_causal: bool,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """softmax(mask(QKᵀ / scale [+ bias])) V over the heads, joined and projected by
        W_O."""
        sinks = getattr(self, "sinks", None)
        explicit = self.softcap is not None or sinks is not None or any(
            t.on for t in (self.scores, self.scaled, self.masked, self.pattern))
        if explicit:
            context_vec = explicit_attention(queries, keys, values, keep, self.scale,
                                             taps=self, causal=is_causal,
                                             softcap=self.softcap, bias=bias,
                                             sinks=sinks)
        elif bias is not None:  # the bias and the mask as one float mask
            mask = bias if keep is None else bias.masked_fill(~keep, float("-inf"))
            context_vec = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=mask.to(queries.dtype),
                scale=1.0 / self.scale)
        else:
            causal = is_causal and keep is not None
            context_vec = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=None if causal else keep, is_causal=causal,
                scale=1.0 / self.scale)
        context_vec = self.context(context_vec)
        B, H, T, D = context_vec.shape
        concat = self.concat(context_vec.transpose(1, 2).reshape(B, T, H * D))  # (B, T, A)
        return self.out(self.out_proj(concat))

    def _k_normed(self, keys: torch.Tensor) -> torch.Tensor:
        """k_norm over the key/value heads; its taps show every query head's keys, as k
        does (grouped-query attention shares them)."""
        norm = self.k_norm
        if not any(t.on for t in (getattr(norm, "in"), norm.mean, norm.var, norm.normed,
                                  norm.out)):
            return norm.fused(keys)
        group = self.n_heads // self.n_kv_heads
        shared = norm(self.share_kv(keys))  # (B, H, S, D), recorded
        return shared[:, ::group] if group > 1 else shared
