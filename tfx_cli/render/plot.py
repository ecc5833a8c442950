"""`--plot FILE`: draw a command's Result as a PNG or SVG with matplotlib.

The plot reads the very Result the terminal view and the JSON read: no second forward
pass, no numbers of its own. matplotlib is an optional extra (`tfx-cli[plot]`), imported
only here and only when --plot is given, with the Agg backend so no display is needed.

One drawing per command, chosen by the result's command:

  attend     one heat map per head, token labels on both axes, one shared colour bar
  posenc     the sinusoid stripes: positions down, dimensions across
  embed      each (T, C) tensor as a heat map, tokens down
  ffn        the hidden pre-activation, the activation and the output, tokens down
  layernorm  per-token mean and variance, before and after normalisation
  lens       layers x positions, shaded by the top token's probability, token text inside
  trace      the one selected tensor: 1-D bars, 2-D heat map, (H, ., .) a grid of heads
  patch      the effect as layers x positions (or heads), diverging around 0, values inside
  attribute  one horizontal bar per part, in forward order
  features   tokens x the text's strongest SAE features, shaded by activation

Files are written beside their final name and moved into place with os.replace
(core/outputs.atomic_file), so a failed or interrupted draw never leaves half a file, and
nothing is overwritten without --force (`check_output_path`).
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..core.outputs import atomic_file, check_output_file
from ..core.results import LayerNormResult, LensResult, Result
from ..errors import MissingPackageError, SelectError, UsageError
from .common import axis_labels, finite_range, layer_of, token_axes

PLOT_SUFFIXES = (".png", ".svg")
INSTALL = "pip install 'tfx-cli[plot]' (or pip install matplotlib)"
MAX_LABELS = 40        # an axis with more tokens than this labels every k-th one
MAX_PANELS = 64        # heads drawn before the grid would be unreadable
DIM_NAMES = {"T": "position", "S": "key position", "C": "dimension", "P": "position",
             "R": "frequency", "F": "ffn unit", "D": "head dim", "V": "vocabulary",
             "H": "head", "L": "layer"}


# ---------------------------------------------------------------- output files

def check_output_path(path, force: bool = False, *, suffixes: Sequence[str] = PLOT_SUFFIXES,
                      option: str = "--plot") -> Path:
    """The output file, once we know it can be written: right extension, parent folder
    present and writable, and either new or --force given. Call it before any work."""
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in suffixes:
        wanted = " or ".join(suffixes)
        got = f"'{path.suffix}'" if path.suffix else "no extension"
        raise UsageError(f"{option} {path}: unsupported file type ({got}); "
                         f"name the file with {wanted}")
    check_output_file(path, force, option=option, example="plot" + suffixes[0])
    return path


def atomic_output(path: Path, force: bool = False):
    """A context manager yielding a temporary path in `path`'s folder, moved onto `path`
    when the block ends well (core/outputs.atomic_file): readers see the old file or the
    new one, never half of one; a file that appeared meanwhile is kept without --force."""
    return atomic_file(path, force=force, mode="umask")


# ---------------------------------------------------------------- matplotlib

def require_matplotlib():
    """pyplot on the Agg backend, or MissingPackageError with the install command."""
    try:
        import matplotlib
    except ImportError:
        raise MissingPackageError(f"--plot needs matplotlib; install it with {INSTALL}") from None
    matplotlib.use("Agg", force=True)  # files only: never open a window
    # SVG element ids are salted with a random uuid unless a salt is set; a fixed one
    # makes the same command give the same file, as _metadata's missing date does
    matplotlib.rcParams["svg.hashsalt"] = "tfx"
    import matplotlib.pyplot as plt

    return plt


def check_plot(path, force: bool = False) -> None:
    """What a command calls first when --plot is given: fail before any work if the file
    cannot be written or matplotlib is missing."""
    if path is not None:
        check_output_path(path, force)
        require_matplotlib()


def plot_to(result: Result, path, force: bool = False) -> None:
    """Draw `result` into `path` when --plot was given, and say so on stderr."""
    if path is None:
        return
    from .emit import info

    written = plot_result(result, path, force)
    info(f"wrote {written}")


def plot_result(result: Result, path, force: bool = False) -> Path:
    """Draw `result` into `path` (.png or .svg). Returns the path written."""
    path = check_output_path(path, force)
    plt = require_matplotlib()
    draw = PLOTTERS.get(result.command) or plot_trace
    with warnings.catch_warnings():
        # a token whose glyph the font lacks draws as a box; that is not worth a warning
        warnings.simplefilter("ignore", UserWarning)
        fig = draw(result, plt)
        try:
            with atomic_output(path, force) as tmp:
                # constrained layout already fits the labels; bbox_inches="tight"
                # would draw the whole figure a second time
                fig.savefig(tmp, format=path.suffix.lower()[1:], dpi=110,
                            metadata=_metadata(path))
        finally:
            plt.close(fig)
    return path


def _metadata(path: Path) -> dict:
    # No creation date: the same command gives the same file.
    if path.suffix.lower() == ".svg":
        return {"Date": None, "Creator": "tfx"}
    return {"Software": "tfx"}


PlotFn = Callable[[Result, object], object]
PLOTTERS: dict[str, PlotFn] = {}


def plotter(*names: str):
    def add(fn: PlotFn) -> PlotFn:
        for name in names:
            PLOTTERS[name] = fn
        return fn

    return add


# ---------------------------------------------------------------- labels and grids

def tex_safe(text: str) -> str:
    """matplotlib reads $...$ as maths; a token like "$" must print as itself."""
    return text.replace("\\", "\\\\").replace("$", r"\$")


def plot_axes(result: Result) -> dict[str, list[str] | None]:
    """Token labels per dim letter (T queries, S keys), made safe for matplotlib."""
    return {dim: None if labels is None else [tex_safe(t) for t in labels]
            for dim, labels in token_axes(result).items()}


def label_axis(ax, axis: str, labels: Sequence[str] | None, size: int, fontsize: float) -> None:
    """Token labels on one axis (every k-th beyond MAX_LABELS), else plain positions."""
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    if labels is None:
        return
    step = max(1, math.ceil(size / MAX_LABELS))
    ticks = list(range(0, size, step))
    rotation = 90 if axis == "x" else 0
    set_ticks(ticks, [labels[i] for i in ticks], fontsize=fontsize, rotation=rotation)


def token_fontsize(n: int) -> float:
    return 9 if n <= 12 else 7 if n <= 24 else 5


def grid_shape(n: int) -> tuple[int, int]:
    """(rows, cols) near square with the fewest empty cells: 8 -> 2x4, 12 -> 3x4."""
    if n <= 3:
        return 1, n
    first = math.ceil(math.sqrt(n))
    best = min(range(first, first + 3), key=lambda c: (math.ceil(n / c) * c - n, c))
    return math.ceil(n / best), best


def finite_limits(array: np.ndarray) -> tuple[float, float]:
    """The colour limits of an array: its finite range, widened when it is one value."""
    found = finite_range(array)
    if found is None:
        return 0.0, 1.0
    lo, hi = found
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def heatmap_grid(plt, panels: list[tuple[str, np.ndarray]], *, dims: tuple[str, str],
                 labels: dict, cmap: str, title: str, colorbar_label: str,
                 vlimits: tuple[float, float] | None = None, cols: int | None = None):
    """Many (rows, cols) matrices on one shared colour scale, one colour bar for all.

    Masked cells (-inf, NaN) stay blank rather than take the lowest colour.
    """
    if len(panels) > MAX_PANELS:
        raise UsageError(f"--plot would draw {len(panels)} panels; select fewer heads or "
                         f"layers (at most {MAX_PANELS})")
    n_rows, n_cols = grid_shape(len(panels)) if cols is None else (
        math.ceil(len(panels) / cols), cols)
    T, S = panels[0][1].shape
    cell = min(4.2, max(2.4, 0.22 * max(T, S)))  # inches per panel
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(cell * n_cols + 1.2, cell * n_rows + 0.6),
                             squeeze=False, layout="constrained")
    vmin, vmax = vlimits or finite_limits(np.stack([m for _, m in panels]))
    row_labels = axis_labels(dims[0], T, labels)
    col_labels = axis_labels(dims[1], S, labels)
    fontsize = token_fontsize(max(T, S))
    image = None
    for ax, (name, matrix) in zip(axes.flat, panels):
        shown = np.ma.masked_invalid(matrix)
        image = ax.imshow(shown, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                          interpolation="nearest")
        ax.set_title(tex_safe(name), fontsize=10)
        label_axis(ax, "y", row_labels, T, fontsize)
        label_axis(ax, "x", col_labels, S, fontsize)
        ax.tick_params(length=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    row_name = "query position" if tuple(dims) == ("T", "S") else DIM_NAMES.get(dims[0], dims[0])
    for ax in axes[:, 0]:
        ax.set_ylabel(row_name, fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel(DIM_NAMES.get(dims[1], dims[1]), fontsize=8)
    fig.colorbar(image, ax=axes, label=colorbar_label, shrink=0.9)
    fig.suptitle(tex_safe(title), fontsize=12)
    return fig


def describe(result: Result) -> str:
    """'gpt124m · random weights, seed 123' or 'minilm · weights minilm'."""
    model = result.model
    if model is None:
        return "model"
    if model.weights:
        return f"{model.name} · weights {model.weights}"
    return f"{model.name} · random weights, seed {model.seed}" if model.seed is not None \
        else model.name


def _layer_label(name: str) -> str:
    layer = layer_of(name)
    return "" if layer is None else f"layer {layer} · "


# ---------------------------------------------------------------- attend

ATTN_PREFERENCE = ("pattern", "masked", "scaled", "scores", "context", "q", "k", "v")


@plotter("attend")
def plot_attention(result: Result, plt):
    """The pattern (or the first recorded stage) of every head, on one colour scale."""
    by_leaf = {n.rsplit(".", 1)[-1]: n for n in result.tensors.names()
               if result.tensors.dims(n)[:1] == ("H",)}
    leaf = next((leaf for leaf in ATTN_PREFERENCE if leaf in by_leaf), None)
    if leaf is None:
        return plot_matrices(result, plt, result.tensors.names())
    name = by_leaf[leaf]
    array, dims = result.tensors.array(name), result.tensors.dims(name)  # (H, T, S)
    heads = result.heads if len(result.heads) == len(array) else list(range(len(array)))
    panels = [(f"{_layer_label(name)}head {h}", array[k]) for k, h in enumerate(heads)]
    lo, hi = finite_limits(array)
    diverging = lo < 0 < hi
    bound = max(-lo, hi)
    # an encoder–decoder's cross-attention: target words (rows) reading source words
    what = "cross-attention" if ".cross." in name else \
        "decoder self-attention" if name.startswith("decoder.") else "attention"
    fig = heatmap_grid(plt, panels, dims=dims[1:], labels=plot_axes(result),
                       cmap="RdBu_r" if diverging else "viridis",
                       vlimits=(-bound, bound) if diverging else (min(lo, 0.0), hi),
                       title=f"{what} {leaf} · {describe(result)}",
                       colorbar_label="attention weight" if leaf == "pattern" else leaf)
    if ".cross." in name:
        for ax in fig.axes[:len(panels)]:
            if ax.get_ylabel():
                ax.set_ylabel("target position (query)", fontsize=8)
            if ax.get_xlabel():
                ax.set_xlabel("source position (key)", fontsize=8)
    return fig


# ---------------------------------------------------------------- posenc and embed

@plotter("posenc")
def plot_posenc(result: Result, plt):
    tr = result.tensors
    # the table itself (sinusoidal, learned); for RoPE the cos and sin it rotates by
    names = [n for n in ("posenc.table", "posenc.cos", "posenc.sin") if n in tr] or \
        [n for n in tr.names() if tr.array(n).ndim == 2]
    if not names:
        return plot_trace(result, plt)
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names) + 1, 5),
                             squeeze=False, layout="constrained")
    image = None
    for ax, name in zip(axes.flat, names):
        table = result.tensors.array(name)  # (P, C): one row per position
        dims = result.tensors.dims(name)
        bound = float(np.nanmax(np.abs(table[np.isfinite(table)]))) if np.isfinite(table).any() else 1.0
        image = ax.imshow(table, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"{tex_safe(name)} {tuple(table.shape)}", fontsize=10)
        ax.set_ylabel(DIM_NAMES.get(dims[0], dims[0]))
        ax.set_xlabel(DIM_NAMES.get(dims[1], dims[1]))
        label_axis(ax, "y", axis_labels(dims[0], table.shape[0], plot_axes(result)),
                   table.shape[0], token_fontsize(table.shape[0]))
        fig.colorbar(image, ax=ax, shrink=0.9)
    fig.suptitle(f"positional encoding · {describe(result)}", fontsize=12)
    return fig


@plotter("embed")
def plot_embed(result: Result, plt):
    names = [n for n in result.tensors.names() if result.tensors.array(n).ndim == 2]
    return plot_matrices(result, plt, names, title=f"embeddings · {describe(result)}")


@plotter("ffn")
def plot_ffn(result: Result, plt):
    names = [n for n in result.tensors.names() if result.tensors.array(n).ndim == 2]
    return plot_matrices(result, plt, names,
                         title=f"feed-forward, layer {result.layer} · {describe(result)}")


def plot_matrices(result: Result, plt, names: list[str], *, title: str | None = None):
    """Each 2-D tensor as its own heat map, stacked, each with its own colour bar."""
    names = [n for n in names if result.tensors.array(n).ndim == 2]
    if not names:
        raise UsageError("--plot found no matrix to draw in this result")
    labels = plot_axes(result)
    fig, axes = plt.subplots(len(names), 1, squeeze=False, layout="constrained",
                             figsize=(9, min(24, 2.0 + 3.2 * len(names))))
    for ax, name in zip(axes[:, 0], names):
        array, dims = result.tensors.array(name), result.tensors.dims(name)
        draw_matrix(ax, fig, name, array, dims, labels)
    fig.suptitle(tex_safe(title or describe(result)), fontsize=12)
    return fig


def draw_matrix(ax, fig, name: str, array: np.ndarray, dims: Sequence[str],
                labels: dict) -> None:
    found = finite_range(array)
    if found is not None and found[0] < 0 < found[1]:
        bound = max(-found[0], found[1])
        limits = dict(cmap="RdBu_r", vmin=-bound, vmax=bound)
    else:
        limits = dict(cmap="viridis")
    image = ax.imshow(np.ma.masked_invalid(array), aspect="auto", interpolation="nearest",
                      **limits)
    ax.set_title(f"{tex_safe(name)} ({', '.join(dims)}) {tuple(array.shape)}", fontsize=10)
    ax.set_ylabel(DIM_NAMES.get(dims[0], dims[0]), fontsize=8)
    ax.set_xlabel(DIM_NAMES.get(dims[1], dims[1]), fontsize=8)
    label_axis(ax, "y", axis_labels(dims[0], array.shape[0], labels), array.shape[0],
               token_fontsize(array.shape[0]))
    label_axis(ax, "x", axis_labels(dims[1], array.shape[1], labels), array.shape[1],
               token_fontsize(array.shape[1]))
    fig.colorbar(image, ax=ax, shrink=0.9)


# ---------------------------------------------------------------- layernorm

def norm_stats(result: LayerNormResult) -> dict[str, np.ndarray]:
    """Per-token statistics over C, before and after normalisation, as the result holds
    them: the norm's own mean and var taps (RMSNorm's var is the mean square), and the
    normalised rows' mean and variance (mean square for RMSNorm)."""
    tr, prefix = result.tensors, result.prefix
    rms = result.norm == "rmsnorm"
    stats: dict[str, np.ndarray] = {}
    if f"{prefix}.mean" in tr:
        stats["mean before"] = tr.array(f"{prefix}.mean")
    stats["var before"] = tr.array(f"{prefix}.var")
    stats["mean after"] = np.asarray(result.normed_mean)
    stats["var after"] = np.asarray(result.normed_mean_square if rms else result.normed_var)
    return stats


