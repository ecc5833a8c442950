"""The command line's options: Typer parameters built from the one table of declarations
(tfx_cli/option_table.py), by `@command`.

    @command("truncate", "edits", "display", "model")
    def lens(*, text, target, truncate, edits, display, model, encoding):
        emit(api.lens(read_text(text, encoding=encoding), truncate=truncate,
                      target=target, **edits, **model), **display)

A command's own parameters are bare keywords: each is the declaration of that name, looked
up in the command's block of the table and then among the shared options (`text`, the
TEXT argument; `target`; `layer` ...), in the order the signature gives them.
`@command(*names)` then adds each named group's options (GROUPS: model, edits,
ablations, dataset, engine, display, training ...), or a single shared option (plot, force,
truncate ...), in the order named, and calls the command with one dict per group, keyed
as `tfx_cli.api` (and render.emit's emit) takes them; a single option comes as its own
keyword. Every value arrives as the API takes it: a choice as its text, a repeatable
option given no times as None. "model" is handed as `model=` (with the progress and notice
hooks) and `encoding=`; --force, when the command takes it, also lands in `model` (it
covers both overwriting files and the memory check), and otherwise the model's own
--force is added.

A parameter that carries its own `Annotated` type is taken as it is written (and a test
lists each such one: none should be left).

Command modules must not use `from __future__ import annotations`: Typer reads the real
annotation objects.
"""
import functools
import inspect
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, List, Optional, get_type_hints

import typer

from .errors import InputTextError, UsageError
from .option_table import GROUPS, MODEL_FORCE, OPTIONS, Option, checker, options_of
from .values import as_names

_TYPES = {"text": str, "choice": str, "int": int, "float": float, "flag": bool,
          "path": Path, "folder": str, "engine": str, "names": List[str],
          "texts": List[str], "floats": List[float], "units": str, "layers": str}
_ENUMS: dict = {}


def _choices(option: Option) -> type:
    """The Enum Typer shows and checks for a choice option (one class per option)."""
    key = (option.name, option.choices)
    if key not in _ENUMS:
        name = "".join(part.title() for part in option.name.split("_"))
        _ENUMS[key] = Enum(name, {c: c for c in option.choices}, type=str)
    return _ENUMS[key]


def _parsed(option: Option):
    """A float's reader as a Click callback: the API's, so `--lr nan` and `--top-p 2` are
    refused as the value is parsed, in the words `api.X(lr=...)` uses."""
    read, name = checker(option), option.spelled
    return lambda value: read(value, name)


def cli_type(option: "str | Option") -> Any:
    """The Annotated type a command's parameter takes for a declared option."""
    option = OPTIONS[option] if isinstance(option, str) else option
    kind = _choices(option) if option.kind == "choice" else _TYPES[option.kind]
    if option.default is None:
        kind = Optional[kind]
    fields = {key: value for key, value in (
        ("help", option.help), ("rich_help_panel", option.panel), ("metavar", option.metavar),
        ("show_default", option.show_default)) if value is not None}
    if option.kind == "int":  # Click shows an int's range in --help and checks it
        fields.update({k: v for k, v in (("min", option.minimum), ("max", option.maximum))
                       if v is not None})
    if option.kind in ("float", "floats"):
        fields["callback"] = _parsed(option)
    if not option.flags:
        return Annotated[kind, typer.Argument(**fields)]
    return Annotated[kind, typer.Option(*option.flags, **fields)]


def _value(value: Any) -> Any:
    """A parsed value as the API takes it: a choice as its text, [] as None."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return value or None
    return value


def _parameter(option: Option) -> inspect.Parameter:
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=cli_type(option), default=option.default)


def _command_name(fn) -> "str | None":
    """The registered command a command module's function is (None for any other)."""
    from .registry import COMMANDS

    package, _, module = (fn.__module__ or "").rpartition(".")
    if package != __package__ + ".commands":
        return None
    return next((c.name for c in COMMANDS if c.module == module), None)


def _own(fn, handed: set, declared: dict) -> tuple[list, list]:
    """fn's own parameters (a bare one made from its declaration) and the names of the
    bare ones, whose values are handed on as the API takes them."""
    hints = get_type_hints(fn, include_extras=True)
    own, bare = [], []
    for param in inspect.signature(fn).parameters.values():
        if param.name in handed:
            continue
        if param.name in hints:  # written out: taken as it is
            own.append(param.replace(annotation=hints[param.name],
                                     kind=inspect.Parameter.KEYWORD_ONLY))
        elif param.name in declared:
            own.append(_parameter(declared[param.name]))
            bare.append(param.name)
        else:
            raise ValueError(f"{fn.__name__}: no option {param.name!r} is declared for "
                             "it; add it to its block in tfx_cli/option_table.py")
    return own, bare


