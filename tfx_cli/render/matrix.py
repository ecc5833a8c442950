"""Arrays -> Rich tables: token labels, a heat shade per cell, head and tail truncation.

Nothing here prints; every function returns a Rich renderable. Labels and titles are built
as `Text`, never parsed as markup, so a token such as "[CLS]" prints literally. Colour is
only ever a cell background: where Rich drops colour (NO_COLOR, a pipe, a file) the numbers
are still padded, aligned and complete.

Widths are counted up front rather than left to Rich: a table that Rich has to squeeze
wraps its numbers, so we pick the columns that fit and mark the cut with an ellipsis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np
from rich import box
from rich.color import Color
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..words import counted
from .common import axis_labels, finite_range, head_tail

DEFAULT_WIDTH = 80  # what we fit to when no console width is given
LABEL_MAX = 12      # row labels longer than this are cut with "…"
HEADER_MAX = 8      # a column label may widen its column up to this many cells
CUT_COL = "…"       # marks the columns left out between head and tail
CUT_ROW = "⋮"       # marks the rows left out
CUT_COL_WIDTH = 4   # separator + " … "
MASKED = Style(dim=True)
INVALID = Style(color="red")

# Colour stops (position, rgb). Sequential: viridis, readable on dark and light terminals.
# Diverging: blue below the centre, grey at it, red above (coolwarm).
SEQUENTIAL = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)),
              (0.75, (94, 201, 98)), (1.0, (253, 231, 37)))
DIVERGING = ((0.0, (59, 76, 192)), (0.25, (141, 176, 254)), (0.5, (221, 221, 221)),
             (0.75, (244, 154, 123)), (1.0, (180, 4, 38)))
LEVELS = 32  # shades per map: finer steps are invisible and would defeat the style cache
MAX_SLICES = 3  # heads (or other leading slices) drawn before "--full shows all"


# ---------------------------------------------------------------- numbers

def format_number(x, precision: int = 3, sci: bool = False) -> str:
    """One number as a table shows it: fixed decimals, "-inf" for a masked cell, "nan"."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    text = f"{x:.{precision}e}" if sci else f"{x:.{precision}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]  # "-0.000" is rounding noise, not information
    return text


def needs_sci(values: np.ndarray, precision: int) -> bool:
    """Scientific notation when fixed decimals would be too wide or round everything to 0."""
    values = np.asarray(values)
    if values.dtype.kind != "f":
        return False
    finite = np.abs(values[np.isfinite(values)])
    if finite.size == 0:
        return False
    biggest = float(finite.max())
    return biggest >= 1e6 or 0.0 < biggest < 0.5 * 10.0 ** -precision


# ---------------------------------------------------------------- heat

@dataclass(frozen=True)
class HeatScale:
    """Maps a value to a shade. `center` set: diverging around it; else sequential lo..hi."""

    lo: float
    hi: float
    center: float | None = None

    def style(self, x: float) -> Style | None:
        if not math.isfinite(x):
            return None
        t = (x - self.lo) / (self.hi - self.lo)
        level = round(min(max(t, 0.0), 1.0) * (LEVELS - 1))
        return _shade(level, self.center is not None)


def heat_scale(values: np.ndarray, center: float | None = None,
               vrange: tuple[float, float] | None = None) -> HeatScale | None:
    """Choose the shading for an array: probabilities in [0, 1] keep a fixed 0..1 scale
    (so two heads compare by colour), signed values diverge around 0, anything else
    spans its own min..max. `vrange` shares one scale across several tables."""
    values = np.asarray(values)
    if values.dtype.kind != "f":
        return None  # ids, counts: shading would suggest a magnitude that means nothing
    vrange = vrange or finite_range(values)
    if vrange is None:
        return None
    lo, hi = vrange
    if center is None and lo >= 0.0 and hi <= 1.0:
        return HeatScale(0.0, 1.0)
    if center is None and lo < 0.0 < hi:
        center = 0.0
    if center is not None:
        span = max(abs(lo - center), abs(hi - center)) or 1.0
        return HeatScale(center - span, center + span, center)
    return HeatScale(lo, hi if hi > lo else lo + 1.0)


@lru_cache(maxsize=2 * LEVELS)
def _shade(level: int, diverging: bool) -> Style:
    stops = DIVERGING if diverging else SEQUENTIAL
    t = level / (LEVELS - 1)
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            rgb = tuple(round(a + (b - a) * f) for a, b in zip(c0, c1))
            break
    luminance = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255
    ink = "black" if luminance > 0.5 else "white"  # keep the digits legible on the shade
    return Style(color=ink, bgcolor=Color.from_rgb(*rgb))


