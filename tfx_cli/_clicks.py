"""Click's exception classes, from every copy that may be in play.

Typer 0.29 raises errors from its own bundled Click (`typer._click`); older Typer uses the
`click` package. The error handler in cli.py must catch both, so a bad option is always a
one-line usage error with exit 2, never an "internal error".
"""
import importlib


def _modules():
    found = []
    for name in ("typer._click", "click"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


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
