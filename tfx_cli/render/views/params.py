"""Terminal views of `tfx count-params` (breakdown, memory, FLOPs) and `tfx configs`.

Laid out to read on an 80-column terminal: names and numbers never wrap, only the
describing column does.
"""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import ConfigsResult, CountParamsResult, ParamCheck
from ...words import counted
from . import register


def si(n: float, unit: str = "") -> str:
    """163009536 -> '163.0 M': decimal prefixes, as parameter counts are quoted."""
    for size, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f} {prefix}{unit}"
    return f"{n:,.0f} {unit}".rstrip()


def _shape(shape) -> str:
    if shape is None:
        return ""
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else ""


def _table(title: str | None, *, footer: bool = True) -> Table:
    return Table(title=Text(title, style="bold") if title else None, title_justify="left",
                 box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, padding=(0, 1),
                 pad_edge=False, show_footer=footer)


def _what(row) -> Text:
    text = Text(row.label)
    if row.note:
        text.append(f" · {row.note}", style="dim")
    return text


def _param_table(title: str, rows: list, total: int, *, total_label: str,
                 n_layers: int, n_decoder_layers: int = 0) -> Table:
    """One row per parameter tensor; share is of this table's total."""
    table = _table(title)
    table.add_column("parameter", footer=total_label, no_wrap=True)
    table.add_column("shape", justify="right", no_wrap=True)
    table.add_column("count", justify="right", footer=f"{total:,}", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("what", overflow="fold")
    for row in rows:
        dim = "dim" if row.count == 0 else ""
        n = n_decoder_layers if row.name == "decoder.blocks" else n_layers
        name = f"{row.name}.{{i}} × {n}" if row.name.endswith("blocks") else row.name
        table.add_row(Text(name, style=dim), _shape(row.shape),
                      Text(f"{row.count:,}", style=dim), _percent(row.count, total),
                      _what(row))
    return table


def _model_line(cfg) -> Text:
    heads = f"{cfg.n_heads} heads"
    if cfg.n_kv_heads != cfg.n_heads:
        heads += f" ({cfg.n_kv_heads} kv)"
    layers = counted(cfg.n_layers, "layer") if not cfg.is_encoder_decoder else \
        f"{cfg.n_layers} encoder + {counted(cfg.n_decoder_layers, 'decoder layer')}"
    parts = [f"d_model {cfg.d_model:,}", heads, layers,
             f"d_ff {cfg.d_ff:,}", f"context {cfg.context_length:,}",
             f"vocab {cfg.vocab_size:,}", f"{cfg.norm} {cfg.norm_position}",
             f"{cfg.positional} positions", cfg.activation, *cfg.features()]
    return Text(" · ".join(parts), style="dim")


@register("count-params")
def count_params_view(result: CountParamsResult, console: Console, opts=None) -> None:
    model = result.model
    title = Text("tfx count-params", style="bold").append(f" · {model.name}", style="not bold")
    if model.weights:
        title.append(f" · weights {model.weights} (architecture only)", style="not bold")
    console.print(title)
    console.print(_model_line(model.cfg))
    total, block = result.total, result.per_block
    console.print()
    n = block.n_layers
    dec = result.decoder_per_block
    console.print(_param_table("parameters", result.breakdown, total, total_label="total",
                               n_layers=n, n_decoder_layers=dec.n_layers if dec else 0))
    console.print()
    for stack, counts in (("encoder." if dec else "", block), ("decoder.", dec)):
        if counts is None:
            continue
        m = counts.n_layers
        where = f"{stack}blocks.0.*" if m == 1 else f"{stack}blocks.{{i}}.*, i = 0 … {m - 1}"
        kind = f"one {stack[:-1]} block" if stack else "one block"
        if result.moe is not None:  # a mixture of experts: the MoE layers' block
            kind, where = "one MoE block", f"blocks.{{i}}.*, i = {_layer_list(result.moe.moe_layers)}"
        console.print(_param_table(f"{kind}: {where}", counts.rows, counts.total,
                                   total_label=kind, n_layers=m))
        console.print()
    if result.moe is not None:  # its dense layers' block, and what a token uses
        from .moe import moe_counts

        moe_counts(console, result, _param_table, si)
    line = Text("total ", style="bold").append(f"{total:,}", style="bold")
    line.append(f" ({si(total)}; {result.non_embedding:,} without embeddings)")
    console.print(line)
    if result.tied:
        console.print(Text(f"tied: the output head shares the token embedding's "
                           f"{result.shared:,} parameters, counted once", style="dim"))
    console.print(Text(result.shape_convention, style="dim"))
    _memory(console, result.memory_bytes)
    _flops(console, result)
    if result.verify is not None:
        _verify(console, result.verify)


def _layer_list(layers: list[int]) -> str:
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]} … {layers[-1]}"
    return ", ".join(map(str, layers))


