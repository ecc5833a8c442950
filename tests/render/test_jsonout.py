"""The tfx/1 envelope: stable keys, data that matches dims and shape, never a bare NaN,
and a NaN never mistaken for a masked -inf."""
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tfx_cli import __version__
from tfx_cli.core.results import (SCHEMA, InputInfo, ModelInfo, Result, array_json, internal,
                                  optional, to_json)
from tfx_cli.core.trace import Trace
from tfx_cli.render.jsonout import dumps

KEYS = ["schema", "command", "tfx_version", "model", "input", "tensors", "result"]


@dataclass(kw_only=True)
class Sample(Result):
    command: ClassVar[str] = "attend"
    loss: object = None
    nan: float = 0.0
    top: object = None
    pair: tuple = ()
    maybe: int | None = optional()
    view_only: str = internal("not in JSON")


def shape_of(data):
    """Nested lists -> shape, checking every level is rectangular."""
    if not isinstance(data, list):
        return ()
    inner = {shape_of(item) for item in data}
    assert len(inner) <= 1, "ragged data"
    return (len(data),) + (inner.pop() if inner else ())


def make_result():
    trace = Trace()
    trace.add("tokens.ids", np.array([15496, 11, 314]), "T")
    masked = np.array([[[0.5, -np.inf, -np.inf], [0.1, 0.2, -np.inf], [1.0, 2.0, 3.0]]] * 2,
                      dtype=np.float32)
    trace.add("blocks.0.attn.masked", masked, "HTS")
    return Sample(model=ModelInfo(config="toy", seed=123),
                  input=InputInfo(text="Hello, I", tokens=["Hello", ",", " I"],
                                  ids=[15496, 11, 314]),
                  tensors=trace, loss=np.float32(1.5), nan=float("nan"),
                  top=np.array([1.0, np.inf, -np.inf]), pair=(1, 2))


def test_envelope_keys_in_order():
    doc = json.loads(dumps(make_result()))
    assert list(doc) == KEYS
    assert doc["schema"] == SCHEMA == "tfx/1"
    assert doc["command"] == "attend"
    assert doc["tfx_version"] == __version__
    assert doc["model"]["config"] == "toy" and doc["model"]["weights"] is None
    assert doc["input"] == {"text": "Hello, I", "tokens": ["Hello", ",", " I"],
                            "ids": [15496, 11, 314]}


def test_tensor_dims_and_shape_match_data():
    doc = json.loads(dumps(make_result()))
    for name, tensor in doc["tensors"].items():
        assert set(tensor) == {"dims", "shape", "dtype", "data"}
        assert len(tensor["dims"]) == len(tensor["shape"])
        assert list(shape_of(tensor["data"])) == tensor["shape"], name
    masked = doc["tensors"]["blocks.0.attn.masked"]
    assert masked["dims"] == ["H", "T", "S"] and masked["shape"] == [2, 3, 3]
    assert masked["dtype"] == "float32"
    assert doc["tensors"]["tokens.ids"]["data"] == [15496, 11, 314]


def test_minus_inf_is_null():
    doc = json.loads(dumps(make_result()))
    row = doc["tensors"]["blocks.0.attn.masked"]["data"][0][0]
    assert row == [0.5, None, None]


def test_result_fields_are_plain_json_and_nan_is_not_null():
    doc = json.loads(dumps(make_result()))
    # NaN and +inf are strings: only a masked -inf is null
    assert doc["result"] == {"loss": 1.5, "nan": "nan", "top": [1.0, "inf", None],
                             "pair": [1, 2]}


def test_optional_and_internal_fields():
    result = make_result()
    assert "maybe" not in result.to_dict()["result"]
    assert "view_only" not in result.to_dict()["result"]
    result.maybe = 3
    assert result.to_dict()["result"]["maybe"] == 3


def test_empty_result_is_still_a_full_envelope():
    doc = json.loads(dumps(Sample()))
    assert list(doc) == KEYS
    assert doc["model"] is None and doc["input"] is None and doc["tensors"] == {}


def test_scalar_tensor():
    trace = Trace()
    trace.add("loss", np.array(np.nan, dtype=np.float32), ())
    doc = Sample(tensors=trace).to_dict()
    assert doc["tensors"]["loss"]["data"] == "nan" and doc["tensors"]["loss"]["shape"] == []


def test_to_json_nested():
    assert to_json({1: [np.int64(3), (np.float64(-np.inf),)]}) == {"1": [3, [None]]}


floats = hnp.arrays(dtype=st.sampled_from([np.float16, np.float32, np.float64]),
                    shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                    elements=st.floats(allow_nan=True, allow_infinity=True, width=16))


@settings(max_examples=100, deadline=None)
@given(array=floats)
def test_dumps_never_emits_nan(array):
    trace = Trace()
    trace.add("x", array, "ABC"[: array.ndim])
    text = dumps(Sample(tensors=trace, top=array,
                        loss=float(array.flat[0]) if array.size else 0.0))
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    data = doc["tensors"]["x"]["data"]
    assert list(shape_of(data)) == list(array.shape)
    written = np.array(array_json(array), dtype=object)
    assert np.array_equal(written == None, np.isneginf(array))  # noqa: E711
    assert np.array_equal(written == "nan", np.isnan(array))
