"""Click's exception classes, from every copy that may be in play.

Typer 0.26+ raises errors from its own bundled Click (`typer._click`); older Typer uses the
`click` package. The error handler in cli.py must catch both, so a bad option is always a
one-line usage error with exit 2, never an "internal error". A copy that is not imported
by the time this module loads (after `import typer`) cannot raise anything, so it is not
imported here: loading `click` for nothing cost ~15 ms of every start-up.
"""
import sys

import typer  # noqa: F401 - loads whichever Click copy this Typer uses


def _modules():
    names = ("typer.exceptions", "typer._click", "click")  # Typer 0.26+ has its own Exit
    return [sys.modules[name] for name in names if name in sys.modules]


def _classes(attr: str) -> tuple:
    out = []
    for module in _modules():
        exceptions = getattr(module, "exceptions", module)
        cls = getattr(exceptions, attr, None) or getattr(module, attr, None)
        if cls is not None and cls not in out:
            out.append(cls)
    return tuple(out)


NO_ARGS_HELP = _classes("NoArgsIsHelpError")
USAGE_ERROR = _classes("UsageError")
CLICK_ERROR = _classes("ClickException")
ABORT = _classes("Abort")
EXIT = _classes("Exit")
