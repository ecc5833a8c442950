"""The one transformer, built from ModelConfig switches, with a Tap at every intermediate.

Read top to bottom: Tap, norms, positions, attention, feed-forward, block, model.

Every intermediate passes through a `Tap`, an identity module; its public name is its
path in `named_modules()` (`blocks.0.attn.pattern`), so names cannot drift from the
module tree. A Tap records only when `Transformer.record(globs)` switched it on, so a run
that asks for one layer keeps one layer in memory.

Parameter creation order follows LLMs-from-scratch's GPTModel (token embedding, position
embedding, then per block W_query, W_key, W_value, out_proj, the two feed-forward
linears, then the output head), and every module keeps PyTorch's default init, so
`torch.manual_seed(123)` followed by building `gpt124m` gives that book's exact weights.
"""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from typing import Iterable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .trace import Lazy, Trace, compile_globs


class Tap(nn.Module):
    """Identity that records its input into the active Trace when switched on.

    `edit`, when set (core/interventions.py sets it), replaces the value flowing through:
    an ablation, a steering vector or a patched-in activation. What is recorded, and what
    the rest of the model reads, is the edited value."""

    def __init__(self, *dims: str):
        super().__init__()
        self.dims = dims  # without the batch dimension, which tfx always records as 0
        self.name = ""  # set by Transformer from named_modules()
        self.trace: Trace | None = None
        self.edit = None  # (B, *dims) tensor -> tensor of the same shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.edit is not None:
            x = self.edit(x)
        if self.trace is not None:
            self.trace.add(self.name, x[0].detach(), self.dims)
        return x

    # A forward passes ~25 taps per block: skip nn.Module's hook machinery (taps have no hooks)
    __call__ = forward

    def lazy(self, compute, shape: Sequence[int]) -> None:
        """Record a value computed only when the trace is read: compute() -> (B, ...)."""
        if self.trace is not None:
            self.trace.add(self.name, Lazy(lambda: compute()[0].detach(), shape[1:]), self.dims)

    @property
    def on(self) -> bool:
        """Must the value pass through this tap? (recorded or edited: a fused kernel that
        never forms it would skip both)"""
        return self.trace is not None or self.edit is not None


class Taps(nn.Module):
    """A named group of taps with no computation of its own (`tokens.ids`)."""

    def __init__(self, **taps: Tap):
        super().__init__()
        for name, tap in taps.items():
            self.add_module(name, tap)


# -- normalisation -----------------------------------------------------------------
class Norm(nn.Module):
    """LayerNorm (mean and biased variance over C, then scale and shift) or RMSNorm.

    Written out rather than F.layer_norm so the mean, variance and normalised rows can be
    shown, and so the arithmetic is the seed's: (x - mean) / sqrt(var + eps) * scale + shift.
    In bfloat16 or float16 models the statistics, scale and shift are computed in float32
    and the output is rounded back to the model's dtype (a no-op in float32).
    """

    def __init__(self, cfg: ModelConfig, size: int | None = None,
                 dims: tuple[str, ...] = ("T", "C")):
        """size: the normalised width (d_model; head_dim for Qwen3's and Gemma 3's q and k
        norms, whose rows are (H, T, D))."""
        super().__init__()
        size = size or cfg.d_model
        self.kind, self.eps = cfg.norm, cfg.ln_eps
        # Gemma stores w and scales by (1 + w); a fresh norm still multiplies by one
        self.plus_one = cfg.norm_plus_one
        self.scale = nn.Parameter(torch.zeros(size) if self.plus_one else torch.ones(size))
        self.shift = nn.Parameter(torch.zeros(size)) if cfg.norm == "layernorm" else None
        self.add_module("in", Tap(*dims))  # what is normalised (x + Sublayer(x) in post-LN)
        self.mean, self.var = Tap(*dims[:-1]), Tap(*dims[:-1])
        self.normed, self.out = Tap(*dims), Tap(*dims)

    @property
    def gain(self) -> torch.Tensor:
        """What the normalised rows are multiplied by: the scale, or 1 + scale (Gemma);
        float32 (1 + w in bfloat16 would round w away)."""
        scale = self.scale.float()
        return 1.0 + scale if self.plus_one else scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = getattr(self, "in")(x)
        if not self.normed.on:
            # the normalised rows are not asked for: one fused kernel instead of six passes
            # over x. Statistics asked for are computed from x when the trace reads them,
            # with the same operations as below, so the output stays the fused one.
            if self.kind == "rmsnorm":
                self.var.lazy(lambda: x.float().pow(2).mean(dim=-1), x.shape[:-1])
            else:
                self.mean.lazy(lambda: x.float().mean(dim=-1), x.shape[:-1])
                self.var.lazy(lambda: x.float().var(dim=-1, unbiased=False), x.shape[:-1])
            return self.out(self.fused(x))
        wide = x.float()  # x itself in float32 models; a float32 copy in half precision
        if self.kind == "rmsnorm":
            mean_square = wide.pow(2).mean(dim=-1, keepdim=True)  # (B, T, 1)
            self.var(mean_square.squeeze(-1))  # RMSNorm's "variance" is the mean square
            normed = self.normed(wide * torch.rsqrt(mean_square + self.eps))
            return self.out((normed * self.gain).to(x.dtype))
        mean = wide.mean(dim=-1, keepdim=True)  # (B, T, 1)
        var = wide.var(dim=-1, keepdim=True, unbiased=False)
        self.mean(mean.squeeze(-1))
        self.var(var.squeeze(-1))
        normed = self.normed((wide - mean) / torch.sqrt(var + self.eps))
        return self.out((normed * self.gain + self.shift.float()).to(x.dtype))

    def fused(self, x: torch.Tensor) -> torch.Tensor:
        """The same norm in one kernel, recording nothing (in float32, as forward)."""
        if self.kind == "rmsnorm":
            out = F.rms_norm(x.float(), (x.shape[-1],), self.gain, self.eps)
        else:
            out = F.layer_norm(x.float(), (x.shape[-1],), self.gain, self.shift.float(),
                               self.eps)
        return out.to(x.dtype)


