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


def patch_tables(result: PatchResult) -> list[tuple[str, list[str] | None, str]]:
    """(tensor, column labels, what its rows and columns are) of each table: one for a
    single stack; an encoder–decoder's encoder (source positions, CLEAN's tokens
    starred), decoder and cross-attention (target positions) tables."""
    cells = "heads" if result.site == "heads" else "positions"
    if not result.tables:
        return [("patch.effect", patch_columns(result),
                 f"{result.site}: rows are layers, columns {cells}")]
    target = result.input.target
    out = []
    for table in result.tables:
        columns = patch_columns(result) if table.cells == "source" else None \
            if table.cells == "heads" else display_tokens(target.tokens)
        out.append((f"patch.{table.part}.effect", columns,
                    f"{table.patched} × " + ("heads" if table.cells == "heads"
                                             else f"{table.cells} positions")))
    return out


@register("patch")
def patch_view(result: PatchResult, console: Console, opts: ViewOptions) -> None:
    if hasattr(result, "n_pairs"):  # tfx patch --pairs: the averaged effect
        from .datasets import pairs_view

        return pairs_view(result, console, opts)
    header(console, result)
    corrupt = result.corrupt
    console.print(Text("corrupt: ", style="dim") + Text(quoted(corrupt.text)) +
                  Text(f" ({counted(len(corrupt.tokens), 'token')})", style="dim"),
                  no_wrap=True, overflow="ellipsis")
    cells = "positions" if result.site != "heads" else "heads"
    if result.sae is not None:
        from .features import sae_lines

        console.print(kv_table(sae_lines(result.sae), precision=opts.precision))
    p = opts.precision
    runs = (f"in {counted(result.batched_runs, 'forward pass', 'forward passes')} of up to "
            f"{result.batch} rows")
    if result.tables:  # an encoder–decoder: a table per stack (and for cross-attention)
        size = f"{result.n_cells} cells {runs}"
    else:
        L, n = result.tensors.shape("patch.effect")
        size = f"{L} {'features' if result.features else 'layers'} × {n} {cells} {runs}"
    console.print(kv_table({
        "patched": f"{result.patched} ({result.site}; one {cells[:-1]} per cell"
                   + (", every position" if result.site == "heads" else "") + ")",
        "metric": result.metric,
        "m_clean": format_number(result.m_clean, max(p, 4)),
        "m_corrupt": format_number(result.m_corrupt, max(p, 4)),
        "effect": result.effect + "  (1: the cell restores CLEAN's answer)",
        "cells": size,
    }, precision=p))
    for name, columns, what in patch_tables(result):
        axes = {"T": columns}
        title = f"{name}  ({what})"
        if result.features:  # --site features: one row per feature of the SAE
            axes["F"] = [f"#{k}" for k in result.features]
            title = (f"{name}  (features of the SAE at {result.sae.site}: rows are "
                     f"features, columns positions)")
        console.print(TensorView(name, result.tensors.array(name), result.tensors.dims(name),
                                 axes=axes, precision=p, full=opts.full, title=title))
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
    if result.sae is not None:
        from .features import sae_lines

        console.print(kv_table(sae_lines(result.sae), precision=p))
    console.print(kv_table({
        "measured": f"{what} at position {result.position}",
        "each part": f"through {result.norm}, then · ({result.direction})",
        "remainder": result.remainder,
    }, precision=p))
    chosen = shown_parts(result, opts.full)
    biggest = max((abs(part.value) for part in result.parts), default=0.0) or 1.0
    # the bars give way to long part names (an encoder–decoder's decoder.blocks.{i}...)
    name_width = max((len(result.parts[i].name) for i in chosen), default=4)
    bar = max(6, min(BAR, (console.width - name_width - 12) // 2))
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text(f"parts of {what}", style="bold"))
    table.add_column("part", no_wrap=True, min_width=name_width)
    table.add_column("value", justify="right", no_wrap=True, min_width=p + 3)
    table.add_column("", no_wrap=True)  # the bar: right of the axis positive, left negative
    for i in chosen:
        part = result.parts[i]
        cells = round(abs(part.value) / biggest * bar)
        drawn = Text(" " * bar + "│", style="dim") if part.value >= 0 else \
            Text(" " * (bar - cells)) + Text("█" * cells, style="red") + Text("│", style="dim")
        if part.value >= 0:
            drawn.append("█" * cells, style="green")
        table.add_row(Text(part.name), format_number(part.value, p), drawn)
    console.print()
    console.print(table)
    if len(chosen) < len(result.parts):
        console.print(Text(f"the {len(chosen) - 1} largest of {len(result.parts) - 1} parts and "
                           "the remainder (--full shows all, --json holds all)", style="dim"))
    through = {} if result.through_cross is None else {
        "through cross-attention": format_number(result.through_cross, max(p, 4))
        + "  (the source's direct share: the cross-attention parts' sum)"}
    console.print(kv_table({
        **through,
        "sum of parts": format_number(result.sum_of_parts, max(p, 4)),
        "logit difference" if result.wrong is not None else "logit":
            format_number(result.logit_diff, max(p, 4)),
        "unexplained": f"{result.unexplained:.1e} (float rounding)",
    }, precision=p))