def command(*names: str):
    """Give a command its declared options: its own bare keywords, then the groups and
    shared options `names` (see the module's text)."""
    def wrap(fn):
        declared = options_of(_command_name(fn))
        unknown = [name for name in names if name not in GROUPS and name not in declared]
        if unknown:
            raise ValueError(f"{fn.__name__}: no option group or declared option "
                             f"{', '.join(unknown)} (tfx_cli/option_table.py)")
        handed = {*names, "encoding"} if "model" in names else set(names)
        own, bare = _own(fn, handed, declared)
        taken = [(name, GROUPS.get(name)) for name in names]  # a group's members: shared
        added = [_parameter(OPTIONS[o]) if group else _parameter(declared[name])
                 for name, group in taken for o in (group or (name,))]
        own_force = any(p.name == "force" for p in own + added)
        if "model" in names and not own_force:
            added.append(_parameter(MODEL_FORCE))

        @functools.wraps(fn)
        def wrapper(**kwargs):
            for name in bare:
                kwargs[name] = _value(kwargs[name])
            for name, group in taken:
                if group:
                    kwargs[name] = {o: _value(kwargs.pop(o)) for o in group}
                else:
                    kwargs[name] = _value(kwargs[name])
            if "model" in names:
                _model_hooks(kwargs, own_force)
            return fn(**kwargs)

        del wrapper.__wrapped__  # Typer must see the new signature, not fn's
        wrapper.__signature__ = inspect.Signature(own + added)
        wrapper.__annotations__ = {p.name: p.annotation for p in own + added}
        return wrapper

    return wrap


def _model_hooks(kwargs: dict, own_force: bool) -> None:
    """The model dict as the API takes it: --force, and the stderr progress bar and notes."""
    from .render.emit import info, progress

    model = kwargs["model"]
    kwargs["encoding"] = model.pop("encoding")
    model["force"] = kwargs["force"] if own_force else kwargs.pop("force")
    model["progress"] = progress  # loading real weights can take seconds
    model["notice"] = info  # e.g. that a checkpoint is streamed from disk


def split_list(values: Optional[List[str]], option: str) -> List[str]:
    """Repeatable options that also take comma lists: -s a,b -s c -> [a, b, c]. An empty
    value is not "everything": it is refused, like every empty value. (The API reads the
    same way: tfx_cli.values.as_names.)"""
    return as_names(values, option) or []


def read_text(text: Optional[str], *, encoding: str = "utf-8", what: str = "text") -> str:
    """The TEXT argument, or standard input for '-'. Empty text is an error."""
    if text is None:
        raise InputTextError(f"no {what} given; pass it as an argument or '-' to read stdin")
    if text != "-" and encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        raise UsageError(f"--encoding {encoding} applies to text read from stdin ('-'), but "
                         f"the {what} was given as an argument; drop --encoding, or pipe the "
                         "text in and pass '-'")
    if text == "-":
        if getattr(sys.stdin, "_tfx_read", None):  # `tfx patch - --corrupt -`
            raise InputTextError(f"standard input can be read once, and the "
                                 f"{sys.stdin._tfx_read} was read from it already; give the "
                                 f"{what} as an argument")
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        try:
            sys.stdin._tfx_read = what
        except AttributeError:  # a stream that takes no attributes: nothing to remember
            pass
        if isinstance(data, bytes):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputTextError(
                    f"standard input is not valid {encoding} (byte {exc.start}: "
                    f"0x{data[exc.start]:02x}); pass --encoding, e.g. --encoding latin-1"
                ) from None
            except LookupError:
                raise InputTextError(f"unknown encoding {encoding!r}; try utf-8 or latin-1") from None
        else:
            text = data
        text = text.rstrip("\r\n")  # the file's last line break (Unix or Windows)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes in argv arrive as surrogates
        raise InputTextError(f"the {what} is not valid UTF-8 (character {exc.start}); "
                             "pass it through stdin with '-' and --encoding") from None
    if not text.strip():
        raise InputTextError(f"the {what} is empty; give at least one word, e.g. \"Hello\"")
    return text



def need_corpus(corpus: Optional[str]) -> str:
    if corpus is None or not corpus.strip():
        raise InputTextError("no CORPUS given; name a .txt, .jsonl or .parquet file, a folder "
                             "of .txt files, or python-docs")
    return corpus
