"""An SAE (or transcoder) as tfx runs it: encode a site's activations into features,
decode features back, and the change of the site that a change of features makes.

    x' = normalise(x) − b_dec·[apply_b_dec_to_input]
    f = the architecture's encoding of x' (architectures.py: ReLU, JumpReLU, TopK, gated)
    x̂ = unnormalise(f·W_dec + b_dec)   (a transcoder: f·W_dec + b_dec, another site's
                                         value, never scaled back; as SAELens; plus
                                         x·W_skipᵀ where it has a skip path)

A site whose activation has heads (attn.context, (H, T, D)) is read as TransformerLens's
hook_z SAEs read it: the heads joined per position, (T, H·D).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from .architectures import Architecture
from .formats import SAEFile

# the width of a flattened site per dims letter (ModelConfig's field)
DIM_FIELDS = {"C": "d_model", "A": "attn_dim", "F": "d_ff", "H": "n_heads", "D": "head_dim"}
ROW_FIELDS = {**DIM_FIELDS, "V": "vocab_size"}  # a row of logits has a width too


@dataclass
class SAE:
    """A read SAE: its file's description (`file`), the site it reads and, for a
    transcoder, the site it writes; tensors float32 on `device`."""

    file: SAEFile
    site: str  # tap name it reads (blocks.{i}.resid_pre already resolved)
    site_out: str  # tap name whose value it reconstructs (= site unless a transcoder)
    spec: str  # the site as the user or file named it (blocks.3.resid_pre)
    device: str = "cpu"

    def __post_init__(self):
        self.W_enc = self._t("W_enc")  # (d_in, d_sae)
        self.W_dec = self._t("W_dec")  # (d_sae, d_out)
        self.b_dec = self._t("b_dec")  # (d_out,)
        f = self.file
        # a transcoder's skip path (d_out, d_in): x·W_skipᵀ joins its output
        self.W_skip = self._t("W_skip") if f.transcoder and "W_skip" in f.tensors else None
        self.dec_norm = self.W_dec.norm(dim=-1) if f.rescale_by_decoder_norm else None
        # the file's architecture with its own tensors (b_enc, threshold, b_gate ...)
        self.encoder: Architecture = f.kind(self.W_enc, self._t, k=f.k,
                                            dec_norm=self.dec_norm)

    def _t(self, name: str) -> torch.Tensor:
        return self.file.tensors[name].to(self.device, torch.float32)

    # -- what it is --------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def d_in(self) -> int:
        return self.file.d_in

    @property
    def d_sae(self) -> int:
        return self.file.d_sae

    @property
    def d_out(self) -> int:
        return self.file.d_out

    @property
    def architecture(self) -> str:
        return self.file.architecture

    @property
    def k(self) -> int | None:
        return self.file.k

    # -- the formula ---------------------------------------------------------------------
    def _normalised(self, x: torch.Tensor) -> tuple[torch.Tensor, object]:
        """x in float32 as the SAE reads it, and the function that takes a vector of
        its space back to the site's scale (None: nothing to undo)."""
        x = x.to(torch.float32)
        how = self.file.normalize
        if how == "constant_norm_rescale":  # SAELens: x · sqrt(d_in) / |x|, then ÷ it
            coeff = math.sqrt(self.d_in) / x.norm(dim=-1, keepdim=True)
            return x * coeff, lambda y: y / coeff
        if how == "layer_norm":  # SAELens: (x − mean) / (std + 1e-5), then · std + mean
            mu = x.mean(dim=-1, keepdim=True)
            centred = x - mu
            std = centred.std(dim=-1, keepdim=True)
            return centred / (std + 1e-5), lambda y, shift=True: y * std + (mu if shift else 0)
        return x, None

    def factors(self, x: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(scale, shift) that take a vector of the SAE's space back to the site's, for
        the input x (float64): a normalising SAE's own statistics; (None, None) else."""
        x = x.to(torch.float64)
        if self.file.transcoder:  # its output is another site: nothing to scale back
            return None, None
        if self.file.normalize == "constant_norm_rescale":
            return x.norm(dim=-1, keepdim=True) / math.sqrt(self.d_in), None
        if self.file.normalize == "layer_norm":
            mu = x.mean(dim=-1, keepdim=True)
            return (x - mu).std(dim=-1, keepdim=True), mu
        return None, None

    def decoder_rows(self) -> torch.Tensor:
        """(d_sae, d_out) float64: what one unit of each feature adds to the
        reconstruction (before a normalising SAE's scale)."""
        rows = self.W_dec.to(torch.float64)
        return rows / self.dec_norm.to(torch.float64)[:, None] if self.dec_norm is not None \
            else rows

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) activations -> (..., d_sae) feature activations, float32."""
        return self.encoder.encode(self._input(x))

    def encode_units(self, x: torch.Tensor, units: list[int] | tuple[int, ...]) -> torch.Tensor:
        """(..., d_in) activations -> (..., U) activations of features `units` alone,
        equal to encode(x)[..., units]. ReLU, JumpReLU and gated SAEs compute only those
        columns of W_enc; TopK computes every pre-activation (architectures.TopK)."""
        return self.encoder.encode(self._input(x), list(units))

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        """x' : x normalised, less b_dec where the SAE subtracts it from its input."""
        x, _ = self._normalised(x)
        return x - self.b_dec if self.file.apply_b_dec_to_input else x

    def _linear(self, acts: torch.Tensor) -> torch.Tensor:
        if self.dec_norm is not None:
            acts = acts / self.dec_norm
        return acts @ self.W_dec

    def _undo(self, x: torch.Tensor):
        """What takes the SAE's output space back to the site's for the input x: a
        normalising SAE's inverse; None for none, and for a transcoder, whose output is
        another site that was never normalised (SAELens's Transcoder.decode skips it)."""
        return None if self.file.transcoder else self._normalised(x)[1]

    def decode(self, acts: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Feature activations -> the reconstruction (..., d_out) of the activation `x`
        they were encoded from (a normalising SAE scales back by x's own statistics)."""
        out = self._linear(acts) + self.b_dec
        if self.W_skip is not None:
            out = out + x.to(torch.float32) @ self.W_skip.T
        undo = self._undo(x)
        return undo(out) if undo is not None else out

    def delta(self, d_acts: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """How the reconstruction of `x` moves when its features change by `d_acts`:
        d_acts·W_dec (scaled back as decode does; no bias, it cancels). A change of
        feature k alone by a is exactly a × W_dec[k]."""
        out = self._linear(d_acts)
        undo = self._undo(x)
        if undo is None:
            return out
        return undo(out, shift=False) if self.file.normalize == "layer_norm" else undo(out)

    # -- sites ----------------------------------------------------------------------------
    @staticmethod
    def flatten(x: torch.Tensor, dims: tuple[str, ...]) -> torch.Tensor:
        """A site's (B, *dims) value as (B, T, width): heads joined per position."""
        if dims == ("H", "T", "D"):
            B, H, T, D = x.shape
            return x.permute(0, 2, 1, 3).reshape(B, T, H * D)
        return x

    @staticmethod
    def unflatten(y: torch.Tensor, dims: tuple[str, ...], like: torch.Tensor) -> torch.Tensor:
        """(B, T, width) back to the site's (B, *dims) layout of `like`."""
        if dims == ("H", "T", "D"):
            B, H, T, D = like.shape
            return y.reshape(B, T, H, D).permute(0, 2, 1, 3)
        return y

    def describe(self) -> str:
        what = f"{self.architecture} SAE" if not self.file.transcoder else \
            f"{self.architecture}"
        if self.k is not None:
            what += f" (k={self.k})"
        return f"{what}, {self.d_in} → {self.d_sae} features, at {self.spec}"


def row_width(cfg, dims: tuple[str, ...]) -> int:
    """The width of one position's row at a site of `dims`: the dims other than T
    flattened in their order (H·D joined); 0 when one of them has no fixed width (S: key
    positions). The corpus commands' row sites are those of a width above 0."""
    return math.prod(getattr(cfg, ROW_FIELDS[d]) if d in ROW_FIELDS else 0
                     for d in dims if d != "T")


def site_width(cfg, dims: tuple[str, ...]) -> int | None:
    """The width an SAE reads at a site of `dims` (T excepted): C, A, F; H·D joined.
    None for a site an SAE cannot read (a pattern, a 1-D statistic, logits)."""
    rest = [d for d in dims if d != "T"]
    if len(dims) < 2 or "T" not in dims or any(d not in DIM_FIELDS for d in rest):
        return None
    if tuple(dims) not in (("T", rest[0]), ("H", "T", "D")):
        return None
    return row_width(cfg, dims)


__all__ = ["SAE", "site_width", "row_width", "DIM_FIELDS"]
