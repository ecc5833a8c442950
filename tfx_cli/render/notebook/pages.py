"""One HTML drawing per command, from the result alone: the pictures `--plot` and the
report draw (attention per head, the lens as layers × positions, patching effects,
attribution bars, features per token), as notebook HTML (pictures.py)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..common import display_tokens, intervention_text, largest_parts, token_axes
from .pictures import Scale, bars, esc, heatmap, kv, number, rows_table, token_strip

Page = Callable[[object], str]
PAGES: dict[str, Page] = {}
MAX_TENSORS = 12  # tensors drawn by the generic page (trace, stages)
MAX_HEADS = 16  # heads drawn side by side


def page(*names: str):
    def add(fn: Page) -> Page:
        for name in names:
            PAGES[name] = fn
        return fn

    return add


# -- what every page starts with ---------------------------------------------------------
def header(result) -> str:
    model = result.model
    line = f"<b>tfx {esc(result.command)}</b>"
    if model is not None:
        line += f" · {esc(model.name)}"
        line += f" · weights {esc(model.weights)}" if model.weights else \
            f" · random weights, seed {esc(model.seed)}" if model.seed is not None else ""
    out = [f"<div>{line}</div>"]
    data = result.input
    if data is not None and data.tokens:
        tokens = display_tokens(result.tokens) or []
        if data.text is not None:
            out.append(f'<div class="tfx-note">text: {esc(repr(data.text))} '
                       f"({len(data.tokens)} tokens)</div>")
        out.append(token_strip(tokens, result.input.ids if result.stack != "decoder" else
                               result.input.target.ids))
    changes = getattr(result, "interventions", None)
    if changes:
        out.append('<div class="tfx-changed">changed: '
                   f'{esc("; ".join(intervention_text(c) for c in changes))}</div>')
    return "".join(out)


def scalars(result) -> str:
    """The result's own numbers and words (lists and objects are left to the JSON)."""
    return kv({k: number(v, 4) if isinstance(v, float) else v
               for k, v in result.result_json().items()
               if not isinstance(v, (dict, list)) and v is not None})


def tensor_html(result, name: str) -> str:
    """One recorded tensor: a heat map (2-D), heads side by side (H first), bars (1-D)."""
    array, dims = result.tensors.array(name), result.tensors.dims(name)
    axes = token_axes(result, name=name)

    def labels(dim: str, n: int):
        found = axes.get(dim)
        return found if found is not None and len(found) == n else None

    title = f"{name} ({', '.join(dims)}) {tuple(array.shape)}"
    if array.ndim == 1:
        names = labels(dims[0], len(array)) or [str(i) for i in range(len(array))]
        if len(array) > 64:
            return heatmap(array, None, names, title=title)
        return bars(names, [float(v) for v in array], title=title)
    if array.ndim == 2:
        return heatmap(array, labels(dims[0], array.shape[0]), labels(dims[1], array.shape[1]),
                       title=title)
    if array.ndim == 3:
        scale = Scale(array)
        heads = [heatmap(array[h], labels(dims[1], array.shape[1]),
                         labels(dims[2], array.shape[2]), title=f"{dims[0].lower()}{h}",
                         scale=scale, values=False)
                 for h in range(min(len(array), MAX_HEADS))]
        more = f'<div class="tfx-note">{len(array) - MAX_HEADS} more not drawn</div>' \
            if len(array) > MAX_HEADS else ""
        return f"<h4>{esc(title)}</h4><div class='tfx-grid'>{''.join(heads)}</div>{more}"
    return f'<div class="tfx-note">{esc(title)}: not drawn ({array.ndim}-D)</div>'


# -- pages ----------------------------------------------------------------------------------
@page("generic")
def generic_page(result) -> str:
    names = result.tensors.names()
    drawn = "".join(tensor_html(result, n) for n in names[:MAX_TENSORS])
    more = (f'<div class="tfx-note">{len(names) - MAX_TENSORS} more tensors in '
            "result.tensors</div>") if len(names) > MAX_TENSORS else ""
    return header(result) + scalars(result) + drawn + more


@page("attend")
def attend_page(result) -> str:
    tensors = result.tensors
    by_leaf = {n.rsplit(".", 1)[-1]: n for n in tensors.names() if tensors.dims(n)[:1] == ("H",)}
    name = next((by_leaf[leaf] for leaf in ("pattern", "masked", "scaled", "scores", "context")
                 if leaf in by_leaf), None)
    if name is None:
        return generic_page(result)
    array = tensors.array(name)
    axes = token_axes(result, name=name)
    heads = list(getattr(result, "heads", None) or range(len(array)))
    if len(heads) != len(array):
        heads = list(range(len(array)))
    scale = Scale(array, (0.0, 1.0) if name.endswith("pattern") else None)
    maps = [heatmap(array[k], axes.get("T"), axes.get("S"), title=f"head {h}", scale=scale,
                    values=False) for k, h in enumerate(heads[:MAX_HEADS])]
    note = (f'<div class="tfx-note">rows: queries, columns: keys; hover a cell for its '
            f"weight · {esc(name)}</div>")
    return header(result) + note + f"<div class='tfx-grid'>{''.join(maps)}</div>"