def _memory(console: Console, memory: dict) -> None:
    table = _table("weights in memory", footer=False)
    table.add_column("dtype", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    for name, n in memory.items():
        table.add_row(name, si(n, "B"), f"{n:,}")
    console.print()
    console.print(table)
    console.print(Text("int8 without quantisation scales; activations and KV cache not "
                       "included", style="dim"))


def _flops(console: Console, result: CountParamsResult) -> None:
    flops = result.flops
    T, n_layers = flops.seq_len, result.per_block.n_layers
    table = _table(f"forward FLOPs per token at T = {T:,}")
    table.add_column("matmul", footer="per token", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_column("FLOPs", justify="right", footer=f"{flops.per_token:,}", no_wrap=True)
    table.add_column("operands", overflow="fold", style="dim",
                     footer=si(flops.per_token, "FLOP"))
    for row in flops.block:  # one block, names relative to blocks.{i}
        table.add_row(row.name, row.label, f"{row.count:,}", row.note)
    table.add_section()
    for row in flops.rows:
        name = f"{row.name}.{{i}}" if row.name.endswith("blocks") else row.name
        if row.name == "blocks":
            name += f" × {n_layers}"
        table.add_row(name, row.label, f"{row.count:,}", row.note)
    console.print()
    console.print(table)
    attention = flops.per_token - flops.without_attention
    console.print(Text(f"linear layers {flops.without_attention:,} + attention matmuls "
                       f"{attention:,} (the part torchinfo omits)"))
    console.print(Text(f"per sequence of {T:,} tokens: {flops.per_sequence:,} "
                       f"({si(flops.per_sequence, 'FLOP')})"))
    if flops.causal_skip_per_token is not None:
        console.print(Text(f"if masked scores were skipped (causal): "
                           f"{flops.causal_skip_per_token:,} per token"))
    console.print(Text(f"convention: {result.flops_convention}", style="dim"))


def _verify(console: Console, check: ParamCheck) -> None:
    line = Text("verified: ", style="bold").append(
        "yes" if check.verified else "NO", style="green" if check.verified else "bold red")
    line.append(f" · the built model has {check.model_params:,} parameters in "
                f"{check.parameter_tensors} tensors; {check.modules} modules, "
                f"{check.modules_with_parameters} holding parameters; "
                f"built on the {check.built_on}")
    console.print()
    console.print(line)
    for note in check.notes:
        console.print(Text(note, style="dim"))
    if check.mismatched:
        console.print(Text("differ: " + ", ".join(check.mismatched[:12]), style="red"))


@register("configs")
def configs_view(result: ConfigsResult, console: Console, opts=None) -> None:
    sizes = _table("presets", footer=False)
    for name in ("name", "d_model", "heads", "layers", "d_ff", "context", "vocab",
                 "parameters"):
        sizes.add_column(name, justify="left" if name == "name" else "right", no_wrap=True)
    switches = _table(None, footer=False)
    for name in ("name", "norm", "at", "positions", "activation", "causal", "head"):
        switches.add_column(name, no_wrap=True)
    grouped = False
    for preset in result.presets:
        p = preset.cfg
        name = Text(p.name, style="bold" if p.name == result.default else "")
        heads = str(p.n_heads)
        if p.n_kv_heads != p.n_heads:
            heads, grouped = f"{heads} ({p.n_kv_heads})", True
        layers = f"{p.n_layers}+{p.n_decoder_layers}" if p.is_encoder_decoder else \
            str(p.n_layers)
        sizes.add_row(name, f"{p.d_model:,}", heads, layers, f"{p.d_ff:,}",
                      f"{p.context_length:,}", f"{p.vocab_size:,}", f"{preset.params:,}")
        head = ("tied" if p.tie_embeddings else "own") if p.lm_head else "none"
        switches.add_row(name, p.norm, p.norm_position, p.positional, p.activation,
                         "dec only" if p.is_encoder_decoder else
                         "yes" if p.causal else "no", head)
    console.print(sizes)
    if grouped:
        console.print(Text("heads (kv): query heads (key/value heads they share)", style="dim"))
    if any(pr.cfg.is_encoder_decoder for pr in result.presets):
        console.print(Text("layers 6+6: encoder + decoder blocks", style="dim"))
    console.print()
    console.print(switches)
    console.print()
    console.print(Text(f"default: {result.default}; pass --config NAME, or a JSON file like "
                       "samples/configs/NAME.json", style="dim"))
