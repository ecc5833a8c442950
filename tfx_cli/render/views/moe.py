"""Terminal view of `tfx route`: a tokens × layers table of the experts each token is
routed to (each expert in its own colour, its weight beside it), then each layer's load
over the text. Reads the RouteResult; computes nothing but which rows and columns fit."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import RouteResult
from ...words import counted
from ..common import display_tokens, head_tail
from . import ViewOptions, header, kv_table, register

# one colour per expert, cycling: expert e is PALETTE[e % len] in every layer
PALETTE = ("red", "green", "yellow", "blue", "magenta", "cyan", "bright_red",
           "bright_green", "bright_yellow", "bright_blue", "bright_magenta", "bright_cyan")
MAX_TOKENS = 24  # token rows before the middle is cut (--full shows all)
MAX_EXPERT_COLUMNS = 16  # load as one column per expert up to this many experts


def expert_text(e: int, weight: float | None = None, precision: int = 2) -> Text:
    text = Text(str(e), style=f"bold {PALETTE[e % len(PALETTE)]}")
    if weight is not None:
        text.append(f" {weight:.{precision}f}", style="dim")
    return text


def _cell(experts, weights, precision: int) -> Text:
    cell = Text()
    for j, (e, w) in enumerate(zip(experts, weights)):
        if j:
            cell.append("  ")
        cell.append_text(expert_text(int(e), float(w), precision))
    return cell


@register("route")
def route_view(result: RouteResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    E, k = result.n_experts, result.experts_per_token
    console.print(kv_table({
        "experts": f"{k} of {E} per token ({result.router} router"
                   + (", plus a shared expert" if result.shared_expert else "") + ")",
        "MoE layers": _layers(result.layers),
        **({"dense layers": _layers(result.dense_layers)} if result.dense_layers else {}),
    }))
    experts = result.tensors.array("route.experts")  # (L, T, k)
    weights = result.tensors.array("route.weights")
    tokens = display_tokens(result.tokens) or []
    precision = min(opts.precision, 2)
    # columns that fit: token column ~14 wide, each layer about k * (digits + 6)
    per_layer = k * (len(str(E - 1)) + precision + 4)
    fit = max(1, (console.width - 16) // (per_layer + 1))
    cols, cut_col = head_tail(len(result.layers), len(result.layers) if opts.full else fit)
    rows, cut_row = head_tail(len(tokens), len(tokens) if opts.full else MAX_TOKENS)
    table = Table(title=Text("experts per token and layer (expert weight)", style="bold"),
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1), pad_edge=False)
    table.add_column("token", no_wrap=True, overflow="ellipsis", max_width=14)
    for j, c in enumerate(cols):
        if j == cut_col:
            table.add_column("…", no_wrap=True)
        table.add_column(f"layer {result.layers[c]}", no_wrap=True)
    for i, t in enumerate(rows):
        if i == cut_row:
            table.add_row("…", *([""] * (len(cols) + (cut_col is not None))))
        cells = []
        for j, c in enumerate(cols):
            if j == cut_col:
                cells.append(Text("…", style="dim"))
            cells.append(_cell(experts[c, t], weights[c, t], precision))
        table.add_row(Text(f"{t} {tokens[t]}"), *cells)
    console.print(table)
    if cut_row is not None or cut_col is not None:
        console.print(Text(f"showing {len(rows)} of {len(tokens)} tokens and {len(cols)} of "
                           f"{len(result.layers)} layers; --full shows all, --json has "
                           "every number", style="dim"))
    _load_table(console, result, opts)


def _layers(layers: list[int]) -> str:
    if layers and layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}–{layers[-1]} ({len(layers)})"
    return ", ".join(map(str, layers))


def _load_table(console: Console, result: RouteResult, opts: ViewOptions) -> None:
    E = result.n_experts
    T = len(result.tokens)
    table = Table(title=Text(f"load: tokens routed to each expert over the text "
                             f"({counted(T, 'token')} × {result.experts_per_token})",
                             style="bold"),
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1), pad_edge=False)
    table.add_column("layer", justify="right", no_wrap=True)
    spread = E <= MAX_EXPERT_COLUMNS
    if spread:
        for e in range(E):
            table.add_column(expert_text(e), justify="right", no_wrap=True)
    else:
        table.add_column("busiest experts (tokens)", no_wrap=True)
        table.add_column("unused", justify="right", no_wrap=True)
    table.add_column("balance", justify="right", no_wrap=True)
    table.add_column(f"entropy (max {result.routing[0].max_entropy:.2f})", justify="right",
                     no_wrap=True)
    for lr in result.routing:
        if spread:
            peak = max(lr.load) or 1
            cells = [Text(str(n), style="bold" if n == peak else "dim" if n == 0 else "")
                     for n in lr.load]
        else:
            top = sorted(range(E), key=lambda e: (-lr.load[e], e))[:6]
            busy = Text()
            for j, e in enumerate(top):
                if lr.load[e]:
                    busy.append("  " if j else "")
                    busy.append_text(expert_text(e))
                    busy.append(f":{lr.load[e]}", style="dim")
            cells = [busy, Text(f"{len(lr.unused)}/{E}")]
        table.add_row(str(lr.layer), *cells, f"{lr.balance:.2f}", f"{lr.entropy:.2f}")
    console.print(table)
    console.print(Text("balance: E · Σ share² (1: every expert takes an equal share, "
                       f"{E}: one expert takes every token); entropy: of the router's "
                       "distribution over every expert, mean over the tokens, in nats",
                       style="dim"))


# ---------------------------------------------------------------- count-params

def moe_counts(console: Console, result, param_table, si) -> None:
    """count-params of a mixture of experts, after its MoE block: the dense layers' block
    (if any) and what one token uses, parameters and FLOPs."""
    moe = result.moe
    dense = moe.dense_per_block
    if dense is not None:
        where = ", ".join(map(str, moe.dense_layers))
        console.print(param_table(f"one dense block: blocks.{{i}}.*, i = {where}", dense.rows,
                                  dense.total, total_label="one dense block",
                                  n_layers=dense.n_layers))
        console.print()
    E, k = moe.n_experts, moe.experts_per_token
    console.print(kv_table({
        "experts": f"{k} of {E} per token in {counted(len(moe.moe_layers), 'MoE layer')}; "
                   f"one expert {moe.expert_params:,} parameters",
        "active parameters": f"{moe.active_params:,} per token ({si(moe.active_params)}, "
                             f"{100 * moe.active_share:.1f}% of {si(result.total)}): the "
                             f"total less the {E - k} experts a token skips in each MoE "
                             "layer, embeddings and head included; "
                             f"{moe.active_without_embedding:,} "
                             f"({si(moe.active_without_embedding)}) without the token "
                             "embedding table",
        "active FLOPs": f"{moe.active_flops_per_token:,} per token "
                        f"({si(moe.active_flops_per_token, 'FLOP')}) at T = "
                        f"{result.seq_len:,}; every expert on every token would be "
                        f"{si(moe.every_expert_flops_per_token, 'FLOP')}",
    }, title="mixture of experts"))
    console.print()
