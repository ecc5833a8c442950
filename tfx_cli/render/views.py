"""Terminal views: one function per result type, looked up by `Result.view or command`.

A view draws one Result on a Console; it never computes anything the JSON lacks. Views of
particular commands live in their own modules (`view_tokenize.py`, ...) and register
themselves with `@register(name)`; VIEW_HOMES says which module holds which view, and
`render` imports only the one it needs (numpy and the matrix code load only for views that
draw arrays, so `count-params` and `tokenize` start fast). A result without a view of its
own gets `generic_view`: a header, its scalars, and every tensor as labelled tables.

The small helpers below (`header`, `kv_table`, `shapes_table`, `tensor_tables`) are shared
by all views, so every command's output reads alike.
"""
from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.trace import Result, Trace, compile_globs, is_ndarray
from ..words import counted
from .emit import ViewOptions

if TYPE_CHECKING:
    import numpy as np

View = Callable[[Result, Console, ViewOptions], None]
VIEWS: dict[str, View] = {}

MAX_SLICES = 3      # heads (or other leading slices) shown before "--full shows all"
MAX_LIST = 16       # longer lists in `result` are left to --json
TOKEN_DIMS = ("T", "S")  # dims whose positions are the input tokens


def register(name: str) -> Callable[[View], View]:
    """Decorator: `@register("tokenize")` makes the function the view for that name."""

    def add(view: View) -> View:
        VIEWS[name] = view
        return view

    return add


def find_view(name: str | None) -> View | None:
    """The view registered as `name`, importing the module that holds it first."""
    if not name:
        return None
    if name not in VIEWS and name in VIEW_HOMES:
        _import_view_module(VIEW_HOMES[name])
    return VIEWS.get(name)


def render(result: Result, console: Console, opts: ViewOptions) -> None:
    view = find_view(result.view) or find_view(result.command) or generic_view
    view(result, console, opts)


# ---------------------------------------------------------------- shared helpers

def header(console: Console, result: Result) -> None:
    """Two lines: what ran on which model (and weights or seed), then the input text."""
    model = result.model or {}
    line = Text(f"tfx {result.command}", style="bold")
    name = model.get("name") or model.get("config")
    if name:
        line.append(f" · {name}")
    if model.get("weights"):
        line.append(f" · weights {model['weights']}")
    elif "seed" in model:
        line.append(f" · random weights, seed {model['seed']}")
    console.print(line, no_wrap=True, overflow="ellipsis")
    data = result.input or {}
    if data.get("text") is not None:
        text = Text("text: ", style="dim") + Text(repr(data["text"]))
        tokens = data.get("tokens")
        if tokens is not None:
            text.append(f" ({counted(len(tokens), 'token')})", style="dim")
        console.print(text, no_wrap=True, overflow="ellipsis")


def format_value(value, precision: int = 3) -> str:
    """A scalar (or short list) as a table cell: ints with thousands separators."""
    np = sys.modules.get("numpy")  # no numpy value can exist before numpy is imported
    if np is not None and isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{int(value):,}"
    if isinstance(value, float):
        from .matrix import format_number

        return format_number(value, precision)
    if is_ndarray(value):
        if value.ndim == 0:
            return format_value(value.item(), precision)
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        items = [format_value(v, precision) for v in value[:MAX_LIST]]
        more = f", … ({len(value)} items)" if len(value) > MAX_LIST else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={format_value(v, precision)}" for k, v in value.items())
    return str(value)


