"""Positions and embeddings: sinusoidal tables, rotary frequencies and tables, learned
rows, and the embedding of ids (token, position and segment rows, summed)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..config import ModelConfig
from .norms import Norm
from .taps import Tap


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

        lo, hi = dim_turning(fast), dim_turning(slow)
        if scaling.get("truncate", 1):  # gpt-oss: truncate 0 keeps the ends unrounded
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
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
    Gemma 3 use their own base and no scaling; GPT-NeoX rotates only rotary_dim dims, and
    latent attention (DeepSeek-V3) the last qk_rope_dim of each head."""
    dim = cfg.qk_rope_dim or cfg.rotary_dim or cfg.head_dim
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
    def __init__(self, cfg: ModelConfig, tok_emb: nn.Embedding | None = None, *,
                 bidirectional: bool = True):
        """tok_emb: a token table shared with another stack (an encoder–decoder's one
        vocabulary); else its own. bidirectional: whether the stack's self-attention sees
        keys after the query (an encoder), for T5's relative buckets."""
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
        self.bidirectional = bidirectional
        if cfg.positional == "relative" and not cfg.relative_per_layer:
            # T5: the first layer's relative_attention_bias, read by every layer of the stack
            self.rel_bias = embedding(cfg.relative_buckets, cfg.n_heads)
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

    def position_bias(self, T: int, S: int, start: int = 0) -> torch.Tensor:
        """(1, H, T, S): the stack's relative position bias (T5), for queries at start ..
        start + T - 1 and keys 0 .. S - 1."""
        return relative_bias(self.rel_bias.weight, T, S, start,
                             bidirectional=self.bidirectional, cfg=self.cfg)


# -- relative positions (T5) -------------------------------------------------------------
def relative_buckets(relative: torch.Tensor, *, bidirectional: bool, buckets: int,
                     max_distance: int) -> torch.Tensor:
    """T5's bucket of each query-key distance (key position - query position), as Mesh
    TensorFlow and transformers' T5Attention._relative_position_bucket compute it.

    Bidirectional (an encoder): half the buckets for keys after the query, half for the
    rest. Unidirectional (a decoder): keys after the query are masked anyway and share
    bucket 0 with the query itself. Of each half, the first half counts distances one by
    one; the rest cover max_exact .. max_distance on a log scale, and every distance from
    max_distance on falls in the last bucket."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        bucket = bucket + (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    max_exact = buckets // 2
    is_small = distance < max_exact
    # float32 with the operations in transformers' order, so a distance on a bucket
    # boundary falls on the same side
    far = max_exact + (torch.log(distance.float() / max_exact)
                       / math.log(max_distance / max_exact)
                       * (buckets - max_exact)).long()
    far = torch.clamp(far, max=buckets - 1)
    return bucket + torch.where(is_small, distance, far)


def relative_bias(table: torch.Tensor, T: int, S: int, start: int, *, bidirectional: bool,
                  cfg: ModelConfig) -> torch.Tensor:
    """(1, H, T, S): the learned bias of each head for queries at positions start ..
    start + T - 1 and keys at 0 .. S - 1; table (buckets, H) is the stack's (T5) or the
    layer's (UMT5) relative_attention_bias."""
    q_pos = torch.arange(start, start + T, device=table.device)[:, None]
    k_pos = torch.arange(S, device=table.device)[None, :]
    bucket = relative_buckets(k_pos - q_pos, bidirectional=bidirectional,
                              buckets=cfg.relative_buckets,
                              max_distance=cfg.relative_max_distance)  # (T, S)
    return table[bucket].permute(2, 0, 1)[None]  # (1, H, T, S)
