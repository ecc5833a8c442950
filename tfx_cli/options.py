"""The command line's options: Typer types built from the one table of declarations
(tfx_cli/option_table.py), and `@command`, which gives a command whole groups of them.

    @command("edits", "display", "model")
    def lens(text: TextArg = None, truncate: TruncateOpt = False, *, edits, display,
             model, encoding):
        emit(api.lens(read_text(text, encoding=encoding), truncate=truncate, **edits,
                      **model), **display)

`@command(*names)` adds each named group's options (GROUPS: model, edits, ablations,
dataset, engine, display), or a single declared option (OPTIONS: plot, force, target ...),
after the command's own parameters, in the order named, and calls the command with one
dict per group, keyed as `tfx_cli.api` (and render.emit's emit) takes them: choices as
their text, a repeatable option given no times as None. A single option comes as its own
keyword. "model" is handed as `model=` (with the progress and notice hooks) and
`encoding=`; --force, when the command takes it, also lands in `model` (it covers both
overwriting files and the memory check), and otherwise the model's own --force is added.

A new option on every model command: one `Option(...)` among option_table.py's model
options; the CLI type, the API's check and every model command's signature follow.
An option only one command takes is written in that command's signature as before; for
a shared one use `cli_type(NAME)` (or the ready-made `...Opt` aliases below).

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
from .option_table import GROUPS, MODEL_FORCE, OPTIONS, SEED_MAX, SITE_HELP, Option  # noqa: F401
from .values import as_names

_TYPES = {"text": str, "choice": str, "int": int, "float": float, "number": float,
          "share": float,
          "flag": bool, "path": Path, "folder": str, "engine": str, "names": List[str],
          "texts": List[str], "floats": List[float]}
_ENUMS: dict = {}


def _choices(option: Option) -> type:
    """The Enum Typer shows and checks for a choice option (one class per option)."""
    if option.name not in _ENUMS:
        name = "".join(part.title() for part in option.name.split("_"))
        _ENUMS[option.name] = Enum(name, {c: c for c in option.choices}, type=str)
    return _ENUMS[option.name]


def cli_type(option: "str | Option") -> Any:
    """The Annotated type a command's parameter takes for a declared option."""
    option = OPTIONS[option] if isinstance(option, str) else option
    kind = _choices(option) if option.kind == "choice" else _TYPES[option.kind]
    if option.default is None and kind is not bool:
        kind = Optional[kind]
    fields = {key: value for key, value in (
        ("help", option.help), ("rich_help_panel", option.panel), ("metavar", option.metavar),
        ("min", option.minimum), ("max", option.maximum),
        ("show_default", option.show_default)) if value is not None}
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


def command(*names: str):
    """Give a command the declared groups and options `names` (see the module's text)."""
    def wrap(fn):
        unknown = [name for name in names if name not in GROUPS and name not in OPTIONS]
        if unknown:
            raise ValueError(f"{fn.__name__}: no option group or declared option "
                             f"{', '.join(unknown)} (tfx_cli/option_table.py)")
        hints = get_type_hints(fn, include_extras=True)
        handed = {*names, "encoding"} if "model" in names else set(names)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in inspect.signature(fn).parameters.values() if p.name not in handed]
        taken = [(name, GROUPS.get(name, (name,))) for name in names]
        added = [_parameter(OPTIONS[o]) for _, options in taken for o in options]
        own_force = any(p.name == "force" for p in own + added)
        if "model" in names and not own_force:
            added.append(_parameter(MODEL_FORCE))

        @functools.wraps(fn)
        def wrapper(**kwargs):
            for name, options in taken:
                if name in GROUPS:
                    kwargs[name] = {o: _value(kwargs.pop(o)) for o in options}
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


def model_command(fn):
    """The model options alone: `fn` is called with `model=` and `encoding=`."""
    return command("model")(fn)


