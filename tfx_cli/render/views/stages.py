"""Terminal views of the stage commands: embed, posenc, attend, layernorm, ffn, trace.

Every table is drawn from the typed result's tensors and fields, the same objects the JSON
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

from ...core.results import (AttendInputsResult, AttendResult, EmbedResult, ExplainRow,
                            FFNResult, LayerNormResult, PosencResult, Result, TraceResult)
from ...core.tokenizers.base import visible
from ...core.trace import Trace
from ...words import counted
from ..common import quoted, terminal_text, token_axes
from ..matrix import TensorView, columns_that_fit, format_number, matrix_table, needs_sci
from . import (ViewOptions, dims_text, header, kv_table, print_tensors, register, shape_text,
                    shapes_table)

VECTOR_HEAD, VECTOR_TAIL = 3, 2  # entries of a long vector kept in an --explain line


def _print(console: Console, *parts) -> None:
    for part in parts:
        if isinstance(part, Table):
            console.print()  # a blank line before each table
        console.print(part)


def _view(result: Result, name: str, opts: ViewOptions, **kw) -> TensorView:
    return TensorView(name, result.tensors.array(name), result.tensors.dims(name),
                      axes=token_axes(result, name=name), precision=opts.precision,
                      full=opts.full, **kw)


# ---------------------------------------------------------------- embed

@register("embed")
def embed_view(result: EmbedResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    summary = {"positional": result.positional, "d_model": result.d_model,
               "n_tokens": result.n_tokens, "out": result.out}
    if result.note:
        summary["note"] = result.note
    console.print(kv_table(summary, precision=opts.precision))
    tokens = token_axes(result)["T"]
    titles = {"embed.tok": "token embedding rows", "embed.pos": "positional rows",
              "embed.token_type": "segment rows", "embed.out": f"= {result.out}"}
    for name in result.tensors.names():
        leaf = name[name.index("embed."):] if "embed." in name else name
        title = f"{name}  {titles[leaf]}" if leaf in titles else None
        console.print(_view(result, name, opts, title=title))
        stats = result.rows.get(name)
        if stats:
            table = np.column_stack([stats.norm, stats.mean, stats.std])
            _print(console, matrix_table(table, title=f"{name} per row", row_labels=tokens,
                                         col_labels=["norm", "mean", "std"],
                                         precision=opts.precision, full=opts.full, heat=False,
                                         width=console.width))


# ---------------------------------------------------------------- posenc

@register("posenc")
def posenc_view(result: PosencResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    summary = {"positional": result.positional, "n_positions": result.n_positions,
               "d_model": result.d_model}
    if result.head_dim is not None:
        summary.update(head_dim=result.head_dim, rope_theta=result.rope_theta)
    summary["formula"] = result.formula
    console.print(kv_table(summary, precision=opts.precision))
    for name in result.tensors.names():
        console.print(_view(result, name, opts))


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


def explain_view(ex: ExplainRow, console: Console, opts: ViewOptions) -> None:
    """Seed 000's and 001's arithmetic on paper, with this run's numbers."""
    p, full = opts.precision, opts.full
    token = f" {visible(str(ex.query_token))!r}" if ex.query_token is not None else ""
    scale = "√d_k" if ex.scale_label == "sqrt(d_k)" else \
        ex.scale_label.replace("sqrt(", "√(") if ex.scale_label.startswith("sqrt(") else "scale"
    console.print()
    console.print(Text(f"explain · head {ex.head} · query position {ex.query_pos}{token}"
                       f" · d_k = {ex.d_k} · {scale} = {format_number(ex.scale, p)}",
                       style="bold"), no_wrap=True, overflow="ellipsis")
    console.print(Text(f"q = {_vec(ex.q, p, full)}"))
    step = iter(range(1, 5))
    if ex.d_k <= 6 or full:  # short enough to write each product out
        console.print(Text(f"{next(step)}. q·k_j, one product per dimension", style="bold"))
        for key in ex.keys:
            console.print(Text(f"   q·k_{key.pos} = {_terms(ex.q, key.k, p)} = "
                               f"{_num(key.dot, p)}"), overflow="fold")
    capped = ex.softcap is not None
    cap = f"{ex.softcap:g}·tanh(s/{ex.softcap:g}), " if capped else ""
    biased = any(key.bias is not None for key in ex.keys)  # T5's relative position bias
    cap += "+ position bias, " if biased else ""
    steps = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  title=Text(f"{next(step)}. scores, ÷{scale}, {cap}"
                             "mask, exp(s − max), softmax", style="bold"),
                  title_justify="left")
    columns = ["j", "key", "q·k", f"÷{scale}"] + (["capped"] if capped else []) + \
        (["+ bias"] if biased else []) + ["mask", "exp", "weight"]
    for col in columns:
        steps.add_column(col, justify="left" if col in ("key", "mask") else "right",
                         no_wrap=True, max_width=12 if col == "key" else None)
    # each column in scientific notation when fixed decimals would round it to 0.000
    sci = {name: needs_sci(np.array([getattr(k, name) or 0.0 for k in ex.keys] or [0.0]), p)
           for name in ("dot", "scaled", "capped", "bias", "exp", "weight")}

    def cell(key, name: str) -> str:
        return format_number(getattr(key, name), p, sci[name])

    for key in ex.keys:
        steps.add_row(str(key.pos), Text(visible(str(key.token or ""))), cell(key, "dot"),
                      cell(key, "scaled"), *([cell(key, "capped")] if capped else []),
                      *([cell(key, "bias")] if biased else []),
                      "" if key.visible else "-inf",
                      cell(key, "exp") if key.visible else "0", cell(key, "weight"))
    steps.add_row("", Text("sum", style="bold"), "", "", *([""] if capped else []),
                  *([""] if biased else []), "",
                  format_number(ex.sum_exp, p, sci["exp"]),
                  format_number(sum(k.weight for k in ex.keys), p))
    console.print(steps)
    console.print(Text(f"   exp(s − max) with max = {format_number(ex.max_scaled, p)}: "
                       "the same softmax, and exp stays finite", style="dim"), overflow="fold")
    console.print(Text("   weight = exp / sum", style="dim"))
    if ex.sink is not None:  # gpt-oss: the sink logit joins the sum and takes its share
        console.print(Text(f"   the sum includes the head's sink, exp({format_number(ex.sink, p)}"
                           f" − max): it takes {format_number(ex.sink_weight, p)} of the row, "
                           "so the weights sum to "
                           f"{format_number(1 - ex.sink_weight, p)}", style="dim"),
                      overflow="fold")
    console.print(Text(f"{next(step)}. weight × v_j, then their sum", style="bold"))
    for key in ex.keys:
        if not key.visible:
            continue
        # two vectors on one line: keep them short enough for 80 columns
        console.print(Text(f"   {format_number(key.weight, p)} × "
                           f"{_vec(key.v, p, full, 2, 1)} = "
                           f"{_vec(key.weighted_v, p, full, 2, 1)}"), overflow="fold")
    console.print(Text(f"   context = {_vec(ex.context, p, full)}", style="bold"),
                  overflow="fold")
    console.print(Text(f"   largest |weight − model's pattern| = "
                       f"{ex.max_abs_diff_vs_pattern:.1e}", style="dim"))


