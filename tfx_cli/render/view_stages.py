"""Terminal views of the stage commands: embed, posenc, attend, layernorm, ffn, trace.

Every table is drawn from `result.tensors` and `result.result`, the same objects the JSON
envelope is built from: a view computes nothing the JSON lacks beyond re-arranging it.
Tokens are shown with whitespace made visible (space ·) and always as Text, never markup.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..core.tokenizers import visible
from ..core.trace import Result, Trace
from ..words import counted
from .emit import ViewOptions
from .matrix import format_number, matrix_table, vector_table
from .views import dims_text, header, kv_table, register, scalars, shape_text, shapes_table

VECTOR_HEAD, VECTOR_TAIL = 3, 2  # entries of a long vector kept in an --explain line


def _tokens(result: Result, key: str | None = None) -> list[str] | None:
    data = result.input or {}
    if key is not None:
        data = data.get(key) or {}
    tokens = data.get("tokens")
    return [visible(str(t)) for t in tokens] if tokens is not None else None


def _print(console: Console, *parts) -> None:
    for part in parts:
        if isinstance(part, Table):
            console.print()  # a blank line before each table
        console.print(part)


def _labels(dim: str, n: int, axes: dict[str, Sequence[str] | None]) -> list | None:
    labels = axes.get(dim)
    return list(labels) if labels is not None and len(labels) == n else None


def tensor_view(name: str, trace: Trace, opts: ViewOptions, width: int,
                axes: dict[str, Sequence[str] | None], *, max_slices: int | None = 3,
                title: str | None = None, heat: bool = True) -> list:
    """Tables for one tensor, rows and columns labelled per dim letter (`axes` maps T to
    the query tokens and S to the key tokens, which differ in cross-attention)."""
    array, dims = trace.array(name), trace.dims(name)
    title = title or name
    common = dict(precision=opts.precision, full=opts.full, dims=dims, shape=array.shape,
                  width=width, heat=heat)
    if array.ndim == 1:
        return [vector_table(array, title=title, labels=_labels(dims[0], len(array), axes),
                             **common)]
    rows = _labels(dims[-2], array.shape[-2], axes)
    cols = _labels(dims[-1], array.shape[-1], axes)
    if array.ndim == 2:
        return [matrix_table(array, title=title, row_labels=rows, col_labels=cols, **common)]
    finite = array[np.isfinite(array)]
    vrange = (float(finite.min()), float(finite.max())) if finite.size else None
    n = array.shape[0]
    shown = n if opts.full or max_slices is None else min(n, max_slices)
    heads = axes.get("heads") or list(range(n))  # the model's head numbers (--head slices)
    out: list = []
    for h in range(shown):
        label = f"head {heads[h]}" if dims[0] == "H" else f"{dims[0]}={h}"
        out.append(matrix_table(array[h], title=f"{title} {label}", row_labels=rows,
                                col_labels=cols, vrange=vrange, **common))
    if shown < n:
        out.append(Text(f"… {n - shown} more of {name} (--head H picks one, --full shows all)",
                        style="dim"))
    return out


# ---------------------------------------------------------------- embed

@register("embed")
def embed_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    info = result.result
    console.print(kv_table(scalars(info), precision=opts.precision))
    axes = {"T": _tokens(result)}
    titles = {"embed.tok": "embed.tok  token embedding rows",
              "embed.pos": "embed.pos  positional rows",
              "embed.token_type": "embed.token_type  segment rows",
              "embed.out": f"embed.out = {info.get('out', 'the sum')}"}
    for name in result.tensors.names():
        _print(console, *tensor_view(name, result.tensors, opts, console.width, axes,
                                     title=titles.get(name)))
        stats = info.get("rows", {}).get(name)
        if stats:
            table = np.column_stack([stats["norm"], stats["mean"], stats["std"]])
            _print(console, matrix_table(table, title=f"{name} per row",
                                         row_labels=axes["T"], col_labels=["norm", "mean", "std"],
                                         precision=opts.precision, full=opts.full, heat=False,
                                         width=console.width))


# ---------------------------------------------------------------- posenc

@register("posenc")
def posenc_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    console.print(kv_table(scalars(result.result), precision=opts.precision))
    axes = {"T": _tokens(result)}
    for name in result.tensors.names():
        _print(console, *tensor_view(name, result.tensors, opts, console.width, axes))


# ---------------------------------------------------------------- attend

def _num(value: float, precision: int) -> str:
    """Whole numbers as whole numbers (seed 000's hand-made matrices), else `precision`."""
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    return format_number(value, precision)


def _vec(values: Sequence[float], precision: int, full: bool, head: int = VECTOR_HEAD,
         tail: int = VECTOR_TAIL) -> str:
    values = list(values)
    text = [_num(v, precision) for v in values]
    if not full and len(text) > head + tail + 1:
        text = text[:head] + ["…"] + text[-tail:]
    return "[" + ", ".join(text) + "]"


def _terms(q: Sequence[float], k: Sequence[float], precision: int) -> str:
    p = min(precision, 3)
    return " + ".join(f"{_num(a, p)}×{_num(b, p)}" for a, b in zip(q, k))


def explain_view(ex: dict, console: Console, opts: ViewOptions) -> None:
    """Seed 000's and 001's arithmetic on paper, with this run's numbers."""
    p, full = opts.precision, opts.full
    token = f" {visible(str(ex['query_token']))!r}" if ex.get("query_token") is not None else ""
    scale = "√d_k" if ex.get("scale_label") == "sqrt(d_k)" else "scale"
    console.print()
    console.print(Text(f"explain · head {ex['head']} · query position {ex['query_pos']}{token}"
                       f" · d_k = {ex['d_k']} · {scale} = {format_number(ex['scale'], p)}",
                       style="bold"), no_wrap=True, overflow="ellipsis")
    console.print(Text(f"q = {_vec(ex['q'], p, full)}"))
    keys = ex["keys"]
    step = iter(range(1, 5))
    if ex["d_k"] <= 6 or full:  # short enough to write each product out
        console.print(Text(f"{next(step)}. q·k_j, one product per dimension", style="bold"))
        for key in keys:
            console.print(Text(f"   q·k_{key['pos']} = {_terms(ex['q'], key['k'], p)} = "
                               f"{_num(key['dot'], p)}"), overflow="fold")
    steps = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  title=Text(f"{next(step)}. scores, ÷{scale}, "
                             "mask, exp(s − max), softmax", style="bold"),
                  title_justify="left")
    for col in ("j", "key", "q·k", f"÷{scale}", "mask", "exp", "weight"):
        steps.add_column(col, justify="left" if col in ("key", "mask") else "right",
                         no_wrap=True, max_width=12 if col == "key" else None)
    for key in keys:
        shown = key["visible"]
        steps.add_row(str(key["pos"]), Text(visible(str(key["token"] or ""))),
                      format_number(key["dot"], p), format_number(key["scaled"], p),
                      "" if shown else "-inf", format_number(key["exp"], p) if shown else "0",
                      format_number(key["weight"], p))
    steps.add_row("", Text("sum", style="bold"), "", "", "", format_number(ex["sum_exp"], p),
                  format_number(sum(k["weight"] for k in keys), p))
    console.print(steps)
    console.print(Text(f"   exp(s − max) with max = {format_number(ex['max_scaled'], p)}: "
                       "the same softmax, and exp stays finite", style="dim"), overflow="fold")
    console.print(Text("   weight = exp / sum", style="dim"))
    console.print(Text(f"{next(step)}. weight × v_j, then their sum", style="bold"))
    for key in keys:
        if not key["visible"]:
            continue
        # two vectors on one line: keep them short enough for 80 columns
        console.print(Text(f"   {format_number(key['weight'], p)} × "
                           f"{_vec(key['v'], p, full, 2, 1)} = "
                           f"{_vec(key['weighted_v'], p, full, 2, 1)}"), overflow="fold")
    console.print(Text(f"   context = {_vec(ex['context'], p, full)}", style="bold"),
                  overflow="fold")
    console.print(Text(f"   largest |weight − model's pattern| = "
                       f"{ex['max_abs_diff_vs_pattern']:.1e}", style="dim"))


