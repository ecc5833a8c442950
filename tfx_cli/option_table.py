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
- A command's own option: one `_opt(...)` in its `_block("command", ...)` in
  tfx_cli/option_blocks.py (blocks in the order of the commands' names), and the
  command's signature names it as a bare
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

from typing import Any, Callable

from .option_blocks import BLOCKS
from .option_kinds import (MODEL_PANEL as _MODEL, SEED_MAX, SITE_HELP, TEXT_HELP,  # noqa: F401
                           TRAIN_PANEL as _TRAIN, Option, checker)
from .option_kinds import _BY_KIND  # noqa: F401  (the kinds a test walks)
from .option_kinds import opt as _opt


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
         help="A transcoder set in circuit-tracer's layout: config.yaml (feature_input_hook, "
         "feature_output_hook, transcoders: one file per layer). tfx graph makes its graph "
         "of the set's features; next and generate set them (--set-feature) and run the "
         "text as tfx graph runs it: a special token first when it starts with none, so the "
         "prediction and the positions are the graph's."),
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



def options_of(command: str | None) -> dict[str, Option]:
    """name -> declaration, as `command` reads its options: its block over the shared
    ones (None: the shared ones alone)."""
    return {**OPTIONS, **BLOCKS.get(command or "", {})}


def checkers(command: str | None = None) -> dict[str, Callable[[Any, str], Any]]:
    """keyword -> its checker, for every option `command` reads (None: the shared ones)."""
    return {name: checker(option) for name, option in options_of(command).items()}
