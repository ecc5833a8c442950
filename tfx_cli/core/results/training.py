"""Result of `tfx train`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import Result, optional


@dataclass
class TrainCheck:
    """One training example, decoded greedily by the trained model."""

    source: str | None  # an encoder–decoder's source; None for a text's next tokens
    target: str  # what it should say
    said: str  # what it says (greedy, up to <end> or the target's length)
    exact: bool


@dataclass(kw_only=True)
class TrainResult(Result):
    command: ClassVar[str] = "train"
    output: str
    data: str  # the --pairs or --text file
    examples: int
    steps: int
    lr: float
    seed: int
    vocab_size: int
    params: int
    loss_first: float
    loss_last: float
    losses: list[float]
    checks: list[TrainCheck]
    all_exact: bool | None = optional()  # pairs: every target reproduced