@register("attend")
def attend_view(result: Result, console: Console, opts: ViewOptions) -> None:
    info, trace = result.result, result.tensors
    header(console, result)
    if result.input and result.input.get("file"):
        console.print(Text(f"inputs: {result.input['file']}", style="dim"))
    if result.input and result.input.get("kv"):
        kv = result.input["kv"]
        console.print(Text("keys/values from: ", style="dim") + Text(repr(kv["text"])) +
                      Text(f" ({counted(len(kv['tokens']), 'token')})", style="dim"),
                      no_wrap=True, overflow="ellipsis")
    summary = {k: v for k, v in scalars(info).items()
               if k not in ("shown", "weights", "scale_label") and v is not None}
    if "kv_groups" in info:
        summary["kv_groups"] = "; ".join(f"kv {g} → q {', '.join(map(str, hs))}"
                                         for g, hs in info["kv_groups"].items())
    console.print(kv_table(summary, precision=opts.precision))
    q_tokens = _tokens(result)
    kv_tokens = _tokens(result, "kv") if result.input and result.input.get("kv") else q_tokens
    axes = {"T": q_tokens, "S": kv_tokens, "heads": info.get("heads")}
    if opts.extra and opts.extra.get("explain") and "explain" in info:
        explain_view(info["explain"], console, opts)
        if not opts.show:
            return
    names = trace.names()
    by_stage = {name.rsplit(".", 1)[-1]: name for name in names}
    stages = list(opts.show) or ["pattern"]
    for stage in stages:
        if stage in by_stage:
            _print(console, *tensor_view(by_stage[stage], trace, opts, console.width, axes,
                                         max_slices=None))
    if not opts.show:
        _print(console, shapes_table(trace, title="shapes of every stage"))


