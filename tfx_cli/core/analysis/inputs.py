"""`tfx attend --inputs FILE.json`: attention on matrices the user writes by hand.

The file holds x (T×d) and per head w_q, w_k (d×d_k) and w_v (d×d_v) — one matrix, or a
list of them for several heads — and optionally:
  x_kv        the keys' and values' input (S×d'), for cross-attention (seed 001's
              decoder, d2l's queries against key-value pairs); w_k and w_v then read it
  w_o         the output projection of the heads joined ((H·d_v)×d_out)
  scale       a number, or "sqrt_dk" (the default)
  mask        "causal" (T = S), or a T×S matrix of 0 (hidden) and 1 (visible)
  valid_lens  d2l's padding: only the first N keys are visible; one N for every query, or
              one per query row (its 2-D form)
  tokens, kv_tokens   labels of the rows of x and of x_kv
Every problem with the file is one InputTextError line naming the key and what it needs.
The matrices go through `model.explicit_attention`, the formula the model itself uses, in
float64, with the model's own Taps recording every stage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from ...errors import InputTextError, RangeError
from ..results import AttendInputsResult, InputInfo
from ..trace import Trace
from .attend import check_show, explain_row, one_head
from .common import check_range

INPUT_KEYS = {"x": "x", "x_kv": "x_kv", "w_q": "w_q", "w_query": "w_q", "w_k": "w_k",
              "w_key": "w_k", "w_v": "w_v", "w_value": "w_v", "w_o": "w_o", "w_out": "w_o",
              "scale": "scale", "mask": "mask", "valid_lens": "valid_lens",
              "tokens": "tokens", "kv_tokens": "kv_tokens", "comment": "comment"}
VALID_KEYS = "x, x_kv, w_q, w_k, w_v, w_o, scale, mask, valid_lens, tokens, kv_tokens, comment"


@dataclass
class AttentionInputs:
    """An --inputs file, checked: float64 matrices (the heads' stacked, (H, d, d_k)), the
    scale, the (T, S) keep-mask and how it was given, the rows' labels."""

    x: torch.Tensor  # (T, d)
    x_kv: torch.Tensor  # (S, d'): x itself unless the file gives x_kv
    w_q: torch.Tensor  # (H, d, d_k)
    w_k: torch.Tensor  # (H, d', d_k)
    w_v: torch.Tensor  # (H, d', d_v)
    w_o: torch.Tensor | None  # ((H·d_v), d_out), when given
    scale: float
    mask: torch.Tensor | None  # (T, S) bool, None: every key visible
    mask_kind: str
    valid_lens: object  # as the file gives it: None, a number or a list
    tokens: list[str]
    kv_tokens: list[str]
    cross: bool  # the file gives x_kv


def _read_keys(path) -> dict:
    """The file's JSON object with each key under its canonical name; unknown, repeated
    and missing keys refused."""
    import json

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
                             "w_k, w_v (optional x_kv, w_o, scale, mask, valid_lens, tokens)")
    unknown = [key for key in data if key not in INPUT_KEYS]
    if unknown:
        raise InputTextError(f"--inputs {path}: unknown key {unknown[0]!r}; valid keys: "
                             f"{VALID_KEYS}")
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
    return got


def _check_heads(path, heads: dict[str, list[torch.Tensor]], x: torch.Tensor,
                 x_kv: torch.Tensor, cross: bool) -> None:
    """As many heads in w_q, w_k and w_v, each reading its input's width, every head of
    one shape, and q·k defined."""
    counts = {name: len(mats) for name, mats in heads.items()}
    if len(set(counts.values())) > 1:
        raise InputTextError(f"--inputs {path}: w_q, w_k and w_v give {counts['w_q']}, "
                             f"{counts['w_k']} and {counts['w_v']} heads; give each one "
                             "matrix per head")
    T, d = x.shape
    S, d_kv = x_kv.shape
    source = {"w_q": ("x", d), "w_k": ("x_kv" if cross else "x", d_kv),
              "w_v": ("x_kv" if cross else "x", d_kv)}
    for name, mats in heads.items():
        reads, rows = source[name]
        for h, m in enumerate(mats):
            if m.shape[0] != rows:
                where = name if len(mats) == 1 else f"{name}[{h}]"
                size = f"{T}×{d}" if reads == "x" else f"{S}×{d_kv}"
                raise InputTextError(f"--inputs {path}: {reads} is {size} but {where} is "
                                     f"{_dims(m)}; {name} needs {rows} rows")
        for h, m in enumerate(mats):
            if m.shape != mats[0].shape:
                raise InputTextError(f"--inputs {path}: {name}[{h}] is {_dims(m)} but "
                                     f"{name}[0] is {_dims(mats[0])}; every head has the same "
                                     "shape")
    if heads["w_q"][0].shape[1] != heads["w_k"][0].shape[1]:
        raise InputTextError(f"--inputs {path}: w_q is {_dims(heads['w_q'][0])} and w_k is "
                             f"{_dims(heads['w_k'][0])}; q·k needs the same number of columns")