@plotter("layernorm")
def plot_layernorm(result: LayerNormResult, plt):
    tokens = plot_axes(result)
    rms = result.norm == "rmsnorm"
    stats = norm_stats(result)
    fig, row = plt.subplots(1, 2, squeeze=False, layout="constrained", figsize=(11, 3.8))
    for ax, what in zip(row[0], ("mean", "var")):
        before, after = stats.get(f"{what} before"), stats.get(f"{what} after")
        n = len(after)
        x = np.arange(n)
        if before is not None:
            ax.bar(x - 0.2, before, width=0.4, label="before", color="#4c72b0")
        ax.bar(x + 0.2, after, width=0.4, label="after", color="#dd8452")
        if what == "var":
            values = np.concatenate([v for v in (before, after) if v is not None])
            if values.min() > 0 and values.max() / values.min() > 50:
                ax.set_yscale("log")  # raw variances dwarf the normalised 1.0
        ax.axhline(0.0 if what == "mean" else 1.0, color="grey", lw=0.8, ls="--")
        label = "mean" if what == "mean" else "mean square" if rms else "variance"
        ax.set_title(f"{tex_safe(result.prefix)} · {label} per token", fontsize=10)
        ax.legend(fontsize=8)
        labels = axis_labels("T", n, tokens)
        if labels is not None:
            label_axis(ax, "x", labels, n, token_fontsize(n))
        else:
            ax.set_xlabel("position")
    fig.suptitle(f"layer norm before and after · {describe(result)}", fontsize=12)
    return fig


