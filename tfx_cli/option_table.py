"""Every option of every command, declared once: its flags, kind, range, default, help,
panel and metavar, the groups a command takes as a whole, and each command's own block.

Both layers read this table. The command line builds its Typer parameters from it
(tfx_cli/options.py: `@command`), the API its checkers (tfx_cli/api/_options.py:
`@checked`), so `tfx next --candidates 0` and `api.next(candidates=0)` are refused by the
same range, read from the same line, with the same words.

Where a name is looked up: a command's block (`BLOCKS["next"]`) first, then the shared
options (`OPTIONS`). A shared option means one thing wherever it is taken (`--heads`,
`--json`, `--target` of an encoder–decoder); an option in a block is that command's alone,
or that command's meaning of a shared flag: `next --candidates` (the rows listed, at least
1) and `report --candidates` (per position, 0 to 50) are two declarations, one in each
block, and `train --steps` is not the training group's `--steps`.

- An option of every command of a group: one `Option(...)` in that group's tuple below
  (GROUPS and OPTIONS are built from the tuples).
- A command takes a group, or a shared option, by naming it in its `@command(...)`; it
  receives one dict per group (`**edits` into the api call).
- A command's own option: one `_opt(...)` in its `_block("command", ...)` below (blocks
  in the order of the commands' names), and the command's signature names it as a bare
  keyword (`def next_token(*, text, temperature, ...)`); the API function of the same
  name (`api.next`) is checked by the same declaration.
- A new command: its `_block(...)` (if it has options of its own) and its `@command`.

A float's range (`minimum`/`maximum`, `min_open`/`max_open` for an open end) is checked
by the same reader on both layers (the command line calls it as the value is parsed); an
int's range is Click's on the command line and `as_int`'s, in Click's words, in the API.
Every "e.g." an error gives is `Option.example`, which lies in the range.

This module imports neither typer nor rich nor torch: `import tfx_cli.api` stays cheap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError
from .values import (as_choice, as_flag, as_float, as_int, as_names, as_path, as_text,
                     as_texts, as_units)

SEED_MAX = 2**64 - 1  # the largest seed torch.manual_seed accepts


@dataclass(frozen=True)
class Option:
    """One option as both layers read it. `kind` says what a value is (text, int,
    float (finite), flag (a default of None: on, off or not given), path, folder (a path
    given on as text), names (repeatable, comma lists), texts (repeatable), floats (one or
    many finite numbers), units ('0,5,9', '0:64' or a list of ints), layers (a text such
    as '0,1,5' or 'all', or a list of ints), choice (one of `choices`), engine (a name, or
    an engine object in the API)); `minimum`/`maximum` bound an int or a float,
    `min_open`/`max_open` leave a float's bound itself out. `flags` empty makes it a
    positional argument shown as `metavar` (or its NAME)."""
    name: str
    flags: tuple[str, ...]
    kind: str
    default: Any = None
    help: str = ""
    panel: str | None = None
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    show_default: bool | None = None  # None: Typer's own rule
    min_open: bool = False
    max_open: bool = False

    @property
    def many(self) -> bool:
        return self.kind in ("names", "texts", "floats")

    @property
    def spelled(self) -> str:
        """How a message names it: its first long flag (--tie of --tie/--no-tie), or an
        argument's METAVAR."""
        if not self.flags:
            return self.metavar or self.name.upper()
        flag = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return flag.split("/")[0]

    @property
    def ranged(self) -> bool:
        return self.minimum is not None or self.maximum is not None

    def holds(self, number: float) -> bool:
        """Whether `number` lies in the declared range."""
        low, high = self.minimum, self.maximum
        return (low is None or (number > low if self.min_open else number >= low)) and \
            (high is None or (number < high if self.max_open else number <= high))

    @property
    def example(self) -> float:
        """A value an error may suggest: the default, else the middle of a two-sided
        range, else 1 or a closed bound; always one the range holds."""
        low, high = self.minimum, self.maximum
        middle = (low + high) / 2 if low is not None and high is not None else None
        for value in (self.default, middle, 1, None if self.min_open else low,
                      None if self.max_open else high):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    math.isfinite(value) and self.holds(value):
                return value
        raise ValueError(f"{self.name}: no example lies in its range")

    @property
    def interval(self) -> str:
        """The range in words, for a float's message ("0 or more", "in (0, 1]")."""
        low, high = self.minimum, self.maximum
        if high is None:
            if self.min_open:
                return "a positive number" if low == 0 else f"above {low:g}"
            return f"{low:g} or more"
        if low is None:
            return f"below {high:g}" if self.max_open else f"{high:g} or less"
        return (f"in {'(' if self.min_open else '['}{low:g}, {high:g}"
                f"{')' if self.max_open else ']'}")