# -- positions ---------------------------------------------------------------------
def sinusoidal_table(n_positions: int, d_model: int, layout: str = "interleaved"
                     ) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
    layout "halves" (Marian) puts the d/2 sines first and the cosines after them."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (C/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, C/2)
    if layout == "halves":
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1).float()
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table.float()


def rope_frequencies(dim: int, theta: float, scaling: dict | None = None,
                     length: int = 0) -> tuple[torch.Tensor, float]:
    """The rotation frequency of each pair of a dim-wide rotation, theta^(-2i/dim), as a
    scaling type changes them for longer contexts, and the factor cos and sin are then
    multiplied by (yarn's attention factor; 1 otherwise). float64, (dim/2,).

    linear divides every frequency by `factor`. llama3 leaves the fast (short-wavelength)
    ones, divides the slow ones by `factor` and blends in between. yarn interpolates the
    slow dimensions, keeps the fast ones, ramps linearly between the dimensions that turn
    beta_slow and beta_fast times over the original context, and scales cos and sin by
    0.1 * ln(factor) + 1 (or its given attention_factor). longrope (Phi-3) divides each
    frequency by its own factor, short_factor while the run's `length` (largest position
    + 1) fits the trained context and long_factor past it, and scales cos and sin by
    sqrt(1 + ln factor / ln trained context)."""
    freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    scaling = scaling or {}
    kind, factor = scaling.get("rope_type", "default"), scaling.get("factor", 1.0)
    if kind == "linear":
        return freq / factor, 1.0
    if kind == "llama3":
        old = scaling.get("original_max_position_embeddings", 8192)
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        wavelength = 2 * math.pi / freq
        slow = wavelength > old / low  # long waves: slowed down by the factor
        blend = ((old / wavelength - low) / (high - low)).clamp(0, 1)  # 0 slow .. 1 fast
        between = (1 - blend) * freq / factor + blend * freq
        fast = wavelength < old / high
        return torch.where(slow, freq / factor, torch.where(fast, freq, between)), 1.0
    if kind == "longrope":
        old = scaling["original_max_position_embeddings"]
        ext = scaling["long_factor" if length > old else "short_factor"]
        freq = freq / torch.tensor(ext, dtype=torch.float64)
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = math.sqrt(1 + math.log(factor) / math.log(old)) if factor > 1 else 1.0
        return freq, float(attention)
    if kind == "yarn":
        old = scaling.get("original_max_position_embeddings", 4096)
        fast, slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)

        def dim_turning(turns: float) -> float:  # the dimension that turns `turns` times
            return dim * math.log(old / (turns * 2 * math.pi)) / (2 * math.log(theta))

        lo = max(math.floor(dim_turning(fast)), 0)
        hi = min(math.ceil(dim_turning(slow)), dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) /
                (max(hi - lo, 0.001))).clamp(0, 1)  # 0: keep, 1: interpolate
        keep = 1 - ramp
        freq = (freq / factor) * (1 - keep) + freq * keep
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        return freq, float(attention)
    return freq, 1.0


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float,
                scaling: dict | None = None) -> torch.Tensor:
    """Rotation angle of each (position, frequency): pos * frequency. (T, dim/2)"""
    freq, _ = rope_frequencies(head_dim, theta, scaling)
    return (positions.double()[:, None] * freq[None, :]).float()


