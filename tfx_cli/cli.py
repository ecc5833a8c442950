"""The Typer app: the command group, the global options and the one error handler.

Importing this module must stay cheap (no torch, no command module): a command's module is
imported, and its click command built, only when that command runs; `tfx --help` lists
the commands from tfx_cli/registry.py without loading any of them.
"""
import difflib
import importlib
import os
import re
import sys
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from ._clicks import ABORT, CLICK_ERROR, EXIT, NO_ARGS_HELP, USAGE_ERROR

from . import __version__
from .errors import DISK_FULL, Interrupted, TfxError, write_error

DEBUG = {"on": bool(os.environ.get("TFX_DEBUG"))}


def _fail(message: str, code: int) -> None:
    from .render.common import terminal_text  # a message may quote what the user typed

    try:
        sys.stderr.write(f"tfx: error: {terminal_text(' '.join(message.split()))}\n")
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


def _build_command(name: str):
    """The click command for `name`, built from its module on first use (None if unknown)."""
    from .registry import find

    entry = find(name)
    if entry is None:
        return None
    module = importlib.import_module(f"tfx_cli.commands.{entry.module}")
    one = typer.Typer(**APP_SETTINGS)
    one.command(name, cls=TfxCommand)(getattr(module, entry.func))
    return typer.main.get_command(one)


def _stdout_is_devnull() -> bool:
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (out.st_rdev, out.st_ino) == (null.st_rdev, null.st_ino)


def _take_debug(args: list) -> list:
    """--debug works wherever the error hint says to type it: before the subcommand
    (`tfx --debug next hi`) or after it (`tfx next hi --debug`). It is taken out of the
    arguments here, up to a `--` (after which every word is text)."""
    cut = args.index("--") if "--" in args else len(args)
    if "--debug" in args[:cut]:
        DEBUG["on"] = True
        args = [a for a in args[:cut] if a != "--debug"] + args[cut:]
    return args


_EMPHASIS = re.compile(r"[\\*_]")  # what markdown would read as emphasis (or an escape)
_CODE = re.compile(r"`[^`\n]*`")


def _as_written(text: str) -> str:
    """Help text that Rich's markdown shows as it is written: outside `code` spans, a
    `*` or `_` (blocks.*.ln2.out, W_enc, sae_weights.safetensors) is escaped, so no pair
    of them turns into emphasis and vanishes."""
    out, last = [], 0
    for span in _CODE.finditer(text):
        out += [_EMPHASIS.sub(r"\\\g<0>", text[last:span.start()]), span.group()]
        last = span.end()
    return "".join(out) + _EMPHASIS.sub(r"\\\g<0>", text[last:])


@contextmanager
def _shown_as_written(command):
    """The command's and its parameters' help escaped while --help is drawn (the texts
    themselves stay as declared: the site's reference reads them too)."""
    held = [(o, o.help) for o in (command, *command.params) if getattr(o, "help", None)]
    for owner, text in held:
        owner.help = _as_written(text)
    try:
        yield
    finally:
        for owner, text in held:
            owner.help = text


class TfxCommand(TyperCommand):
    def format_help(self, ctx, formatter):
        # Rich answers a reader that closed the pipe (`tfx attend --help | head -3`) by
        # pointing stdout at /dev/null and exiting 1; a reader that has seen enough is no
        # failure, so that exit becomes 0, as everywhere else in tfx.
        try:
            with _shown_as_written(self):
                return super().format_help(ctx, formatter)
        except SystemExit as exc:
            if exc.code == 1 and _stdout_is_devnull():
                sys.exit(0)
            raise