# ---------------------------------------------------------------- lens

@plotter("lens")
def plot_lens(result: LensResult, plt):
    from ..core.tokenizers.base import visible

    probs = np.asarray(result.top_probs, dtype=np.float64)  # (L, T)
    n_layers, T = probs.shape
    fig, ax = plt.subplots(figsize=(min(30, 1.5 + 0.9 * T), min(30, 1.5 + 0.45 * n_layers)),
                           layout="constrained")
    image = ax.imshow(probs, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    if T <= 48:
        fontsize = 7 if T <= 16 else 5
        for i in range(n_layers):
            for j in range(T):
                text = tex_safe(visible(str(result.top_tokens[i][j])))[:10]
                ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                        color="white" if probs[i, j] > 0.55 else "black")
    ax.set_yticks(range(n_layers), [tex_safe(r) for r in result.layers], fontsize=8)
    ax.set_ylabel("layer")
    label_axis(ax, "x", axis_labels("T", T, plot_axes(result)), T, token_fontsize(T))
    ax.set_xlabel("input position")
    fig.colorbar(image, ax=ax, label="top-token probability", shrink=0.9)
    ax.set_title(f"logit lens · {describe(result)}", fontsize=12)
    return fig


# ---------------------------------------------------------------- trace

@plotter("trace")
def plot_trace(result: Result, plt):
    names = result.tensors.names()
    if len(names) != 1:
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        raise SelectError(f"--plot draws one tensor but {len(names)} are selected "
                          f"({shown}); pass --select with one name, e.g. "
                          "--select blocks.0.attn.pattern")
    name = names[0]
    array, dims = result.tensors.array(name), result.tensors.dims(name)
    labels = plot_axes(result)
    if array.ndim == 3 and dims[0] == "H":
        panels = [(f"head {h}", array[h]) for h in range(array.shape[0])]
        lo, hi = finite_limits(array)
        diverging = lo < 0 < hi  # scores and values: blue below zero, red above
        bound = max(-lo, hi)
        return heatmap_grid(plt, panels, dims=dims[1:], labels=labels,
                            cmap="RdBu_r" if diverging else "viridis",
                            vlimits=(-bound, bound) if diverging else (lo, hi),
                            title=f"{name} ({', '.join(dims)}) · {describe(result)}",
                            colorbar_label=name.rsplit(".", 1)[-1])
    if array.ndim > 2:
        raise UsageError(f"--plot draws 1-D and 2-D tensors (or heads of one); {name} is "
                         f"({', '.join(dims)}) {tuple(array.shape)}")
    if array.ndim == 2:
        return plot_matrices(result, plt, [name])
    fig, ax = plt.subplots(figsize=(max(5, 0.35 * len(array) + 1.5), 3.5), layout="constrained")
    values = np.nan_to_num(array.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    ax.bar(np.arange(len(array)), values, color="#4c72b0")
    tick_labels = axis_labels(dims[0], len(array), labels) if dims else None
    if tick_labels is not None:
        label_axis(ax, "x", tick_labels, len(array), token_fontsize(len(array)))
    ax.set_xlabel(DIM_NAMES.get(dims[0], dims[0]) if dims else "")
    ax.set_title(f"{tex_safe(name)} ({', '.join(dims)}) · {describe(result)}", fontsize=10)
    return fig


# ---------------------------------------------------------------- patch and attribute

@plotter("patch")
def plot_patch(result: Result, plt):
    """The effect as layers × positions (or heads), values inside; an encoder–decoder's
    tables (encoder, decoder, cross-attention) one above the other."""
    from ..core.tokenizers.base import visible

    tables = getattr(result, "tables", None)  # an encoder–decoder's (none with --pairs)
    if tables:
        target = [tex_safe(visible(t)) for t in result.input.target.tokens]
        panels = [(f"patch.{t.part}.effect", t.patched, t.cells if t.cells != "target"
                   else target) for t in tables]
    else:
        panels = [("patch.effect", result.patched, "heads" if result.site == "heads"
                   else "source")]
    effects = [np.asarray(result.tensors.array(name), dtype=np.float64)
               for name, _, _ in panels]  # (L, T|H) each
    n = max(e.shape[1] for e in effects)
    heights = [e.shape[0] for e in effects]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, layout="constrained",
                             figsize=(min(30, 2.5 + 0.75 * n),
                                      min(30, sum(1.8 + 0.24 * h for h in heights))),
                             height_ratios=[max(h, 1) for h in heights])
    bound = max([1.0] + [float(np.nanmax(np.abs(e))) for e in effects if e.size])
    for ax, effect, (name, patched, columns) in zip(axes[:, 0], effects, panels):
        image = _patch_panel(ax, effect, bound, columns, result)
        if len(panels) > 1:
            ax.set_title(tex_safe(f"{name} · {patched}"), fontsize=9)
    fig.colorbar(image, ax=list(axes[:, 0]), label="effect (1: restores CLEAN's answer)",
                 shrink=0.9)
    patched = result.site if tables else result.patched  # the panels name theirs
    measured = f"logit({result.answer.token!r}) − logit({result.wrong.token!r})" \
        if hasattr(result, "answer") else f"mean over {result.n_pairs} pairs"
    fig.suptitle(tex_safe(f"activation patching · {patched} · {measured}\n"
                          f"{describe(result)}"), fontsize=10)
    return fig