# ---------------------------------------------------------------- labels and cells

def label_text(label, limit: int) -> Text:
    """A label as literal text: control characters made visible, cut to `limit` cells."""
    raw = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(label))
    text = Text(raw, no_wrap=True)
    text.truncate(limit, overflow="ellipsis")
    return text


def _cell(text: str | Text, width: int, justify: str = "right", style=None) -> Text:
    """A cell exactly width+2 cells wide, padding included, so a shade fills the cell."""
    text = Text(text) if isinstance(text, str) else text.copy()
    text.align(justify, width)
    cell = Text(" ", justify="left", no_wrap=True) + text + Text(" ")
    if style is not None:
        cell.stylize(style)
    return cell


def _labels(labels: Sequence | None, n: int) -> list:
    if labels is None or len(labels) != n:
        return list(range(n))  # no (or mismatched) labels: positions
    return list(labels)


def _alternate(n: int):
    """0, n-1, 1, n-2, ...: adding columns in this order keeps head and tail balanced."""
    lo, hi = 0, n - 1
    while lo <= hi:
        yield lo
        if hi != lo:
            yield hi
        lo, hi = lo + 1, hi - 1


# ---------------------------------------------------------------- tables

@dataclass
class _Layout:
    """What one matrix table shows: chosen rows/columns, their text, and the cuts."""

    array: np.ndarray
    rows: list[int]
    row_cut: int | None
    row_names: list[Text]
    label_width: int
    col_names: list[Text]
    precision: int
    sci: bool

    def text(self, i: int, j: int) -> str:
        return format_number(self.array[i, j], self.precision, self.sci)

    def col_width(self, j: int) -> int:
        numbers = max((len(self.text(i, j)) for i in self.rows), default=1)
        return max(numbers, min(self.col_names[j].cell_len, HEADER_MAX))


def _fit_columns(layout: _Layout, budget: int, max_cols: int | None,
                 full: bool) -> tuple[list[int], int | None, dict[int, int]]:
    """Columns that fit in `budget` cells, taken from both ends; their widths."""
    n = len(layout.col_names)
    used = layout.label_width + 2
    chosen: dict[int, int] = {}
    for j in _alternate(n):
        width = layout.col_width(j)
        cut = 0 if len(chosen) + 1 == n else CUT_COL_WIDTH
        too_many = max_cols is not None and len(chosen) >= max_cols
        if chosen and not full and (used + 1 + width + 2 + cut > budget or too_many):
            break
        chosen[j] = width
        used += 1 + width + 2
    cols = sorted(chosen)
    if len(cols) == n:
        return cols, None, chosen
    head = (len(cols) + 1) // 2
    return cols, head, chosen


def _blocks(cols: list[int], widths: dict[int, int], label_width: int,
            budget: int) -> list[list[int]]:
    """Split all columns into runs that each fit the width (for --full)."""
    blocks, current, used = [], [], label_width + 2
    for j in cols:
        step = 1 + widths[j] + 2
        if current and used + step > budget:
            blocks.append(current)
            current, used = [], label_width + 2
        current.append(j)
        used += step
    if current:
        blocks.append(current)
    return blocks


def _build(layout: _Layout, cols: list[int], col_cut: int | None, widths: dict[int, int],
           scale: HeatScale | None, corner: str, title: Text | None,
           caption: Text | None) -> Table:
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False,
                  padding=0, pad_edge=False, title_justify="left", caption_justify="left",
                  title_style="bold", caption_style="dim")
    # cells arrive aligned and padded; "left" keeps Rich from stripping a shaded pad
    table.add_column(_cell(label_text(corner, layout.label_width), layout.label_width,
                           "left"), justify="left", no_wrap=True)
    cells = [(j, widths[j]) for j in cols]
    if col_cut is not None:
        cells.insert(col_cut, (None, 1))
    for j, width in cells:
        header = CUT_COL if j is None else layout.col_names[j]
        table.add_column(_cell(header, width), justify="left", no_wrap=True)

    def data_row(i: int, name: Text) -> list[Text]:
        row = [_cell(name, layout.label_width, "left")]
        for j, width in cells:
            if j is None:
                row.append(_cell(CUT_COL, width, "center", "dim"))
                continue
            value = layout.array[i, j]
            style = None
            if isinstance(value, (float, np.floating)):
                if np.isnan(value):
                    style = INVALID
                elif np.isinf(value):
                    style = MASKED
                elif scale is not None:
                    style = scale.style(float(value))
            row.append(_cell(layout.text(i, j), width, "right", style))
        return row

    for k, (i, name) in enumerate(zip(layout.rows, layout.row_names)):
        if k == layout.row_cut:
            table.add_row(_cell(CUT_ROW, layout.label_width, "left", "dim"),
                          *[_cell(CUT_ROW, w, "center", "dim") for _, w in cells])
        table.add_row(*data_row(i, name))
    return table


