"""Typed results: what each command computed, as dataclasses with names.

The terminal views, `--plot`, the HTML report, the JSON envelope and the Python API all
read the same object: a view reads attributes (`result.explain.keys[0].weight`), the
envelope is `result.to_dict()`, and `tfx_cli.api` hands the object itself to Python.

The envelope (tfx/1) is built here, once, for every result:

    {"schema": "tfx/1", "command": ..., "tfx_version": ..., "model": {...},
     "input": {...}, "tensors": {name: {dims, shape, dtype, data}}, "result": {...}}

`result` holds the result's own fields in declaration order; nested dataclasses become
objects, tuples lists, numpy values plain numbers. Fields marked `internal()` stay out of
the JSON (they steer the terminal view only), fields marked `optional()` are left out
while they are None. Floats: a masked -inf is written as null (JSON has no infinities);
NaN as the string "nan" and +inf as "inf", so neither can pass for a masked cell.

Torch-free on purpose, and numpy is imported only when an array exists.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from .. import __version__
from .trace import Trace, is_ndarray, is_numpy_scalar

if TYPE_CHECKING:
    import numpy as np

    from .config import ModelConfig
    from .params import Row

SCHEMA = "tfx/1"
_BASE = ("model", "input", "tensors")


def optional(default=None):
    """A result field written to JSON only when it is not None."""
    return field(default=default, metadata={"omit_none": True})


def internal(default=None, **kw):
    """A field the terminal view reads but the JSON leaves out."""
    return field(default=default, metadata={"json": False}, **kw)


# -- JSON values ------------------------------------------------------------------------
def number_json(x: float) -> float | str | None:
    """A float as JSON has it: finite as itself, -inf (a masked score) as null, NaN as
    "nan" and +inf as "inf"."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else None


def array_json(array: np.ndarray) -> Any:
    """Nested lists of plain numbers; non-finite floats written as number_json says."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all():
            if array.ndim == 0:
                return number_json(float(array))
            obj = array.astype(object)
            for index in map(tuple, np.argwhere(~finite)):
                obj[index] = number_json(float(array[index]))
            return obj.tolist()
    return array.tolist()


def to_json(value: Any) -> Any:
    """Any result value -> plain JSON data (dicts, lists, str, numbers, bool, None)."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return fields_json(value)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if is_ndarray(value):
        return array_json(value)
    if is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, float):
        return number_json(value)
    if isinstance(value, Enum):
        return to_json(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)  # anything else (a dtype) as its readable name


def fields_json(obj, skip: tuple[str, ...] = ()) -> dict:
    out = {}
    for f in fields(obj):
        if f.name in skip or not f.metadata.get("json", True):
            continue
        value = getattr(obj, f.name)
        if value is None and f.metadata.get("omit_none"):
            continue
        out[f.metadata.get("json_name", f.name)] = to_json(value)
    return out


def tensor_json(array: np.ndarray, dims: tuple[str, ...]) -> dict:
    return {"dims": list(dims), "shape": list(array.shape), "dtype": str(array.dtype),
            "data": array_json(array)}


def tensors_json(trace: Trace) -> dict:
    return {name: tensor_json(array, dims) for name, array, dims in trace.items()}


# -- what every result carries --------------------------------------------------------
@dataclass
class ModelInfo:
    """Which model ran: the preset or checkpoint name, the weights, the seed, and every
    config field (flattened into the JSON `model` object)."""

    config: str | None
    weights: str | None = None
    seed: int | None = None
    cfg: ModelConfig | None = None

    @property
    def name(self) -> str:
        return (self.cfg.name if self.cfg is not None else None) or self.config or "model"

    def to_json(self) -> dict:
        out = {"config": self.config, "weights": self.weights, "seed": self.seed}
        if self.cfg is not None:
            out.update(to_json(self.cfg.to_dict()))
        return out


@dataclass
class InputInfo:
    """What the model read: the text (or the file of hand-made matrices), its tokens as
    the tokenizer holds them, and their ids; `kv` is the second text of cross-attention."""

    text: str | None = optional()
    file: str | None = optional()
    tokens: list[str] = field(default_factory=list)
    ids: list[int] | None = optional()
    kv: InputInfo | None = optional()


