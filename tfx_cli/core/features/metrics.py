"""How well an SAE does on activations: the numbers `tfx features` reports per text and
training is to report on held-out tokens, computed one way for both (float64).

    FVU     Σ_t |x_t − x̂_t|² / Σ_t |x_t − mean x|²   (fraction of variance unexplained)
    L0      features with a nonzero activation, per token
    dead    features that fire on no token
"""
from __future__ import annotations

import torch


def fvu(x: torch.Tensor, recon: torch.Tensor) -> float | None:
    """(N, d) activations and their reconstructions -> FVU; None for fewer than two rows
    or rows that are all alike (no variance to explain)."""
    x, recon = x.to(torch.float64), recon.to(torch.float64)
    spread = float(((x - x.mean(dim=0)) ** 2).sum())
    if len(x) < 2 or spread == 0:
        return None
    return float(((x - recon) ** 2).sum()) / spread


def l0(acts: torch.Tensor) -> torch.Tensor:
    """(N, F) feature activations -> (N,) how many fire per row."""
    return (acts != 0).sum(dim=-1)


def dead(acts: torch.Tensor) -> int:
    """Features that fire on none of the (N, F) rows."""
    return int(((acts != 0).sum(dim=0) == 0).sum())


__all__ = ["fvu", "l0", "dead"]