def rope_tables(positions: torch.Tensor, cfg: ModelConfig, *, local: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (T, rotary dims), that rotate q and k: the sliding layers of
    Gemma 3 use their own base and no scaling; GPT-NeoX rotates only rotary_dim dims."""
    dim = cfg.rotary_dim or cfg.head_dim
    theta = cfg.rope_local_theta if local and cfg.rope_local_theta else cfg.rope_theta
    scaling = None if local and cfg.rope_local_theta else cfg.rope
    length = int(positions.max()) + 1 if positions.numel() else 0
    freq, factor = rope_frequencies(dim, theta, scaling, length)
    angles = (positions.double()[:, None] * freq[None, :]).float()  # (T, dim/2)
    angles = torch.cat([angles, angles], -1)  # dimension i and i + dim/2 share angle i
    return angles.cos() * factor, angles.sin() * factor


def apply_rope(x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+R/2}) of the first R dims by their angle, the split-halves
    (HF Llama, GPT-NeoX) layout; dims past R (partial rotation) pass unchanged."""
    cos, sin = rot  # (T, R)
    R = cos.shape[-1]
    turned, passed = (x, None) if R == x.shape[-1] else (x[..., :R], x[..., R:])
    half = R // 2
    rotated_half = torch.cat([-turned[..., half:], turned[..., :half]], dim=-1)
    out = turned * cos + rotated_half * sin
    return out if passed is None else torch.cat([out, passed], dim=-1)


def embedding(n: int, d: int) -> nn.Embedding:
    """nn.Embedding with PyTorch's default init, except on the meta device: there its
    normal_ init would import torch._dynamo (seconds) to fill a tensor that has no data."""
    if torch.empty(0).is_meta:  # inside `with torch.device("meta")`
        return nn.Embedding(n, d, _weight=torch.empty(n, d))
    return nn.Embedding(n, d)


class Embed(nn.Module):
    def __init__(self, cfg: ModelConfig, tok_emb: nn.Embedding | None = None):
        """tok_emb: a token table shared with another stack (an encoder–decoder's one
        vocabulary); else its own."""
        super().__init__()
        self.cfg = cfg
        self.tok_emb = tok_emb if tok_emb is not None else embedding(cfg.vocab_size, cfg.d_model)
        if cfg.positional == "learned":  # BART's rows start pos_offset (2) into the table
            self.pos_emb = embedding(cfg.context_length + cfg.pos_offset, cfg.d_model)
        elif cfg.positional == "sinusoidal":
            self.register_buffer("pe", sinusoidal_table(cfg.context_length, cfg.d_model,
                                                        cfg.sinusoidal_layout),
                                 persistent=False)
        if cfg.token_types:
            self.type_emb = embedding(cfg.token_types, cfg.d_model)
        self.tok = Tap("T", "C")
        if cfg.positional in ("learned", "sinusoidal"):
            self.pos = Tap("T", "C")
        if cfg.token_types:
            self.token_type = Tap("T", "C")
        self.ln = Norm(cfg) if cfg.embed_norm else None
        self.out = Tap("T", "C")

    def forward(self, ids: torch.Tensor, positions: torch.Tensor,
                token_type_ids: torch.Tensor | None) -> torch.Tensor:
        x = self.tok(self.tok_emb(ids))  # (B, T, C)
        if self.cfg.embed_scale:  # Gemma: rows of unit-ish norm brought up to sqrt(d_model)
            x = x * math.sqrt(self.cfg.d_model)
        if self.cfg.positional == "learned":
            x = x + self.pos(self.pos_emb(positions + self.cfg.pos_offset)[None])
        elif self.cfg.positional == "sinusoidal":
            x = x + self.pos(self.pe[positions][None])
        if self.cfg.token_types:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            x = x + self.token_type(self.type_emb(token_type_ids))
        if self.ln is not None:
            x = self.ln(x)
        return self.out(x)


# -- attention ---------------------------------------------------------------------
class KVCache:
    """Preallocated keys and values per layer; a decoding step writes in place."""

    def __init__(self, cfg: ModelConfig, batch: int = 1, max_len: int | None = None,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        max_len = max_len or cfg.context_length
        shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        # the decoder's self-attention in an encoder–decoder; every block otherwise
        layers = cfg.n_decoder_layers or cfg.n_layers
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
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
                       causal: bool = False, softcap: float | None = None) -> torch.Tensor:
    """softmax(mask(Q Kᵀ / scale)) V, written out step by step: the one attention formula.

    queries (..., T, D), keys (..., S, D), values (..., S, Dv); keep (T, S) bool or None.
    `taps` has scores/scaled/masked/pattern taps (an Attention module, or the stand-alone
    ones `tfx attend --inputs` uses for hand-made matrices); None records nothing.
    causal: keep is the square causal mask (key j visible to query i when j <= i).
    softcap (Gemma 2): the scaled scores become cap * tanh(scaled / cap) before the mask,
    recorded as `capped`.

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

    def masked(rows=every, cols=every):
        if keep is None:
            return capped(rows, cols)
        return capped(rows, cols).masked_fill_(~keep[rows, cols], float("-inf"))

    shape = (*queries.shape[:-1], keys.shape[-2])
    for name, compute in (("scores", scores), ("scaled", scaled), ("capped", capped),
                          ("masked", masked)):
        if getattr(getattr(tap, name, None), "on", False):
            getattr(tap, name).lazy(compute, shape)
    T = queries.shape[-2]
    # an edited pattern must be whole before the context is formed from it
    edited = getattr(tap.pattern, "edit", None) is not None
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
    """Multi-head (or grouped-query) attention: the only attention in tfx.

    The explicit path materialises scores, scaled, masked and pattern; when no tap inside
    needs them it calls the fused scaled_dot_product_attention, held equal by a test.
    Switches of the newer families: per-head q and k norms (Qwen3, Gemma 3), a sliding
    window (Mistral, Gemma), soft-capped scores (Gemma 2), a scale other than sqrt(D)
    (Gemma's query_pre_attn_scalar), and a head width apart from d_model / n_heads.
    """

    def __init__(self, cfg: ModelConfig, layer: int, *, cross: bool = False):
        """cross: an encoder–decoder's cross-attention (queries from the decoder, keys and
        values from the encoder output; no mask but the source's padding)."""
        super().__init__()
        self.cfg, self.layer, self.is_cross = cfg, layer, cross
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.window = cfg.sliding_window if cfg.is_sliding(layer) and not cross else None
        self.softcap = cfg.attn_softcap
        self.scale = math.sqrt(cfg.attn_scalar or cfg.head_dim)  # scores are divided by it
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self.W_query = nn.Linear(cfg.d_model, cfg.attn_dim, bias=cfg.qkv_bias)
        self.W_key = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)
        self.W_value = nn.Linear(cfg.d_model, kv_dim, bias=cfg.qkv_bias)
        self.out_proj = nn.Linear(cfg.attn_dim, cfg.d_model, bias=cfg.proj_bias)
        self.q, self.k, self.v = Tap("H", "T", "D"), Tap("H", "S", "D"), Tap("H", "S", "D")
        if cfg.qk_norm:  # each head's q and k rows normalised over D, before the rotation
            self.q_norm = Norm(cfg, cfg.head_dim, ("H", "T", "D"))
            self.k_norm = Norm(cfg, cfg.head_dim, ("H", "S", "D"))
        if cfg.positional == "rope" and not cross:
            self.q_rot, self.k_rot = Tap("H", "T", "D"), Tap("H", "S", "D")
        self.scores, self.scaled = Tap("H", "T", "S"), Tap("H", "T", "S")
        if self.softcap is not None:
            self.capped = Tap("H", "T", "S")
        self.masked, self.pattern = Tap("H", "T", "S"), Tap("H", "T", "S")
        # A: the heads joined, H * D wide; C (d_model) unless head_dim is set apart
        joined = "C" if cfg.attn_dim == cfg.d_model else "A"
        self.context, self.concat, self.out = Tap("H", "T", "D"), Tap("T", joined), Tap("T", "C")

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
        keys before it)."""
        q_pos = torch.arange(start, start + T, device=device)[:, None]
        return q_pos - torch.arange(S, device=device)[None, :] < self.window

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                kv_x: torch.Tensor | None = None, rot: tuple | None = None,
                k_rot: tuple | None = None, rot_local: tuple | None = None,
                cache: KVCache | None = None, start: int = 0,
                is_causal: bool = False) -> torch.Tensor:
        """x: (B, T, C) queries' input; kv_x: keys/values' input (cross-attention), else x.
        keep: (T, S) bool, True where a query may look; None means no mask at all.
        rot: the (cos, sin) tables rotating q (rotary models); k_rot those of k when they
        differ (keys from another text), else rot; rot_local those of a sliding layer that
        rotates with its own base (Gemma 3).
        is_causal: keep is exactly the square causal mask, which the fused kernel can
        apply by skipping the hidden blocks instead of reading a mask."""
        if self.window is not None and rot_local is not None:
            rot = rot_local
        if self.is_cross:
            return self._cross(x, keep, kv_x, cache)
        q, k, v = self._project(x, kv_x)
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
        return self._attend(queries, keys, values, keep, is_causal)

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
                keep: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """softmax(mask(QKᵀ / scale)) V over the heads, joined and projected by W_O."""
        explicit = self.softcap is not None or any(
            t.on for t in (self.scores, self.scaled, self.masked, self.pattern))
        if explicit:
            context_vec = explicit_attention(queries, keys, values, keep, self.scale,
                                             taps=self, causal=is_causal,
                                             softcap=self.softcap)
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


# -- feed-forward ------------------------------------------------------------------
class FeedForward(nn.Module):
    """x W1 -> activation -> W2; or gated (SwiGLU: SiLU, GeGLU: GELU-tanh): the gate
    x W_gate goes through the activation and multiplies x W_up, then W_down."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.activation = cfg.activation
        self.gated = cfg.activation in GATED
        bias = cfg.proj_bias
        if self.gated:
            self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=bias)
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=bias)  # "up" when gated
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=bias)  # "down"
        self.hidden, self.act, self.out = Tap("T", "F"), Tap("T", "F"), Tap("T", "C")
        if self.gated:
            self.up = Tap("T", "F")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate = self.hidden(self.gate_proj(x))  # (B, T, F), pre-activation of the gate
            act = self.act(self.activate(gate) * self.up(self.fc1(x)))
        else:
            hidden = self.hidden(self.fc1(x))  # (B, T, F)
            act = self.act(self.activate(hidden))
        return self.out(self.fc2(act))

    def activate(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.activation == "relu":
            return F.relu(hidden)
        if self.activation == "gelu":
            return F.gelu(hidden)  # exact (erf), as BERT and nanoGPT
        if self.activation in ("swiglu", "silu"):
            return F.silu(hidden)  # the gate of Llama's SwiGLU; Marian's plain "swish"
        return F.gelu(hidden, approximate="tanh")  # GPT-2, seed 004; Gemma's GeGLU gate


GATED = ("swiglu", "geglu")


# -- block and model ----------------------------------------------------------------
class InMemory:
    """Where a model's weights are: all in memory, so holding a part costs nothing.
    (core/streaming.Streamed keeps them on disk and reads each part while it runs.)

    Parts: "embed" (the embedding tables and their norm), "blocks.{i}", and "head" (the
    final norm and the output head)."""

    streamed = False

    def holding(self, *parts: str):
        return nullcontext()

    def reading(self):
        return nullcontext()  # a streamed model shows its reads as progress here


class Block(nn.Module):
    """One transformer block: attention then feed-forward, each with its residual add.

    pre-LN (GPT, Llama):  x + attn(ln1(x)), then + ffn(ln2(x))
    post-LN (seed 000, BERT):  ln1(x + attn(x)), then ln2(x + ffn(x))
    sandwich (Gemma 2/3):  x + ln_post_attn(attn(ln1(x))), then + ln_post_ffn(ffn(ln2(x)))
    parallel (GPT-NeoX):  x + attn(ln1(x)) + ffn(ln2(x)), both reading the block's input

    A decoder block of an encoder–decoder (cross=True) has three sublayers: masked
    self-attention (ln1), cross-attention on the encoder output (`cross`, ln2) and the
    feed-forward (ln3), each with its add & norm, post-LN as in the paper or pre-LN.
    """

    def __init__(self, cfg: ModelConfig, layer: int, *, cross: bool = False):
        super().__init__()
        self.post_ln = cfg.norm_position == "post"
        self.parallel, self.sandwich = cfg.parallel_residual, cfg.sandwich_norm
        self.has_cross = cross
        self.ln1 = Norm(cfg)
        self.attn = Attention(cfg, layer)
        if self.sandwich:
            self.ln_post_attn = Norm(cfg)
        if not self.parallel:  # a parallel block has no stream between its sublayers
            self.resid_mid = Tap("T", "C")
        self.ln2 = Norm(cfg)
        if cross:
            self.cross = Attention(cfg, layer, cross=True)
            self.resid_cross = Tap("T", "C")
            self.ln3 = Norm(cfg)
        self.ffn = FeedForward(cfg)
        if self.sandwich:
            self.ln_post_ffn = Norm(cfg)
        self.resid_out = Tap("T", "C")

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                memory: torch.Tensor | None = None, memory_keep: torch.Tensor | None = None,
                **attn_kw) -> torch.Tensor:
        """memory, memory_keep: the encoder output (B, S, C) and which of its positions
        the cross-attention may read (decoder blocks only)."""
        if self.has_cross:
            return self._decoder_block(x, keep, memory, memory_keep, attn_kw)
        if self.post_ln:  # LayerNorm(x + Sublayer(x)), the original encoder (seed 000)
            x = self.resid_mid(self.ln1(x + self.attn(x, keep, **attn_kw)))
            return self.resid_out(self.ln2(x + self.ffn(x)))
        if self.parallel:
            attended = self.attn(self.ln1(x), keep, **attn_kw)
            return self.resid_out(x + attended + self.ffn(self.ln2(x)))
        attended = self.attn(self.ln1(x), keep, **attn_kw)
        if self.sandwich:
            attended = self.ln_post_attn(attended)
        x = self.resid_mid(x + attended)
        fed = self.ffn(self.ln2(x))
        if self.sandwich:
            fed = self.ln_post_ffn(fed)
        return self.resid_out(x + fed)

    def _decoder_block(self, x, keep, memory, memory_keep, attn_kw) -> torch.Tensor:
        cache = attn_kw.get("cache")
        if self.post_ln:
            x = self.resid_mid(self.ln1(x + self.attn(x, keep, **attn_kw)))
            x = self.resid_cross(self.ln2(x + self.cross(x, memory_keep, kv_x=memory,
                                                         cache=cache)))
            return self.resid_out(self.ln3(x + self.ffn(x)))
        x = self.resid_mid(x + self.attn(self.ln1(x), keep, **attn_kw))
        x = self.resid_cross(x + self.cross(self.ln2(x), memory_keep, kv_x=memory,
                                            cache=cache))
        return self.resid_out(x + self.ffn(self.ln3(x)))