# ---------------------------------------------------------------- layernorm

@register("layernorm")
def layernorm_view(result: Result, console: Console, opts: ViewOptions) -> None:
    info, trace = result.result, result.tensors
    header(console, result)
    summary = {k: v for k, v in scalars(info).items()
               if v is not None and not k.startswith("normed_")}  # those are the table below
    summary["eps"] = f"{info['eps']:g}"
    console.print(kv_table(summary, precision=opts.precision))
    axes = {"T": _tokens(result)}
    names = trace.names()
    prefix = next(n for n in names if n.endswith(".normed")).rsplit(".", 1)[0]
    tables = []
    for name in info.get("residual", []):  # post-LN: x and Sublayer(x) before their sum
        tables += tensor_view(name, trace, opts, console.width, axes)
    tables += tensor_view(prefix + ".in", trace, opts, console.width, axes,
                          title=f"{prefix}.in  (what is normalised"
                          + (": x + Sublayer(x))" if info.get("residual") else ")"))
    # per-token statistics: the model's mean/var, then the check on the normalised rows
    cols, labels = [], []
    if prefix + ".mean" in trace:
        cols.append(trace.array(prefix + ".mean")); labels.append("mean")
    var_label = "mean x²" if info.get("norm") == "rmsnorm" else "var"
    cols.append(trace.array(prefix + ".var")); labels.append(var_label)
    cols.append(np.asarray(info["normed_mean"])); labels.append("n.mean")
    cols.append(np.asarray(info["normed_var"])); labels.append("n.var")
    tables.append(matrix_table(np.column_stack(cols), title=f"{prefix} per token "
                               f"(eps = {info['eps']:g}; n. = of the normalised row)",
                               row_labels=axes["T"], col_labels=labels,
                               precision=max(opts.precision, 4), full=opts.full, heat=False,
                               width=console.width))
    tables += tensor_view(prefix + ".normed", trace, opts, console.width, axes,
                          title=f"{prefix}.normed")
    params = [trace.array(prefix + ".scale")]
    plabels = ["γ scale"]
    if prefix + ".shift" in trace:
        params.append(trace.array(prefix + ".shift"))
        plabels.append("β shift")
    tables.append(matrix_table(np.stack(params), title=f"{prefix}.scale, .shift  (C,) each",
                               row_labels=plabels, precision=opts.precision, full=opts.full,
                               corner="C", width=console.width))
    tables += tensor_view(prefix + ".out", trace, opts, console.width, axes)
    _print(console, *tables)
    mean_err = max(abs(v) for v in info["normed_mean"])
    var_err = max(abs(v - 1) for v in info["normed_var"])
    what = "mean x²" if info.get("norm") == "rmsnorm" else "variance"
    if info.get("norm") == "rmsnorm":
        var_err = max(abs(v - 1) for v in info["normed_mean_square"])
    console.print()
    console.print(Text(f"normalised rows: |mean| ≤ {mean_err:.1e}, |{what} − 1| ≤ {var_err:.1e}"),
                  overflow="fold")
    console.print(Text("(eps keeps the variance a little under 1)", style="dim"))


# ---------------------------------------------------------------- ffn

@register("ffn")
def ffn_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    console.print(kv_table(scalars(result.result), precision=opts.precision))
    axes = {"T": _tokens(result)}
    for name in result.tensors.names():
        _print(console, *tensor_view(name, result.tensors, opts, console.width, axes))


# ---------------------------------------------------------------- trace

def trace_tree(trace: Trace) -> Tree:
    """Names as a tree split at the dots, each leaf with its dims and shape."""
    root = Tree(Text(f"{len(trace)} tensors", style="bold"), guide_style="dim")
    nodes: dict[str, Tree] = {}
    for name in trace.names():
        parts = name.split(".")
        parent, path = root, ""
        for part in parts[:-1]:
            path = f"{path}.{part}" if path else part
            if path not in nodes:
                nodes[path] = parent.add(Text(part))
            parent = nodes[path]
        leaf = Text(parts[-1]) + Text(f"  {dims_text(trace.dims(name))} = "
                                      f"{shape_text(trace.shape(name))}", style="dim")
        parent.add(leaf)
    return root


@register("trace")
def trace_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    console.print(trace_tree(result.tensors))
    if opts.extra and opts.extra.get("values"):
        axes = {"T": _tokens(result), "S": _tokens(result)}
        for name in result.tensors.names():
            _print(console, *tensor_view(name, result.tensors, opts, console.width, axes))