def read_inputs(path) -> AttentionInputs:
    """Parse and check an --inputs file; every problem is one InputTextError line."""
    from pathlib import Path

    path = Path(path)
    got = _read_keys(path)
    x = _matrix(path, "x", got["x"])
    x_kv = _matrix(path, "x_kv", got["x_kv"]) if got.get("x_kv") is not None else x
    cross = "x_kv" in got
    heads = {name: _heads(path, name, got[name]) for name in ("w_q", "w_k", "w_v")}
    _check_heads(path, heads, x, x_kv, cross)
    T, S = x.shape[0], x_kv.shape[0]
    stacked = {name: torch.stack(mats) for name, mats in heads.items()}  # (H, d, d_k)
    H, d_v = len(heads["w_v"]), heads["w_v"][0].shape[1]
    w_o = None
    if got.get("w_o") is not None:
        w_o = _matrix(path, "w_o", got["w_o"])
        if w_o.shape[0] != H * d_v:
            joined = f"{H} heads × {d_v} columns" if H > 1 else f"{d_v} columns"
            raise InputTextError(f"--inputs {path}: w_v gives {joined} but w_o is "
                                 f"{_dims(w_o)}; w_o needs {H * d_v} rows")
    scale = _scale(path, got.get("scale", "sqrt_dk"), stacked["w_q"].shape[2])
    mask = _keep(path, got.get("mask"), got.get("valid_lens"), T, S)
    tokens = _labels(path, "tokens", got.get("tokens"), T, "x", "x")
    return AttentionInputs(
        x=x, x_kv=x_kv, **stacked, w_o=w_o, scale=scale, mask=mask,
        mask_kind=_mask_kind(got.get("mask"), got.get("valid_lens")),
        valid_lens=got.get("valid_lens"), tokens=tokens,
        kv_tokens=_labels(path, "kv_tokens", got.get("kv_tokens"), S, "x_kv", "k")
        if cross else tokens, cross=cross)


def _labels(path, key: str, value, n: int, rows_of: str, prefix: str) -> list[str]:
    if value is None:
        return [f"{prefix}{i}" for i in range(n)]
    if not isinstance(value, list) or len(value) != n or \
            not all(isinstance(t, (str, int, float)) for t in value):
        raise InputTextError(f"--inputs {path}: {key} must be a list of {n} labels, one per "
                             f"row of {rows_of}")
    return [str(t) for t in value]


def _dims(m) -> str:
    return f"{m.shape[0]}×{m.shape[1]}"


def _matrix(path, name: str, value) -> torch.Tensor:
    """A non-empty rectangular list of lists of finite numbers, as float64."""
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


def _heads(path, name: str, value) -> list[torch.Tensor]:
    """One matrix (one head) or a list of matrices (one per head)."""
    is_list_of_matrices = (isinstance(value, list) and value and
                           all(isinstance(m, list) and m and isinstance(m[0], list)
                               for m in value))
    if not is_list_of_matrices:
        return [_matrix(path, name, value)]
    return [_matrix(path, f"{name}[{h}]", m) for h, m in enumerate(value)]


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


def _mask_kind(mask, valid_lens) -> str:
    kinds = [("causal" if mask == "causal" else "given") if mask not in (None, "none")
             else None, "valid_lens" if valid_lens is not None else None]
    return " + ".join(k for k in kinds if k) or "none"


def _keep(path, mask, valid_lens, T: int, S: int):
    """The (T, S) keep-mask of `mask` and `valid_lens` together (None: every key)."""
    keep = None
    if mask not in (None, "none"):
        if mask == "causal":
            if T != S:
                raise InputTextError(f"--inputs {path}: a causal mask needs as many queries "
                                     f"as keys, but x has {T} rows and x_kv {S}; use "
                                     "valid_lens or a T×S mask")
            keep = torch.ones(T, T, dtype=torch.bool).tril()
        else:
            m = _matrix(path, "mask", mask)
            if m.shape[0] != T or not ((m == 0) | (m == 1)).all():
                raise InputTextError(f"--inputs {path}: mask must be \"causal\" or a {T}×{S} "
                                     "matrix of 0 (hidden) and 1 (visible)")
            if m.shape[1] != S:
                raise InputTextError(f"--inputs {path}: mask is {_dims(m)} but the keys are "
                                     f"{S}; give a {T}×{S} mask")
            keep = m.bool()
    if valid_lens is not None:
        lens = valid_lens if isinstance(valid_lens, list) else [valid_lens] * T
        if len(lens) != T or not all(isinstance(n, int) and not isinstance(n, bool)
                                     and 1 <= n <= S for n in lens):
            raise InputTextError(f"--inputs {path}: valid_lens must be a whole number from 1 "
                                 f"to {S} (the keys), or a list of {T} of them, one per query "
                                 f"row; got {json_repr(valid_lens)}")
        visible = torch.arange(S)[None, :] < torch.tensor(lens)[:, None]  # (T, S)
        keep = visible if keep is None else keep & visible
    if keep is not None:
        empty = (~keep).all(dim=1).nonzero()
        if len(empty):
            raise InputTextError(f"--inputs {path}: mask row {int(empty[0])} hides every key; "
                                 "softmax needs at least one 1 per row")
    return keep