def _one_line(text: str, budget: int, style: str | None = None) -> Text:
    line = Text(text, no_wrap=True, overflow="ellipsis", style=style or "")
    line.truncate(budget, overflow="ellipsis")
    line.overflow = "ignore"  # wider than a narrow table is fine: it fits the console
    return line


def matrix_table(array2d, *, title: str, row_labels: Sequence | None = None,
                 col_labels: Sequence | None = None, precision: int = 3, full: bool = False,
                 heat: bool = True, max_rows: int = 12, max_cols: int | None = None,
                 center: float | None = None, vrange: tuple[float, float] | None = None,
                 dims: Sequence[str] | None = None, shape: Sequence[int] | None = None,
                 corner: str | None = None, width: int | None = None) -> Table:
    """A 2-D array as a Rich table.

    Rows and columns beyond `max_rows` / the console `width` are cut to head and tail with
    an ellipsis row/column; `full=True` keeps all of them (columns then continue in blocks
    below one another). The title carries `dims` and the full `shape` (pass the parent's
    when showing one slice of a bigger tensor). `max_cols` caps columns further; by
    default as many fit as the width allows. `vrange` shares a heat scale across tables.
    """
    array = np.asarray(array2d)
    if array.ndim != 2:
        raise ValueError(f"matrix_table needs a 2-D array, got shape {array.shape}")
    if array.dtype.kind == "b":
        array = array.astype(np.int8)  # a mask reads better as 1/0 than True/False
    budget = max(width or DEFAULT_WIDTH, 20)
    n_rows, n_cols = array.shape

    rows, row_cut = head_tail(n_rows, n_rows if full else max_rows)
    row_names = [label_text(lab, LABEL_MAX) for lab in _labels(row_labels, n_rows)]
    row_names = [row_names[i] for i in rows]
    if corner is None:
        corner = f"{dims[-2]}\\{dims[-1]}" if dims is not None and len(dims) >= 2 else ""
    label_width = max([t.cell_len for t in row_names] + [1, len(corner)])
    label_width = min(label_width, LABEL_MAX)
    col_names = [label_text(lab, HEADER_MAX) for lab in _labels(col_labels, n_cols)]
    layout = _Layout(array, rows, row_cut, row_names, label_width, col_names, precision,
                     needs_sci(array[rows], precision))
    cols, col_cut, widths = _fit_columns(layout, budget, max_cols, full)
    scale = heat_scale(array, center, vrange) if heat else None

    heading = _title(title, dims, shape or array.shape)
    note = _cut_note(len(rows), n_rows, len(cols), n_cols)
    if not full or _fits(cols, widths, label_width, budget):
        return _build(layout, cols, col_cut, widths, scale, corner,
                      _one_line(heading, budget, "bold"), note and _one_line(note, budget))
    # --full and too wide: one table per run of columns, stacked under one title
    outer = Table.grid()
    outer.title, outer.title_justify, outer.title_style = _one_line(heading, budget), "left", "bold"
    for block in _blocks(cols, widths, label_width, budget):
        caption = _one_line(f"columns {block[0]}-{block[-1]} of {n_cols}", budget)
        outer.add_row(_build(layout, block, None, widths, scale, corner, None, caption))
    return outer


def columns_that_fit(array2d, width: int, precision: int = 3,
                     row_labels: Sequence | None = None) -> int:
    """How many columns matrix_table shows of this matrix at this width (head and tail):
    views pass the smallest to tables that should cut the same columns."""
    table = matrix_table(array2d, title="", row_labels=row_labels, precision=precision,
                         width=width)
    return sum(1 for col in table.columns[1:] if col.header.plain.strip() != CUT_COL)


def _fits(cols: list[int], widths: dict[int, int], label_width: int, budget: int) -> bool:
    return label_width + 2 + sum(1 + widths[j] + 2 for j in cols) <= budget


def _title(title: str, dims: Sequence[str] | None, shape: Sequence[int]) -> str:
    shape_text = "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    if dims:
        return f"{title}  ({', '.join(dims)}) = {shape_text}"
    return f"{title}  {shape_text}"


