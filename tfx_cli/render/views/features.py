"""Terminal view of `tfx features`: the SAE, then a token × top-features table (each
cell a feature's index and activation, shaded by it), then how well the SAE
reconstructs its site over the text."""
from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Console
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from ...core.results import FeaturesResult
from ..common import display_tokens, head_tail, terminal_text
from ..matrix import format_number, heat_scale
from . import header, kv_table, register

MAX_ROWS = 40  # tokens shown before the head and tail (--full shows all)
LABEL = 14  # characters of a token shown


def sae_lines(sae) -> dict:
    """What the SAE is and where it reads, as key -> text (shared by the views that ran
    with one: features, patch --site features, attribute --sae)."""
    what = f"{sae.architecture}" + (f", k={sae.k}" if sae.k is not None else "")
    site = sae.site if sae.site == sae.name else f"{sae.site} (= {sae.name})"
    if sae.hook and sae.hook != sae.site:
        site += f", its file's {sae.hook}"
    lines = {"sae": f"{sae.path} ({sae.format}, {what})",
             "site": site + (f" → {sae.site_out}" if sae.site_out else ""),
             "features": f"{sae.d_sae:,}, reading {sae.d_in:,} numbers per token"}
    for note in sae.notes or ():
        lines.setdefault("note", note)
    return lines