TEXT_HELP = "Input text; '-' reads standard input."
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

_TRANSCODER_EDIT_OPTIONS = (  # a transcoder set's features set (core/circuits/intervene.py)
    _opt("set_feature", "--set-feature", kind="texts", metavar="LAYER:POS:FEATURE=VALUE",
         show_default=False, panel="Transcoder features",
         help="Set a transcoder feature (repeatable; needs --transcoders): its FFN output "
         "changes by (VALUE − its activation) × its decoder row. POS is the position tfx "
         "graph gives it (a special token put first counts as 0)."),
    _opt("transcoders", "--transcoders", kind="folder", metavar="DIR", show_default=False,
         panel="Transcoder features",
         help="The transcoder set --set-feature's features belong to (circuit-tracer's "
         "layout). With it the text runs as tfx graph runs it: a special token first when "
         "it starts with none, so the prediction and the positions are the graph's."),
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
    _opt("gpus_per_worker", "--gpus-per-worker", kind="float", metavar="F", minimum=0,
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
         minimum=0, min_open=True, show_default=False, help="The width as a multiple of the input's (latents = X × "
         "d_in)."),
    _opt("l1", "--l1", kind="float", metavar="COEF", panel=_TRAIN, show_default=False,
         minimum=0, min_open=True,
         help="Train ReLU latents with this L1 penalty on their activations instead of TopK "
         "(what circuit-tracer 0.5.0 loads, for transcoders)."),
    _opt("lr", "--lr", kind="float", default=4e-4, minimum=0, min_open=True, panel=_TRAIN,
         help="Adam's learning rate."),
    _opt("steps", "--steps", kind="int", metavar="N", panel=_TRAIN, show_default=False,
         help="Adam steps (per layer for transcoders; default 1000)."),
    _opt("epochs", "--epochs", kind="float", metavar="E", panel=_TRAIN, show_default=False,
         minimum=0, min_open=True,
         help="Passes over the training tokens, instead of --steps."),
    _opt("holdout", "--holdout", kind="float", default=0.05, metavar="FRACTION",
         minimum=0, maximum=1, min_open=True, max_open=True,
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
    _opt("text", show_default=False, help=TEXT_HELP),  # the TEXT argument
    _opt("source", kind="folder", metavar="CORPUS", show_default=False,
         help="A .txt file (one document per non-empty line), a .jsonl or .parquet file "
         "(--field; one document per line or row), a folder of .txt files (one document "
         "per file, its lines together), or a built-in corpus: python-docs, "
         "repeated-tokens."),
    _opt("output", "--output", "-o", kind="path", metavar="DIR", show_default=False,
         help="Keep the run's state in DIR (resumable after a kill) and its result in "
         "DIR/result.json."),  # scan's, top's and eval-sae's: a run's state folder
    _opt("layer", "--layer", "-l", kind="int", default=0, help="Block to look at."),
    _opt("top_k", "--top-k", kind="int", show_default=False, panel="Sampling",
         help="Sample only among the K largest logits (ties with the K-th are kept). An "
         "error when K is larger than the vocabulary."),
    _opt("top_p", "--top-p", kind="float", minimum=0, maximum=1, min_open=True,
         show_default=False, panel="Sampling",
         help="Nucleus: sample only among the most likely tokens whose probability adds up "
         "to P, in (0, 1]. Applied after --temperature and --top-k."),
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
}
OPTIONS: dict[str, Option] = {o.name: o for o in (
    *_MODEL_OPTIONS, *_EDIT_OPTIONS, *_TRANSCODER_EDIT_OPTIONS, *_CORPUS_OPTIONS, *_ENGINE_OPTIONS, *_DISPLAY_OPTIONS,
    *_TRAINING_OPTIONS, *_SINGLE_OPTIONS)}

# a group is handed to a command under its own name, so that name is no option's but
# (--engine in "engine") one of its own members
if not all(name not in OPTIONS or name in members for name, members in GROUPS.items()):
    raise ValueError("a group is named like an option it does not hold")


# -- each command's own options ----------------------------------------------------------
# BLOCKS["next"]: what `next` alone takes, or takes with a meaning of its own; looked up
# before OPTIONS. One `_block` per command, in the order of the commands' names.
BLOCKS: dict[str, dict[str, Option]] = {}


def _block(command: str, *options: Option) -> None:
    if command in BLOCKS:
        raise ValueError(f"{command}: its options are declared in one block")
    BLOCKS[command] = {option.name: option for option in options}


_ENCDEC = "Encoder–decoder"
_SAMPLING = "Sampling"

_block(
    "attend",
    _opt("head", "--head", kind="int", show_default=False, help="One head (default: all)."),
    _opt("mask", "--mask", kind="choice", choices=("causal", "none"), show_default=False,
         help="causal or none (default: the config's; none with --kv). Applies to every "
         "layer up to --layer."),
    _opt("kv", "--kv", metavar="TEXT", show_default=False,
         help="Cross-attention: keys and values from this text, queries from TEXT."),
    _opt("valid_lens", "--valid-lens", kind="int", show_default=False,
         help="Padding mask: only the first N keys are visible (1..key length)."),
    _opt("show", "--show", kind="names", show_default=False,
         help="Stages to print, comma-separated: q, k, v, scores, scaled, masked, pattern, "
         "context, concat, out (q_rot, k_rot for RoPE). Default: pattern and a table of "
         "shapes."),
    _opt("explain", "--explain", kind="flag", default=False,
         help="Spell out one head and one query position with every number."),
    _opt("query_pos", "--query-pos", kind="int", show_default=False,
         help="Query position --explain spells out (default: the last)."),
    _opt("inputs", "--inputs", kind="path", metavar="FILE.json", show_default=False,
         help="Your own matrices instead of a model: JSON with x, w_q, w_k, w_v (optional "
         "w_o, scale, mask, tokens). See samples/seed000.json."),
    _opt("cross", "--cross", kind="flag", default=False, panel=_ENCDEC,
         help="The decoder's cross-attention (needs --target): queries from the target, "
         "keys and values from the encoder's output of TEXT."),
)

_block(
    "attribute",
    _opt("answer", "--answer", metavar="TOKEN", show_default=False,
         help="The token whose logit is split: one token (mind the leading space)."),
    _opt("wrong", "--wrong", metavar="TOKEN", show_default=False,
         help="Split logit(--answer) − logit(--wrong) instead: one token."),
    _opt("per_head", "--per-head", kind="flag", default=False,
         help="One part per attention head (its context times its slice of W_O) instead of "
         "one per layer. (--heads is the head-count override.)"),
)

_block(
    "collect",
    _opt("select", "--select", "-s", kind="names", show_default=False,
         help="Sites to store, names or globs (repeatable, or comma-separated), e.g. "
         "'blocks.*.resid_out'."),
    _opt("output", "--output", "-o", kind="path", metavar="DIR", show_default=False,
         help="The folder to write (created; a folder of the same run is resumed)."),
    _opt("shard_tokens", "--shard-tokens", kind="int", metavar="N", show_default=False,
         help="Rows (tokens) per shard file (default: about 64 MB of rows)."),
)

_block(
    "count-params",
    _opt("tie", "--tie/--no-tie", kind="flag", show_default=False,
         help="Tie the output head to the token embedding (counted once), or untie it. "
         "Default: the config's."),
    _opt("seq_len", "--seq-len", kind="int", minimum=1, show_default=False,
         help="Sequence length T for the FLOP count. Default: the context length."),
    _opt("vocab_size", "--vocab-size", kind="int", minimum=1, show_default=False,
         help="Count with this vocabulary size (e.g. the paper's 37000 shared BPE tokens for "
         "vaswani). Default: the config's."),
    _opt("verify", "--verify", kind="flag", default=False,
         help="Also build the model (shapes only, no weight memory; imports torch) and "
         "check its parameter count against the analytic one."),
)

_block(
    "features",
    _opt("per_token", "--per-token", kind="int", default=5, minimum=1, metavar="N",
         help="The most active features listed per token."),
)

_block(
    "generate",
    _opt("prompt", show_default=False, help=TEXT_HELP),
    _opt("max_new_tokens", "--max-new-tokens", "-n", kind="int", default=20,
         help="How many tokens to add (at least 1)."),
    _opt("temperature", "--temperature", kind="float", default=0.0, minimum=0,
         panel=_SAMPLING,
         help="0 is greedy (argmax, as LLMs-from-scratch's generate_text_simple); above 0 "
         "samples from softmax(logits / T). Must not be negative."),
    _opt("stop", "--stop", kind="texts", show_default=False,
         help="End as soon as the continuation contains TEXT; the text is cut before it "
         "(the ids keep every token). Repeatable."),
    _opt("candidates", "--candidates", kind="int", default=5, minimum=0,
         help="Most likely alternatives shown (and in JSON) per step."),
    _opt("no_cache", "--no-cache", kind="flag", default=False,
         help="Recompute the whole text every step instead of reusing cached keys and "
         "values (same tokens; for comparison)."),
    _opt("select", "--select", "-s", kind="names", show_default=False,
         help="Record these trace names (globs) at every step, as step.{i}.NAME: e.g. "
         "'blocks.0.attn.pattern'. Repeatable."),
    _opt("no_stream", "--no-stream", kind="flag", default=False,
         help="Do not echo the text to stderr while it is produced."),
    _opt("ignore_eos", "--ignore-eos", kind="flag", default=False,
         help="Go on past the model's end-of-sequence token (real weights bring one, e.g. "
         "SmolLM2's <|im_end|>); by default decoding stops there."),
    _opt("target", "--target", metavar="TEXT", show_default=False, panel=_ENCDEC,
         help="An encoder–decoder's target so far: decoding goes on after it (default: "
         "from the start token alone). PROMPT is the source."),
)

_block(
    "layernorm",
    _opt("which", "--which", kind="choice", default="ln1",
         choices=("ln1", "ln2", "ln3", "ln_f", "embed"),
         help="ln1 (before/after attention), ln2 (feed-forward; in a decoder block, "
         "cross-attention), ln3 (a decoder block's feed-forward), ln_f (final), embed "
         "(BERT's embedding norm)."),
)

_block(
    "next",
    _opt("temperature", "--temperature", kind="float", default=1.0, minimum=0,
         panel=_SAMPLING,
         help="Show softmax(logits / T); 0 puts all probability on the argmax (greedy)."),
    _opt("candidates", "--candidates", kind="int", default=10, minimum=1,
         help="How many of the most likely tokens to list."),
)

_block(
    "patch",
    _opt("clean", show_default=False, help=TEXT_HELP),
    _opt("corrupt", "--corrupt", metavar="TEXT", show_default=False,
         help="The corrupted text: as many tokens as CLEAN, differing where the answer "
         "should change."),
    _opt("answer", "--answer", metavar="TOKEN", show_default=False,
         help="CLEAN's answer: one token (mind the leading space, e.g. ' Paris')."),
    _opt("wrong", "--wrong", metavar="TOKEN", show_default=False,
         help="CORRUPT's answer: one token (e.g. ' Rome')."),
    _opt("site", "--site", kind="choice", default="resid_pre",
         choices=("resid_pre", "attn_out", "ffn_out", "heads", "features"),
         help="What one cell patches: resid_pre (block i's input at one position), "
         "attn_out, ffn_out (a sublayer's output at one position), heads (one head's "
         "context at every position), features (one feature of --sae's SAE at one "
         "position, the 32 features that differ most)."),
    _opt("batch", "--batch", kind="int", minimum=1, show_default=False,
         help="Cells run together in one forward pass (default: as many as fill 4,096 "
         "positions). 1 runs each cell alone: slower, and bit for bit the patched model "
         "run by itself; batched cells agree with that to float rounding."),
    _opt("pairs", "--pairs", kind="path", metavar="FILE.jsonl", show_default=False,
         help="Patch many prompt pairs and average: one {\"clean\", \"corrupt\", "
         "\"answer\", \"wrong\"} object per line, instead of CLEAN and the options. "
         "See samples/ioi_pairs.jsonl."),
)

_block(
    "posenc",
    _opt("length", "--length", "-n", kind="int", show_default=False,
         help="Show positions 0..N-1 instead of a text's positions."),
)

_block(
    "report",
    _opt("output", "--output", "-o", kind="path", metavar="FILE.html", show_default=False,
         help="The HTML file to write (.html)."),
    _opt("show_layers", "--show-layers", kind="layers", metavar="LIST", show_default=False,
         help="Layers to show in the attention views: '0,1,5', '0-3' or 'all' (default: "
         "all). (--layers changes the model's layer count.)"),
    _opt("candidates", "--candidates", kind="int", default=5, minimum=0, maximum=50,
         help="Most likely next tokens listed per position (causal models with an output "
         "head; 0 leaves them out)."),
)

_block(
    "top",
    _opt("site", "--site", metavar="SITE", show_default=False,
         help="A site with one row per token: blocks.3.ffn.act (neurons), "
         "blocks.3.resid_out (residual dimensions), blocks.3.attn.context (heads × head "
         "dim) ... With --sae: the SAE's site (default: the one its folder names)."),
    _opt("units", "--units", kind="units", metavar="LIST", show_default=False,
         help="Units of the site: 0,5,9 or 0:64 (default: all); with --sae, feature "
         "indices."),
    _opt("k", "-k", "--k", kind="int", default=10, help="Examples per unit."),
    _opt("around", "--around", kind="int", default=8, metavar="C",
         help="Tokens of context shown either side of each example (--context is the "
         "model's context length)."),
    _opt("html", "--html", kind="path", metavar="FILE", show_default=False,
         help="Also write a self-contained HTML page with a card per unit."),
)

_block(
    "trace",
    _opt("select", "--select", "-s", kind="names", show_default=False,
         help="Trace names or globs to record (repeatable, or comma-separated), e.g. "
         "'blocks.*.attn.pattern'. Default: everything."),
    _opt("values", "--values", kind="flag", default=False,
         help="Print the recorded values, not only names and shapes."),
)

_block(
    "train",
    _opt("pairs", "--pairs", kind="folder", metavar="FILE.tsv", show_default=False,
         help="Lines of source, a tab, then target, for an encoder–decoder (toy, vaswani), "
         "e.g. samples/seed001.tsv."),
    _opt("text", "--text", kind="folder", metavar="FILE", show_default=False,
         help="A text whose next tokens a decoder-only model learns."),
    _opt("output", "--output", "-o", kind="folder", metavar="DIR", show_default=False,
         help="The checkpoint folder to write (then --weights DIR in every command)."),
    _opt("steps", "--steps", kind="int", default=200, minimum=1, maximum=100_000,
         help="Adam updates, each over every example."),
    _opt("lr", "--lr", kind="float", default=0.01, minimum=0, min_open=True,
         help="Adam's learning rate."),
    _opt("tokenizer", "--tokenizer", "-t", kind="choice", choices=("word", "char"),
         show_default=False, panel=_MODEL,
         help="word or char: the vocabulary is built from the data (default: the config's "
         "if it is one of them, else word)."),
)

# what both trainers take beside the training group (the API's keywords; train-sae's
# command line shows them all): some named like other options (the corpus's
# --batch-size, the model's --seed), so declared in each trainer's block
_TRAINER = (
    _opt("batch_size", "--batch-size", kind="int", default=4096, metavar="TOKENS",
         panel=_TRAIN, help="Tokens per step."),
    _opt("seed", "--seed", kind="int", default=0, panel=_TRAIN,
         help="Initialisation and shuffling."),
    _opt("b_dec_init", "--b-dec-init", default="median", metavar="HOW",
         help="The decoder bias's start: median (geometric), mean or zeros."),
    _opt("dead_after", "--dead-after", kind="int", metavar="TOKENS", show_default=False,
         help="A latent is dead once it has not fired in this many training tokens "
         "(default: an epoch, at most 10M)."),
    _opt("aux_k", "--aux-k", kind="int", metavar="N", show_default=False,
         help="TopK's auxiliary loss: the N most active dead latents model the residual "
         "(default min(512, latents/2); 0 turns it off)."),
    _opt("aux_coef", "--aux-coef", kind="float", default=1 / 32, metavar="C",
         help="The auxiliary loss's weight."),
    _opt("score_tokens", "--score-tokens", kind="int", minimum=0, metavar="N",
         show_default=False,
         help="The CE-loss score of what was written (eval-sae's: its site or MLP replaced "
         "by the reconstruction) on up to N of the collect folder's last tokens, the model "
         "rebuilt from its manifest (default 4096; train-transcoder's, 4096 shared out "
         "among its layers, at least 512; left out with a note where the folder's model "
         "cannot be rebuilt); 0 skips it."),
)

_block(
    "train-sae",
    _opt("collect", kind="path", metavar="COLLECT_DIR", show_default=False,
         help="A folder written by tfx collect."),
    _opt("site", "--site", metavar="SITE", show_default=False,
         help="The collected site to train on, e.g. blocks.15.resid_out."),
    _opt("output", "--output", "-o", kind="path", metavar="SAE_DIR", show_default=False,
         help="The SAE folder to write (a killed run in it is continued)."),
    *_TRAINER,
)

_block("train-transcoder", *_TRAINER)


def options_of(command: str | None) -> dict[str, Option]:
    """name -> declaration, as `command` reads its options: its block over the shared
    ones (None: the shared ones alone)."""
    return {**OPTIONS, **BLOCKS.get(command or "", {})}


def _engine(value, option):  # a name, or an engine object as documented
    return value if hasattr(value, "map") and not isinstance(value, str) else \
        as_text(value, option)


def _folder(value, option):
    """A file or folder name, given on as the text it is (an SAE folder: --sae)."""
    return None if value is None else str(as_path(value, option))


def _maybe_flag(value, option):
    """A flag whose None means "not given" (count-params --tie/--no-tie)."""
    return None if value is None else as_flag(value, option)


def _layers(value, option):
    """Layers as report reads them: its text ('0,1,5', '0-3', 'all'), or a list of ints
    the command checks against the model."""
    return value if not isinstance(value, (str, bytes)) else as_text(value, option)


_BY_KIND: dict[str, Callable[[Any, str], Any]] = {
    "text": as_text, "path": as_path, "names": as_names, "texts": as_texts,
    "folder": _folder, "engine": _engine, "units": as_units, "layers": _layers,
}


def _number(option: Option) -> Callable[[Any, str], Any]:
    """A float's reader: finite, within the range; each message's example in it."""
    example = option.example

    def read(value, name):
        number = as_float(value, name, finite=True, example=example)
        if number is not None and not option.holds(number):
            raise UsageError(f"{name} {number:g} must be {option.interval}, e.g. "
                             f"{example:g}")
        return number

    return read


def checker(option: Option) -> Callable[[Any, str], Any]:
    """How a value of `option` is read (the API's reader, and a float's on the command
    line too): its kind's reader, with its range and choices."""
    if option.kind == "int":
        low, high = option.minimum, option.maximum
        return lambda v, o: as_int(v, o, minimum=low, maximum=high)
    if option.kind in ("float", "floats"):
        number = _number(option)
        if option.kind == "float":
            return number
        return lambda v, o: [number(x, o) for x in v] if isinstance(v, (list, tuple)) \
            else number(v, o)
    if option.kind == "choice":
        return lambda v, o: as_choice(v, o, option.choices)
    if option.kind == "flag":
        return as_flag if option.default is not None else _maybe_flag
    return _BY_KIND[option.kind]


def checkers(command: str | None = None) -> dict[str, Callable[[Any, str], Any]]:
    """keyword -> its checker, for every option `command` reads (None: the shared ones)."""
    return {name: checker(option) for name, option in options_of(command).items()}