@page("lens")
def lens_page(result) -> str:
    probs = np.asarray(result.top_probs, dtype=np.float64)  # (L, T)
    scale = Scale(probs, (0.0, 1.0))
    tokens = display_tokens(result.tokens) or []
    rows, styles = [], []
    for i, layer in enumerate(result.layers):
        top = display_tokens(result.top_tokens[i]) or []
        rows.append([layer] + [f"{t} {probs[i, j]:.2f}" for j, t in enumerate(top)])
        styles.append([None] + [scale.css(p) for p in probs[i]])
    return (header(result) + '<div class="tfx-note">each layer\'s residual stream through '
            "the final norm and the head: its top token and probability per position</div>"
            + rows_table(["layer"] + tokens, rows, styles=styles))


@page("patch")
def patch_page(result) -> str:
    """The effect as layers (or features) × positions or heads: one table for a single
    stack, one per stack (and cross-attention) for an encoder–decoder, the mean and the
    standard deviation over pairs for --pairs."""
    pairs = getattr(result, "n_pairs", None)
    mean = " (mean over pairs)" if pairs is not None else ""
    facts = {"pairs": f"{pairs} from {result.pairs_file}"} if pairs is not None else {}
    facts.update({"patched": result.patched, "metric": result.metric,
                  "m_clean" + mean: number(result.m_clean, 4),
                  "m_corrupt" + mean: number(result.m_corrupt, 4),
                  "effect": result.effect + " (1: the cell restores CLEAN's answer)"})
    drawn = []
    for name, cells in _patch_tables(result):
        effect = result.tensors.array(name)
        finite = np.abs(effect[np.isfinite(effect)])
        bound = max(1.0, float(finite.max()) if finite.size else 1.0)
        rows = [f"#{k}" for k in result.features] if getattr(result, "features", None) \
            else [str(i) for i in range(effect.shape[0])]
        cols = _patch_columns(result, cells, effect.shape[1])
        vrange = (0.0, bound) if name.endswith("_std") else (-bound, bound)
        drawn.append(heatmap(effect, rows, cols, title=name, values=True, vrange=vrange))
    return header(result) + kv(facts) + "".join(drawn)


def _patch_tables(result) -> list[tuple[str, str]]:
    """(tensor, what a column is: source, target or heads) of each table drawn."""
    tables = getattr(result, "tables", None)  # an encoder–decoder's (none with --pairs)
    if tables:
        return [(f"patch.{t.part}.effect", t.cells) for t in tables]
    cells = "heads" if result.site == "heads" else "source"
    names = ["patch.effect"] + (["patch.effect_std"] if hasattr(result, "n_pairs") else [])
    return [(name, cells) for name in names]


def _patch_columns(result, cells: str, n: int) -> list[str]:
    """Head numbers; the target's tokens; or CLEAN's tokens, starred where CORRUPT
    differs (a single pair: --pairs has one CORRUPT per pair)."""
    if cells == "heads":
        return [str(h) for h in range(n)]
    if cells == "target":
        return display_tokens(result.input.target.tokens) or []
    differing = getattr(result, "differing_positions", None) or []
    return [t + ("*" if i in differing else "")
            for i, t in enumerate(display_tokens(result.tokens) or [])]


@page("attribute")
def attribute_page(result) -> str:
    values = [p.value for p in result.parts]
    chosen = largest_parts(values, 40)
    what = f"logit({result.answer.token!r})" + (
        f" − logit({result.wrong.token!r})" if result.wrong is not None else "")
    facts = kv({"measured": f"{what} at position {result.position}",
                "sum of parts": number(result.sum_of_parts, 4),
                "logit difference": number(result.logit_diff, 4),
                "unexplained": f"{result.unexplained:.1e}"})
    return header(result) + facts + bars([result.parts[i].name for i in chosen],
                                         [values[i] for i in chosen],
                                         title=f"parts of {what}")