def _patch_panel(ax, effect, bound: float, columns, result):
    """One layers × cells heat map with its values; columns: "heads", "source" (CLEAN's
    tokens, * where CORRUPT differs) or a list of labels (an encoder–decoder's target)."""
    from ..core.tokenizers.base import visible

    n_layers, n = effect.shape
    image = ax.imshow(effect, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto",
                      interpolation="nearest")
    if n * n_layers <= 600:
        fontsize = 7 if n <= 16 else 5
        for i in range(n_layers):
            for j in range(n):
                text = f"{effect[i, j]:.2f}".replace("-0.00", "0.00")  # rounding noise
                ax.text(j, i, text, ha="center", va="center",
                        fontsize=fontsize,
                        color="white" if abs(effect[i, j]) > 0.6 * bound else "black")
    step = max(1, math.ceil(n_layers / MAX_LABELS))
    rows = [f"#{k}" for k in result.features] if getattr(result, "features", None) else \
        [str(i) for i in range(n_layers)]
    ax.set_yticks(range(0, n_layers, step), rows[::step], fontsize=7)
    ax.set_ylabel("feature" if getattr(result, "features", None) else "layer")
    if columns == "heads":
        ax.set_xticks(range(n), [str(h) for h in range(n)], fontsize=7)
        ax.set_xlabel("head")
    elif columns == "source":
        differing = getattr(result, "differing_positions", [])  # none with --pairs
        labels = [tex_safe(visible(t)) + ("*" if i in differing else "")
                  for i, t in enumerate(result.tokens)]
        label_axis(ax, "x", labels, n, token_fontsize(n))
        ax.set_xlabel("position (* where CORRUPT differs)")
    else:
        label_axis(ax, "x", list(columns), n, token_fontsize(n))
        ax.set_xlabel("target position")
    return image


