"""HTML pictures a result is drawn with in a notebook: heat maps, bar charts, token
strips and tables. Plain HTML and inline SVG or PNG (a data: URI), styled inline: no
script, nothing fetched, so a notebook shows them as they were saved, trusted or not.

A heat map of a few dozen rows and columns is an HTML table whose cells are shaded and
say their value on hover (and inside, when small); a larger one is a PNG of one pixel
per cell, drawn bigger, with its rows labelled beside it. Colours are the terminal's
and the report's: viridis for values of one sign, blue-grey-red around 0.
"""
from __future__ import annotations

import base64
import html
import math
import struct
import zlib
from typing import Sequence

import numpy as np

from ..common import finite_range, head_tail

VIRIDIS = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)),
           (0.75, (94, 201, 98)), (1.0, (253, 231, 37)))
DIVERGING = ((0.0, (59, 76, 192)), (0.25, (141, 176, 254)), (0.5, (221, 221, 221)),
             (0.75, (244, 154, 123)), (1.0, (180, 4, 38)))
TABLE_MAX = 48  # rows or columns a heat map table shows (head and tail) before a picture
IMAGE_MAX = 1024  # rows or columns a picture shows (head and tail)
LABEL = 14  # characters of a label

STYLE = """<style>
.tfx-result{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d232b}
.tfx-result h4{margin:10px 0 4px;font-size:13px}
.tfx-result .tfx-note{color:#5b6573;margin:2px 0 6px}
.tfx-result table{border-collapse:collapse;margin:2px 0 8px}
.tfx-result table.tfx-kv td{padding:0 10px 0 0;border:none;text-align:left}
.tfx-result table.tfx-kv td:first-child{color:#5b6573}
.tfx-result table.tfx-heat td{min-width:14px;height:14px;padding:0 3px;font-size:10px;
 text-align:right;border:1px solid #fff;font-variant-numeric:tabular-nums}
.tfx-result table.tfx-heat th,.tfx-result table.tfx-rows th{font-weight:normal;
 font-family:ui-monospace,monospace;font-size:11px;padding:0 4px;white-space:pre;color:#333}
.tfx-result table.tfx-rows td,.tfx-result table.tfx-rows th{border-bottom:1px solid #e4e7eb;
 padding:1px 8px;text-align:right;white-space:pre;font-variant-numeric:tabular-nums}
.tfx-result .tfx-chips{display:flex;flex-wrap:wrap;gap:3px;margin:4px 0 8px}
.tfx-result .tfx-tok{border:1px solid #d9dee5;border-radius:4px;padding:0 5px;
 font-family:ui-monospace,monospace;white-space:pre;background:#fff}
.tfx-result .tfx-tok sub{color:#5b6573;font-size:9px;margin-right:2px}
.tfx-result .tfx-grid{display:flex;flex-wrap:wrap;gap:10px}
.tfx-result .tfx-changed{color:#a15c00;font-weight:bold}
</style>"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def cut(text: str, limit: int = LABEL) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- colour -----------------------------------------------------------------------------
def _rgb(stops, t: float) -> tuple[int, int, int]:
    t = min(max(t, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if t <= b:
            u = (t - a) / (b - a)
            return tuple(round(x + u * (y - x)) for x, y in zip(ca, cb))
    return stops[-1][1]


class Scale:
    """A value -> colour map: diverging around 0 for signed values, else viridis over
    [lo, hi] ([0, 1] for probabilities, so two maps compare by colour)."""

    def __init__(self, values, vrange: tuple[float, float] | None = None):
        lo, hi = vrange or finite_range(np.asarray(values)) or (0.0, 1.0)
        self.diverging = lo < 0.0 < hi
        if self.diverging:
            bound = max(-lo, hi)
            lo, hi = -bound, bound
        elif 0.0 <= lo and hi <= 1.0 and vrange is None:
            lo, hi = 0.0, 1.0
        self.lo, self.hi = lo, hi if hi > lo else lo + 1.0

    def fraction(self, x: float) -> float:
        return (x - self.lo) / (self.hi - self.lo)

    def rgb(self, x: float) -> tuple[int, int, int]:
        return _rgb(DIVERGING if self.diverging else VIRIDIS, self.fraction(x))

    def css(self, x: float) -> str:
        if not math.isfinite(x):
            return "background:#f3f3f3;color:#999"
        r, g, b = self.rgb(x)
        ink = "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#fff"
        return f"background:rgb({r},{g},{b});color:{ink}"


def number(x: float, digits: int = 3) -> str:
    if not math.isfinite(x):
        return "−inf" if x < 0 else "inf" if x > 0 else "nan"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 10 ** -digits):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}f}"


# -- pieces ------------------------------------------------------------------------------
def kv(items: dict) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in items.items()
                   if v is not None)
    return f'<table class="tfx-kv">{rows}</table>' if rows else ""


def token_strip(tokens: Sequence[str], ids: Sequence[int] | None = None,
                shades: Sequence[str | None] | None = None,
                notes: Sequence[str] | None = None) -> str:
    """The tokens as chips, numbered; `shades` a CSS style per token, `notes` hover text."""
    chips = []
    for i, token in enumerate(tokens):
        title = f"position {i}" + (f" · id {ids[i]}" if ids is not None and i < len(ids)
                                   else "") + (f" · {notes[i]}" if notes else "")
        style = f' style="{shades[i]}"' if shades and shades[i] else ""
        chips.append(f'<span class="tfx-tok" title="{esc(title)}"{style}><sub>{i}</sub>'
                     f"{esc(token)}</span>")
    return f'<div class="tfx-chips">{"".join(chips)}</div>'


def rows_table(headers: Sequence[str], rows: Sequence[Sequence], *,
               styles: Sequence[Sequence[str | None]] | None = None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, value in enumerate(row):
            style = styles[r][c] if styles and styles[r][c] else None
            cells.append(f'<td style="{style}">{esc(value)}</td>' if style
                         else f"<td>{esc(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="tfx-rows"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def heatmap(array, rows: Sequence[str] | None = None, cols: Sequence[str] | None = None, *,
            title: str = "", values: bool | None = None, vrange=None,
            scale: Scale | None = None) -> str:
    """A 2-D array as a shaded HTML table (small) or a PNG picture (large)."""
    array = np.asarray(array, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    n_rows, n_cols = array.shape
    rows = list(rows) if rows is not None and len(rows) == n_rows else \
        [str(i) for i in range(n_rows)]
    cols = list(cols) if cols is not None and len(cols) == n_cols else \
        [str(j) for j in range(n_cols)]
    scale = scale or Scale(array, vrange)
    caption = f"<h4>{esc(title)} <span class='tfx-note'>{n_rows} × {n_cols}</span></h4>" \
        if title else ""
    if n_rows > TABLE_MAX or n_cols > TABLE_MAX:
        return caption + _picture(array, rows, scale)
    show = n_cols <= 16 if values is None else values
    head = "".join(f'<th title="{esc(c)}">{esc(cut(c, 8))}</th>' for c in cols)
    body = []
    for i in range(n_rows):
        cells = "".join(
            f'<td style="{scale.css(array[i, j])}" title="{esc(rows[i])} · {esc(cols[j])}: '
            f'{number(array[i, j], 4)}">{number(array[i, j], 2) if show else ""}</td>'
            for j in range(n_cols))
        body.append(f'<tr><th title="{esc(rows[i])}">{esc(cut(rows[i]))}</th>{cells}</tr>')
    return (f'{caption}<table class="tfx-heat"><thead><tr><th></th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _picture(array: np.ndarray, rows: list[str], scale: Scale) -> str:
    """A large matrix as a PNG, one pixel per cell (head and tail past IMAGE_MAX)."""
    keep_r, _ = head_tail(array.shape[0], IMAGE_MAX)
    keep_c, _ = head_tail(array.shape[1], IMAGE_MAX)
    shown = array[np.ix_(keep_r, keep_c)]
    stops = DIVERGING if scale.diverging else VIRIDIS
    lut = np.array([_rgb(stops, i / 255) for i in range(256)], dtype=np.uint8)
    level = np.clip(np.nan_to_num((shown - scale.lo) / (scale.hi - scale.lo), nan=0.0),
                    0.0, 1.0)
    rgb = lut[np.rint(level * 255).astype(np.int64)]
    rgb[~np.isfinite(shown)] = (243, 243, 243)
    px = max(1, min(14, 360 // max(len(keep_r), 1)))
    width = min(900, max(120, len(keep_c) * max(1, min(14, 900 // max(len(keep_c), 1)))))
    labels = "<br>".join(esc(cut(rows[i])) for i in keep_r) if px >= 10 else ""
    side = (f'<div style="font:10px/{px}px ui-monospace,monospace;text-align:right;'
            f'padding-right:4px;white-space:pre">{labels}</div>') if labels else ""
    return (f'<div style="display:flex;align-items:flex-start">{side}'
            f'<img alt="heat map" src="data:image/png;base64,{png_base64(rgb)}" '
            f'style="width:{width}px;height:{px * len(keep_r)}px;image-rendering:pixelated">'
            "</div>")


def png_base64(rgb: np.ndarray) -> str:
    """An (H, W, 3) uint8 array as a base64 PNG (no library: zlib and the PNG chunks)."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode("ascii")