class Stack(nn.Module):
    """One stack of an encoder–decoder: its input ids, embedding (the token table is the
    one both stacks share), blocks and, pre-LN, final norm. Trace names get the stack's
    name in front: encoder.blocks.0.attn.pattern, decoder.blocks.0.cross.pattern."""

    def __init__(self, cfg: ModelConfig, n_blocks: int, *, cross: bool,
                 tok_emb: nn.Embedding | None = None):
        super().__init__()
        self.tokens = Taps(ids=Tap("T"))
        self.embed = Embed(cfg, tok_emb)
        self.blocks = nn.ModuleList(Block(cfg, i, cross=cross) for i in range(n_blocks))
        self.ln_f = Norm(cfg) if cfg.has_final_norm else None


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, blocks: int | None = None):
        """blocks=n materialises the embedding and blocks 0..n-1 only; later blocks, the
        final norm and an untied head are built on the meta device (no storage, no init).
        Modules are built in forward order and meta init draws nothing from the RNG, so
        what is built equals the whole model's values for the same seed bit for bit.

        An encoder–decoder config builds an `encoder` and a `decoder` Stack (whole) and
        one head after the decoder; every other model is one stack at the top level."""
        super().__init__()
        self.cfg = cfg
        self.encoder_runs = 0  # how often the encoder ran (decoding runs it once)
        if cfg.is_encoder_decoder:
            self.built_blocks = cfg.n_layers
            self.encoder = Stack(cfg, cfg.n_layers, cross=False)
            self.decoder = Stack(cfg, cfg.n_decoder_layers, cross=True,
                                 tok_emb=self.encoder.embed.tok_emb)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            token_table = self.encoder.embed.tok_emb
        else:
            self.built_blocks = cfg.n_layers if blocks is None else \
                max(0, min(blocks, cfg.n_layers))
            self.tokens = Taps(ids=Tap("T"))
            self.embed = Embed(cfg)
            self.blocks = nn.ModuleList(Block(cfg, i) for i in range(self.built_blocks))
            rest = self.built_blocks < cfg.n_layers
            with torch.device("meta") if rest else nullcontext():
                self.blocks.extend(Block(cfg, i) for i in range(self.built_blocks, cfg.n_layers))
                self.ln_f = Norm(cfg) if cfg.has_final_norm else None
                if cfg.lm_head:
                    self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            token_table = self.embed.tok_emb
        if cfg.lm_head and cfg.tie_embeddings:
            self.lm_head.weight = token_table.weight
        if cfg.logits_bias:  # Marian, BART: a fixed bias on every logit (not trained)
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        if cfg.final_softcap is not None:  # Gemma 2: the head's logits before the cap
            self.logits_uncapped = Tap("T", "V")
        self.logits = Tap("T", "V")
        self.taps: dict[str, Tap] = {}
        for name, module in self.named_modules():
            if isinstance(module, Tap):
                module.name = name
                self.taps[name] = module

    def stack(self, which: str | None = None) -> tuple[nn.Module, str]:
        """(module holding embed, blocks and ln_f, its trace-name prefix): the model
        itself for a single stack; the encoder or decoder of an encoder–decoder."""
        if not self.cfg.is_encoder_decoder:
            return self, ""
        which = which or "encoder"
        return getattr(self, which), which + "."

    def tied(self) -> dict[str, str]:
        """Parameters that are another one (name -> the name they share)."""
        return tied_parameters(self.cfg)

    def retie(self) -> None:
        """Share the tied parameters again (after load_state_dict(assign=True) replaced
        the token table)."""
        if self.cfg.is_encoder_decoder:
            self.decoder.embed.tok_emb = self.encoder.embed.tok_emb
            table = self.encoder.embed.tok_emb
        else:
            table = self.embed.tok_emb
        if self.cfg.lm_head and self.cfg.tie_embeddings:
            self.lm_head.weight = table.weight
    # -- precision, device and where the weights are -------------------------------------
    dtype = torch.float32  # of the weights and activations (norms, softmax: float32)
    device = torch.device("cpu")
    residency = InMemory()  # or core/streaming.Streamed: the weights stay on disk

    def place(self, dtype: torch.dtype | None = None, device: str | None = None) -> "Transformer":
        """Cast and move the weights; every tensor forward makes follows them (ids,
        positions, masks, rotary tables, the KV cache)."""
        self.dtype = dtype or self.dtype
        self.device = torch.device(device) if device else self.device
        if not self.residency.streamed:
            def move(t: torch.Tensor) -> torch.Tensor:  # blocks left on meta stay there
                dtype = self.dtype if t.is_floating_point() else t.dtype
                return t if t.is_meta else t.to(device=self.device, dtype=dtype)

            self._apply(move)
        return self

    def holding(self, *parts: str):
        """A context in which the named parts' weights are in memory ("embed",
        "blocks.{i}", "head"): free for a model in memory; a streamed model reads them
        from disk for the duration, unless they are held already."""
        return self.residency.holding(*parts)

    def rope_for(self, positions: torch.Tensor, *, local: bool = False) -> tuple:
        """rope_tables in the model's dtype and on its device (computed on the CPU in
        float64, as always, then rounded: half-precision models rotate by the same
        angles as float32 ones, as transformers does)."""
        cos, sin = rope_tables(positions, self.cfg, local=local)
        return cos.to(self.device, self.dtype), sin.to(self.device, self.dtype)

    # -- recording --------------------------------------------------------------------
    recording = 0  # open record() blocks; decoding.step records nothing, so it needs 0

    def tap_names(self) -> list[str]:
        return list(self.taps)

    @contextmanager
    def record(self, globs: Iterable[str], trace: Trace | None = None):
        """Switch on the taps whose names match `globs`; yields the Trace they fill."""
        trace = trace if trace is not None else Trace()
        rx = compile_globs(list(globs))
        chosen = [tap for name, tap in self.taps.items() if rx.match(name)]
        for tap in chosen:
            tap.trace = trace
        self.recording += 1
        try:
            yield trace
        finally:
            self.recording -= 1
            for tap in chosen:
                tap.trace = None

    # -- forward ----------------------------------------------------------------------
    def mask(self, T: int, S: int, start: int = 0, *, causal: bool | None = None,
             valid_len: int | None = None) -> torch.Tensor | None:
        """(T, S) keep-mask: query i sits at position start + i; key j at position j."""
        causal = self.cfg.causal if causal is None else causal
        if not causal and valid_len is None:
            return None
        keep = torch.ones(T, S, dtype=torch.bool, device=self.device)
        if causal:
            q_pos = torch.arange(start, start + T, device=self.device)[:, None]
            keep &= torch.arange(S, device=self.device)[None, :] <= q_pos
        if valid_len is not None:
            keep[:, valid_len:] = False
        return keep

    def forward(self, ids: torch.Tensor, *, token_type_ids: torch.Tensor | None = None,
                cache: KVCache | None = None, keep: torch.Tensor | None | str = "auto",
                stop_after: int | None = None, head: str = "all",
                target: torch.Tensor | None = None, stack: str | None = None,
                memory: torch.Tensor | None = None,
                source_len: int | None = None) -> torch.Tensor | None:
        """ids: (B, T). Returns logits (B, T, V), or (B, 1, V) with head="last", or the
        final hidden state for models without a head; None when stopped early.

        stop_after=L runs blocks 0..L only (a command that shows layer L needs no more).

        Encoder–decoder models: ids is the source; `target` (B, T) the decoder's input
        (None: run the encoder only and return its output). `stack` says which stack
        stop_after counts in ("encoder" or "decoder", the default). `memory` is an encoder
        output already computed (decoding reuses it); `source_len` marks the source
        positions from there on as padding, hidden from the encoder's attention and the
        cross-attention. `keep` is the encoder's mask without a target, else the
        decoder's self-attention mask ("auto": causal).
        """
        if self.cfg.is_encoder_decoder:
            with self.residency.reading():
                return self._seq2seq(ids, target, cache=cache, keep=keep,
                                     stop_after=stop_after, head=head, stack=stack or "decoder",
                                     memory=memory, source_len=source_len)
        with self.residency.reading():
            return self._forward(ids, token_type_ids, cache, keep, stop_after, head)

    def _forward(self, ids, token_type_ids, cache, keep, stop_after, head):
        B, T = ids.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context_length:
            raise ValueError(f"{start + T} positions exceed the context length "
                             f"{self.cfg.context_length}")
        ids = ids.to(self.device)
        self.tokens.ids(ids)
        with self.holding("embed"):
            positions = torch.arange(start, start + T, device=self.device)
            x = self.embed(ids, positions, token_type_ids)  # (B, T, C)
        if stop_after is not None and stop_after < 0:
            return None  # the embedding was all that was asked for
        context = self.attention_context(T, start=start, cache=cache, keep=keep)
        return self.run_blocks(x, context, stop_after=stop_after, head=head)

    def _seq2seq(self, ids, target, *, cache, keep, stop_after, head, stack, memory,
                 source_len) -> torch.Tensor | None:
        S = ids.shape[1]
        if memory is None:
            enc_keep = keep if target is None else "auto"
            if isinstance(enc_keep, str):
                enc_keep = self.mask(S, S, causal=False, valid_len=source_len)
            memory = self.encode(ids, keep=enc_keep,
                                 stop_after=stop_after if stack == "encoder" else None)
            if memory is None or target is None:
                return memory
        elif target is None:
            return memory
        B, T = target.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context_length:
            raise ValueError(f"{start + T} target positions exceed the context length "
                             f"{self.cfg.context_length}")
        dec = self.decoder
        target = target.to(self.device)
        dec.tokens.ids(target)
        with self.holding("decoder.embed"):
            x = dec.embed(target, torch.arange(start, start + T, device=self.device), None)
        if stop_after is not None and stop_after < 0:
            return None
        context = self.attention_context(T, start=start, cache=cache, keep=keep, causal=True)
        context["memory"] = memory
        context["memory_keep"] = None if source_len is None else \
            self.mask(T, memory.shape[1], causal=False, valid_len=source_len)
        return self.run_blocks(x, context, stop_after=stop_after if stack == "decoder" else None,
                               head=head, stack=dec)

    def encode(self, ids: torch.Tensor, *, keep: torch.Tensor | None = None,
               stop_after: int | None = None) -> torch.Tensor | None:
        """An encoder–decoder's encoder on the source ids (B, S): its output (B, S, C), the
        `memory` every decoder block's cross-attention reads; None when stopped early."""
        self.encoder_runs += 1
        S = ids.shape[1]
        if S > self.cfg.context_length:
            raise ValueError(f"{S} source positions exceed the context length "
                             f"{self.cfg.context_length}")
        enc = self.encoder
        ids = ids.to(self.device)
        enc.tokens.ids(ids)
        with self.residency.reading():
            with self.holding("encoder.embed"):
                x = enc.embed(ids, torch.arange(S, device=self.device), None)
            if stop_after is not None and stop_after < 0:
                return None
            context = {"keep": keep, "cache": None, "start": 0}
            return self.run_blocks(x, context, stop_after=stop_after, stack=enc)

    def attention_context(self, T: int, *, start: int = 0, cache: KVCache | None = None,
                          keep: torch.Tensor | None | str = "auto",
                          causal: bool | None = None) -> dict:
        """What every block's attention needs besides x: the keep-mask (the config's own
        for "auto", or causal when `causal`; sliding layers narrow it to their window
        themselves), the cache and where the new positions start, and the rotary tables
        of the new positions."""
        causal = self.cfg.causal if causal is None else causal
        attn_kw: dict = {"keep": keep, "cache": cache, "start": start}
        if isinstance(keep, str):
            attn_kw["keep"] = self.mask(T, start + T, start, causal=causal)
            attn_kw["is_causal"] = causal and start == 0  # square: query i, keys <= i
        if self.cfg.positional == "rope":
            positions = torch.arange(start, start + T)
            attn_kw["rot"] = self.rope_for(positions)
            if self.cfg.rope_local_theta is not None:
                attn_kw["rot_local"] = self.rope_for(positions, local=True)
        return attn_kw

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The head on a (normalised) residual stream: logits, soft-capped where the
        model caps them (Gemma 2). Recorded as `logits`."""
        logits = self.lm_head(x)
        if self.cfg.logits_bias:
            logits = logits + self.final_logits_bias
        cap = self.cfg.final_softcap
        if cap is not None:
            logits = self.logits_uncapped(logits)
            logits = torch.tanh(logits / cap) * cap
        return logits

    def run_blocks(self, x: torch.Tensor, context: dict, *, first: int = 0,
                   stop_after: int | None = None, head: str = "all",
                   stack: nn.Module | None = None) -> torch.Tensor | None:
        """Blocks first..last on the residual stream x (B, T, C) entering block `first`,
        then the final norm and head: the rest of forward, so a run can resume from any
        block's input (activation patching starts each patched run there). `stack`: an
        encoder–decoder's encoder (which ends at its output, no head) or decoder."""
        module = self if stack is None else stack
        # the parts a streamed model reads (core/streaming.py): "blocks.{i}" and "head",
        # an encoder–decoder's prefixed with its stack
        prefix = "" if stack is None else \
            "encoder." if stack is getattr(self, "encoder", None) else "decoder."
        n = len(module.blocks)
        last = n if stop_after is None else min(stop_after, n - 1)
        if stack is None and last >= self.built_blocks and self.built_blocks < n:
            raise RuntimeError(f"this model was built with {self.built_blocks} of "
                               f"{n} blocks; build it whole to run further")
        attn_kw = dict(context)
        keep = attn_kw.pop("keep")
        for i in range(first, n):
            with self.holding(f"{prefix}blocks.{i}"):
                x = module.blocks[i](x, keep, **attn_kw)
            if stop_after is not None and i >= stop_after:
                return None
        cache = context["cache"]
        if cache is not None:
            cache.length = context["start"] + x.shape[1]
        # a streamed model reads its last part only for what runs: a final norm, or the head
        ends = module.ln_f is not None or (prefix != "encoder." and self.cfg.lm_head
                                           and head != "none")
        with self.holding("encoder.ln_f" if prefix == "encoder." else "head") if ends \
                else nullcontext():
            if module.ln_f is not None:
                x = module.ln_f(x)
            if stack is not None and stack is getattr(self, "encoder", None):
                return x  # the memory the decoder reads
            if not self.cfg.lm_head or head == "none":
                return x
            if head == "last":
                x = x[:, -1:]
                if x.dtype == torch.bfloat16:
                    # a fresh row: handed a row whose batch stride is the whole text's
                    # (T * C), torch's bfloat16 matmul copies the head's whole weight
                    # first (Qwen2.5-0.5B: +272 MB and 1.2 s instead of 0.04 s)
                    x = x.new_empty(x.shape).copy_(x)
            return self.logits(self.unembed(x))


