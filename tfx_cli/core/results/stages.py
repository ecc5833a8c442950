"""Results of the stage commands: embed, posenc, attend, layernorm, ffn, trace, report."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from . import Result, internal, optional
from .decoding import Candidate


@dataclass
class RowStats:
    """Per-row L2 norm, mean and population standard deviation of a (T, C) matrix."""

    norm: list[float]
    mean: list[float]
    std: list[float]


@dataclass(kw_only=True)
class EmbedResult(Result):
    command: ClassVar[str] = "embed"
    positional: str
    d_model: int
    n_tokens: int
    out: str  # how embed.out is formed, e.g. "tok + pos"
    rows: dict[str, RowStats]
    note: str | None = optional()


@dataclass(kw_only=True)
class PosencResult(Result):
    command: ClassVar[str] = "posenc"
    positional: str
    n_positions: int
    d_model: int
    head_dim: int | None = optional()
    rope_theta: float | None = optional()
    formula: str


@dataclass(kw_only=True)
class ExplainKey:
    pos: int
    token: str | None
    k: list[float]
    dot: float
    scaled: float
    capped: float | None = optional()  # Gemma 2: cap * tanh(scaled / cap)
    bias: float | None = optional()  # T5: the head's relative position bias for this key
    visible: bool
    exp: float
    weight: float
    v: list[float]
    weighted_v: list[float]


@dataclass(kw_only=True)
class ExplainRow:
    """One head's arithmetic at one query position, number by number, in float64."""

    head: int
    query_pos: int
    query_token: str | None
    d_k: int
    scale: float
    scale_label: str
    q: list[float]
    softcap: float | None = optional()
    max_scaled: float  # the largest visible (capped) score, subtracted before exp
    sum_exp: float
    keys: list[ExplainKey]
    context: list[float]
    max_abs_diff_vs_pattern: float
    # gpt-oss: the head's sink logit and the share of the row it takes (1 - Σ weights)
    sink: float | None = optional()
    sink_weight: float | None = optional()


@dataclass(kw_only=True)
class AttendResult(Result):
    command: ClassVar[str] = "attend"
    layer: int
    heads: list[int]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    scale: float
    mask: str
    valid_lens: int | None
    cross_attention: bool
    shown: list[str]
    kv_groups: dict[int, list[int]] | None = optional()
    explain: ExplainRow | None = optional()
    # the view adds a table of every stage's shape unless --show chose the stages
    show_given: bool = internal(False)


@dataclass(kw_only=True)
class AttendInputsResult(Result):
    """attend --inputs: self-attention on hand-made matrices."""

    command: ClassVar[str] = "attend"
    source: str
    n_heads: int
    head_dim: int
    scale: float
    scale_label: str
    mask: str  # none, causal, given, valid_lens, or two of them joined by " + "
    valid_lens: int | list[int] | None = optional()
    cross_attention: bool = False
    heads: list[int]
    shown: list[str]
    formula: str
    weights: dict[str, list]  # one matrix per name, or (several heads) a list of them
    explain: ExplainRow | None = optional()
    show_given: bool = internal(False)


@dataclass(kw_only=True)
class LayerNormResult(Result):
    command: ClassVar[str] = "layernorm"
    which: str
    layer: int | None
    norm: str
    position: str
    eps: float
    normed_mean: list[float]
    normed_var: list[float]
    normed_mean_square: list[float] | None = optional()
    formula: str
    residual: list[str] | None = optional()  # post-LN: x and Sublayer(x), recorded
    prefix: str = internal("")  # the norm's trace prefix, e.g. blocks.0.ln1


@dataclass(kw_only=True)
class FFNResult(Result):
    command: ClassVar[str] = "ffn"
    layer: int
    activation: str
    d_model: int
    d_ff: int
    # the trace name the FFN reads; JSON calls it "input" (in Python `input` is the text
    # the model read, as on every result)
    source: str = field(metadata={"json_name": "input"})
    formula: str
    fraction_positive: float


@dataclass(kw_only=True)
class TraceResult(Result):
    command: ClassVar[str] = "trace"
    selected: list[str]
    n_selected: int


@dataclass
class NormStats:
    """Per-token statistics of what enters one norm, from its own taps."""

    name: str  # the norm's trace prefix: blocks.0.ln1, ln_f, embed.ln
    mean: list[float] | None  # None for RMSNorm, which subtracts no mean
    var: list[float]  # biased variance (LayerNorm) or mean square (RMSNorm)


@dataclass(kw_only=True)
class ReportResult(Result):
    """What `tfx report` puts on its page: attention patterns (tensors), the statistics
    entering every norm, and the next-token top-k after every position."""

    command: ClassVar[str] = "report"
    layers: list[int]
    n_heads: int
    norm: str
    norms: list[NormStats]
    top_k: int
    next_tokens: list[list[Candidate]]
    output: str | None = None