def bars(names: Sequence[str], values: Sequence[float], *, title: str = "",
         width: int = 560) -> str:
    """Horizontal bars around a zero axis, one per name, as inline SVG."""
    n = len(values)
    row, label_w = 16, 8 * min(LABEL + 4, max((len(s) for s in names), default=4)) + 10
    biggest = max((abs(v) for v in values if math.isfinite(v)), default=0.0) or 1.0
    span = (width - label_w - 70) / 2
    zero = label_w + span
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{row * n + 8}" font-family="ui-monospace,monospace" font-size="11">',
             f'<line x1="{zero}" y1="0" x2="{zero}" y2="{row * n + 8}" stroke="#999"/>']
    for i, (name, v) in enumerate(zip(names, values)):
        y = 4 + i * row
        length = span * abs(v) / biggest if math.isfinite(v) else 0.0
        x = zero if v >= 0 else zero - length
        colour = "#2a9d5c" if v >= 0 else "#c0392b"
        parts.append(f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">'
                     f"{esc(cut(name, LABEL + 6))}</text>")
        parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{length:.1f}" height="{row - 4}" '
                     f'fill="{colour}"><title>{esc(name)}: {number(v, 4)}</title></rect>')
        parts.append(f'<text x="{zero + span + 6:.1f}" y="{y + 11}">{number(v, 3)}</text>')
    parts.append("</svg>")
    caption = f"<h4>{esc(title)}</h4>" if title else ""
    return caption + "".join(parts)


def panel(inner: str) -> str:
    return f'<div class="tfx-result">{STYLE}{inner}</div>'


__all__ = ["heatmap", "bars", "token_strip", "rows_table", "kv", "panel", "Scale", "esc",
           "number", "png_base64", "cut"]
