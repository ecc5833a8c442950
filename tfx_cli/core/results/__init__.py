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

Torch-free on purpose, and numpy is imported only when an array exists. May import:
core.config and core.trace (and core.params for type hints only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from ... import __version__
from ..trace import Trace, is_ndarray, is_numpy_scalar

if TYPE_CHECKING:
    import numpy as np

    from ..config import ModelConfig

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
    return {name: tensor_json(array, dims) for name, array, dims in trace.entries()}


# -- what every result carries --------------------------------------------------------
@dataclass
class ModelInfo:
    """Which model ran: the preset or checkpoint name, the weights, the seed, and every
    config field (flattened into the JSON `model` object)."""

    config: str | None
    weights: str | None = None
    seed: int | None = None
    cfg: ModelConfig | None = None
    dtype: str | None = None  # of a model that ran: float32, bfloat16 or float16
    device: str | None = None  # where it ran: cpu, cuda, mps
    streamed: bool = False  # its weights were read from disk part by part (--max-memory)

    @property
    def name(self) -> str:
        """The config's name, or the weights' (an alias, or a path's last part)."""
        weights = str(self.weights).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] \
            if self.weights else None
        return (self.cfg.name if self.cfg is not None else None) or self.config or \
            weights or "model"

    def to_json(self) -> dict:
        out = {"config": self.config, "weights": self.weights, "seed": self.seed}
        if self.dtype is not None:
            out.update(dtype=self.dtype, device=self.device, streamed=self.streamed)
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
    # an encoder–decoder's decoder input (--target), its start token first
    target: InputInfo | None = optional()


# -- showing itself ------------------------------------------------------------------------
# A result draws itself in a notebook (`_repr_html_`) and in a Rich console (`__rich__`),
# but the core never draws: the layer above that can (tfx_cli.api, when imported) puts
# the drawers in registry.DRAWERS, and render is imported only when a result is shown.


@dataclass(kw_only=True)
class Result:
    """Base of every command's result: model, input and recorded tensors; subclasses
    add their own fields, which become the envelope's `result` object."""

    command: ClassVar[str] = ""
    model: ModelInfo | None = None
    input: InputInfo | None = None
    tensors: Trace = field(default_factory=Trace)
    # an encoder–decoder's stack the result shows ("encoder" or "decoder"); in `result`
    stack: str | None = optional()
    # what the run changed (--ablate, --steer): core/results/interventions.Intervention
    interventions: list | None = optional()

    def result_json(self) -> dict:
        out = fields_json(self, skip=_BASE)
        if "interventions" in out:  # last, after the command's own fields
            out["interventions"] = out.pop("interventions")
        return out

    def to_dict(self) -> dict:
        """The tfx/1 envelope: exactly what `tfx <command> ... --json` prints."""
        return {"schema": SCHEMA, "command": self.command, "tfx_version": __version__,
                "model": to_json(self.model), "input": to_json(self.input),
                "tensors": tensors_json(self.tensors), "result": self.result_json()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every recorded tensor as a numpy array, by trace name."""
        return dict(self.tensors)

    def _repr_html_(self) -> str | None:
        """The result's pictures, for a notebook (None: no drawer installed; import
        tfx_cli.api, which installs them)."""
        from ...registry import DRAWERS

        draw = DRAWERS.get("html")
        return draw(self) if draw is not None else None

    def __rich__(self):
        """The terminal view, for a Rich console (`rich.print(result)`)."""
        from ...registry import DRAWERS

        draw = DRAWERS.get("rich")
        return draw(self) if draw is not None else repr(self)

    @property
    def tokens(self) -> list[str]:
        """The tokens the result's positions are: the input's, or an encoder–decoder's
        target tokens when the result shows the decoder."""
        if self.input is None:
            return []
        if self.stack == "decoder" and self.input.target is not None:
            return list(self.input.target.tokens)
        return list(self.input.tokens)


# -- tokenize -------------------------------------------------------------------------
@dataclass(kw_only=True)
class TokenizeResult(Result):
    command: ClassVar[str] = "tokenize"
    tokenizer: str
    vocab_size: int
    n_tokens: int
    decoded: str
    round_trip: bool
    special_tokens: list[str]


# -- the other results, imported when first named ------------------------------------------
# Building a dataclass costs ~0.4 ms; tokenize and count-params need none of the stage or
# decoding results, so those modules load on first use (`from tfx_cli.core.results import
# AttendResult` works all the same).
_LAZY = {
    "counts": ("Preset", "ConfigsResult", "BlockCount", "FlopSummary", "ParamCheck",
               "CountParamsResult"),
    "stages": ("RowStats", "EmbedResult", "PosencResult", "ExplainKey", "ExplainRow",
               "AttendResult", "AttendInputsResult", "LayerNormResult", "FFNResult",
               "TraceResult", "NormStats", "ReportResult"),
    "decoding": ("Candidate", "StepInfo", "GenerateSettings", "GenerateResult",
                 "NextCandidate", "Greedy", "NextSettings", "NextResult", "LensResult",
                 "MaskPrediction"),
    "interventions": ("Intervention", "TokenRef", "PatchResult", "Part", "AttributeResult",
                      "PatchTable"),
    "training": ("TrainCheck", "TrainResult"),
    # mixtures of experts: tfx route, and count-params' active parameters
    "moe": ("MoeCount", "LayerRouting", "RouteResult"),
    "datasets": ("CorpusRun", "ScanResult", "TopContext", "TopExample", "TopUnit",
                 "TopResult", "SiteInfo", "ShardInfo", "CollectResult", "PairInfo",
                 "PatchPairsResult"),
    "features": ("SAEInfo", "FeatureAct", "TokenFeatures", "FeatureSummary",
                 "FeaturesResult", "TrainSAEResult", "EvalSAEResult", "TranscoderLayer",
                 "TrainTranscoderResult", "TranscoderSetInfo", "EvalLayer"),
    "circuits": ("GraphNode", "PathStep", "GraphResult", "graph_payload"),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SCHEMA", "Result", "ModelInfo", "InputInfo", "to_json", "array_json",
           "number_json", "tensors_json", "optional", "internal", "TokenizeResult", *_HOME]
