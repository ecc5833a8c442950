"""Terminal views: one function per command, found through tfx_cli/registry.py.

A view draws one typed result on a Console, reading its attributes; it computes nothing
the JSON lacks. Views of particular commands live in their own modules (`stages.py`,
`generate.py`, ...) and register themselves with `@register(name)`; `render` imports only the module the
registry names for the result's command (numpy and the matrix code load only for views
that draw arrays, so `count-params` and `tokenize` start fast). A command without a view
of its own gets `generic_view`: a header, its scalars, and every tensor as tables.

The small helpers below (`header`, `kv_table`, `shapes_table`) are shared by all views,
so every command's output reads alike; every matrix is a `matrix.TensorView`.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.trace import Trace, is_ndarray
from ...words import counted
from ..common import quoted, terminal_text

if TYPE_CHECKING:
    from ...core.results import Result

@dataclass(frozen=True)
class ViewOptions:
    """How a terminal view draws (never what it shows: that is the result's)."""

    precision: int = 3  # decimals in tables
    full: bool = False  # whole matrices and lists, not head and tail
    values: bool = False  # trace: print every recorded tensor, not only the tree


View = Callable[["Result", Console, ViewOptions], None]
VIEWS: dict[str, View] = {}

MAX_LIST = 16       # longer lists in a result are left to --json


def register(name: str) -> Callable[[View], View]:
    """Decorator: `@register("tokenize")` makes the function the view for that command."""

    def add(view: View) -> View:
        VIEWS[name] = view
        return view

    return add


def find_view(command: str) -> View | None:
    """The view registered for `command`, importing the module the registry names."""
    from ...registry import find

    entry = find(command)
    if command not in VIEWS and entry is not None and entry.view is not None:
        importlib.import_module(f"{__package__}.{entry.view}")
    return VIEWS.get(command)


def render(result: Result, console: Console, opts: ViewOptions) -> None:
    view = find_view(result.command) or generic_view
    view(result, console, opts)


# ---------------------------------------------------------------- shared helpers

def header(console: Console, result: Result) -> None:
    """Two lines: what ran on which model (and weights or seed), then the input text."""
    line = Text(f"tfx {result.command}", style="bold")
    model = result.model
    if model is not None:
        line.append(f" · {terminal_text(model.name)}")
        if model.weights:
            line.append(f" · weights {terminal_text(model.weights)}")
        elif model.seed is not None:
            line.append(f" · random weights, seed {model.seed}")
    console.print(line, no_wrap=True, overflow="ellipsis")
    data = result.input
    if data is not None and data.text is not None:
        text = Text("text: ", style="dim") + Text(quoted(data.text))
        text.append(f" ({counted(len(data.tokens), 'token')})", style="dim")
        console.print(text, no_wrap=True, overflow="ellipsis")
    if data is not None and data.target is not None:  # an encoder–decoder's decoder input
        text = Text("target: ", style="dim") + Text(quoted(" ".join(data.target.tokens)))
        text.append(f" ({counted(len(data.target.tokens), 'token')}, start token first)",
                    style="dim")
        if getattr(result, "stack", None):
            text.append(f" · showing the {result.stack}", style="dim")
        console.print(text, no_wrap=True, overflow="ellipsis")
    changes = getattr(result, "interventions", None)
    if changes:
        from ..common import intervention_text

        line = Text("changed: ", style="dim") + Text(terminal_text(
            "; ".join(intervention_text(c) for c in changes)), style="bold yellow")
        console.print(line, overflow="fold")


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
        from ..matrix import format_number

        # like a table column: scientific where fixed decimals would show 0.000 or run long
        sci = 0 < abs(value) < 0.5 * 10.0 ** -precision or abs(value) >= 1e6
        return format_number(value, precision, sci=sci)
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


MAX_VALUE = 600  # characters of one value shown before "--full shows all"


def cut_text(text: str, full: bool = False, limit: int = MAX_VALUE) -> str:
    """A long value cut to its head and tail, saying how much was left out."""
    if full or len(text) <= limit:
        return text
    keep = limit // 2
    return (f"{text[:keep]} … [{len(text) - 2 * keep:,} more characters; --full shows all] "
            f"… {text[-keep:]}")


def kv_table(items: dict, *, title: str | None = None, precision: int = 3,
             full: bool = False) -> Table:
    """Key | value, two columns; values shown literally (no markup, no terminal control
    characters) and long ones cut unless `full`."""
    table = Table(title=Text(title, style="bold") if title else None, show_header=False,
                  box=None, title_justify="left", padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in items.items():
        shown = terminal_text(cut_text(format_value(value, precision), full))
        table.add_row(Text(terminal_text(str(key))), Text(shown))
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


def scalars(items: dict) -> dict:
    """The entries worth a row: no long or nested lists (those are for --json)."""
    out = {}
    for key, value in items.items():
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_LIST or any(isinstance(v, (list, tuple, dict)) for v in value):
                continue
        if isinstance(value, dict) and (len(value) > MAX_LIST or any(
                isinstance(v, (list, tuple, dict)) for v in value.values())):
            continue
        out[key] = value
    return out


def print_tensors(console: Console, result: Result, opts: ViewOptions,
                  names: Sequence[str] | None = None, **kw) -> None:
    """Every named tensor (all by default) as a TensorView labelled with the tokens."""
    from ..common import token_axes
    from ..matrix import TensorView

    trace = result.tensors
    for name in trace.names() if names is None else names:
        console.print(TensorView(name, trace.array(name), trace.dims(name),
                                 axes=token_axes(result, name=name),
                                 precision=opts.precision, full=opts.full, **kw))


# ---------------------------------------------------------------- the fallback view

def generic_view(result: Result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    values = scalars(result.result_json())
    if values:
        console.print()
        console.print(kv_table(values, precision=opts.precision))
    print_tensors(console, result, opts)
