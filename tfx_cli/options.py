"""Shared option types, and the one decorator that gives a command the model options.

Every command that runs the model takes the same dozen options (--config, --weights,
--seed, the size overrides, --tokenizer ...). They are declared once here; `@model_command`
adds them to a command's signature and hands the command the model options as the
keyword arguments `tfx_cli.api` takes.

Command modules must not use `from __future__ import annotations`: Typer reads the real
annotation objects.
"""
import functools
import inspect
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, List, Optional, get_type_hints

import typer

from .errors import InputTextError, UsageError
from .values import as_names

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

# Encoder–decoder models (toy, vaswani, Marian, BART): the decoder's input and the stack.
TargetOpt = Annotated[Optional[str], typer.Option(
    "--target", metavar="TEXT", show_default=False, rich_help_panel="Encoder–decoder",
    help="The decoder's input (its start token is put first): TEXT is then the source the "
         "encoder reads.")]


class Stack(str, Enum):
    encoder = "encoder"
    decoder = "decoder"


StackOpt = Annotated[Optional[Stack], typer.Option(
    "--stack", show_default=False, rich_help_panel="Encoder–decoder",
    help="Which stack to show: encoder, or decoder (the default with --target).")]


def stack_value(stack: Optional[Stack]) -> Optional[str]:
    return stack.value if stack is not None else None


# Interventions (core/interventions.py): change an intermediate and see what the output does.
SITE_HELP = ("a trace name such as blocks.0.attn.out, or blocks.{i}.resid_pre (block i's "
             "input), narrowed with :h=HEAD and/or :p=POSITION")


class AblateMode(str, Enum):
    zero = "zero"
    mean = "mean"


AblateOpt = Annotated[Optional[List[str]], typer.Option(
    "--ablate", metavar="SITE", show_default=False, rich_help_panel="Interventions",
    help=f"Ablate SITE: {SITE_HELP}. Repeatable, or comma-separated.")]
AblateModeOpt = Annotated[Optional[AblateMode], typer.Option(
    "--ablate-mode", show_default=False, rich_help_panel="Interventions",
    help="zero (the default) sets the site to 0; mean to its mean over the text's positions.")]
SteerOpt = Annotated[Optional[List[str]], typer.Option(
    "--steer", metavar="SITE", show_default=False, rich_help_panel="Interventions",
    help=f"Add --scale × (activation(--toward) − activation(--away)) at SITE, position by "
         f"position from the first: {SITE_HELP}. Repeatable: every --steer applies, each "
         "with the --toward, --away and --scale given in the same place (first with first); "
         "one given once is shared by all.")]
TowardOpt = Annotated[Optional[List[str]], typer.Option(
    "--toward", metavar="TEXT", show_default=False, rich_help_panel="Interventions",
    help="--steer's text to move toward (as many tokens as --away); once, or once per "
         "--steer.")]
AwayOpt = Annotated[Optional[List[str]], typer.Option(
    "--away", metavar="TEXT", show_default=False, rich_help_panel="Interventions",
    help="--steer's text to move away from; once, or once per --steer.")]
ScaleOpt = Annotated[Optional[List[float]], typer.Option(
    "--scale", metavar="K", show_default=False, rich_help_panel="Interventions",
    help="--steer's multiplier (default 1; once, or once per --steer), or what "
         "--steer-feature adds to the feature.")]

# Features of a sparse autoencoder (core/features, core/analysis/feature_sites.py).
SaeOpt = Annotated[Optional[str], typer.Option(
    "--sae", metavar="DIR", show_default=False, rich_help_panel="Features",
    help="An SAE folder (SAELens's cfg.json + sae_weights.safetensors, Gemma Scope's "
         "params.npz, Gemma Scope 2's params.safetensors, tfx-sae.json). With --ablate "
         "features.K, its feature K is removed from its site.")]
SaeSiteOpt = Annotated[Optional[str], typer.Option(
    "--sae-site", metavar="SITE", show_default=False, rich_help_panel="Features",
    help="The site the SAE reads, when its folder does not say or says it otherwise: a "
         "trace name (blocks.3.resid_out) or a TransformerLens hook (blocks.3.hook_resid_post).")]
