"""Every shared option, declared once: its flags, kind, range, default, help, panel and
metavar, and the groups a command takes as a whole.

Both layers read this table. The command line builds its Typer types from it
(tfx_cli/options.py: `cli_type`, and `@command("edits", "display", "model")`, which adds a
group's options to a command and hands the command one dict per group); the API builds its
checkers from it (tfx_cli/api/_options.py: OPTION_KINDS), so `--heads 0` and
`api.trace(heads=0)` are refused by the same range, read from the same line.

This module imports neither typer nor rich nor torch: `import tfx_cli.api` stays cheap.

To add an option to every command of a group, add one `Option(...)` to that group's
tuple below (GROUPS and OPTIONS are built from the tuples). To give a new command a group, name the group in its `@command`
decorator and read the dict it is handed (`**edits` into the api call). A command's own
options are declared here too, in that command's block, as its group (tfx graph's:
"graph_options"), so the command line and the API read one range and one default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError
from .values import as_flag, as_float, as_int, as_names, as_path, as_text, as_texts

SEED_MAX = 2**64 - 1  # the largest seed torch.manual_seed accepts


@dataclass(frozen=True)
class Option:
    """One option as both layers read it. `kind` says what a value is (text, int,
    float (finite), number (any float), share (0 < x ≤ 1), flag, path, folder, names
    (repeatable, comma lists), texts (repeatable), floats (one or many finite numbers),
    choice (one of `choices`), engine (a name, or an engine object in the API));
    `minimum`/`maximum` bound an int. `flags` empty makes it a positional argument shown
    as `metavar`."""
    name: str
    flags: tuple[str, ...]
    kind: str
    default: Any = None
    help: str = ""
    panel: str | None = None
    metavar: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    show_default: bool | None = None  # None: Typer's own rule

    @property
    def many(self) -> bool:
        return self.kind in ("names", "texts", "floats")


SITE_HELP = ("a trace name such as blocks.0.attn.out, or blocks.{i}.resid_pre (block i's "
             "input), narrowed with :h=HEAD and/or :p=POSITION")


def _opt(name, *flags, kind="text", **fields) -> Option:
    return Option(name, tuple(flags), kind, **fields)


_MODEL = "Model"
_MODEL_OPTIONS = (
    _opt("config", "--config", "-c", panel=_MODEL, show_default=False,
         help="Preset name (see `tfx configs`) or a JSON config file. Default: gpt124m."),
    _opt("weights", "--weights", "-w", panel=_MODEL, show_default=False,
         help="Real weights: an HF folder, a .gguf file, a nanoGPT ckpt.pt, or an alias "
         "(minilm, smollm2, qwen2.5-0.5b, gemma3-270m). Brings its own architecture and "
         "tokenizer."),
    _opt("seed", "--seed", kind="int", default=123, minimum=0, maximum=SEED_MAX,
         panel=_MODEL, help="Seed for random weights (and sampling)."),
    _opt("heads", "--heads", kind="int", minimum=1, panel=_MODEL, show_default=False,
         help="Override the head count."),
    _opt("layers", "--layers", kind="int", minimum=1, panel=_MODEL, show_default=False,
         help="Override the layer count."),
    _opt("d_model", "--d-model", kind="int", minimum=1, panel=_MODEL, show_default=False,
         help="Override d_model (d_ff follows when it was 4 × d_model)."),
    _opt("context", "--context", kind="int", minimum=1, panel=_MODEL, show_default=False,
         help="Override the context length."),
    _opt("tokenizer", "--tokenizer", "-t", panel=_MODEL, show_default=False,
         help="word, char, byte, gpt2, minilm, smollm2, qwen2.5-0.5b, gemma3-270m, a "
         "tokenizer.json path (or a folder holding one) or a .gguf file. Default: the "
         "config's. Not with --weights."),
    _opt("corpus", "--corpus", kind="path", panel=_MODEL, show_default=False,
         help="Text file whose words (or characters) form the word (char) vocabulary. "
         "Default: the seeds' sentences (tfx_cli/data/corpus.txt)."),
    _opt("encoding", "--encoding", default="utf-8", panel="Input",
         help="Encoding of text read from stdin ('-')."),
    _opt("no_cache_weights", "--no-cache-weights", kind="flag", default=False, panel=_MODEL,
         help="Do not read or write the dequantised-weights cache."),
    _opt("dtype", "--dtype", default="float32", panel=_MODEL,
         help="float32, bfloat16 or float16: the weights and activations in that precision "
         "(norms and softmax accumulate in float32)."),
    _opt("max_memory", "--max-memory", metavar="SIZE", panel=_MODEL, show_default=False,
         help="What the run may hold (300MB, 2GB, 1.5GiB): weights, KV cache, recorded "
         "tensors. A checkpoint that does not fit is streamed from disk one block at a "
         "time. Default: the free memory, less a margin."),
    _opt("device", "--device", default="cpu", panel=_MODEL,
         help="cpu, cuda (or cuda:N) or mps: where the model runs."),
)

_EDIT_OPTIONS = (  # interventions (core/interventions.py) and an SAE's features
    _opt("ablate", "--ablate", kind="names", metavar="SITE", show_default=False,
         panel="Interventions", help=f"Ablate SITE: {SITE_HELP}. Repeatable, or "
         "comma-separated."),
    _opt("ablate_mode", "--ablate-mode", kind="choice", choices=("zero", "mean"),
         show_default=False, panel="Interventions",
         help="zero (the default) sets the site to 0; mean to its mean over the text's "
         "positions."),
    _opt("steer", "--steer", kind="names", metavar="SITE", show_default=False,
         panel="Interventions",
         help=f"Add --scale × (activation(--toward) − activation(--away)) at SITE, position "
         f"by position from the first: {SITE_HELP}. Repeatable: every --steer applies, each "
         "with the --toward, --away and --scale given in the same place (first with "
         "first); one given once is shared by all."),
    _opt("toward", "--toward", kind="texts", metavar="TEXT", show_default=False,
         panel="Interventions", help="--steer's text to move toward (as many tokens as "
         "--away); once, or once per --steer."),
    _opt("away", "--away", kind="texts", metavar="TEXT", show_default=False,
         panel="Interventions",
         help="--steer's text to move away from; once, or once per --steer."),
    _opt("scale", "--scale", kind="floats", metavar="K", show_default=False,
         panel="Interventions", help="--steer's multiplier (default 1; once, or once per "
         "--steer), or what --steer-feature adds to the feature."),
    _opt("sae", "--sae", kind="folder", metavar="DIR", show_default=False, panel="Features",
         help="An SAE folder (SAELens's cfg.json + sae_weights.safetensors, Gemma Scope's "
         "params.npz, Gemma Scope 2's params.safetensors, tfx-sae.json). With --ablate "
         "features.K, its feature K is removed from its site."),
    _opt("sae_site", "--sae-site", metavar="SITE", show_default=False, panel="Features",
         help="The site the SAE reads, when its folder does not say or says it otherwise: a "
         "trace name (blocks.3.resid_out) or a TransformerLens hook "
         "(blocks.3.hook_resid_post)."),
    _opt("steer_feature", "--steer-feature", metavar="DIR:IDX", show_default=False,
         panel="Features", help="Add --scale × feature IDX's decoder row of the SAE in DIR "
         "at its site (the feature's activation raised by K at every position)."),
)

# the transcoder set: tfx graph's, and the one next's and generate's --set-feature sets
TRANSCODERS = _opt(
    "transcoders", "--transcoders", kind="folder", metavar="DIR", show_default=False,
    panel="Transcoder features",
    help="A transcoder set in circuit-tracer's layout: config.yaml (feature_input_hook, "
    "feature_output_hook, transcoders: one file per layer). tfx graph makes its graph of "
    "the set's features; next and generate set them (--set-feature) and run the text as "
    "tfx graph runs it: a special token first when it starts with none, so the prediction "
    "and the positions are the graph's.")

_TRANSCODER_EDIT_OPTIONS = (  # a transcoder set's features set (core/circuits/intervene.py)
    _opt("set_feature", "--set-feature", kind="texts", metavar="LAYER:POS:FEATURE=VALUE",
         show_default=False, panel="Transcoder features",
         help="Set a transcoder feature (repeatable; needs --transcoders): its FFN output "
         "changes by (VALUE − its activation) × its decoder row. POS is the position tfx "
         "graph gives it (a special token put first counts as 0)."),
    TRANSCODERS,
    _opt("freeze_attention", "--freeze-attention/--no-freeze-attention", kind="flag",
         default=True, panel="Transcoder features",
         help="Keep the attention patterns of the plain run while features are set."),
    _opt("allow_inactive", "--allow-inactive", kind="flag", default=False,
         panel="Transcoder features",
         help="Let --set-feature switch on a feature that is not active at that position "
         "(refused otherwise, as a likely wrong index)."),
    _opt("constrained_layers", "--constrained-layers", metavar="START:END",
         show_default=False, panel="Transcoder features",
         help="Only these layers take the change, their FFN outputs otherwise frozen (all "
         "layers: the norms' divisors frozen too): direct effects only."),
)

_CORPUS_OPTIONS = (  # dataset commands (scan, top, collect, patch --pairs)
    _opt("field", "--field", default="text", panel="Corpus",
         help="The JSONL key or Parquet column holding each document."),
    _opt("max_docs", "--max-docs", kind="int", metavar="N", show_default=False,
         panel="Corpus", help="Read the first N documents only."),
    _opt("max_tokens", "--max-tokens", kind="int", metavar="N", show_default=False,
         panel="Corpus", help="Stop after N tokens (the last document is cut there)."),
    _opt("ctx", "--ctx", kind="int", metavar="N", show_default=False, panel="Corpus",
         help="Window length: a longer document is cut into windows of N tokens, which "
         "never attend to each other (default: the model's context, at most 1024)."),
    _opt("batch_size", "--batch-size", kind="int", default=8, metavar="N", panel="Corpus",
         help="Windows per forward pass (similar lengths together, padded on the right)."),
)

_ENGINE_OPTIONS = (
    _opt("engine", "--engine", kind="engine", default="local", panel="Engine",
         help="Where batches run: local (this process) or ray (a pool of model actors on "
         "Ray Data; needs pip install 'tfx-cli[ray]'). Same results either way."),
    _opt("ray_address", "--ray-address", metavar="ADDR", show_default=False, panel="Engine",
         help="The Ray cluster to run on (HOST:PORT of `ray start --head`; default: "
         "$RAY_ADDRESS, else a Ray runtime started on this machine for the run)."),
    _opt("workers", "--workers", kind="int", metavar="N", show_default=False, panel="Engine",
         help="Model replicas (Ray actors, half a CPU each) for --engine ray (default: 1)."),
    _opt("gpus_per_worker", "--gpus-per-worker", kind="float", metavar="F",
         show_default=False, panel="Engine",
         help="GPUs each --engine ray worker holds (e.g. 1, or 0.5 to put two on one GPU); "
         "the workers then run on cuda."),
    _opt("verbose", "--verbose", kind="flag", default=False, panel="Engine",
         help="Let the engine's own log lines and progress bars (Ray's) through to stderr."),
)

_TRAIN = "Training"
_TRAINING_OPTIONS = (  # train-sae's and train-transcoder's (the API checks the rest)
    _opt("k", "--k", kind="int", metavar="K", panel=_TRAIN, show_default=False,
         help="TopK: the latents kept per token (default 32)."),
    _opt("latents", "--latents", kind="int", metavar="N", panel=_TRAIN, show_default=False,
         help="The width: latents of the SAE (of each transcoder) (default 4096)."),
    _opt("expansion", "--expansion", kind="float", metavar="X", panel=_TRAIN,
         show_default=False, help="The width as a multiple of the input's (latents = X × "
         "d_in)."),
    _opt("l1", "--l1", kind="float", metavar="COEF", panel=_TRAIN, show_default=False,
         help="Train ReLU latents with this L1 penalty on their activations instead of TopK "
         "(what circuit-tracer 0.5.0 loads, for transcoders)."),
    _opt("lr", "--lr", kind="float", default=4e-4, panel=_TRAIN, help="Adam's learning rate."),
    _opt("steps", "--steps", kind="int", metavar="N", panel=_TRAIN, show_default=False,
         help="Adam steps (per layer for transcoders; default 1000)."),
    _opt("epochs", "--epochs", kind="float", metavar="E", panel=_TRAIN, show_default=False,
         help="Passes over the training tokens, instead of --steps."),
    _opt("holdout", "--holdout", kind="float", default=0.05, metavar="FRACTION",
         panel=_TRAIN, help="The last tokens held out to judge what is trained (FVU, L0, "
         "dead latents)."),
    _opt("skip_first", "--skip-first", kind="int", default=0, minimum=0, metavar="N",
         panel=_TRAIN, help="Leave out each window's first N positions (train and "
         "held-out): a model's first token is often an attention sink whose norm dwarfs "
         "the rest (SmolLM2's ~140×) and would dominate the reconstruction."),
)

_DISPLAY_OPTIONS = (  # how a result is shown (render/emit.py's emit takes these)
    _opt("json", "--json", kind="flag", default=False,
         help="Print one JSON document (tfx/1) on stdout."),
    _opt("precision", "--precision", kind="int", default=3, minimum=0, maximum=12,
         help="Decimals shown in tables."),
    _opt("full", "--full", kind="flag", default=False,
         help="Show whole matrices, not head and tail."),
)

_SINGLE_OPTIONS = (
    _opt("plot", "--plot", kind="path", metavar="FILE", show_default=False,
         help="Also draw the result into FILE (.png or .svg); needs matplotlib: "
         "pip install 'tfx-cli[plot]'."),
    _opt("force", "--force", kind="flag", default=False,
         help="Overwrite an existing output file."),
    _opt("truncate", "--truncate", kind="flag", default=False,
         help="Keep the last context-length tokens of a longer text (as LLMs-from-scratch's "
         "generate crops its context); without it a text longer than the context is an "
         "error."),
    _opt("target", "--target", metavar="TEXT", show_default=False, panel="Encoder–decoder",
         help="The decoder's input (its start token is put first): TEXT is then the source "
         "the encoder reads."),
    _opt("stack", "--stack", kind="choice", choices=("encoder", "decoder"),
         show_default=False, panel="Encoder–decoder",
         help="Which stack to show: encoder, or decoder (the default with --target)."),
)

# -- tfx graph's own options (core/circuits): every default of the graph is here alone;
# the command hands them to api.graph, which reads them from here too ------------------
_GRAPH_OPTIONS = (
    TRANSCODERS,
    _opt("max_logits", "--max-logits", kind="int", default=10, minimum=1,
         help="At most this many logit targets."),
    _opt("logit_prob", "--logit-prob", kind="share", default=0.95,
         help="Take the most likely tokens until their probabilities add up to this "
         "(0 < p ≤ 1)."),
    _opt("targets", "--target", kind="texts", metavar="TOKEN", show_default=False,
         help="A logit target of your own (one token; repeatable, each token once) instead "
         "of the likeliest."),
    _opt("max_features", "--max-features", kind="int", default=7500, minimum=1,
         help="Rows for at most this many active features, the most influential first "
         "(circuit-tracer's ranking)."),
    _opt("node_threshold", "--node-threshold", kind="share", default=0.8,
         help="Keep the nodes carrying this share of the influence on the logits "
         "(0 < t ≤ 1)."),
    _opt("edge_threshold", "--edge-threshold", kind="share", default=0.98,
         help="Keep the edges carrying this share of the influence (0 < t ≤ 1)."),
    _opt("save", "--save", kind="path", metavar="FILE.safetensors", show_default=False,
         help="Write the unpruned graph (adjacency, features, targets, labels): --open "
         "reads it back and prunes it again at any threshold; any safetensors reader "
         "reads it too."),
    _opt("labels", "--labels", kind="texts", metavar="DIR", show_default=False,
         help="A `tfx top --sae ... -o DIR` folder (repeatable, one per layer): label the "
         "features by their top examples instead of their strongest output tokens."),
    _opt("output", "--output", "-o", kind="path", metavar="FILE.json", show_default=False,
         help="Write graph.json, the file circuit-tracer's frontend and Neuronpedia open."),
    _opt("html", "--html", kind="path", metavar="FILE", show_default=False,
         help="Write one self-contained offline page drawing the pruned graph."),
    _opt("max_links", "--max-links", kind="int", default=60_000, minimum=0, metavar="N",
         help="At most N edges in graph.json and the --html page, the strongest by "
         "circuit-tracer's edge score (a viewer chokes on millions); 0 keeps every pruned "
         "edge."),
    _opt("open", "--open", kind="path", metavar="FILE", show_default=False,
         help="Show a saved graph again, without the model: the unpruned FILE.safetensors "
         "of --save, pruned again at --node-threshold and --edge-threshold, or a graph.json "
         "(`tfx graph -o`'s or circuit-tracer's, pruned already). No TEXT, no model or "
         "transcoder options."),
)

# --force where a command writes nothing of its own: the model's memory check alone
MODEL_FORCE = _opt("force", "--force", kind="flag", default=False, panel=_MODEL,
                   help="Build the model even if it may not fit in memory.")

GROUPS: dict[str, tuple[str, ...]] = {
    "model": tuple(o.name for o in _MODEL_OPTIONS),
    "edits": tuple(o.name for o in _EDIT_OPTIONS),
    "ablations": ("ablate", "ablate_mode", "sae", "sae_site"),  # no steering
    "transcoder_edits": tuple(o.name for o in _TRANSCODER_EDIT_OPTIONS),
    "dataset": tuple(o.name for o in _CORPUS_OPTIONS),  # how a corpus is read
    "engine": tuple(o.name for o in _ENGINE_OPTIONS),
    "display": tuple(o.name for o in _DISPLAY_OPTIONS),
    "training": tuple(o.name for o in _TRAINING_OPTIONS),
    "graph_options": tuple(o.name for o in _GRAPH_OPTIONS),
}
OPTIONS: dict[str, Option] = {}
for _option in (*_MODEL_OPTIONS, *_EDIT_OPTIONS, *_TRANSCODER_EDIT_OPTIONS, *_CORPUS_OPTIONS,
                *_ENGINE_OPTIONS, *_DISPLAY_OPTIONS, *_TRAINING_OPTIONS, *_SINGLE_OPTIONS,
                *_GRAPH_OPTIONS):
    # one name, one declaration (groups may share one: --transcoders)
    if OPTIONS.setdefault(_option.name, _option) is not _option:
        raise ValueError(f"the option {_option.name} is declared twice")

# a group is handed to a command under its own name, so that name is no option's but
# (--engine in "engine") one of its own members
if not all(name not in OPTIONS or name in members for name, members in GROUPS.items()):
    raise ValueError("a group is named like an option it does not hold")


def _engine(value, option):  # a name, or an engine object as documented
    return value if hasattr(value, "map") and not isinstance(value, str) else \
        as_text(value, option)


def _floats(value, option):
    """One number or one per --steer (--scale)."""
    if isinstance(value, (list, tuple)):
        return [as_float(v, option, finite=True) for v in value]
    return as_float(value, option, finite=True)


def _share(value, option):
    """A share of a whole, 0 < x ≤ 1 (a threshold, a probability mass)."""
    number = as_float(value, option)
    if number is not None and not 0 < number <= 1:  # NaN is refused here too
        raise UsageError(f"{option} {number:g} is outside (0, 1]; give a share of the whole, "
                         f"e.g. {option} 0.5")
    return number


def _folder(value, option):
    """A file or folder name, given on as the text it is (an SAE folder: --sae)."""
    return None if value is None else str(as_path(value, option))


_BY_KIND: dict[str, Callable[[Any, str], Any]] = {
    "text": as_text, "choice": as_text, "flag": as_flag, "path": as_path, "names": as_names,
    "texts": as_texts, "floats": _floats, "folder": _folder, "engine": _engine,
    "float": lambda v, o: as_float(v, o, finite=True), "number": as_float, "share": _share,
}


def checker(option: Option) -> Callable[[Any, str], Any]:
    """How the API reads a value of `option`: its kind's reader, with its range."""
    if option.kind == "int":
        low, high = option.minimum, option.maximum
        return lambda v, o: as_int(v, o, minimum=low, maximum=high)
    return _BY_KIND[option.kind]


def checkers() -> dict[str, Callable[[Any, str], Any]]:
    """keyword -> its checker, for every declared option (and --force)."""
    return {name: checker(option) for name, option in OPTIONS.items()}