def tied_parameters(cfg: ModelConfig) -> dict[str, str]:
    """A model's parameters that are another one (name -> the name they share): an
    encoder–decoder's decoder token table is the encoder's, and a tied head is the token
    table."""
    table = "encoder.embed.tok_emb.weight" if cfg.is_encoder_decoder else \
        "embed.tok_emb.weight"
    out = {}
    if cfg.is_encoder_decoder:
        out["decoder.embed.tok_emb.weight"] = table
    if cfg.lm_head and cfg.tie_embeddings:
        out["lm_head.weight"] = table
    return out


def build_model(cfg: ModelConfig, seed: int | None = 123, *, device: str | None = None,
                blocks: int | None = None, dtype: torch.dtype | None = None) -> Transformer:
    """Random weights from `seed` (PyTorch's default init); device="meta" builds no storage.
    blocks=n builds only what a forward stopping after block n-1 touches (see Transformer).
    dtype: the float32 values of the seed, rounded to it (the same init in every dtype)."""
    if device == "meta":
        with torch.device("meta"):
            return Transformer(cfg).eval()
    if seed is not None:
        torch.manual_seed(seed)
    model = Transformer(cfg, blocks).eval()
    return model.place(dtype, device) if dtype or device else model


def tap_names(cfg: ModelConfig) -> list[str]:
    """Every trace name this config produces, in forward order (no weights allocated)."""
    return build_model(cfg, device="meta").tap_names()



__all__: Sequence[str] = ["Transformer", "Stack", "build_model", "tap_names", "KVCache", "Tap", "InMemory",
                          "sinusoidal_table", "rope_angles", "apply_rope", "explicit_attention"]
