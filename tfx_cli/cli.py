"""The Typer app: registers the commands, the global options and the one error handler.

Importing this module must stay cheap (no torch): commands import the core lazily.
"""
import os
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ._clicks import ABORT, CLICK_ERROR, EXIT, NO_ARGS_HELP, USAGE_ERROR

from . import __version__
from .errors import Interrupted, TfxError

DEBUG = {"on": bool(os.environ.get("TFX_DEBUG"))}


def _fail(message: str, code: int) -> None:
    try:
        sys.stderr.write(f"tfx: error: {' '.join(message.split())}\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    sys.exit(code)


def _quiet_broken_pipe() -> None:
    # The reader went away (`tfx trace --json | head -c 100`): stop quietly, and keep
    # Python from complaining again when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)


class TfxGroup(TyperGroup):
    """Every error leaves here as one line on stderr and an exit code."""

    def invoke(self, ctx):
        # Typer turns a closed stdout into a silent exit 1 before main() below sees it;
        # catch it first: a reader that stops early (`| head`) is no failure.
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _quiet_broken_pipe()

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if args is None:
            args = sys.argv[1:]
        if "--debug" in args:
            DEBUG["on"] = True
        try:
            rv = super().main(args=args, prog_name=prog_name or "tfx",
                              complete_var=complete_var, standalone_mode=False, **extra)
        except TfxError as exc:
            if DEBUG["on"]:
                raise
            _fail(exc.message, exc.exit_code)
        except NO_ARGS_HELP:
            sys.exit(2)  # the help was already printed
        except USAGE_ERROR as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see `{exc.ctx.command_path} --help`)"
            _fail(exc.format_message() + hint, 2)
        except CLICK_ERROR as exc:
            _fail(exc.format_message(), exc.exit_code)
        except ABORT + (KeyboardInterrupt,):
            _fail(Interrupted().message, Interrupted.exit_code)
        except EXIT as exc:
            rv = exc.exit_code
        except BrokenPipeError:
            _quiet_broken_pipe()
        except OSError as exc:
            if getattr(exc, "errno", None) == 32:
                _quiet_broken_pipe()
            if DEBUG["on"]:
                raise
            _fail(f"{exc.strerror or exc} ({getattr(exc, 'filename', '') or 'I/O'})", 1)
        except MemoryError:
            _fail("out of memory; try a smaller config, fewer layers or a shorter text", 1)
        except Exception as exc:  # noqa: BLE001 - the one place that catches everything
            if DEBUG["on"]:
                raise
            _fail(f"internal error: {type(exc).__name__}: {exc} "
                  "(rerun with --debug for the traceback, and please report it)", 1)
        if rv == 130:
            _fail(Interrupted().message, Interrupted.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=TfxGroup,
    name="tfx",
    help="Look inside transformers: every stage, every intermediate, on your own text.\n\n"
         "Examples:\n\n"
         "  tfx attend \"When you play game of thrones\" --heads 8\n\n"
         "  tfx count-params --config gpt124m\n\n"
         "  tfx generate \"Hello, I am\" --max-new-tokens 6 --json | jq .result",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tfx {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version.")] = None,
) -> None:
    """Look inside transformers: every stage, every intermediate, on your own text."""
    if debug:
        DEBUG["on"] = True


def _register() -> None:
    from .commands import COMMANDS

    for name, module_name, func_name in COMMANDS:
        module = __import__(f"tfx_cli.commands.{module_name}", fromlist=[func_name])
        app.command(name)(getattr(module, func_name))


_register()


def main() -> None:
    app()
