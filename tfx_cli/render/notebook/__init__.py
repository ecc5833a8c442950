"""How a result shows itself outside the command line: `result._repr_html_()` in a
notebook (the pictures of `--plot` and the report, as HTML: heat maps, bar charts, token
strips, tables; inline, no script, nothing fetched) and `result.__rich__()` in a Rich
console (the terminal view).

core/results defines both methods and calls the drawers that tfx_cli.api registers when
it is imported (core never imports render); they import this package only when a result
is shown. pictures.py draws (heat maps, bars, token strips), pages.py holds one drawing
per command. May import: numpy, rich (for the terminal view), render's other modules.
"""
from __future__ import annotations


def result_html(result) -> str:
    """The result as one HTML fragment: its command's drawing, or every tensor."""
    from .pages import PAGES
    from .pictures import panel

    draw = PAGES.get(result.command) or PAGES["generic"]
    return panel(draw(result))


class ResultView:
    """A Rich renderable of a result: its terminal view, drawn at the console's width."""

    def __init__(self, result, precision: int = 3, full: bool = False):
        self.result, self.precision, self.full = result, precision, full

    def __rich_console__(self, console, options):
        import io

        from rich.console import Console
        from rich.text import Text

        from ..views import ViewOptions, render

        inner = Console(width=options.max_width, file=io.StringIO(), force_terminal=True,
                        color_system="truecolor", highlight=False, emoji=False,
                        force_jupyter=False, legacy_windows=False)
        with inner.capture() as captured:
            render(self.result, inner, ViewOptions(precision=self.precision, full=self.full))
        yield Text.from_ansi(captured.get().rstrip("\n"))


def result_rich(result) -> ResultView:
    return ResultView(result)


__all__ = ["result_html", "result_rich", "ResultView"]
