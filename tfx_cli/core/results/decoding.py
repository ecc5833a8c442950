"""Results of the decoding commands: generate, next and lens."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import Result, optional


@dataclass
class Candidate:
    id: int
    token: str
    prob: float
    logit: float


@dataclass
class StepInfo:
    position: int
    id: int
    token: str
    logit: float
    prob: float
    sample_prob: float
    entropy: float
    fed: int
    context: int
    candidates: list[Candidate]


@dataclass
class GenerateSettings:
    max_new_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    decoding: str
    seed: int
    stop: list[str]
    eos_ids: list[int]  # the model's end-of-sequence tokens
    ignore_eos: bool
    cache: bool
    candidates: int
    context_length: int


@dataclass(kw_only=True)
class GenerateResult(Result):
    command: ClassVar[str] = "generate"
    text: str
    completion: str
    ids: list[int]
    prompt_ids: list[int]
    new_ids: list[int]
    stopped: str  # max_new_tokens, stop (a --stop text) or eos (an end-of-sequence token)
    settings: GenerateSettings
    steps: list[StepInfo]


@dataclass
class NextCandidate:
    rank: int
    id: int
    token: str
    logit: float
    prob: float
    tempered_prob: float
    kept: bool
    final_prob: float


@dataclass
class Greedy:
    id: int
    token: str
    prob: float


@dataclass
class NextSettings:
    temperature: float
    top_k: int | None
    top_p: float | None
    candidates: int


@dataclass
class MaskPrediction:
    """A masked LM's prediction at one mask token: next's numbers for that position."""

    position: int
    entropy: float
    greedy: Greedy
    kept_tokens: int
    kept_mass: float
    candidates: list[NextCandidate]


@dataclass(kw_only=True)
class NextResult(Result):
    command: ClassVar[str] = "next"
    position: int
    context: int
    entropy: float
    greedy: Greedy
    kept_tokens: int
    kept_mass: float
    settings: NextSettings
    candidates: list[NextCandidate]
    # a masked LM (fill-mask): the fields above are its first mask's; `masks` has every
    # mask in order, `filled` the text with each mask replaced by its most likely token
    mask_token: str | None = optional()
    masks: list[MaskPrediction] | None = optional()
    filled: str | None = optional()


@dataclass(kw_only=True)
class LensResult(Result):
    command: ClassVar[str] = "lens"
    layers: list[str]
    sources: list[str]
    norm: str
    top_ids: list[list[int]]
    top_tokens: list[list[str]]
    top_probs: list[list[float]]
    # causal models: [layer][position] the probability of the token that comes next
    next_token_probs: list[list[float]] | None = optional()
    output_top_ids: list[int]
    # a masked LM: [layer][position] the probability of the position's own token (null
    # at a mask), and where its mask tokens are
    token_probs: list[list[float | None]] | None = optional()
    mask_positions: list[int] | None = optional()