def _cut_note(shown_rows: int, n_rows: int, shown_cols: int, n_cols: int) -> str | None:
    parts = []
    if shown_rows < n_rows:
        parts.append(f"{shown_rows} of {n_rows} rows")
    if shown_cols < n_cols:
        parts.append(f"{shown_cols} of {n_cols} columns")
    if not parts:
        return None
    return "showing " + ", ".join(parts) + " (--full shows all)"


def vector_table(array1d, *, title: str, labels: Sequence | None = None, precision: int = 3,
                 full: bool = False, heat: bool = True, max_rows: int = 12,
                 center: float | None = None, vrange: tuple[float, float] | None = None,
                 dims: Sequence[str] | None = None, shape: Sequence[int] | None = None,
                 value_label: str = "value", width: int | None = None) -> Table:
    """A 1-D array as a column of values, one labelled row per entry."""
    array = np.asarray(array1d)
    if array.ndim != 1:
        raise ValueError(f"vector_table needs a 1-D array, got shape {array.shape}")
    corner = dims[-1] if dims else ""
    return matrix_table(array[:, None], title=title, row_labels=labels, col_labels=[value_label],
                        precision=precision, full=full, heat=heat, max_rows=max_rows,
                        center=center, vrange=vrange, dims=dims, shape=shape or array.shape,
                        corner=corner, width=width)


class TensorView:
    """One recorded tensor as Rich tables, fitted to the console's width: a vector, a
    matrix, or one matrix per leading index (per head) on one shared heat scale.

    Rows and columns are labelled per dim letter from `axes` (T: the query tokens, S: the
    key tokens, which differ in cross-attention); `heads` names the H slices (the model's
    head numbers when --head picked one). Every matrix view of every command is one of
    these; a blank line goes before each table.
    """

    def __init__(self, name: str, array, dims: Sequence[str], *,
                 axes: Mapping[str, Sequence[str] | None] | None = None, precision: int = 3,
                 full: bool = False, max_slices: int = MAX_SLICES, title: str | None = None,
                 heat: bool = True, heads: Sequence[int] | None = None,
                 max_cols: int | None = None):
        self.name, self.array, self.dims = name, np.asarray(array), tuple(dims)
        self.axes, self.precision, self.full = axes or {}, precision, full
        self.max_slices, self.title, self.heat, self.heads = max_slices, title, heat, heads
        self.max_cols = max_cols

    def parts(self, width: int) -> list:
        array, dims, title = self.array, self.dims, self.title or self.name
        common = dict(precision=self.precision, full=self.full, dims=dims, shape=array.shape,
                      width=width, heat=self.heat)
        if array.ndim >= 2:
            common["max_cols"] = self.max_cols
        if array.ndim == 0:
            return [Text(f"{title}  () = {format_number(array.item(), self.precision)}")]
        if array.ndim == 1:
            return [vector_table(array, title=title,
                                 labels=axis_labels(dims[0], len(array), self.axes), **common)]
        rows = axis_labels(dims[-2], array.shape[-2], self.axes)
        cols = axis_labels(dims[-1], array.shape[-1], self.axes)
        if array.ndim == 2:
            return [matrix_table(array, title=title, row_labels=rows, col_labels=cols,
                                 **common)]
        # (H, T, S) and the like: one table per leading index, all on one heat scale
        vrange = finite_range(array) if array.dtype.kind == "f" else None
        indices = list(np.ndindex(array.shape[:-2]))
        shown = indices if self.full else indices[:self.max_slices]
        out: list = []
        for index in shown:
            out.append(matrix_table(array[index], title=f"{title} {self._slice(index)}",
                                    row_labels=rows, col_labels=cols, vrange=vrange, **common))
        if len(shown) < len(indices):
            rest = len(indices) - len(shown)
            heads = dims[0] == "H" and array.ndim == 3
            hint = "--head H picks one, --full shows all" if heads else "--full shows all"
            out.append(Text(f"… {counted(rest, 'more head' if heads else 'more slice')} of "
                            f"{self.name} ({hint})", style="dim"))
        return out

    def _slice(self, index: tuple[int, ...]) -> str:
        if self.dims[0] == "H" and len(index) == 1:
            head = self.heads[index[0]] if self.heads is not None else index[0]
            return f"head {head}"
        return ", ".join(f"{d}={i}" for d, i in zip(self.dims, index))

    def __rich_console__(self, console, options):
        for part in self.parts(options.max_width):
            if isinstance(part, Table):
                yield Text("")  # a blank line before each table, not before a note
            yield part