def kv_table(items: dict, *, title: str | None = None, precision: int = 3) -> Table:
    """Key | value, two columns; values shown literally (no markup)."""
    table = Table(title=Text(title, style="bold") if title else None, show_header=False,
                  box=None, title_justify="left", padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in items.items():
        table.add_row(Text(str(key)), Text(format_value(value, precision)))
    return table


def dims_text(dims: Sequence[str]) -> str:
    return "(" + ", ".join(dims) + ")"


def shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def shapes_table(trace: Trace, *, title: str | None = "shapes") -> Table:
    """Name | dims | shape for every tensor, in forward-pass order (no data is read)."""
    table = Table(title=Text(title, style="bold") if title else None, title_justify="left",
                  box=None, padding=(0, 1), header_style="dim")
    table.add_column("name", no_wrap=True, overflow="fold")
    table.add_column("dims", no_wrap=True)
    table.add_column("shape", justify="right", no_wrap=True)
    for name in trace.names():
        table.add_row(Text(name), dims_text(trace.dims(name)), shape_text(trace.shape(name)))
    return table


def axis_labels(dim: str, size: int, tokens: Sequence[str] | None) -> list | None:
    """Token strings along T and S axes (when they match the length), else positions."""
    if dim in TOKEN_DIMS and tokens is not None and len(tokens) == size:
        return list(tokens)
    return None


def _slice_name(dims: Sequence[str], index: tuple[int, ...]) -> str:
    parts = [("head " if d == "H" else f"{d}=") + str(i) for d, i in zip(dims, index)]
    return ", ".join(parts)


def tensor_tables(name: str, array: np.ndarray, dims: Sequence[str], opts: ViewOptions, *,
                  tokens: Sequence[str] | None = None, width: int | None = None,
                  max_slices: int = MAX_SLICES) -> list:
    """Renderables for one tensor: a vector or matrix table, or one matrix per slice of
    the leading dims (heads first) up to `max_slices` unless `opts.full`."""
    import numpy as np

    from .matrix import finite_range, format_number, matrix_table, vector_table

    array = np.asarray(array)
    dims = tuple(dims)
    common = dict(precision=opts.precision, full=opts.full, dims=dims, shape=array.shape,
                  width=width)
    if array.ndim == 0:
        return [Text(f"{name}  () = {format_number(array.item(), opts.precision)}")]
    if array.ndim == 1:
        return [vector_table(array, title=name, labels=axis_labels(dims[0], len(array), tokens),
                             **common)]
    rows = axis_labels(dims[-2], array.shape[-2], tokens)
    cols = axis_labels(dims[-1], array.shape[-1], tokens)
    if array.ndim == 2:
        return [matrix_table(array, title=name, row_labels=rows, col_labels=cols, **common)]
    # (H, T, S) and the like: one table per leading index, all on one heat scale
    vrange = finite_range(array) if array.dtype.kind == "f" else None
    indices = list(np.ndindex(array.shape[:-2]))
    shown = indices if opts.full else indices[:max_slices]
    out: list = []
    for index in shown:
        out.append(matrix_table(array[index], title=f"{name} {_slice_name(dims, index)}",
                                row_labels=rows, col_labels=cols, vrange=vrange, **common))
    if len(shown) < len(indices):
        rest = len(indices) - len(shown)
        what = "head" if dims[0] == "H" and array.ndim == 3 else "slice"
        out.append(Text(f"… {counted(rest, 'more ' + what)} of {name} (--full shows all)",
                        style="dim"))
    return out


def selected(trace: Trace, globs: Iterable[str]) -> list[str]:
    """Names to draw: all, or those matching `opts.show` globs."""
    globs = list(globs)
    if not globs:
        return trace.names()
    rx = compile_globs(globs)
    return [name for name in trace.names() if rx.match(name)]


def scalars(result: dict) -> dict:
    """The entries of `result` worth a row: no long or nested lists (those are for --json)."""
    out = {}
    for key, value in result.items():
        if is_ndarray(value):
            value = value.tolist() if value.size <= MAX_LIST else None
            if value is None:
                continue
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_LIST or any(isinstance(v, (list, tuple, dict)) for v in value):
                continue
        if isinstance(value, dict) and (len(value) > MAX_LIST or any(
                isinstance(v, (list, tuple, dict)) or is_ndarray(v) for v in value.values())):
            continue
        out[key] = value
    return out


# ---------------------------------------------------------------- the fallback view

def generic_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    values = scalars(result.result or {})
    if values:
        console.print()
        console.print(kv_table(values, precision=opts.precision))
    tokens = (result.input or {}).get("tokens")
    for name in selected(result.tensors, opts.show):
        array, dims = result.tensors.array(name), result.tensors.dims(name)
        parts = tensor_tables(name, array, dims, opts, tokens=tokens, width=console.width)
        for k, part in enumerate(parts):
            if k == 0 or isinstance(part, Table):
                console.print()  # a blank line before each tensor and table, not a note
            console.print(part)


# ---------------------------------------------------------------- command views

VIEW_MODULES = ["view_tokenize", "view_params", "view_stages", "view_generate"]

# view name -> the module that registers it (a test keeps this equal to what they register)
VIEW_HOMES = {
    "tokenize": "view_tokenize",
    "count-params": "view_params", "configs": "view_params",
    "embed": "view_stages", "posenc": "view_stages", "attend": "view_stages",
    "layernorm": "view_stages", "ffn": "view_stages", "trace": "view_stages",
    "generate": "view_generate", "next": "view_generate", "lens": "view_generate",
}


def _import_view_module(name: str) -> None:
    # Each module registers its views on import. A module not written yet is skipped;
    # any other import error inside one is a real bug and must surface.
    qualified = f"{__package__}.{name}"
    try:
        importlib.import_module(qualified)
    except ModuleNotFoundError as exc:
        if exc.name != qualified:
            raise


def _load_view_modules() -> None:
    """Import every view module (tests and tools that want the whole registry)."""
    for name in VIEW_MODULES:
        _import_view_module(name)