# The declared options as Typer types, for a command that spells one in its signature:
# built on first use (module __getattr__), so a command pays only for the ones it names.
_ALIASES = {
    "JsonOpt": "json", "PrecisionOpt": "precision", "FullOpt": "full", "ForceOpt": "force",
    "PlotOpt": "plot", "TruncateOpt": "truncate", "TargetOpt": "target", "StackOpt": "stack",
    "EncodingOpt": "encoding", "AblateOpt": "ablate", "AblateModeOpt": "ablate_mode",
    "SteerOpt": "steer", "TowardOpt": "toward", "AwayOpt": "away", "ScaleOpt": "scale",
    "SaeOpt": "sae", "SaeSiteOpt": "sae_site", "SteerFeatureOpt": "steer_feature",
    "ConfigOpt": "config", "WeightsOpt": "weights", "SeedOpt": "seed", "HeadsOpt": "heads",
    "LayersOpt": "layers", "DModelOpt": "d_model", "ContextOpt": "context",
    "TokenizerOpt": "tokenizer", "CorpusOpt": "corpus", "NoCacheWeightsOpt": "no_cache_weights",
    "DtypeOpt": "dtype", "MaxMemoryOpt": "max_memory", "DeviceOpt": "device",
    "FieldOpt": "field", "MaxDocsOpt": "max_docs", "MaxTokensOpt": "max_tokens",
    "CtxOpt": "ctx", "BatchSizeOpt": "batch_size", "EngineOpt": "engine",
    "RayAddressOpt": "ray_address", "WorkersOpt": "workers",
    "GpusPerWorkerOpt": "gpus_per_worker", "VerboseOpt": "verbose",
}


def __getattr__(name: str) -> Any:
    if name in _ALIASES:
        value = globals()[name] = cli_type(_ALIASES[name])
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TextArg = Annotated[Optional[str], typer.Argument(
    help="Input text; '-' reads standard input.", show_default=False)]
Stack = _choices(OPTIONS["stack"])
AblateMode = _choices(OPTIONS["ablate_mode"])


# For a command that spells these options one by one rather than taking their group:
# stack_value, edit_options, corpus_options and engine_options turn them into what the
# API takes, as @command does for a group.
def stack_value(stack: Optional[Stack]) -> Optional[str]:
    return stack.value if stack is not None else None


def edit_options(ablate: Optional[List[str]] = None, ablate_mode: Optional[AblateMode] = None,
                 **steering) -> dict:
    """The intervention options as `tfx_cli.api` takes them (which reads and checks them:
    tfx_cli/values.py). Repeatable options given no times are None, not []."""
    return {k: _value(v) for k, v in dict(ablate=ablate, ablate_mode=ablate_mode,
                                          **steering).items()}


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


# -- dataset commands (scan, top, collect, patch --pairs) ---------------------------------
CorpusArg = Annotated[Optional[str], typer.Argument(
    metavar="CORPUS", show_default=False,
    help="A .txt file (one document per non-empty line), a .jsonl or .parquet file "
         "(--field; one document per line or row), a folder of .txt files (one document "
         "per file, its lines together), or a built-in corpus: python-docs, "
         "repeated-tokens.")]
# scan's and top's optional state folder (collect's -o is its output, with its own help)
StateDirOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", metavar="DIR", show_default=False,
    help="Keep the run's state in DIR (resumable after a kill) and its result in "
         "DIR/result.json.")]


def corpus_options(field: str, max_docs: Optional[int], max_tokens: Optional[int],
                   ctx: Optional[int], batch_size: int, engine: str) -> dict:
    return dict(field=field, max_docs=max_docs, max_tokens=max_tokens, ctx=ctx,
                batch_size=batch_size, engine=engine)


def engine_options(ray_address: Optional[str], workers: Optional[int],
                   gpus_per_worker: Optional[float], verbose: bool) -> dict:
    """--engine ray's options (--engine itself travels with corpus_options)."""
    return dict(ray_address=ray_address, workers=workers, gpus_per_worker=gpus_per_worker,
                verbose=verbose)


def need_corpus(corpus: Optional[str]) -> str:
    if corpus is None or not corpus.strip():
        raise InputTextError("no CORPUS given; name a .txt, .jsonl or .parquet file, a folder "
                             "of .txt files, or python-docs")
    return corpus