@page("features")
def features_page(result) -> str:
    from ..plot import shown_features

    tokens = display_tokens(result.tokens) or []
    chosen = shown_features(result)
    acts = np.asarray(result.tensors.array("features.acts"), dtype=np.float64)
    shown = acts[:, chosen]
    scale = Scale(shown, (0.0, float(shown.max()) if shown.size and shown.max() > 0 else 1.0))
    firsts = [pos.top[0] if pos.top else None for pos in result.positions]
    strip = token_strip(tokens, shades=[scale.css(a.activation) if a else None
                                        for a in firsts],
                        notes=[f"top feature #{a.index} ({a.activation:.3g}), L0 {p.l0}"
                               if a else f"no feature fires, L0 {p.l0}"
                               for a, p in zip(firsts, result.positions)])
    sae = result.sae
    facts = kv({"sae": f"{sae.path} ({sae.format}, {sae.architecture})",
                "site": sae.site + (f" (= {sae.name})" if sae.name != sae.site else ""),
                "L0": f"{result.l0_mean:.2f} features per token",
                "FVU": "—" if result.fvu is None else number(result.fvu, 4),
                "cosine": "—" if result.cosine_mean is None else number(result.cosine_mean, 4),
                "|x − x̂|": number(result.error_norm_mean, 3)})
    note = ('<div class="tfx-note">tokens shaded by their strongest feature (hover for it); '
            "below, tokens × the text's strongest features</div>")
    return (header(result) + facts + note + strip
            + heatmap(shown, tokens, [f"#{k}" for k in chosen], title="features.acts",
                      scale=scale, values=len(chosen) <= 24))


@page("next")
def next_page(result) -> str:
    rows = [[c.rank, display_tokens([c.token])[0], c.id, number(c.logit, 3),
             number(c.prob, 4)] for c in result.candidates]
    styles = [[None, None, None, None, Scale([0.0, 1.0]).css(c.prob)]
              for c in result.candidates]
    return header(result) + rows_table(["rank", "token", "id", "logit", "probability"], rows,
                                       styles=styles)


@page("generate")
def generate_page(result) -> str:
    scale = Scale([0.0, 1.0])
    steps = result.steps
    strip = token_strip(display_tokens([s.token for s in steps]) or [],
                        [s.id for s in steps], shades=[scale.css(s.prob) for s in steps],
                        notes=[f"p {s.prob:.3f}" for s in steps])
    return (header(result) + f'<div class="tfx-note">continuation: '
            f'{esc(repr(result.completion))} (stopped: {esc(result.stopped)})</div>' + strip)


@page("tokenize")
def tokenize_page(result) -> str:
    return header(result) + kv({"tokenizer": result.tokenizer, "tokens": result.n_tokens,
                                "vocabulary": f"{result.vocab_size:,}",
                                "round trip": result.round_trip})


@page("report")
def report_page(result) -> str:
    from ..report import build_html

    page_html = esc(build_html(result))
    return ('<iframe sandbox="allow-scripts" style="width:100%;height:720px;border:1px solid '
            f'#d9dee5" srcdoc="{page_html}"></iframe>')


@page("graph")
def graph_page(result) -> str:
    """tfx graph: the scores, the paths from each logit back to the tokens as nested
    lists, and the kept features by influence."""
    from ..views.circuits import node_text

    tokens = list(result.input.tokens) if result.input else []

    def known(x, show=str) -> str:  # a graph file may lack it
        return "not in the file" if x is None else show(x)

    facts = kv({**({"opened from": result.opened} if result.opened else {}),
                "transcoders": known(result.transcoders, lambda t: f"{t} ("
                                     f"{result.feature_input_hook} → "
                                     f"{result.feature_output_hook})"),
                "features": known(result.n_active_features, lambda n: f"{n} active, "
                                  f"{result.n_selected_features} with rows"),
                "replacement score": known(result.replacement_score, lambda x: number(x, 4)),
                "completeness score": known(result.completeness_score,
                                            lambda x: number(x, 4)),
                "kept": f"{len(result.nodes)} nodes, {result.n_edges} edges"})

    def tree(step) -> str:
        items = "".join(f"<li>{number(c.weight, 3)} {esc(node_text(result.nodes[c.node], tokens))}"
                        f"{tree(c)}</li>" for c in step.inputs)
        return f"<ul>{items}</ul>" if items else ""

    paths = "".join(f"<h4>{esc(node_text(result.nodes[s.node], tokens))}</h4>{tree(s)}"
                    for s in result.paths or [])
    features = sorted((n for n in result.nodes if n.kind == "feature"),
                      key=lambda n: 2.0 if n.influence is None else n.influence)[:20]
    table = rows_table(["layer", "pos", "feature", "activation", "influence", "label"],
                       [[n.layer, n.pos, n.feature, known(n.activation, number),
                         known(n.influence, number), n.label or ""] for n in features])
    return header(result) + facts + paths + "<h4>most influential features</h4>" + table
