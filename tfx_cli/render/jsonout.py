"""Result -> the tfx/1 JSON envelope. Built here once for every command.

Floats are plain JSON numbers. Non-finite values (a masked -inf before softmax) are
written as null: JSON has no Infinity, and `jq` and browsers reject it.
"""
from __future__ import annotations

import json
import math
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..core.trace import Result, Trace, is_ndarray, is_numpy_scalar

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "tfx/1"


def array_data(array: np.ndarray) -> Any:
    import numpy as np

    array = np.asarray(array)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all():
            obj = array.astype(object)
            obj[~finite] = None
            return obj.tolist()
    return array.tolist()


def tensor_json(array: np.ndarray, dims: tuple[str, ...]) -> dict:
    return {"dims": list(dims), "shape": list(array.shape), "dtype": str(array.dtype),
            "data": array_data(array)}


def tensors_json(trace: Trace) -> dict:
    return {name: tensor_json(array, dims) for name, array, dims in trace.items()}


def clean(value: Any) -> Any:
    """Make command-specific results JSON-safe: numpy scalars, arrays, tuples, NaN."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if is_ndarray(value):
        return array_data(value)
    if is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, PurePath):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # anything else (an enum, a dtype) as its readable name


def envelope(result: Result) -> dict:
    return {
        "schema": SCHEMA,
        "command": result.command,
        "tfx_version": __version__,
        "model": clean(result.model),
        "input": clean(result.input),
        "tensors": tensors_json(result.tensors),
        "result": clean(result.result),
    }


def dumps(result: Result) -> str:
    return json.dumps(envelope(result), ensure_ascii=False, allow_nan=False)