class TfxGroup(TyperGroup):
    """Commands load on demand; every error leaves here as one line on stderr and an exit
    code."""

    def parse_args(self, ctx, args):
        # `tfx --help` is written while the options are parsed, before invoke(); a reader
        # that is already gone must end it quietly too (Typer would exit 1)
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            _quiet_broken_pipe()

    def list_commands(self, ctx):
        from .registry import COMMANDS

        return [command.name for command in COMMANDS]

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands:
            command = _build_command(cmd_name)
            if command is None:
                return None
            self.commands[cmd_name] = command
        return self.commands[cmd_name]

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except USAGE_ERROR as exc:
            message = getattr(exc, "message", "")
            if args and message.startswith("No such command") and "Did you mean" not in message:
                matches = difflib.get_close_matches(args[0], self.list_commands(ctx))
                if matches:
                    exc.message = (message.rstrip(".") + ". Did you mean "
                                   + ", ".join(repr(m) for m in matches) + "?")
            raise

    def format_help(self, ctx, formatter):
        from .registry import COMMANDS, PANELS
        from .render.grouphelp import group_help

        options = []
        for param in self.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            names = list(param.opts) + list(param.secondary_opts)
            options.append((", ".join(n for n in names if n.startswith("--")),
                            ", ".join(n for n in names if not n.startswith("--")),
                            param.help or ""))
        panels = [(title, [(c.name, c.summary) for c in COMMANDS if c.panel == key])
                  for key, title in PANELS.items()]
        # a command without a known panel is still listed (and a test names it)
        panels.append(("Commands", [(c.name, c.summary) for c in COMMANDS
                                    if c.panel not in PANELS]))
        formatter.write(group_help(ctx.command_path, self.help or "", options,
                                   [(title, rows) for title, rows in panels if rows]))

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
        args = _take_debug(list(args))
        from .core.interrupts import install as hold_ctrl_c_during_torch_import

        hold_ctrl_c_during_torch_import()
        if os.environ.get("_TFX_COMPLETE"):  # the shell asks for completions
            from typer.completion import completion_init

            completion_init()
        try:
            rv = super().main(args=args, prog_name=prog_name or "tfx",
                              complete_var=complete_var, standalone_mode=False, **extra)
        except TfxError as exc:
            if DEBUG["on"]:
                raise
            _fail(exc.message, exc.exit_code)
        except NO_ARGS_HELP as exc:
            text = exc.format_message()  # the help (Typer's Rich help prints its own)
            if text:
                typer.echo(text)
            sys.exit(2)
        except USAGE_ERROR as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see `{exc.ctx.command_path} --help`)"
            if exc.format_message().startswith("Got unexpected extra argument"):
                hint = (" (a text of several words goes in quotes: "
                        f"{exc.ctx.command_path if exc.ctx else 'tfx'} \"Hello world\")")
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
            if getattr(exc, "errno", None) in DISK_FULL:  # a writer that did not say which
                _fail(write_error(exc.filename or "its output", exc).message, 1)
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


# What every command's Typer shares (each command gets its own, built on demand).
APP_SETTINGS = dict(add_completion=False, pretty_exceptions_enable=False,
                    rich_markup_mode="markdown")

app = typer.Typer(
    cls=TfxGroup,
    name="tfx",
    help="Look inside transformers: every stage, every intermediate, on your own text.\n\n"
         "Examples:\n\n"
         "  tfx attend \"When you play game of thrones\" --heads 8\n\n"
         "  tfx count-params --config gpt124m\n\n"
         "  tfx generate \"Hello, I am\" --max-new-tokens 6 --json | jq .result",
    no_args_is_help=True,
    **APP_SETTINGS,
    context_settings={"help_option_names": ["-h", "--help"]},
)


SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion(action: str):
    """--show-completion / --install-completion SHELL: Typer's own script and installer,
    imported only when asked for (Typer's add_completion would build them, and import
    subprocess, on every run)."""

    def callback(ctx, param, value):
        if value is None or ctx.resilient_parsing:
            return
        if value not in SHELLS:
            from .errors import UsageError

            raise UsageError(f"{param.opts[0]} {value!r}: not a shell tfx completes; "
                             f"valid: {', '.join(SHELLS)}")
        from typer import completion

        completion.completion_init()
        (completion.show_callback if action == "show" else completion.install_callback)(
            ctx, param, value)

    return callback


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tfx {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version.")] = None,
    install_completion: Annotated[Optional[str], typer.Option(
        "--install-completion", metavar="SHELL", callback=_completion("install"),
        is_eager=True, expose_value=False,
        help="Install tab completion for SHELL (bash, zsh, fish, powershell).")] = None,
    show_completion: Annotated[Optional[str], typer.Option(
        "--show-completion", metavar="SHELL", callback=_completion("show"), is_eager=True,
        expose_value=False,
        help="Print the tab-completion script for SHELL, to copy or source.")] = None,
) -> None:
    """Look inside transformers: every stage, every intermediate, on your own text."""
    if debug:
        DEBUG["on"] = True


def main() -> None:
    app()