def _attention_trace(path, data: AttentionInputs) -> Trace:
    """The inputs through model.explicit_attention, every stage recorded by the model's
    own Taps; products that overflow float64 refused."""
    from types import SimpleNamespace

    from ..model import Tap, explicit_attention

    T = data.x.shape[0]
    tr = Trace()
    tr.add("x", data.x, ("T", "C"))
    if data.cross:
        tr.add("x_kv", data.x_kv, ("S", "C"))

    def tap(name: str, *dims: str) -> Tap:
        t = Tap(*dims)
        t.name, t.trace = f"attn.{name}", tr
        return t

    x, x_kv = data.x[None, None], data.x_kv[None, None]  # (1, 1, T, d): batch, head
    q = tap("q", "H", "T", "D")(x @ data.w_q[None])  # (1, H, T, d_k)
    k = tap("k", "H", "S", "D")(x_kv @ data.w_k[None])  # (1, H, S, d_k)
    v = tap("v", "H", "S", "D")(x_kv @ data.w_v[None])  # (1, H, S, d_v)
    taps = SimpleNamespace(scores=tap("scores", "H", "T", "S"),
                           scaled=tap("scaled", "H", "T", "S"),
                           masked=tap("masked", "H", "T", "S"),
                           pattern=tap("pattern", "H", "T", "S"))
    context = tap("context", "H", "T", "D")(
        explicit_attention(q, k, v, data.mask, data.scale, taps=taps))
    concat = tap("concat", "T", "C")(context.transpose(1, 2).reshape(1, T, -1))
    if not (torch.isfinite(q).all() and torch.isfinite(k).all() and torch.isfinite(v).all()
            and torch.isfinite(tr.raw("attn.pattern")).all()
            and torch.isfinite(context).all()):
        raise InputTextError(f"--inputs {path}: the products overflow float64 (entries near "
                             f"{float(data.x.abs().max()):.3g} in x); scale the matrices "
                             "down")
    if data.w_o is not None:
        tap("out", "T", "C")(concat @ data.w_o)
    return tr


def _weights(data: AttentionInputs) -> dict[str, list]:
    """The matrices as the result shows them (one head's without its head axis)."""
    H = data.w_q.shape[0]
    weights = {name: (m[0] if H == 1 else m).tolist()
               for name, m in (("w_q", data.w_q), ("w_k", data.w_k), ("w_v", data.w_v))}
    if data.w_o is not None:
        weights["w_o"] = data.w_o.tolist()
    return weights


def attend_inputs(path, *, head: int | None = None, explain: bool = False,
                  query_pos: int | None = None,
                  show: Iterable[str] | None = None) -> AttendInputsResult:
    """Attention on matrices from a JSON file (seed 000's worked example, seed 001's
    two-head masked example, d2l's queries against key-value pairs), through
    model.explicit_attention, the formula the model itself uses, in float64."""
    data = read_inputs(path)
    stages = ["q", "k", "v", "scores", "scaled", "masked", "pattern", "context", "concat"]
    if data.w_o is not None:
        stages.append("out")
    show = check_show(show, stages)
    H = data.w_q.shape[0]
    check_range("head", head, H, "--head")
    T = data.x.shape[0]
    tr = _attention_trace(path, data)
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position (row of x)", query_pos, T, "--query-pos",
                    plural="query positions (rows of x)")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    d_k = data.w_q.shape[2]
    label = "sqrt(d_k)" if abs(data.scale - d_k ** 0.5) < 1e-12 else "scale"
    explained = None
    h = head if head is not None else 0
    if explain:
        explained = explain_row(
            tr.array("attn.q")[h], tr.array("attn.k")[h], tr.array("attn.v")[h],
            None if data.mask is None else data.mask.numpy(), query_pos, data.scale,
            tr.array("attn.pattern")[h], head=h, tokens=data.tokens,
            kv_tokens=data.kv_tokens, scale_label=label)
    if show:
        tr = tr.subset(["x"] + (["x_kv"] if data.cross else []) +
                       [f"attn.{s}" for s in show])
    if head is not None:
        tr = one_head(tr, head)
    source = InputInfo(file=str(path), tokens=data.tokens)
    if data.cross:
        source.kv = InputInfo(tokens=data.kv_tokens)
    return AttendInputsResult(
        input=source, tensors=tr, source=str(path), n_heads=H, head_dim=d_k,
        scale=data.scale, scale_label=label, mask=data.mask_kind,
        valid_lens=data.valid_lens, cross_attention=data.cross,
        heads=[head] if head is not None else list(range(H)),
        shown=show or ["pattern"], show_given=bool(show),
        formula="tfx_cli.core.model.explicit_attention (the model's own)",
        weights=_weights(data), explain=explained)


__all__ = ["read_inputs", "attend_inputs", "AttentionInputs"]