SteerFeatureOpt = Annotated[Optional[str], typer.Option(
    "--steer-feature", metavar="DIR:IDX", show_default=False, rich_help_panel="Features",
    help="Add --scale × feature IDX's decoder row of the SAE in DIR at its site (the "
         "feature's activation raised by K at every position).")]


def edit_options(ablate: Optional[List[str]] = None, ablate_mode: Optional[AblateMode] = None,
                 **steering) -> dict:
    """The intervention options as `tfx_cli.api` takes them (which reads and checks them:
    tfx_cli/values.py). Repeatable options given no times are None, not []."""
    return dict(ablate=ablate or None,
                ablate_mode=ablate_mode.value if ablate_mode is not None else None,
                **{k: v or None if isinstance(v, list) else v for k, v in steering.items()})


SEED_MAX = 2**64 - 1  # the largest seed torch.manual_seed accepts

# The model options, one type each, shared by every command that names a model.
ConfigOpt = Annotated[Optional[str], typer.Option(
    "--config", "-c", help="Preset name (see `tfx configs`) or a JSON config file. "
    "Default: gpt124m.", show_default=False, rich_help_panel="Model")]
WeightsOpt = Annotated[Optional[str], typer.Option(
    "--weights", "-w", help="Real weights: an HF folder, a .gguf file, a nanoGPT ckpt.pt, or "
    "an alias (minilm, smollm2, qwen2.5-0.5b, gemma3-270m). Brings its own architecture and "
    "tokenizer.",
    show_default=False, rich_help_panel="Model")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random weights (and sampling).",
                                      min=0, max=SEED_MAX, rich_help_panel="Model")]
HeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads", min=1, help="Override the head count.", show_default=False,
    rich_help_panel="Model")]
LayersOpt = Annotated[Optional[int], typer.Option(
    "--layers", min=1, help="Override the layer count.", show_default=False,
    rich_help_panel="Model")]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", min=1, help="Override d_model (d_ff follows when it was 4 × d_model).",
    show_default=False, rich_help_panel="Model")]
ContextOpt = Annotated[Optional[int], typer.Option(
    "--context", min=1, help="Override the context length.", show_default=False,
    rich_help_panel="Model")]
TokenizerOpt = Annotated[Optional[str], typer.Option(
    "--tokenizer", "-t", help="word, char, byte, gpt2, minilm, smollm2, qwen2.5-0.5b, "
    "gemma3-270m, a tokenizer.json path (or a folder holding one) or a .gguf file. Default: "
    "the config's. Not with --weights.",
    show_default=False, rich_help_panel="Model")]
CorpusOpt = Annotated[Optional[Path], typer.Option(
    "--corpus", help="Text file whose words (or characters) form the word (char) "
    "vocabulary. Default: the seeds' sentences (tfx_cli/data/corpus.txt).",
    show_default=False, rich_help_panel="Model")]
NoCacheWeightsOpt = Annotated[bool, typer.Option(
    "--no-cache-weights", help="Do not read or write the dequantised-weights cache.",
    rich_help_panel="Model")]

DtypeOpt = Annotated[str, typer.Option(
    "--dtype", help="float32, bfloat16 or float16: the weights and activations in that "
    "precision (norms and softmax accumulate in float32).", rich_help_panel="Model")]
MaxMemoryOpt = Annotated[Optional[str], typer.Option(
    "--max-memory", metavar="SIZE", help="What the run may hold (300MB, 2GB, 1.5GiB): "
    "weights, KV cache, recorded tensors. A checkpoint that does not fit is streamed from "
    "disk one block at a time. Default: the free memory, less a margin.",
    show_default=False, rich_help_panel="Model")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="cpu, cuda (or cuda:N) or mps: where the model runs.",
    rich_help_panel="Model")]

_MODEL_OPTIONS = {"config": ConfigOpt, "weights": WeightsOpt, "seed": SeedOpt,
                  "heads": HeadsOpt, "layers": LayersOpt, "d_model": DModelOpt,
                  "context": ContextOpt, "tokenizer": TokenizerOpt, "corpus": CorpusOpt,
                  "encoding": EncodingOpt, "no_cache_weights": NoCacheWeightsOpt,
                  "dtype": DtypeOpt, "max_memory": MaxMemoryOpt, "device": DeviceOpt}