@plotter("attribute")
def plot_attribute(result: Result, plt):
    from .common import largest_parts

    values = [part.value for part in result.parts]
    chosen = largest_parts(values, 60)
    names = [tex_safe(result.parts[i].name) for i in chosen]
    shown = np.array([values[i] for i in chosen], dtype=np.float64)
    fig, ax = plt.subplots(figsize=(8, min(30, 1.5 + 0.22 * len(chosen))),
                           layout="constrained")
    colours = ["#2a9d5c" if v >= 0 else "#c0392b" for v in shown]
    ax.barh(np.arange(len(chosen)), shown, color=colours)
    ax.set_yticks(range(len(chosen)), names, fontsize=7 if len(chosen) <= 40 else 5)
    ax.invert_yaxis()  # forward order, top to bottom
    ax.axvline(0.0, color="grey", lw=0.8)
    what = f"logit({result.answer.token!r})"
    if result.wrong is not None:
        what += f" − logit({result.wrong.token!r})"
    ax.set_xlabel(tex_safe(f"contribution to {what}"))
    more = f" (the {len(chosen) - 1} largest parts)" if len(chosen) < len(values) else ""
    ax.set_title(tex_safe(f"direct logit attribution{more}: sum {result.sum_of_parts:.4g} = "
                          f"{result.logit_diff:.4g}\n{describe(result)}"), fontsize=10)
    return fig


