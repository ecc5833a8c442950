"""Each command's own options (`BLOCKS["next"]`): what one command alone takes, or its
own meaning of a flag another command also has, looked up before the shared options of
tfx_cli/option_table.py (whose text says how the table is read).

This module imports neither typer nor rich nor torch."""
from __future__ import annotations

from .option_kinds import MODEL_PANEL as _MODEL, TRAIN_PANEL as _TRAIN, TEXT_HELP, Option
from .option_kinds import opt as _opt

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

_block(  # every default of tfx graph is here alone; api.graph reads them from here too
    "graph",
    _opt("max_logits", "--max-logits", kind="int", default=10, minimum=1,
         help="At most this many logit targets."),
    _opt("logit_prob", "--logit-prob", kind="float", default=0.95, minimum=0, maximum=1,
         min_open=True,
         help="Take the most likely tokens until their probabilities add up to this."),
    _opt("targets", "--target", kind="texts", metavar="TOKEN", show_default=False,
         help="A logit target of your own (one token; repeatable, each token once) instead "
         "of the likeliest."),
    _opt("max_features", "--max-features", kind="int", default=7500, minimum=1,
         help="Rows for at most this many active features, the most influential first "
         "(circuit-tracer's ranking)."),
    _opt("node_threshold", "--node-threshold", kind="float", default=0.8, minimum=0,
         maximum=1, min_open=True,
         help="Keep the nodes carrying this share of the influence on the logits."),
    _opt("edge_threshold", "--edge-threshold", kind="float", default=0.98, minimum=0,
         maximum=1, min_open=True,
         help="Keep the edges carrying this share of the influence."),
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