@dataclass(kw_only=True)
class Result:
    """Base of every command's result: model, input and recorded tensors; subclasses
    add their own fields, which become the envelope's `result` object."""

    command: ClassVar[str] = ""
    model: ModelInfo | None = None
    input: InputInfo | None = None
    tensors: Trace = field(default_factory=Trace)

    def result_json(self) -> dict:
        return fields_json(self, skip=_BASE)

    def to_dict(self) -> dict:
        """The tfx/1 envelope: exactly what `tfx <command> ... --json` prints."""
        return {"schema": SCHEMA, "command": self.command, "tfx_version": __version__,
                "model": to_json(self.model), "input": to_json(self.input),
                "tensors": tensors_json(self.tensors), "result": self.result_json()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every recorded tensor as a numpy array, by trace name."""
        return {name: array for name, array, _ in self.tensors.items()}

    @property
    def tokens(self) -> list[str]:
        return list(self.input.tokens) if self.input is not None else []


# -- tokenize, configs, count-params ---------------------------------------------------
@dataclass(kw_only=True)
class TokenizeResult(Result):
    command: ClassVar[str] = "tokenize"
    tokenizer: str
    vocab_size: int
    n_tokens: int
    decoded: str
    round_trip: bool
    special_tokens: list[str]


@dataclass
class Preset:
    cfg: ModelConfig
    params: int

    def to_json(self) -> dict:
        return {**to_json(self.cfg.to_dict()), "name": self.cfg.name, "params": self.params}


@dataclass(kw_only=True)
class ConfigsResult(Result):
    command: ClassVar[str] = "configs"
    default: str
    presets: list[Preset]


@dataclass
class BlockCount:
    rows: list[Row]
    total: int
    parts: dict[str, int]
    n_layers: int
    all_blocks: int


@dataclass
class FlopSummary:
    seq_len: int
    per_token: int
    per_block: int
    without_attention: int
    per_sequence: int
    causal_skip_per_token: int | None
    rows: list[Row]
    block: list[Row]


@dataclass
class ParamCheck:
    """count-params --verify: the model built on the meta device against the count."""

    verified: bool
    model_params: int
    expected: int
    analytic_total: int
    modules: int
    modules_with_parameters: int
    parameter_tensors: int
    mismatched: list[str]
    notes: list[str]
    built_on: str


@dataclass(kw_only=True)
class CountParamsResult(Result):
    command: ClassVar[str] = "count-params"
    total: int
    non_embedding: int
    tied: bool
    shared: int
    parts: dict[str, int]
    breakdown: list[Row]
    per_block: BlockCount
    shape_convention: str
    memory_bytes: dict[str, int]
    seq_len: int
    flops_per_token: int
    flops_convention: str
    flops: FlopSummary
    verify: ParamCheck | None = optional()


# -- stages -----------------------------------------------------------------------------
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


@dataclass
class ExplainKey:
    pos: int
    token: str | None
    k: list[float]
    dot: float
    scaled: float
    visible: bool
    exp: float
    weight: float
    v: list[float]
    weighted_v: list[float]


@dataclass
class ExplainRow:
    """One head's arithmetic at one query position, number by number, in float64."""

    head: int
    query_pos: int
    query_token: str | None
    d_k: int
    scale: float
    scale_label: str
    q: list[float]
    max_scaled: float
    sum_exp: float
    keys: list[ExplainKey]
    context: list[float]
    max_abs_diff_vs_pattern: float


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
    mask: str
    heads: list[int]
    shown: list[str]
    formula: str
    weights: dict[str, list[list[float]]]
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


# -- decoding -----------------------------------------------------------------------------
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
    stopped: str
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


@dataclass(kw_only=True)
class LensResult(Result):
    command: ClassVar[str] = "lens"
    layers: list[str]
    sources: list[str]
    norm: str
    top_ids: list[list[int]]
    top_tokens: list[list[str]]
    top_probs: list[list[float]]
    next_token_probs: list[list[float]]
    output_top_ids: list[int]


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


__all__ = ["SCHEMA", "Result", "ModelInfo", "InputInfo", "to_json", "array_json",
           "number_json", "tensors_json", "TokenizeResult", "ConfigsResult", "Preset",
           "CountParamsResult", "BlockCount", "FlopSummary", "ParamCheck", "EmbedResult",
           "RowStats", "PosencResult", "AttendResult", "AttendInputsResult", "ExplainRow",
           "ExplainKey", "LayerNormResult", "FFNResult", "TraceResult", "GenerateResult",
           "GenerateSettings", "StepInfo", "Candidate", "NextResult", "NextCandidate",
           "Greedy", "NextSettings", "LensResult", "ReportResult", "NormStats"]