MAX_HEADS = 16  # heads attend draws before "--head H picks one, --full shows all"


def _attend_summary(result: AttendResult | AttendInputsResult) -> dict:
    if isinstance(result, AttendInputsResult):
        summary = {"source": result.source, "n_heads": result.n_heads,
                   "head_dim": result.head_dim, "scale": result.scale, "mask": result.mask}
        if result.valid_lens is not None:
            summary["valid_lens"] = result.valid_lens
        summary.update(cross_attention=result.cross_attention, heads=result.heads,
                       formula=result.formula)
        return summary
    summary = {"layer": result.layer, "heads": result.heads, "n_heads": result.n_heads,
               "n_kv_heads": result.n_kv_heads, "head_dim": result.head_dim,
               "scale": result.scale, "mask": result.mask}
    if result.valid_lens is not None:
        summary["valid_lens"] = result.valid_lens
    summary["cross_attention"] = result.cross_attention
    if result.kv_groups is not None:
        summary["kv_groups"] = "; ".join(f"kv {g} → q {', '.join(map(str, hs))}"
                                         for g, hs in result.kv_groups.items())
    return summary


@register("attend")
def attend_view(result: AttendResult | AttendInputsResult, console: Console,
                opts: ViewOptions) -> None:
    trace = result.tensors
    header(console, result)
    source = result.input
    if source is not None and source.file:
        console.print(Text(f"inputs: {source.file}", style="dim"))
    if source is not None and source.kv is not None:
        hand_made = source.kv.text is None  # attend --inputs: the file's x_kv
        where = "x_kv" if hand_made else quoted(source.kv.text)
        count = counted(len(source.kv.tokens), "row" if hand_made else "token")
        console.print(Text("keys/values from: ", style="dim") + Text(terminal_text(where)) +
                      Text(f" ({count})", style="dim"), no_wrap=True, overflow="ellipsis")
    console.print(kv_table(_attend_summary(result), precision=opts.precision))
    if result.explain is not None:
        explain_view(result.explain, console, opts)
        if not result.show_given:
            return
    by_stage = {name.rsplit(".", 1)[-1]: name for name in trace.names()}
    for stage in result.shown:
        if stage in by_stage:
            console.print(_view(result, by_stage[stage], opts, heads=result.heads,
                                max_slices=MAX_HEADS))
    if not result.show_given:
        _print(console, shapes_table(trace, title="shapes of every stage"))


