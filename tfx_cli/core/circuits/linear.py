"""The local replacement model of one prompt, as linear maps on the residual stream.

With the attention patterns and every norm's divisor frozen at the real run's values
(circuit-tracer's stop-gradients on hook_pattern and hook_scale) and each MLP replaced by
its transcoder's reconstruction plus a fixed error term, the stream is an affine function
of the token embeddings, the active features' decoder rows (times their activations) and
the error vectors. `Frozen` holds what was frozen and applies that affine map's linear
part backwards (the transpose: a row of edges per target) and its whole forward (to find
the constant terms)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..features.transcoder_set import TranscoderSet


@dataclass
class FrozenNorm:
    gain: torch.Tensor  # (D,)
    shift: torch.Tensor | None  # (D,)
    divisor: torch.Tensor  # (T,) the real run's sqrt(var + eps) or sqrt(mean square + eps)
    centred: bool  # LayerNorm subtracts the mean, RMSNorm does not

    def back(self, g: torch.Tensor) -> torch.Tensor:
        """The transpose of x ↦ centre(x) / divisor · gain on (..., T, D) gradients."""
        h = g * self.gain / self.divisor[:, None]
        return h - h.mean(dim=-1, keepdim=True) if self.centred else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.centred:
            x = x - x.mean(dim=-1, keepdim=True)
        out = x / self.divisor[:, None] * self.gain
        return out if self.shift is None else out + self.shift


@dataclass
class FrozenAttention:
    pattern: torch.Tensor  # (H, T, T)
    W_V: torch.Tensor  # (Hkv·Dv, D)
    b_V: torch.Tensor | None
    W_O: torch.Tensor  # (D, H·Dv)
    b_O: torch.Tensor | None
    n_kv: int
    norm: FrozenNorm  # ln1

    def back(self, g: torch.Tensor) -> torch.Tensor:
        """Gradient (B, T, D) at the attention output -> at the block's input."""
        B, T, _ = g.shape
        H = self.pattern.shape[0]
        ctx = (g @ self.W_O).view(B, T, H, -1).transpose(1, 2)  # (B, H, T, Dv)
        gv = torch.einsum("hts,bhtd->bhsd", self.pattern, ctx)  # (B, H, S, Dv)
        gv = gv.reshape(B, self.n_kv, H // self.n_kv, T, -1).sum(2)  # (B, Hkv, S, Dv)
        gv = gv.transpose(1, 2).reshape(B, T, -1)  # (B, S, Hkv·Dv)
        return self.norm.back(gv @ self.W_V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[0]
        H = self.pattern.shape[0]
        v = torch.nn.functional.linear(self.norm.forward(x), self.W_V, self.b_V)
        v = v.view(T, self.n_kv, -1).transpose(0, 1).repeat_interleave(H // self.n_kv, 0)
        ctx = (self.pattern @ v).transpose(0, 1).reshape(T, -1)
        return torch.nn.functional.linear(ctx, self.W_O, self.b_O)


@dataclass
class Frozen:
    """Everything the linear map needs for one prompt of T tokens through L blocks."""

    attn: list[FrozenAttention]
    ln2: list[FrozenNorm]
    ln_f: FrozenNorm
    tc: TranscoderSet
    # what the features read, from the stream after attention: ln2 (its output, or its
    # normalised rows before gain and shift), or None (the stream itself)
    site_norms: list[FrozenNorm | None]

    def site_back(self, layer: int, g_site: torch.Tensor) -> torch.Tensor:
        norm = self.site_norms[layer]
        return g_site if norm is None else norm.back(g_site)

    def site_forward(self, layer: int, mid: torch.Tensor) -> torch.Tensor:
        norm = self.site_norms[layer]
        return mid if norm is None else norm.forward(mid)
