"""Terminal views of the corpus commands: scan (a layers × heads heat map per metric),
top (each example as a strip of tokens shaded by the unit's value), collect (what was
written) and patch --pairs (the averaged effect). Nothing is computed here."""
from __future__ import annotations

import math

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.tokenizers.base import visible
from ...words import counted
from ..common import terminal_text
from ..matrix import TensorView, format_number
from . import ViewOptions, header, kv_table, register

MAX_UNITS = 16  # units drawn before --full


def corpus_line(console: Console, result) -> None:
    c = result.corpus
    what = f"{c['source']} ({c['kind']}" + (f", field {c['field']}" if c.get("field") else "") + ")"
    console.print(Text("corpus: ", style="dim") + Text(terminal_text(what)) + Text(
        f" · {counted(result.documents, 'document')}, {counted(result.windows, 'window')}, "
        f"{result.tokens:,} tokens · windows of ≤ {result.ctx} tokens, {result.batch_size} "
        "per batch", style="dim"), overflow="fold")
    if result.output:
        console.print(Text("output: ", style="dim") + Text(terminal_text(result.output)))


@register("scan")
def scan_view(result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    corpus_line(console, result)
    p = opts.precision
    for metric in result.metrics:
        name = f"scan.{metric}"
        title = (f"{name}  (rows layers, columns heads; mean over "
                 f"{result.queries[metric]:,} queries)")
        console.print(TensorView(name, result.tensors.array(name), result.tensors.dims(name),
                                 precision=p, full=opts.full, title=title))
    unmeasured = [m for m, n in result.queries.items() if not n]
    if unmeasured:
        console.print(Text(f"not measured (no query qualified: no token repeats in a "
                           f"window): {', '.join(unmeasured)}", style="dim"))
    table = Table(title=Text("strongest heads", style="bold"), title_justify="left",
                  box=None, padding=(0, 1), header_style="dim")
    table.add_column("metric", no_wrap=True)
    table.add_column("layer.head (value)", overflow="fold")
    for metric in result.metrics:
        heads = ", ".join(f"{h['layer']}.{h['head']} ({format_number(h['value'], p)})"
                          for h in result.strongest[metric])
        table.add_row(metric + (" (lowest)" if metric == "entropy" else ""), heads or "—")
    console.print(table)
    mean = result.tensors.array("scan.resid_norm_mean")
    top = result.tensors.array("scan.resid_norm_max")
    layers = Table(title=Text("per layer", style="bold"), title_justify="left", box=None,
                   padding=(0, 1), header_style="dim")
    for col in ("layer", "resid norm mean", "resid norm max",
                f"dead FFN neurons (of {result.ffn_width})"):
        layers.add_column(col, justify="right", no_wrap=True)
    for i in range(len(mean)):
        layers.add_row(str(i), format_number(float(mean[i]), p), format_number(float(top[i]), p),
                       f"{result.dead_neurons[i]:,}")
    console.print(layers)


def _strip(example, low: float, high: float) -> Text:
    """The example's tokens, the activating one reversed, the others shaded by value."""
    out = Text()
    for i, (piece, value) in enumerate(zip(example.context.tokens, example.context.values)):
        token = terminal_text(visible(piece))
        if i == example.context.at:
            out.append(token, style="bold reverse")
            continue
        if value is None or not math.isfinite(value) or high <= low:
            out.append(token, style="dim")
            continue
        share = max(0.0, min(1.0, (value - low) / (high - low)))
        level = int(232 + round(share * 12))  # grey 232 (dark) .. 244
        out.append(token, style=f"on color({level})" if share > 0.15 else "")
    return out


@register("top")
def top_view(result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    corpus_line(console, result)
    console.print(Text("site: ", style="dim") + Text(result.site) + Text(
        f" · {result.k} highest per unit, {result.context} tokens either side", style="dim"))
    noun = "unit"
    if result.sae is not None:
        noun = "feature"
        s = result.sae
        console.print(Text("SAE: ", style="dim") + Text(terminal_text(s.path)) + Text(
            f" · {s.architecture}" + (f" (k={s.k})" if s.k else "") +
            f", {s.d_in:,} → {s.d_sae:,} features", style="dim"))
    if result.html:
        console.print(Text("page: ", style="dim") + Text(terminal_text(result.html)))
    units = result.units if opts.full else result.units[:MAX_UNITS]
    for unit in units:
        values = [v for e in unit.examples for v in e.context.values
                  if v is not None and math.isfinite(v)]
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        table = Table(title=Text(f"{noun} {unit.unit}", style="bold"), title_justify="left",
                      box=None, padding=(0, 1), header_style="dim", show_header=False)
        table.add_column(justify="right", no_wrap=True)
        table.add_column(style="dim", no_wrap=True)
        table.add_column(overflow="fold")
        for e in unit.examples:
            table.add_row(format_number(e.value, opts.precision), f"doc {e.doc}:{e.position}",
                          _strip(e, low, high))
        if not unit.examples:
            table.add_row("—", "", Text("no token in the corpus", style="dim"))
        console.print(table)
    if len(units) < len(result.units):
        console.print(Text(f"{len(units)} of {len(result.units)} {noun}s shown (--full shows "
                           "all, --json holds all)", style="dim"))


@register("collect")
def collect_view(result, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    corpus_line(console, result)
    console.print(kv_table({
        "folder": result.output,
        "manifest": result.manifest,
        "shards": f"{len(result.shards)} × ≤ {result.shard_tokens:,} tokens"
                  + (f" ({result.resumed_shards} kept from before)" if result.resumed_shards
                     else ""),
        "rows": f"{result.tokens:,} tokens, in corpus order, {result.dtype}",
    }))
    table = Table(title=Text("sites", style="bold"), title_justify="left", box=None,
                  padding=(0, 1), header_style="dim")
    for col in ("site", "dims", "rows × width", "dtype"):
        table.add_column(col, no_wrap=True)
    shown = result.sites if opts.full or len(result.sites) <= 40 else result.sites[:40]
    for s in shown:
        table.add_row(s.name, "(" + ", ".join(s.dims) + ")",
                      f"{s.shape[0]:,} × {s.shape[1]:,}", s.dtype)
    console.print(table)


def pairs_view(result, console: Console, opts: ViewOptions) -> None:
    """`tfx patch --pairs`: called by the patch view for a PatchPairsResult."""
    header(console, result)
    p = opts.precision
    cells = "heads" if result.site == "heads" else "positions"
    console.print(kv_table({
        "pairs": f"{result.n_pairs} from {result.pairs_file}",
        "patched": f"{result.patched} ({result.site}; one {cells[:-1]} per cell)",
        "metric": result.metric,
        "m_clean (mean)": format_number(result.m_clean, max(p, 4)),
        "m_corrupt (mean)": format_number(result.m_corrupt, max(p, 4)),
        "effect": result.effect,
        "runs": f"{counted(result.batched_runs, 'forward pass', 'forward passes')} of up to "
                f"{result.batch} rows",
    }, precision=p))
    axes = {"T": None if result.site == "heads" else [terminal_text(visible(t))
                                                     for t in result.input.tokens]}
    for name, what in (("patch.effect", "mean over pairs"),
                       ("patch.effect_std", "standard deviation over pairs")):
        console.print(TensorView(name, np.asarray(result.tensors.array(name)),
                                 result.tensors.dims(name), axes=axes, precision=p,
                                 full=opts.full,
                                 title=f"{name}  ({what}: rows are layers, columns {cells})"))
