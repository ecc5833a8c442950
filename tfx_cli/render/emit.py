"""The only place that writes stdout. Warnings and progress go to stderr.

`emit(result, json=True)` prints the tfx/1 envelope; otherwise the result's view draws
Rich tables. Rich already honours NO_COLOR and drops colour when stdout is not a terminal.
Rich's console is imported only when something is drawn: `--json` output never loads it.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.results import Result


def stdout_console() -> Console:
    from rich.console import Console

    class _StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            # Rich would exit 1 here; hand the closed pipe to cli.py, which stops quietly
            # with 0 (`tfx attend ... | head` is a reader that has seen enough, not a
            # failure)
            self.quiet = True
            raise BrokenPipeError

    # emoji=False: ":name:" in a token stays text (and Rich skips loading its emoji table)
    return _StdoutConsole(highlight=False, soft_wrap=False, emoji=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)


def emit(result: Result, *, json: bool = False, precision: int = 3, full: bool = False,
         values: bool = False, console: Console | None = None) -> None:
    if json:
        from .jsonout import dumps

        text = dumps(result)  # built whole before writing: never half a document
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    from .views import ViewOptions, render

    render(result, console or stdout_console(),
           ViewOptions(precision=precision, full=full, values=values))


def warn(message: str) -> None:
    from rich.text import Text

    from .common import terminal_text

    stderr_console().print(Text("tfx: warning: ", style="yellow") + Text(terminal_text(message)),
                           soft_wrap=True)  # one line, like an error


def info(message: str) -> None:
    from .common import terminal_text

    if not os.environ.get("TFX_QUIET"):
        # one line, however wide the terminal: a note is read, and grepped, whole
        stderr_console().print(terminal_text(message), markup=False, soft_wrap=True)


@contextmanager
def progress(description: str, *, total: int | None = None, unit: str | None = None):
    """A stderr spinner/bar for long work; yields update(fraction, text). With `total`
    (a corpus's documents), a counted bar: update(done, tokens) draws done/total, the
    tokens read, tokens/s and the time left."""
    console = stderr_console()
    if not console.is_terminal:  # one line, no bar (TFX_QUIET: not even that)
        if not os.environ.get("TFX_QUIET"):
            console.print(f"{description} ...", markup=False)
        yield lambda fraction=None, text=None: None
        return
    if total is not None:
        with _counted(console, description, total, unit or "") as update:
            yield update
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=1.0)

        def update(fraction=None, text=None):
            bar.update(task, completed=fraction if fraction is not None else None,
                       description=text or description)

        yield update


@contextmanager
def _counted(console, description: str, total: int, unit: str):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                               TextColumn, TimeRemainingColumn)
    from rich.text import Text

    class Tokens(ProgressColumn):
        def render(self, task) -> Text:
            tokens = task.fields.get("tokens")
            if tokens is None:  # a count of other things (a graph's rows): no tokens
                return Text("")
            elapsed = task.elapsed or 0.0
            rate = f" · {tokens / elapsed:,.0f} tokens/s" if elapsed > 0.5 else ""
            return Text(f"{tokens:,} tokens{rate}")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn(unit), Tokens(), TimeRemainingColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task(description, total=total, tokens=None)

        def update(done=None, tokens=None):
            bar.update(task, completed=done, tokens=tokens)

        yield update
