"""Taps: the identity modules every intermediate passes through, so it can be recorded
or edited by its trace name (`blocks.0.attn.pattern`)."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from ..trace import Lazy, Trace


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
            self.trace.take(self.name, x, self.dims)
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
