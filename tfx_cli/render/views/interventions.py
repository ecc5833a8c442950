"""Terminal views of `tfx patch` (a layers × positions heat map) and `tfx attribute` (a
table of parts with bars). Both read the typed result; nothing is computed here beyond
choosing which rows fit."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import AttributeResult, PatchResult
from ...core.tokenizers.base import visible
from ...words import counted
from ..common import display_tokens, largest_parts, quoted, terminal_text
from ..matrix import TensorView, format_number
from . import ViewOptions, header, kv_table, register

MAX_PARTS = 40  # attribute rows shown before the largest are picked (--full shows all)
BAR = 24  # cells of the longest bar


# ---------------------------------------------------------------- patch

def patch_columns(result: PatchResult) -> list[str] | None:
    """Column labels: CLEAN's tokens, starred where CORRUPT differs (positions); None
    (head numbers) for --site heads."""
    if result.site == "heads":
        return None
    tokens = display_tokens(result.tokens)
    return [t + "*" if i in result.differing_positions else t for i, t in enumerate(tokens)]


@register("patch")
def patch_view(result: PatchResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    corrupt = result.corrupt
    console.print(Text("corrupt: ", style="dim") + Text(quoted(corrupt.text)) +
                  Text(f" ({counted(len(corrupt.tokens), 'token')})", style="dim"),
                  no_wrap=True, overflow="ellipsis")
    cells = "positions" if result.site != "heads" else "heads"
    L, n = result.tensors.shape("patch.effect")
    p = opts.precision
    console.print(kv_table({
        "patched": f"{result.patched} ({result.site}; one {cells[:-1]} per cell"
                   + (", every position" if result.site == "heads" else "") + ")",
        "metric": result.metric,
        "m_clean": format_number(result.m_clean, max(p, 4)),
        "m_corrupt": format_number(result.m_corrupt, max(p, 4)),
        "effect": result.effect + "  (1: the cell restores CLEAN's answer)",
        "cells": f"{L} layers × {n} {cells} in {counted(result.batched_runs, 'forward pass', 'forward passes')}"
                 f" of up to {result.batch} rows",
    }, precision=p))
    axes = {"T": patch_columns(result)}
    title = f"patch.effect  ({result.site}: rows are layers, columns {cells})"
    console.print(TensorView("patch.effect", result.tensors.array("patch.effect"),
                             result.tensors.dims("patch.effect"), axes=axes, precision=p,
                             full=opts.full, title=title))
    if result.differing_positions and result.site != "heads":
        pairs = [f"{i}: {visible(result.tokens[i])!r} → {visible(corrupt.tokens[i])!r}"
                 for i in result.differing_positions]
        console.print(Text(terminal_text("* CORRUPT differs at " + ", ".join(pairs)),
                           style="dim"), overflow="fold")


# ---------------------------------------------------------------- attribute

def shown_parts(result: AttributeResult, full: bool) -> list[int]:
    """Indices of the parts to draw: all of them, or the MAX_PARTS largest in magnitude
    (the remainder always), kept in forward order."""
    values = [part.value for part in result.parts]
    return list(range(len(values))) if full else largest_parts(values, MAX_PARTS)


@register("attribute")
def attribute_view(result: AttributeResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    p = opts.precision
    what = f"logit({result.answer.token!r})"
    if result.wrong is not None:
        what += f" − logit({result.wrong.token!r})"
    console.print(kv_table({
        "measured": f"{what} at position {result.position}",
        "each part": f"through {result.norm}, then · ({result.direction})",
        "remainder": result.remainder,
    }, precision=p))
    chosen = shown_parts(result, opts.full)
    biggest = max((abs(part.value) for part in result.parts), default=0.0) or 1.0
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text(f"parts of {what}", style="bold"))
    table.add_column("part", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)  # the bar: right of the axis positive, left negative
    for i in chosen:
        part = result.parts[i]
        cells = round(abs(part.value) / biggest * BAR)
        bar = Text(" " * BAR + "│", style="dim") if part.value >= 0 else \
            Text(" " * (BAR - cells)) + Text("█" * cells, style="red") + Text("│", style="dim")
        if part.value >= 0:
            bar.append("█" * cells, style="green")
        table.add_row(Text(part.name), format_number(part.value, p), bar)
    console.print()
    console.print(table)
    if len(chosen) < len(result.parts):
        console.print(Text(f"the {len(chosen) - 1} largest of {len(result.parts) - 1} parts and "
                           "the remainder (--full shows all, --json holds all)", style="dim"))
    console.print(kv_table({
        "sum of parts": format_number(result.sum_of_parts, max(p, 4)),
        "logit difference" if result.wrong is not None else "logit":
            format_number(result.logit_diff, max(p, 4)),
        "unexplained": f"{result.unexplained:.1e} (float rounding)",
    }, precision=p))
