"""`tfx attend --inputs FILE.json`: self-attention on matrices the user writes by hand.

The file holds x (T×d), w_q, w_k (d×d_k), w_v (d×d_v) and optionally w_o, scale, mask and
tokens (README "Attention on your own matrices"). Every problem with the file is one
InputTextError line naming the key and what it needs. The matrices then go through
`model.explicit_attention`, the formula the model itself uses, in float64.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

from ..errors import InputTextError, RangeError
from .results import AttendInputsResult, InputInfo
from .stages import check_range, check_show, explain_row
from .trace import Trace


INPUT_KEYS = {"x": "x", "w_q": "w_q", "w_query": "w_q", "w_k": "w_k", "w_key": "w_k",
              "w_v": "w_v", "w_value": "w_v", "w_o": "w_o", "w_out": "w_o",
              "scale": "scale", "mask": "mask", "tokens": "tokens", "comment": "comment"}


def read_inputs(path) -> dict:
    """Parse and check an --inputs file; every problem is one InputTextError line."""
    import json
    from pathlib import Path

    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputTextError(f"--inputs {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputTextError(f"--inputs {path}: cannot read it ({exc})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputTextError(f"--inputs {path} is not valid JSON: {exc.msg} at line "
                             f"{exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise InputTextError(f"--inputs {path}: expected a JSON object with keys x, w_q, "
                             "w_k, w_v (optional w_o, scale, mask, tokens)")
    unknown = [key for key in data if key not in INPUT_KEYS]
    if unknown:
        raise InputTextError(f"--inputs {path}: unknown key {unknown[0]!r}; valid keys: x, "
                             "w_q, w_k, w_v, w_o, scale, mask, tokens, comment")
    got = {}
    for key, value in data.items():
        canon = INPUT_KEYS[key]
        if canon in got:
            raise InputTextError(f"--inputs {path}: {key!r} given twice (as {canon})")
        got[canon] = value
    missing = [key for key in ("x", "w_q", "w_k", "w_v") if key not in got]
    if missing:
        raise InputTextError(f"--inputs {path}: missing key {missing[0]!r}; an inputs file "
                             "needs x (T×d), w_q, w_k (d×d_k) and w_v (d×d_v)")
    out = {name: _matrix(path, name, got[name]) for name in ("x", "w_q", "w_k", "w_v")}
    if got.get("w_o") is not None:
        out["w_o"] = _matrix(path, "w_o", got["w_o"])
    T, d = out["x"].shape
    for name in ("w_q", "w_k", "w_v"):
        if out[name].shape[0] != d:
            raise InputTextError(f"--inputs {path}: x is {T}×{d} but {name} is "
                                 f"{_dims(out[name])}; {name} needs {d} rows")
    if out["w_q"].shape[1] != out["w_k"].shape[1]:
        raise InputTextError(f"--inputs {path}: w_q is {_dims(out['w_q'])} and w_k is "
                             f"{_dims(out['w_k'])}; q·k needs the same number of columns")
    if "w_o" in out and out["w_o"].shape[0] != out["w_v"].shape[1]:
        raise InputTextError(f"--inputs {path}: w_v gives {out['w_v'].shape[1]} columns but "
                             f"w_o is {_dims(out['w_o'])}; w_o needs {out['w_v'].shape[1]} rows")
    out["scale"] = _scale(path, got.get("scale", "sqrt_dk"), out["w_q"].shape[1])
    out["mask"] = _mask(path, got.get("mask"), T)
    tokens = got.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != T
                               or not all(isinstance(t, (str, int, float)) for t in tokens)):
        raise InputTextError(f"--inputs {path}: tokens must be a list of {T} labels, one per "
                             "row of x")
    out["tokens"] = [str(t) for t in tokens] if tokens is not None else \
        [f"x{i}" for i in range(T)]
    return out


def _dims(m) -> str:
    return f"{m.shape[0]}×{m.shape[1]}"


def _matrix(path, name: str, value) -> torch.Tensor:
    """A non-empty rectangular list of lists of numbers, as float64."""
    where = f"--inputs {path}: {name}"
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise InputTextError(f"{where} must be a matrix: a non-empty list of rows, e.g. "
                             "[[1, 0], [0, 1]]")
    width = len(value[0])
    for i, row in enumerate(value):
        if len(row) != width or not row:
            raise InputTextError(f"{where} is ragged: row 0 has {width} numbers but row {i} "
                                 f"has {len(row)}")
        for j, cell in enumerate(row):
            if isinstance(cell, bool) or not isinstance(cell, (int, float)):
                raise InputTextError(f"{where}[{i}][{j}] is {json_repr(cell)}, not a number")
            if not math.isfinite(cell):  # JSON readers accept NaN and Infinity
                raise InputTextError(f"{where}[{i}][{j}] is {cell}; every entry must be a "
                                     "finite number")
    return torch.tensor(value, dtype=torch.float64)


def json_repr(value) -> str:
    import json

    return json.dumps(value)


def _scale(path, value, d_k: int) -> float:
    if value == "sqrt_dk":
        return d_k ** 0.5
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise InputTextError(f"--inputs {path}: scale must be a positive, finite number or "
                             f"\"sqrt_dk\", got {json_repr(value)}")
    return float(value)


def _mask(path, value, T: int):
    if value is None or value == "none":
        return None
    if value == "causal":
        return torch.ones(T, T, dtype=torch.bool).tril()
    m = _matrix(path, "mask", value)
    if m.shape[0] != T or not ((m == 0) | (m == 1)).all():
        raise InputTextError(f"--inputs {path}: mask must be \"causal\" or a {T}×{T} matrix "
                             "of 0 (hidden) and 1 (visible)")
    if m.shape[1] != T:
        raise InputTextError(f"--inputs {path}: mask is {_dims(m)} but x has {T} rows, so "
                             f"keys are {T}; give a {T}×{T} mask")
    keep = m.bool()
    empty = (~keep).all(dim=1).nonzero()
    if len(empty):
        raise InputTextError(f"--inputs {path}: mask row {int(empty[0])} hides every key; "
                             "softmax needs at least one 1 per row")
    return keep


def attend_inputs(path, *, explain: bool = False, query_pos: int | None = None,
                  show: Iterable[str] | None = None) -> AttendInputsResult:
    """Self-attention on matrices from a JSON file (seed 000's worked example), through
    model.explicit_attention, the formula the model itself uses, in float64."""
    from types import SimpleNamespace

    from .model import Tap, explicit_attention

    data = read_inputs(path)
    stages = ["q", "k", "v", "scores", "scaled", "masked", "pattern", "context"]
    if "w_o" in data:
        stages.append("out")
    show = check_show(show, stages)
    T = data["x"].shape[0]
    tr = Trace()
    tr.add("x", data["x"], ("T", "C"))

    def tap(name: str, *dims: str) -> Tap:
        t = Tap(*dims)
        t.name, t.trace = f"attn.{name}", tr
        return t

    x = data["x"][None]  # (1, T, C): a batch of one, as the model sees it
    q = tap("q", "H", "T", "D")((x @ data["w_q"])[:, None])  # (1, 1, T, D): one head
    k = tap("k", "H", "S", "D")((x @ data["w_k"])[:, None])
    v = tap("v", "H", "S", "D")((x @ data["w_v"])[:, None])
    taps = SimpleNamespace(scores=tap("scores", "H", "T", "S"),
                           scaled=tap("scaled", "H", "T", "S"),
                           masked=tap("masked", "H", "T", "S"),
                           pattern=tap("pattern", "H", "T", "S"))
    context = tap("context", "H", "T", "D")(
        explicit_attention(q, k, v, data["mask"], data["scale"], taps=taps))
    if not (torch.isfinite(q).all() and torch.isfinite(k).all() and torch.isfinite(v).all()
            and torch.isfinite(tr.raw("attn.pattern")).all()
            and torch.isfinite(context).all()):
        raise InputTextError(f"--inputs {path}: the products overflow float64 (entries near "
                             f"{float(data['x'].abs().max()):.3g} in x); scale the matrices "
                             "down")
    if "w_o" in data:
        tap("out", "T", "C")(context[:, 0] @ data["w_o"])
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position (row of x)", query_pos, T, "--query-pos",
                    plural="query positions (rows of x)")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    d_k = data["w_q"].shape[1]
    label = "sqrt(d_k)" if abs(data["scale"] - d_k ** 0.5) < 1e-12 else "scale"
    explained = None
    if explain:
        explained = explain_row(
            tr.array("attn.q")[0], tr.array("attn.k")[0], tr.array("attn.v")[0],
            None if data["mask"] is None else data["mask"].numpy(), query_pos, data["scale"],
            tr.array("attn.pattern")[0], head=0, tokens=data["tokens"], scale_label=label)
    if show:
        tr = tr.subset(["x"] + [f"attn.{s}" for s in show])
    return AttendInputsResult(
        input=InputInfo(file=str(path), tokens=data["tokens"]), tensors=tr,
        source=str(path), n_heads=1, head_dim=d_k, scale=data["scale"], scale_label=label,
        mask="none" if data["mask"] is None else "given", heads=[0],
        shown=show or ["pattern"], show_given=bool(show),
        formula="tfx_cli.core.model.explicit_attention (the model's own)",
        weights={name: data[name].tolist() for name in ("w_q", "w_k", "w_v", "w_o")
                 if name in data},
        explain=explained)


__all__ = ["read_inputs", "attend_inputs"]