# ---------------------------------------------------------------- scan (datasets)

@plotter("scan")
def plot_scan(result: Result, plt):
    """One layers × heads heat map per attention metric."""
    panels = [(metric, np.asarray(result.tensors.array(f"scan.{metric}"), dtype=np.float64))
              for metric in result.metrics]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1, 4.2),
                             squeeze=False, layout="constrained")
    for ax, (metric, values) in zip(axes[0], panels):
        image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", aspect="auto",
                          interpolation="nearest")
        ax.set_title(metric.replace("_", " "), fontsize=10)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        for n, set_ticks in zip(values.shape, (ax.set_yticks, ax.set_xticks)):
            set_ticks(range(0, n, max(1, -(-n // 16))))  # whole layers and heads only
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(tex_safe(f"tfx scan · {result.corpus['source']} · {result.tokens:,} tokens · "
                          f"{describe(result)}"), fontsize=11)
    return fig


# ---------------------------------------------------------------- features

FEATURE_COLUMNS = 40  # features drawn across (the strongest of the text)


def shown_features(result) -> list[int]:
    """The features to draw for a features result: every token's top features, the
    strongest first, at most FEATURE_COLUMNS (shared with the notebook picture)."""
    best: dict[int, float] = {}
    for pos in result.positions:
        for a in pos.top:
            best[a.index] = max(best.get(a.index, 0.0), a.activation)
    return sorted(best, key=lambda k: (-best[k], k))[:FEATURE_COLUMNS]


@plotter("features")
def plot_features(result, plt):
    """Tokens × the text's strongest features, shaded by activation, values inside."""
    from ..core.tokenizers.base import visible

    chosen = shown_features(result)
    acts = np.asarray(result.tensors.array("features.acts"), dtype=np.float64)  # (T, F)
    shown = acts[:, chosen] if chosen else np.zeros((acts.shape[0], 0))
    T, n = shown.shape
    fig, ax = plt.subplots(figsize=(min(30, 2.5 + 0.6 * max(n, 1)), min(30, 1.8 + 0.3 * T)),
                           layout="constrained")
    image = ax.imshow(np.ma.masked_equal(shown, 0.0), cmap="viridis", aspect="auto",
                      interpolation="nearest", vmin=0.0,
                      vmax=float(shown.max()) if shown.size and shown.max() > 0 else 1.0)
    if n * T <= 600:
        for i in range(T):
            for j in range(n):
                if shown[i, j] > 0:
                    ax.text(j, i, f"{shown[i, j]:.2g}", ha="center", va="center",
                            fontsize=6, color="white")
    ax.set_xticks(range(n), [f"#{k}" for k in chosen], fontsize=7, rotation=90)
    ax.set_xlabel("feature (blank: 0)")
    labels = [tex_safe(visible(t)) for t in result.tokens]
    label_axis(ax, "y", labels, T, token_fontsize(T))
    ax.set_ylabel("token")
    fig.colorbar(image, ax=ax, label="activation", shrink=0.9)
    fvu = "—" if result.fvu is None else f"{result.fvu:.3g}"
    ax.set_title(tex_safe(f"SAE features at {result.sae.site} · L0 {result.l0_mean:.1f} · "
                          f"FVU {fvu}\n{describe(result)}"), fontsize=10)
    return fig
