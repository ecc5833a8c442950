"""The SAE architectures tfx runs, one class each: the tensors it has beside W_enc, W_dec
and b_dec, and how it turns x' (the input as the SAE reads it: normalised, b_dec taken
off where the SAE says so) into features.

    ReLU      f = ReLU(x'·W_enc + b_enc)                    SAELens standard (relu)
    JumpReLU  f = ReLU(pre) · [pre > threshold]             jumprelu, Gemma Scope
    TopK      f = the k largest of pre (× |W_dec row| when the SAE says so), ReLU'd
    Gated     f = [x'·W_enc + b_gate > 0] · ReLU(x'·(W_enc ⊙ exp r_mag) + b_mag)
    Transcoder, JumpReLUTranscoder, TopKTranscoder: ReLU's, JumpReLU's and TopK's
              encoders; their output is another site's value, which a normalising SAE
              does not scale back
    CircuitTracerJumpReLU  f = pre · [pre > threshold]: circuit-tracer's JumpReLU, which
              keeps a negative pre-activation above a negative threshold (the same as
              JumpReLU's wherever threshold ≥ 0); every JumpReLU layer of a transcoder
              set runs it, as the replacement model is circuit-tracer's

The class is chosen once, where a folder is read (formats.py, by the names below; a
transcoder set's layers in transcoder_set.py); sae.SAE and the set build one with its
tensors and run its `encode`, or its `activate` of pre-activations they computed. Adding
an architecture is one class here, listed in KINDS.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import torch

Load = Callable[[str], torch.Tensor]  # a tensor of the SAE by name, float32 on its device


class Architecture:
    """An SAE's encoder. `encode(x, units)` gives every feature, or those of `units`
    alone (equal to the whole encoding's columns), from x' (..., d_in)."""

    activation: ClassVar[str]  # tfx's name (tfx-sae.json's architecture, write.py's)
    saelens: ClassVar[tuple[str, ...]] = ()  # the architecture names SAELens gives it
    tensors: ClassVar[tuple[str, ...]] = ("b_enc",)  # beside W_enc, W_dec and b_dec
    needs_k: ClassVar[bool] = False
    transcoder: ClassVar[bool] = False  # reads one site and writes another

    def __init__(self, W_enc: torch.Tensor, load: Load, *, k: int | None = None,
                 dec_norm: torch.Tensor | None = None):
        """dec_norm: |W_dec row| per feature when the SAE rescales by it, else None."""
        self.W_enc, self.k, self.dec_norm = W_enc, k, dec_norm
        for name in self.tensors:
            setattr(self, name, load(name))

    def encode(self, x: torch.Tensor, units: list[int] | None = None) -> torch.Tensor:
        pre = x @ _cols(self.W_enc, units) + _pick(self.b_enc, units)
        return self.activate(pre, units)

    def activate(self, pre: torch.Tensor, units: list[int] | None) -> torch.Tensor:
        """The features of pre-activations `pre` (..., F), or (..., U) of `units`."""
        raise NotImplementedError


def _cols(W: torch.Tensor, units: list[int] | None) -> torch.Tensor:
    return W if units is None else W[:, units]


def _pick(v: torch.Tensor, units: list[int] | None) -> torch.Tensor:
    return v if units is None else v[units]


class ReLU(Architecture):
    activation, saelens = "relu", ("standard", "relu")

    def activate(self, pre, units):
        return torch.relu(pre)


class JumpReLU(Architecture):
    activation, saelens = "jumprelu", ("jumprelu",)
    tensors = ("b_enc", "threshold")

    def activate(self, pre, units):
        return torch.relu(pre) * (pre > _pick(self.threshold, units)).to(pre.dtype)


class TopK(Architecture):
    """Every pre-activation is needed to know which k survive, so `units` computes them
    all and keeps, per row, the requested features among the k."""

    activation, saelens = "topk", ("topk",)
    needs_k = True

    def encode(self, x, units=None):
        pre = x @ self.W_enc + self.b_enc
        if self.dec_norm is not None:
            pre = pre * self.dec_norm
        return self.activate(pre, units)

    def activate(self, pre, units):
        """`pre`: every feature's pre-activation (..., F), whatever `units` asks for."""
        k = min(self.k, pre.shape[-1])
        if units is None:  # every other feature 0
            values, index = torch.topk(pre, k, dim=-1)
            return torch.zeros_like(pre).scatter_(-1, index, torch.relu(values))
        index = torch.topk(pre, k, dim=-1).indices  # (..., k): the survivors
        wanted = torch.tensor(units, device=pre.device)
        kept = (index[..., :, None] == wanted).any(dim=-2)  # (..., U)
        return torch.relu(pre[..., units]) * kept.to(pre.dtype)


class Gated(Architecture):
    activation, saelens = "gated", ("gated",)
    tensors = ("b_gate", "r_mag", "b_mag")

    def __init__(self, W_enc, load, **kw):
        super().__init__(W_enc, load, **kw)
        self.W_mag = W_enc * self.r_mag.exp()

    def encode(self, x, units=None):
        gate = (x @ _cols(self.W_enc, units) + _pick(self.b_gate, units)) > 0
        return gate.to(x.dtype) * torch.relu(x @ _cols(self.W_mag, units)
                                             + _pick(self.b_mag, units))


class Transcoder(ReLU):
    saelens, transcoder = ("transcoder",), True


class JumpReLUTranscoder(JumpReLU):
    saelens, transcoder = ("jumprelu_transcoder",), True


class TopKTranscoder(TopK):
    saelens, transcoder = (), True  # a TopK layer of a set tfx trained, given to --sae


class CircuitTracerJumpReLU(JumpReLU):
    saelens, transcoder = (), True

    def activate(self, pre, units):
        return pre * (pre > _pick(self.threshold, units))


KINDS = (ReLU, JumpReLU, TopK, Gated, Transcoder, JumpReLUTranscoder, TopKTranscoder,
         CircuitTracerJumpReLU)
# SAELens's architecture names -> the class
SAELENS = {name: kind for kind in KINDS for name in kind.saelens}
# the architectures tfx trains and writes, by their tfx-sae.json name
TFX = {kind.activation: kind for kind in (ReLU, JumpReLU, TopK)}

__all__ = ["Architecture", "ReLU", "JumpReLU", "TopK", "Gated", "Transcoder",
           "JumpReLUTranscoder", "TopKTranscoder", "CircuitTracerJumpReLU", "KINDS", "SAELENS",
           "TFX"]
