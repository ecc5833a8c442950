"""Normalisation: LayerNorm and RMSNorm, written out so their statistics can be shown."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .finite import fits_norm
from .taps import Tap


class Norm(nn.Module):
    """LayerNorm (mean and biased variance over C, then scale and shift) or RMSNorm.

    Written out rather than F.layer_norm so the mean, variance and normalised rows can be
    shown, and so the arithmetic is the seed's: (x - mean) / sqrt(var + eps) * scale + shift.
    In bfloat16 or float16 models the statistics, scale and shift are computed in float32
    and the output is rounded back to the model's dtype (a no-op in float32).
    """

    identity = False  # see NoNorm

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
        # ModernBERT's LayerNorms have no shift (norm_bias false)
        self.shift = nn.Parameter(torch.zeros(size)) \
            if cfg.norm == "layernorm" and cfg.norm_bias else None
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
        tap_in = getattr(self, "in")
        x = tap_in(x)
        if not self.normed.on and (tap_in.edit is None or fits_norm(x)):
            # the normalised rows are not asked for: one fused kernel instead of six passes
            # over x. Statistics asked for are computed from x when the trace reads them,
            # with the same operations as below, so the output stays the fused one. An
            # edited input (a steered ln_f.in) too large to normalise takes the long way,
            # which hands on NaN (_overflowed).
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
            normed = self.normed(_overflowed(wide * torch.rsqrt(mean_square + self.eps),
                                             mean_square))
            return self.out((normed * self.gain).to(x.dtype))
        mean = wide.mean(dim=-1, keepdim=True)  # (B, T, 1)
        var = wide.var(dim=-1, keepdim=True, unbiased=False)
        self.mean(mean.squeeze(-1))
        self.var(var.squeeze(-1))
        normed = self.normed(_overflowed((wide - mean) / torch.sqrt(var + self.eps), var))
        shifted = normed * self.gain if self.shift is None else \
            normed * self.gain + self.shift.float()
        return self.out(shifted.to(x.dtype))

    def fused(self, x: torch.Tensor) -> torch.Tensor:
        """The same norm in one kernel, recording nothing (in float32, as forward)."""
        if self.kind == "rmsnorm":
            out = F.rms_norm(x.float(), (x.shape[-1],), self.gain, self.eps)
        else:
            shift = None if self.shift is None else self.shift.float()
            out = F.layer_norm(x.float(), (x.shape[-1],), self.gain, shift, self.eps)
        return out.to(x.dtype)


def _overflowed(normed: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Rows whose variance overflowed float32 (a row of 1e30s) as NaN, not the zeros that
    dividing by infinity gives: no later number means anything, and the model's finite
    check (core/model/finite.py) then stops the run and names the variance."""
    if bool(torch.isfinite(var).all()):
        return normed
    return torch.where(torch.isfinite(var), normed, torch.full_like(normed, float("nan")))


class NoNorm(nn.Module):
    """Where a family has no norm but the block's layout has one (OLMo 2 before attention
    and the FFN, ModernBERT before block 0's attention): the stream passes unchanged. Its
    `in` and `out` taps keep the names (blocks.{i}.ln1.in is block i's input, the
    resid_pre site); it has no statistics and no parameters."""

    identity = True
    eps = 0.0
    shift = None

    def __init__(self, dims: tuple[str, ...] = ("T", "C")):
        super().__init__()
        self.add_module("in", Tap(*dims))
        self.out = Tap(*dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(getattr(self, "in")(x))

    def fused(self, x: torch.Tensor) -> torch.Tensor:
        return x
