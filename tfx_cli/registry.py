"""The one registry: every command, the module that holds it, and the module of its view.

`cli.py` lists and loads commands from it (importing a command's module only when that
command runs), and `render.views` finds a result's terminal view from it (importing only
that view module). Pure data: importing it costs nothing.

`summary` is the first paragraph of the command's docstring, kept here so `tfx --help`
lists every command without importing any of them (a test keeps the two equal).
`panel` is the key in PANELS of the group it is listed under, in `tfx --help` and in the
site's CLI reference (a test fails for a command without one).
"""
from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    name: str  # as typed: tfx count-params
    module: str  # tfx_cli.commands.<module>
    func: str  # the Typer function in that module
    view: str | None  # tfx_cli.render.views.<view> registers the terminal view (None: generic)
    summary: str
    panel: str = ""  # a key of PANELS


# The groups of `tfx --help` and of the site, in the order a learner meets them: one key
# (as a Command's `panel`) -> the panel's title.
PANELS: dict[str, str] = {
    "stages": "Stages",
    "generation": "Generation and the lens",
    "interventions": "Interventions",
    "datasets": "Datasets",
    "features": "Features",
    "circuits": "Circuits",
    "models": "Models and counting",
}


COMMANDS: tuple[Command, ...] = (
    Command("tokenize", "tokenize", "tokenize", "tokenize",
            "Split TEXT into tokens and show each token's id.", panel="stages"),
    Command("embed", "embed", "embed", "stages",
            "Show each token's embedding row, its positional row and their sum (T, C).",
            panel="stages"),
    Command("posenc", "posenc", "posenc", "stages",
            "Show the positional encoding for TEXT's positions, or for --length N "
            "positions.", panel="stages"),
    Command("attend", "attend", "attend", "stages",
            "Show one layer's attention: Q, K, V, the raw scores QKᵀ, scaled (÷√d_k), "
            "masked, the pattern (softmax, rows sum to 1), the context (pattern·V), the "
            "heads joined and the output projection W_O.", panel="stages"),
    Command("layernorm", "layernorm", "layernorm", "stages",
            "Show one LayerNorm (or RMSNorm): per-token mean and variance, the normalised "
            "rows (mean ≈ 0, variance ≈ 1), γ (scale), β (shift) and the output.",
            panel="stages"),
    Command("ffn", "ffn", "ffn", "stages",
            "Show one feed-forward sublayer: its input, the hidden pre-activation (T, F), "
            "the activation (ReLU for toy, GELU-tanh for gpt124m, SiLU-gated for SwiGLU) "
            "and the output (T, C).", panel="stages"),
    Command("trace", "trace", "trace", "stages",
            "Run the whole forward pass on TEXT, record only the names --select picks, and "
            "show them as a tree with dims and shapes (values with --values; every tensor "
            "with --json).", panel="stages"),
    Command("configs", "configs", "configs", "params",
            "List the presets: sizes, switches and parameter counts.", panel="models"),
    Command("count-params", "count_params", "count_params", "params",
            "Count parameters, weight memory and forward FLOPs per token, from the config "
            "alone.", panel="models"),
    Command("generate", "generate", "generate", "generate",
            "Continue PROMPT token by token and show each step: the token chosen, its "
            "probability and the most likely alternatives.", panel="generation"),
    Command("next", "next", "next_token", "generate",
            "The model's distribution over the token after TEXT: the most likely tokens "
            "with their logits and probabilities (softmax of the logits).",
            panel="generation"),
    Command("lens", "lens", "lens", "generate",
            "Logit lens: what each layer would predict if the model stopped there.",
            panel="generation"),
    Command("patch", "patch", "patch", "interventions",
            "Activation patching: run CORRUPT, put in CLEAN's activation at one cell, and "
            "see how much of CLEAN's answer comes back.", panel="interventions"),
    Command("attribute", "attribute", "attribute", "interventions",
            "Direct logit attribution: which parts of the model write the answer's logit at "
            "the last position.", panel="interventions"),
    Command("graph", "graph", "graph", "circuits",
            "The attribution graph of TEXT's next token: which transcoder features, "
            "through which paths, write the most likely logits.", panel="circuits"),
    Command("train", "train", "train", "train",
            "Train a model from random weights on a few examples, as seed 001 describes "
            "it: the model sees the target, errs, is corrected (cross-entropy) and its "
            "weights are updated (Adam), until it answers right.", panel="models"),
    # mixtures of experts
    Command("route", "route", "route", "moe",
            "Show a mixture-of-experts model's router: for every MoE layer and token, the k "
            "experts it is routed to and their weights; each layer's load over the text and "
            "the router's entropy.", panel="models"),
    Command("features", "features", "features", "features",
            "Show a sparse autoencoder's features on TEXT: per token the most active "
            "features, how many fire (L0), and how well the SAE reconstructs its site.",
            panel="features"),
    Command("train-sae", "train_sae", "train_sae", "features",
            "Train a sparse autoencoder on a collect folder's site and write it in SAELens's "
            "format (read back with --sae).", panel="features"),
    Command("eval-sae", "eval_sae", "eval_sae", "features",
            "Judge a sparse autoencoder (or transcoder) over a corpus by SAEBench's core "
            "scores: sparsity, reconstruction, and how much of the model's loss it keeps.",
            panel="features"),
    Command("train-transcoder", "train_transcoder", "train_transcoder", "features",
            "Train per-layer transcoders on a collect folder's MLP input/output pairs and "
            "write them in circuit-tracer's layout (read by circuit-tracer's "
            "load_transcoder_set).", panel="circuits"),
    Command("report", "report", "report", None,
            "Write one self-contained HTML page: tokens, a layers × heads grid of attention "
            "maps, a clickable head view with hover values, layer-norm statistics, and the "
            "next-token top-k.", panel="stages"),
    # -- over a corpus (core/datasets) --
    Command("scan", "scan", "scan", "datasets",
            "Attention head statistics, residual norms and FFN activity over a corpus.",
            panel="datasets"),
    Command("top", "top", "top", "datasets",
            "Each unit's highest activations over a corpus (max-activating examples).",
            panel="datasets"),
    Command("collect", "collect", "collect", "datasets",
            "Write an activation dataset: DIR/shard-00000.safetensors ... (one 2-D tensor "
            "per site, rows = tokens in corpus order), DIR/tokens.parquet and "
            "DIR/manifest.json.", panel="datasets"),
)

BY_NAME = {command.name: command for command in COMMANDS}

# How a result draws itself outside the command line: "html" (result -> an HTML fragment,
# for a notebook's _repr_html_) and "rich" (result -> a Rich renderable, __rich__).
# core/results calls them; tfx_cli.api puts render.notebook's here when it is imported
# (the core may not import render).
DRAWERS: dict = {}


def find(name: str | None) -> Command | None:
    return BY_NAME.get(name or "")