# ---------------------------------------------------------------- layernorm

@register("layernorm")
def layernorm_view(result: LayerNormResult, console: Console, opts: ViewOptions) -> None:
    trace, prefix = result.tensors, result.prefix
    header(console, result)
    summary = {"which": result.which, "layer": result.layer, "norm": result.norm,
               "position": result.position, "eps": f"{result.eps:g}",
               "formula": result.formula}
    if result.residual:
        summary["residual"] = result.residual
    console.print(kv_table({k: v for k, v in summary.items() if v is not None},
                           precision=opts.precision))
    tokens = token_axes(result)["T"]
    tables: list = []
    for name in result.residual or []:  # post-LN: x and Sublayer(x) before their sum
        tables.append(_view(result, name, opts))
    tables.append(_view(result, prefix + ".in", opts,
                        title=f"{prefix}.in  (what is normalised"
                        + (": x + Sublayer(x))" if result.residual else ")")))
    # per-token statistics: the model's mean/var, then the check on the normalised rows
    rms = result.norm == "rmsnorm"
    cols, labels = [], []
    if prefix + ".mean" in trace:
        cols.append(trace.array(prefix + ".mean")); labels.append("mean")
    cols.append(trace.array(prefix + ".var")); labels.append("mean x²" if rms else "var")
    cols.append(np.asarray(result.normed_mean)); labels.append("n.mean")
    cols.append(np.asarray(result.normed_var)); labels.append("n.var")
    tables.append(matrix_table(np.column_stack(cols), title=f"{prefix} per token "
                               f"(eps = {result.eps:g}; n. = of the normalised row)",
                               row_labels=tokens, col_labels=labels,
                               precision=max(opts.precision, 4), full=opts.full, heat=False,
                               width=console.width))
    tables.append(_view(result, prefix + ".normed", opts, title=f"{prefix}.normed"))
    params, plabels = [trace.array(prefix + ".scale")], ["γ scale"]
    if prefix + ".shift" in trace:
        params.append(trace.array(prefix + ".shift"))
        plabels.append("β shift")
    what = ".scale, .shift  (C,) each" if len(params) == 2 else ".scale  (C,)"
    tables.append(matrix_table(np.stack(params), title=f"{prefix}{what}",
                               row_labels=plabels, precision=opts.precision, full=opts.full,
                               corner="C", width=console.width))
    tables.append(_view(result, prefix + ".out", opts))
    _print(console, *tables)
    mean_err = max(abs(v) for v in result.normed_mean)
    second = result.normed_mean_square if rms else result.normed_var
    var_err = max(abs(v - 1) for v in second)
    console.print()
    console.print(Text(f"normalised rows: |mean| ≤ {mean_err:.1e}, "
                       f"|{'mean x²' if rms else 'variance'} − 1| ≤ {var_err:.1e}"),
                  overflow="fold")
    console.print(Text("(eps keeps the variance a little under 1)", style="dim"))


# ---------------------------------------------------------------- ffn

@register("ffn")
def ffn_view(result: FFNResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    console.print(kv_table({"layer": result.layer, "activation": result.activation,
                            "d_model": result.d_model, "d_ff": result.d_ff,
                            "input": result.source, "formula": result.formula,
                            "fraction_positive": result.fraction_positive},
                           precision=opts.precision))
    # the (T, F) tables side by side in the reader's mind: the same columns in each
    trace = result.tensors
    wide = [n for n in trace.names() if trace.dims(n) == ("T", "F")]
    cols = min(columns_that_fit(trace.array(n), console.width, opts.precision,
                                token_axes(result)["T"]) for n in wide) if wide else None
    for name in trace.names():
        console.print(_view(result, name, opts, max_cols=cols if name in wide else None))


# ---------------------------------------------------------------- trace

def trace_tree(trace: Trace) -> Tree:
    """Names as a tree split at the dots, each leaf with its dims and shape."""
    root = Tree(Text(counted(len(trace), "tensor"), style="bold"), guide_style="dim")
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
def trace_view(result: TraceResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    console.print(trace_tree(result.tensors))
    if opts.values:
        print_tensors(console, result, opts)
