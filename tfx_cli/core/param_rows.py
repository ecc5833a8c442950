"""One row of count-params' tables: a parameter tensor, or in FLOP tables one matmul.
Apart from params.py so that params_moe.py, which params.py calls, builds rows too."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One parameter tensor (or, in FLOP tables, one matmul)."""

    name: str  # parameter path in core.model; inside a block, relative to blocks.{i}
    label: str  # what it is, in words
    shape: tuple[int, ...] | None
    count: int  # what this row adds to the total (0 when fixed or shared)
    part: str  # the group it sums into (token_embedding, attention, ffn, ...)
    note: str = ""


__all__ = ["Row"]