@register("features")
def features_view(result: FeaturesResult, console: Console, opts) -> None:
    header(console, result)
    p = opts.precision
    console.print(kv_table(sae_lines(result.sae), precision=p))
    acts = [a.activation for pos in result.positions for a in pos.top]
    scale = heat_scale(np.asarray(acts + [0.0], dtype=np.float64))
    tokens = display_tokens([pos.token for pos in result.positions]) or []
    shown, cut = head_tail(len(result.positions), len(result.positions) if opts.full
                           else MAX_ROWS)
    rows = []
    for t in shown:
        pos = result.positions[t]
        rows.append((str(t), terminal_text(tokens[t])[:LABEL], str(pos.l0),
                     "—" if pos.cosine is None else format_number(pos.cosine, p),
                     format_number(pos.error_norm, p),
                     [(f"#{a.index} {format_number(a.activation, p)}", a.activation)
                      for a in pos.top]))
    heads = ("pos", "token", "L0", "cos", "|x − x̂|")
    fixed = sum(max([cell_len(h)] + [cell_len(r[i]) for r in rows]) + 2
                for i, h in enumerate(heads))
    cell = max([cell_len(c) for r in rows for c, _ in r[5]] + [3]) + 2
    columns = result.per_token if opts.full else \
        max(1, min(result.per_token, (console.width - fixed - 2) // cell))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                  title=Text(f"top {result.per_token} features per token (#index activation)",
                             style="bold"))
    for name, justify in zip(heads, ("right", "left", "right", "right", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    for i in range(columns):
        table.add_column(f"#{i + 1}", justify="right", no_wrap=True)
    for n, row in enumerate(rows):
        if cut is not None and n == cut:
            table.add_row("⋮", *[""] * (4 + columns))
        cells = [Text(text, style=(scale.style(a) if scale is not None else None) or "")
                 for text, a in row[5][:columns]]
        cells += [""] * (columns - len(cells))
        table.add_row(row[0], Text(row[1]), row[2], row[3], row[4], *cells)
    console.print()
    console.print(table)
    if cut is not None:
        console.print(Text(f"{len(shown)} of {len(result.positions)} tokens (--full shows "
                           "all)", style="dim"))
    if columns < result.per_token:
        console.print(Text(f"{columns} of {result.per_token} features per token fit the "
                           "width (--full shows all, --json holds all)", style="dim"))
    summary = {
        "L0": f"{format_number(result.l0_mean, 2)} features per token on average",
        "FVU": "— (one token has no variance)" if result.fvu is None else
               f"{format_number(result.fvu, max(p, 4))}  (Σ|x − x̂|² / Σ|x − mean x|²)",
        "cosine": "—" if result.cosine_mean is None else
                  f"{format_number(result.cosine_mean, max(p, 4))} on average",
        "|x − x̂|": f"{format_number(result.error_norm_mean, p)} on average",
        "silent": f"{result.dead:,} of {result.sae.d_sae:,} features fire on no token",
    }
    console.print(kv_table(summary, precision=p))
    if result.top_features:
        top = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                    title=Text("strongest features of the text", style="bold"))
        for name in ("feature", "max", "at", "tokens"):
            top.add_column(name, justify="left" if name == "at" else "right", no_wrap=True)
        for f in result.top_features:
            top.add_row(f"#{f.index}", format_number(f.max_activation, p),
                        Text(f"{f.position} {terminal_text(tokens[f.position])!r}"),
                        str(f.tokens))
        console.print()
        console.print(top)


def _resumed(result) -> str:
    if result.resumed_from >= result.steps:
        return "; already finished in this folder, nothing trained"
    return f"; resumed at step {result.resumed_from:,}" if result.resumed_from else ""


@register("train-sae")
def train_sae_view(result, console: Console, opts) -> None:
    """What was trained on what, and how it does on the held-out tokens."""
    header(console, result)
    p = opts.precision
    what = ("TopK" + f" (k={result.k})") if result.architecture == "topk" else \
        f"ReLU (L1 {format_number(result.l1, p)})"
    console.print(kv_table({
        "data": f"{result.collect} · {result.site} ({result.d_in:,} wide) · "
                f"{result.train_tokens:,} training tokens, {result.holdout_tokens:,} held out",
        "SAE": f"{what}, {result.d_in:,} → {result.latents:,} latents",
        "training": f"{result.steps:,} steps × {result.batch_size:,} tokens "
                    f"({result.epochs:.2f} epochs), Adam lr {result.lr:g}, seed {result.seed}"
                    + _resumed(result),
        "loss": f"{format_number(result.loss_first, p)} → {format_number(result.loss_last, p)}",
        "time": f"{result.seconds:.1f} s" + (f" · {result.tokens_per_s:,.0f} tokens/s"
                                             if result.tokens_per_s else ""),
        "written": f"{result.output} (cfg.json + sae_weights.safetensors, hook "
                   f"{result.hook_name})",
    }, precision=p))
    held = Table(title=Text("held-out tokens", style="bold"), title_justify="left", box=None,
                 padding=(0, 1), show_header=False)
    held.add_column(style="dim", no_wrap=True)
    held.add_column()
    held.add_row("FVU", "—" if result.fvu is None else format_number(result.fvu, p))
    held.add_row("L0", format_number(result.l0, p))
    held.add_row("dead", f"{result.dead:,} of {result.latents:,} latents fire on none "
                         f"({100 * result.dead_fraction:.1f}%); {result.dead_in_training:,} "
                         f"had not fired in the last {result.dead_after:,} training tokens")
    if result.score_tokens is not None:
        held.add_row("CE-loss score", ("—" if result.ce_loss_score is None else
                                       format_number(result.ce_loss_score, p))
                     + f" (the site replaced, on the collect folder's last "
                       f"{result.score_tokens:,} tokens)"
                     + (f"; {noisy_note(result.ce_ablation_delta, 'the site')}"
                        if result.ce_loss_score_noisy else ""))
    elif result.score_note:
        held.add_row("CE-loss score", f"not measured: {result.score_note}")
    console.print(held)


def noisy_note(delta: float, what: str, more: str = "--score-tokens") -> str:
    """Why a CE-loss score is flagged noisy: its denominator, what zeroing adds to the
    loss (`delta`: the largest of the flagged), is under 5% of the clean loss."""
    return (f"noisy: zeroing {what} adds under 5% of the clean loss ({delta:+.4f} nats or "
            "less), so the score's denominator is small and it can pass 1 or fall below "
            f"0; score on more tokens ({more}) and read it with the FVU")


@register("eval-sae")
def eval_sae_view(result, console: Console, opts) -> None:
    """The SAE (or transcoder set), the corpus read, then SAEBench's core scores; a set's
    per layer first."""
    from .datasets import corpus_line

    header(console, result)
    corpus_line(console, result)
    p = opts.precision
    num = lambda v: "—" if v is None else format_number(v, p)
    if result.transcoders is not None:
        console.print(kv_table(set_lines(result.transcoders), precision=p))
        console.print(eval_layers_table(result.layers, p))
        n = result.transcoders.n_layers * result.transcoders.width
        where, zeroed, rebuilt = "every MLP", "MLPs zeroed", "replaced"
    else:
        console.print(kv_table(sae_lines(result.sae), precision=p))
        n = result.sae.d_sae
        where, zeroed, rebuilt = "site", "site zeroed", "reconstructed"
    scores = Table(title=Text("SAEBench core scores" + (" of the set, every MLP replaced"
                                                        if result.layers else ""),
                              style="bold"), title_justify="left",
                   box=None, padding=(0, 1), show_header=False)
    scores.add_column(style="dim", no_wrap=True)
    scores.add_column()
    scores.add_row("L0", f"{num(result.l0)} features per token"
                   + (" (mean of the layers)" if result.layers else ""))
    scores.add_row("FVU", f"{num(result.fvu)} (explained variance "
                          f"{num(result.explained_variance)})"
                   + (f", pooled over the layers" if result.layers else ""))
    scores.add_row("cosine", num(result.cosine))
    scores.add_row("CE loss", f"clean {num(result.ce_clean)} · {zeroed} "
                              f"{num(result.ce_ablation)} · {rebuilt} "
                              f"{num(result.ce_replaced)} over {result.predicted:,} positions")
    noisy = noisy_note(result.ce_ablation_delta, "the site" if where == "site" else where,
                       "more of the corpus") if result.ce_loss_score_noisy else None
    scores.add_row("CE-loss score", num(result.ce_loss_score) + (f"; {noisy}" if noisy else ""))
    scores.add_row("KL", f"{zeroed} {num(result.kl_ablation)} · {rebuilt} "
                         f"{num(result.kl_replaced)}")
    scores.add_row("KL score", num(result.kl_score))
    scores.add_row("dead", f"{result.dead:,} of {n:,} features active on no token")
    scores.add_row("dense", f"{result.dense:,} active on more than "
                            f"{100 * result.dense_above:g}% of tokens")
    if where != "site":
        scores.add_row("replaced", "each MLP output by its transcoder's reconstruction "
                                   "from its input in the replaced run (no error term)")
    console.print(scores)


def set_lines(info) -> dict:
    """What a transcoder set is, as key -> text."""
    return {"transcoders": f"{info.path} ({info.kind}, {info.activation}"
                           + (", skip path" if info.skip else "") + ")",
            "sites": f"blocks.I.{info.site} ({info.feature_input_hook}) → blocks.I.ffn.out "
                     f"({info.feature_output_hook})",
            "sizes": f"{info.n_layers} layers × {info.width:,} features, d_model "
                     f"{info.d_model:,}"}


def eval_layers_table(layers, p: int) -> Table:
    """One row per layer of a transcoder set, on the clean run's MLP input and output."""
    num = lambda v: "—" if v is None else format_number(v, p)
    table = Table(title=Text("per layer, on the clean run", style="bold"),
                  title_justify="left", box=None, padding=(0, 1), header_style="dim")
    for col in ("layer", "L0", "FVU (MLP out)", "explained var.", "cosine", "dead", "dense"):
        table.add_column(col, justify="right", no_wrap=True)
    for row in layers:
        table.add_row(str(row.layer), num(row.l0), num(row.fvu),
                      num(row.explained_variance), num(row.cosine), f"{row.dead:,}",
                      f"{row.dense:,}")
    return table


@register("train-transcoder")
def train_transcoder_view(result, console: Console, opts) -> None:
    """What was trained, then one row per layer: held-out FVU, L0, dead latents, loss."""
    header(console, result)
    p = opts.precision
    what = ("TopK" + f" (k={result.k})") if result.architecture == "topk" else \
        f"JumpReLU (L0 {format_number(result.jumprelu, p)})" if result.jumprelu else \
        f"ReLU (L1 {format_number(result.l1, p)})"
    console.print(kv_table({
        "data": f"{result.collect} · blocks.I.{result.input_site} → blocks.I.ffn.out",
        "transcoders": f"{what}, {result.d_in:,} → {result.latents:,} latents"
                       + (", with a skip path W_skip" if result.skip else ""),
        "training": f"Adam lr {result.lr:g}, {result.batch_size:,} tokens per step, seed "
                    f"{result.seed}" + (f" · {result.seconds:.1f} s, "
                                        f"{result.tokens_per_s:,.0f} tokens/s"
                                        if result.tokens_per_s else ""),
        "written": f"{result.output} (layer_I.safetensors; "
                   + (f"config.yaml: {result.feature_input_hook} → "
                      f"{result.feature_output_hook})" if result.config else
                      f"config.yaml once every layer has a file: missing "
                      f"{', '.join(map(str, result.missing))})"),
    }, precision=p))
    table = Table(title=Text("held-out tokens, per layer", style="bold"), title_justify="left",
                  box=None, padding=(0, 1), header_style="dim")
    scored = result.score_tokens is not None
    for col in ("layer", "FVU (MLP out)", "L0", "dead", "loss", "steps",
                *(("CE-loss score",) if scored else ())):
        table.add_column(col, justify="right", no_wrap=True)
    num = lambda v: "—" if v is None else format_number(v, p)
    for row in result.layers:
        done = "already trained" if row.resumed_from >= row.steps else (
            f"{row.steps:,} (from {row.resumed_from:,})" if row.resumed_from else
            f"{row.steps:,}")
        table.add_row(str(row.layer), num(row.fvu),
                      format_number(row.l0, p), f"{row.dead:,}",
                      f"{format_number(row.loss_first, p)} → {format_number(row.loss_last, p)}",
                      done, *((num(row.ce_loss_score) + ("*" if row.ce_loss_score_noisy
                                                         else ""),) if scored else ()))
    console.print(table)
    if any(row.ce_loss_score_noisy for row in result.layers):
        noisy = [row.layer for row in result.layers if row.ce_loss_score_noisy]
        console.print(Text.assemble(("* ", "dim"), f"layer{'s' if len(noisy) > 1 else ''} "
                                    f"{', '.join(map(str, noisy))}: " + noisy_note(
                                        max(row.ce_ablation_delta for row in result.layers
                                            if row.ce_loss_score_noisy), "the MLP")))
    if scored:
        console.print(Text.assemble(
            ("CE-loss score ", "dim"), f"on the collect folder's last {result.score_tokens:,} "
            "tokens: per layer, its MLP alone replaced; ",
            ("the set, every MLP replaced: ", "dim"),
            num(result.ce_loss_score) if result.config else "once every layer has a file"))
    elif result.score_note:
        console.print(Text.assemble(("CE-loss score ", "dim"),
                                    f"not measured: {result.score_note}"))
