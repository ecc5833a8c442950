"""Shared option types, and the one decorator that gives a command the model options.

Every command that runs the model takes the same dozen options (--config, --weights,
--seed, the size overrides, --tokenizer ...). They are declared once here; `@model_command`
adds them to a command's signature and hands the command one `ModelSpec`.

Command modules must not use `from __future__ import annotations`: Typer reads the real
annotation objects.
"""
import functools
import inspect
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Optional, get_type_hints

import typer

from .errors import InputTextError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (tfx/1) on stdout.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", min=0, max=12,
                                           help="Decimals shown in tables.")]
FullOpt = Annotated[bool, typer.Option("--full", help="Show whole matrices, not head and tail.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="FILE", show_default=False,
    help="Also draw the result into FILE (.png or .svg); needs matplotlib: "
         "pip install 'tfx-cli[plot]'.")]
TextArg = Annotated[Optional[str], typer.Argument(
    help="Input text; '-' reads standard input.", show_default=False)]
EncodingOpt = Annotated[str, typer.Option(
    "--encoding", help="Encoding of text read from stdin ('-').", rich_help_panel="Input")]
TruncateOpt = Annotated[bool, typer.Option(
    "--truncate", help="Keep the last context-length tokens of a longer text (as LLMs-from-scratch's "
    "generate crops its context); without it a text longer than the context is an error.")]


SEED_MAX = 2**64 - 1  # the largest seed torch.manual_seed accepts


@dataclass(frozen=True)
class ModelSpec:
    """What the user asked for: which model, which weights, which tokenizer."""

    config: Optional[str] = None
    weights: Optional[str] = None
    seed: int = 123
    heads: Optional[int] = None
    layers: Optional[int] = None
    d_model: Optional[int] = None
    context: Optional[int] = None
    tokenizer: Optional[str] = None
    corpus: Optional[Path] = None
    no_cache_weights: bool = False
    force: bool = False

    @property
    def overrides(self) -> dict:
        return {"heads": self.heads, "layers": self.layers, "d_model": self.d_model,
                "context": self.context}


_MODEL_OPTIONS = {
    "config": (Optional[str], typer.Option(
        "--config", "-c", help="Preset name (see `tfx configs`) or a JSON config file. "
        "Default: gpt124m.", show_default=False, rich_help_panel="Model")),
    "weights": (Optional[str], typer.Option(
        "--weights", "-w", help="Real weights: an HF folder, a .gguf file, a nanoGPT ckpt.pt, "
        "or an alias (minilm, smollm2).", show_default=False, rich_help_panel="Model")),
    "seed": (int, typer.Option("--seed", help="Seed for random weights (and sampling).",
                               min=0, max=SEED_MAX, rich_help_panel="Model")),
    "heads": (Optional[int], typer.Option("--heads", min=1, help="Override the head count.",
                                          show_default=False, rich_help_panel="Model")),
    "layers": (Optional[int], typer.Option("--layers", min=1, help="Override the layer count.",
                                           show_default=False, rich_help_panel="Model")),
    "d_model": (Optional[int], typer.Option("--d-model", min=1, help="Override d_model.",
                                            show_default=False, rich_help_panel="Model")),
    "context": (Optional[int], typer.Option("--context", min=1,
                                            help="Override the context length.",
                                            show_default=False, rich_help_panel="Model")),
    "tokenizer": (Optional[str], typer.Option(
        "--tokenizer", "-t", help="word, char, byte, gpt2, or a tokenizer.json path. "
        "Default: the config's.", show_default=False, rich_help_panel="Model")),
    "corpus": (Optional[Path], typer.Option(
        "--corpus", help="Text file whose words form the word tokenizer's vocabulary "
        "(default: the input text).", show_default=False, rich_help_panel="Model")),
    "encoding": (str, typer.Option(
        "--encoding", help="Encoding of text read from stdin ('-').", rich_help_panel="Input")),
    "no_cache_weights": (bool, typer.Option(
        "--no-cache-weights", help="Do not read or write the dequantised-weights cache.",
        rich_help_panel="Model")),
}
_DEFAULTS = {f.name: f.default for f in fields(ModelSpec)}
_DEFAULTS["encoding"] = "utf-8"
_INPUT = {"encoding": "utf-8"}  # set per invocation by @model_command, read by read_text


def model_command(fn):
    """Add the shared model options to `fn`'s CLI signature; call it with `spec=ModelSpec`.

    If `fn` has its own `force` parameter, it also lands in the spec (so --force covers
    both overwriting files and the memory check).
    """
    hints = get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(fn).parameters.values() if p.name != "spec"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                               annotation=Annotated[typ, opt], default=_DEFAULTS[name])
             for name, (typ, opt) in _MODEL_OPTIONS.items()]
    own_force = any(p.name == "force" for p in own)
    if not own_force:
        extra.append(inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, default=False,
                                       annotation=Annotated[bool, typer.Option(
                                           "--force", help="Build the model even if it may "
                                           "not fit in memory.", rich_help_panel="Model")]))

    @functools.wraps(fn)
    def wrapper(**kwargs):
        spec_args = {name: kwargs.pop(name) for name in _MODEL_OPTIONS}
        _INPUT["encoding"] = spec_args.pop("encoding")
        spec_args["force"] = kwargs["force"] if own_force else kwargs.pop("force")
        if spec_args["weights"]:
            # loading real weights can take seconds: show progress on stderr (the core
            # module stays torch-free on import and never prints itself)
            from .core import weights
            from .render.emit import progress

            weights.default_progress = progress
        return fn(spec=ModelSpec(**spec_args), **kwargs)

    del wrapper.__wrapped__  # Typer must see the new signature, not fn's
    wrapper.__signature__ = inspect.Signature(own + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
    return wrapper


def read_text(text: Optional[str], *, encoding: Optional[str] = None, what: str = "text") -> str:
    """The TEXT argument, or standard input for '-'. Empty text is an error."""
    encoding = encoding or _INPUT["encoding"]
    if text is None:
        raise InputTextError(f"no {what} given; pass it as an argument or '-' to read stdin")
    if text == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
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
        text = text.rstrip("\n")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes in argv arrive as surrogates
        raise InputTextError(f"the {what} is not valid UTF-8 (character {exc.start}); "
                             "pass it through stdin with '-' and --encoding") from None
    if not text.strip():
        raise InputTextError(f"the {what} is empty; give at least one word, e.g. \"Hello\"")
    return text