_DEFAULTS = {"config": None, "weights": None, "seed": 123, "heads": None, "layers": None,
             "d_model": None, "context": None, "tokenizer": None, "corpus": None,
             "encoding": "utf-8", "no_cache_weights": False, "dtype": "float32",
             "max_memory": None, "device": "cpu"}


def model_command(fn):
    """Add the shared model options to `fn`'s CLI signature. `fn` is called with
    `model=` (a dict of the model options, as `tfx_cli.api` takes them, with the stderr
    progress bar for loading weights) and `encoding=` (for text read from stdin).

    If `fn` has its own `force` parameter, it also lands in the model options (so
    --force covers both overwriting files and the memory check).
    """
    hints = get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(fn).parameters.values()
           if p.name not in ("model", "encoding")]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                               default=_DEFAULTS[name])
             for name, annotation in _MODEL_OPTIONS.items()]
    own_force = any(p.name == "force" for p in own)
    if not own_force:
        extra.append(inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, default=False,
                                       annotation=Annotated[bool, typer.Option(
                                           "--force", help="Build the model even if it may "
                                           "not fit in memory.", rich_help_panel="Model")]))

    @functools.wraps(fn)
    def wrapper(**kwargs):
        from .render.emit import info, progress

        model = {name: kwargs.pop(name) for name in _MODEL_OPTIONS}
        encoding = model.pop("encoding")
        model["force"] = kwargs["force"] if own_force else kwargs.pop("force")
        model["progress"] = progress  # loading real weights can take seconds
        model["notice"] = info  # e.g. that a checkpoint is streamed from disk
        return fn(model=model, encoding=encoding, **kwargs)

    del wrapper.__wrapped__  # Typer must see the new signature, not fn's
    wrapper.__signature__ = inspect.Signature(own + extra)
    wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
    return wrapper


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
FieldOpt = Annotated[str, typer.Option(
    "--field", help="The JSONL key or Parquet column holding each document.",
    rich_help_panel="Corpus")]
MaxDocsOpt = Annotated[Optional[int], typer.Option(
    "--max-docs", metavar="N", show_default=False, rich_help_panel="Corpus",
    help="Read the first N documents only.")]
MaxTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-tokens", metavar="N", show_default=False, rich_help_panel="Corpus",
    help="Stop after N tokens (the last document is cut there).")]
CtxOpt = Annotated[Optional[int], typer.Option(
    "--ctx", metavar="N", show_default=False, rich_help_panel="Corpus",
    help="Window length: a longer document is cut into windows of N tokens, which never "
         "attend to each other (default: the model's context, at most 1024).")]
BatchSizeOpt = Annotated[int, typer.Option(
    "--batch-size", metavar="N", rich_help_panel="Corpus",
    help="Windows per forward pass (similar lengths together, padded on the right).")]
# scan's and top's optional state folder (collect's -o is its output, with its own help)
StateDirOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", metavar="DIR", show_default=False,
    help="Keep the run's state in DIR (resumable after a kill) and its result in "
         "DIR/result.json.")]
EngineOpt = Annotated[str, typer.Option(
    "--engine", rich_help_panel="Engine",
    help="Where batches run: local (this process) or ray (a pool of model actors on Ray "
         "Data; needs pip install 'tfx-cli[ray]'). Same results either way.")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", metavar="ADDR", show_default=False, rich_help_panel="Engine",
    help="The Ray cluster to run on (HOST:PORT of `ray start --head`; default: "
         "$RAY_ADDRESS, else a Ray runtime started on this machine for the run).")]
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", metavar="N", show_default=False, rich_help_panel="Engine",
    help="Model replicas (Ray actors, half a CPU each) for --engine ray (default: 1).")]
GpusPerWorkerOpt = Annotated[Optional[float], typer.Option(
    "--gpus-per-worker", metavar="F", show_default=False, rich_help_panel="Engine",
    help="GPUs each --engine ray worker holds (e.g. 1, or 0.5 to put two on one GPU); the "
         "workers then run on cuda.")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", rich_help_panel="Engine",
    help="Let the engine's own log lines and progress bars (Ray's) through to stderr.")]


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
