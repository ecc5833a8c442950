"""`tfx report`: one self-contained HTML page built from one ReportResult.

The page makes no network request at all: CSS and JavaScript are inline, the data sits in
a `<script type="application/json">` block, and a Content-Security-Policy forbids any
fetch, so it works the same from file://, an e-mail attachment or an air-gapped laptop.

What it shows, all from the result one forward pass made (core/analysis/report.py):
  tokens        the input pieces and their ids
  model view    a layers x heads grid of small attention maps (canvas)
  head view     one head at full size with token labels; hovering a cell reads out the
                query token, the key token and the weight
  layer norms   per-token mean and variance entering every norm
  next tokens   the top-k continuation at every position (causal models with a head)

Attention weights are stored as round(w * 10000) in 16 bits (base64). Hover values are
printed from those integers, so they equal the JSON output (`tfx trace --json`) rounded to
the 4 decimals shown, exactly: a float32 times 10^4 is exact in float64, and np.rint
rounds half to even like Python's formatting does. 8-bit storage would be half the size
but its 1/510 error flips the third decimal.
"""
from __future__ import annotations

import base64
import html
import json
import math
from typing import Sequence

import numpy as np

from .. import __version__
from ..core.results import ReportResult
from .common import display_tokens, finite_range, layer_of

DECIMALS = 4
SCALE = 10 ** DECIMALS  # stored integer = round(weight * SCALE)


# ---------------------------------------------------------------- data

def quantise(pattern: np.ndarray) -> np.ndarray:
    """(H, T, S) weights in [0, 1] -> uint16 round(w * 10^4), half to even as Python
    rounds. float32 * 10^4 needs at most 38 mantissa bits, so the float64 product is
    exact and the rounding is the decimal one."""
    scaled = np.rint(np.asarray(pattern, dtype=np.float64) * SCALE)
    return np.clip(np.nan_to_num(scaled, nan=0.0), 0, SCALE).astype("<u2")


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def _grid(result: ReportResult, leaf: str) -> tuple[dict, list, int, tuple]:
    """Every shown layer's `leaf` pattern (.attn.pattern, .cross.pattern), quantised."""
    patterns, n_heads, shape, layers = {}, 0, (0, 0), []
    for name in result.tensors.names():
        layer = layer_of(name)
        if layer is None or not name.endswith(leaf):
            continue
        array = result.tensors.array(name)  # (H, T, S)
        n_heads, shape = array.shape[0], array.shape[1:]
        patterns[str(layer)] = b64(quantise(array))
        layers.append(layer)
    return patterns, layers, n_heads, shape


def page_data(result: ReportResult) -> dict:
    """The JSON the page's script reads: tokens and every shown head, quantised; for an
    encoder–decoder's decoder also its cross-attention (target rows, source columns)."""
    patterns, layers, n_heads, shape = _grid(result, ".attn.pattern")
    data = {"tokens": display_tokens(result.tokens), "ids": list(result.input.ids or []),
            "layers": layers, "heads": n_heads, "T": shape[0], "S": shape[1], "scale": SCALE,
            "decimals": DECIMALS, "patterns": patterns}
    if result.stack == "decoder":
        data["ids"] = list(result.input.target.ids or [])
        cross, cross_layers, _, cross_shape = _grid(result, ".cross.pattern")
        data["cross"] = {"layers": cross_layers, "T": cross_shape[0], "S": cross_shape[1],
                         "patterns": cross, "keys": display_tokens(result.input.tokens)}
    return data


# ---------------------------------------------------------------- html pieces

def esc(value) -> str:
    return html.escape(str(value), quote=True)


def header_html(result: ReportResult, data: dict) -> str:
    model, cfg = result.model, result.model.cfg
    seed = "—" if model.seed is None else model.seed  # real weights have no seed
    source = f"weights {esc(model.weights)}" if model.weights else \
        f"random weights, seed {esc(seed)}"
    shape = (f"{cfg.n_layers} layers · {cfg.n_heads} heads · d_model {cfg.d_model} · "
             f"{cfg.norm} ({cfg.norm_position}) · {cfg.positional} positions · "
             f"{'causal' if cfg.causal else 'bidirectional'}")
    text = result.input.text or ""
    if result.stack == "decoder":
        text = f"{text} → {' '.join(result.input.target.tokens)}"
    changed = ""
    if result.interventions:  # --ablate: the page shows the changed model
        from .common import intervention_text

        changed = (f'\n    <dt>changed</dt><dd id="changed">'
                   f'{esc("; ".join(intervention_text(c) for c in result.interventions))}</dd>')
    return f"""
<header>
  <h1>tfx report</h1>
  <dl class="facts">
    <dt>model</dt><dd id="model-name">{esc(model.name)} · <span id="model-source">{source}</span></dd>
    <dt>shape</dt><dd>{esc(shape)}</dd>
    <dt>seed</dt><dd id="seed">{esc(seed)}</dd>
    <dt>input</dt><dd><q id="input-text">{esc(text)}</q> · {len(data['tokens'])} tokens</dd>
    <dt>tool</dt><dd>tfx {esc(__version__)}</dd>{changed}
  </dl>
</header>"""


def tokens_html(data: dict) -> str:
    chips = "".join(f'<span class="tok" title="position {i} · id {esc(token_id)}">'
                    f'<sub>{i}</sub>{esc(token)}</span>'
                    for i, (token, token_id) in enumerate(zip(data["tokens"], data["ids"])))
    return f"""
<section id="tokens"><h2>Tokens</h2>
  <p class="note">Whitespace is made visible: space ·, newline ↵, tab →.</p>
  <div class="chips">{chips}</div>
</section>"""


def _thumb_rows(layers, heads: int, T: int, S: int, grid: str) -> str:
    rows = []
    for layer in layers:
        cells = "".join(
            f'<td><canvas class="thumb" width="{S}" height="{T}" data-grid="{grid}" '
            f'data-layer="{layer}" data-head="{h}" title="layer {layer} · head {h}"></canvas></td>'
            for h in range(heads))
        rows.append(f'<tr><th class="layer">layer {layer}</th>{cells}</tr>')
    return "".join(rows)


def cross_view_html(data: dict) -> str:
    cross = data.get("cross")
    if not cross or not cross["layers"]:
        return ""
    heads = "".join(f"<th>head {h}</th>" for h in range(data["heads"]))
    rows = _thumb_rows(cross["layers"], data["heads"], cross["T"], cross["S"], "cross")
    return f"""
<section id="cross-view"><h2>Cross-attention</h2>
  <p class="note">The decoder's cross-attention: each target token (rows) reading the
  encoder's output of the source (columns). Click a head to open it below.</p>
  <div class="scroll"><table id="cross-grid"><thead><tr><th></th>{heads}</tr></thead>
  <tbody>{rows}</tbody></table></div>
</section>"""


def model_view_html(data: dict) -> str:
    if not data["layers"]:
        return ""
    heads = "".join(f"<th>head {h}</th>" for h in range(data["heads"]))
    rows = [_thumb_rows(data["layers"], data["heads"], data["T"], data["S"], "self")]
    return f"""
<section id="model-view"><h2>Model view</h2>
  <p class="note">{len(data['layers'])} layers × {data['heads']} heads; each map is one head's
  attention pattern (rows: queries, columns: keys). Click a head to open it below.</p>
  <label class="note">colour <select id="colour-scale">
    <option value="sqrt" selected>√weight, 0 → 1 (small weights visible)</option>
    <option value="linear">weight, 0 → 1</option>
    <option value="row">weight ÷ row maximum</option>
  </select></label>
  <div class="scroll"><table id="model-grid" data-layers="{len(data['layers'])}"
  data-heads="{data['heads']}"><thead><tr><th></th>{heads}</tr></thead>
  <tbody>{''.join(rows)}</tbody></table></div>
</section>"""


def head_view_html(data: dict) -> str:
    if not data["layers"]:
        return ""
    return f"""
<section id="head-view"><h2>Head view · <span id="head-title"></span></h2>
  <p class="note">Rows are query tokens, columns the key tokens they attend to. Hover a
  cell for its weight ({DECIMALS} decimals, exact).</p>
  <div id="hover" class="hover">
    <span class="label">query</span> <span id="hover-query">–</span>
    <span class="label">key</span> <span id="hover-key">–</span>
    <span class="label">weight</span> <span id="hover-value">–</span>
  </div>
  <div class="scroll"><canvas id="head-canvas" width="10" height="10"></canvas></div>
</section>"""


def shade(value: float, lo: float, hi: float) -> str:
    """A light background for a table cell, by where value sits in [lo, hi]."""
    f = 0.0 if hi <= lo else (value - lo) / (hi - lo)
    f = min(1.0, max(0.0, f))
    r, g, b = (int(255 - f * (255 - c)) for c in (92, 140, 214))
    return f"background:rgb({r},{g},{b})"


def norm_table(norms, key: str, tokens: Sequence[str], *, log: bool) -> str:
    rows = [(n.name, getattr(n, key)) for n in norms if getattr(n, key) is not None]
    if not rows:
        return ""
    found = finite_range(np.concatenate([np.asarray(v, dtype=np.float64) for _, v in rows]))
    lo, hi = found or (0.0, 1.0)
    transform = (lambda v: math.log10(max(v, 1e-12))) if log else abs
    if log:
        lo, hi = transform(lo), transform(hi)
    else:
        lo, hi = 0.0, max(abs(lo), abs(hi)) or 1.0
    head = "".join(f"<th title='position {i}'>{esc(t)}</th>" for i, t in enumerate(tokens))
    body = []
    for name, values in rows:
        cells = "".join(
            f'<td style="{shade(transform(float(v)), lo, hi)}" '
            f'title="{esc(name)} · {esc(tokens[i] if i < len(tokens) else i)}">{float(v):.4g}</td>'
            for i, v in enumerate(values))
        body.append(f"<tr><th class='norm'>{esc(name)}</th>{cells}</tr>")
    return (f'<div class="scroll"><table class="stats" data-stat="{key}"><thead><tr><th></th>'
            f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def layernorm_html(result: ReportResult, tokens: Sequence[str]) -> str:
    if not result.norms:
        return ""
    rms = result.norm == "rmsnorm"
    var_name = "mean square" if rms else "variance"
    mean = norm_table(result.norms, "mean", tokens, log=False)
    var = norm_table(result.norms, "var", tokens, log=True)
    return f"""
<section id="layernorm"><h2>Layer norm statistics</h2>
  <p class="note">What enters each norm, per token, over the {esc(result.model.cfg.d_model)}
  features of d_model: {'the mean square (RMSNorm divides by its root)' if rms else
  'mean and biased variance (LayerNorm subtracts the one and divides by the root of the other)'}.
  Shading: |mean| linear, {var_name} on a log scale.</p>
  {f'<h3>mean</h3>{mean}' if mean else ''}
  <h3>{var_name}</h3>{var}
</section>"""


def probability(p: float) -> str:
    """0.412, or 2.1e-05 for the tiny ones a random model spreads over 50k tokens."""
    return f"{p:.3f}" if p >= 0.0005 else f"{p:.1e}"


def next_tokens_html(rows, tokens: Sequence[str]) -> str:
    if not rows:
        return ""
    k = len(rows[0])
    head = "".join(f"<th>#{i + 1}</th>" for i in range(k))
    body = []
    for t, preds in enumerate(rows):
        cells = "".join(f'<td style="{shade(c.prob, 0.0, 1.0)}" title="id {c.id}">'
                        f'<span class="tokname">{esc(display_tokens([c.token])[0])}</span> '
                        f'<span class="prob">{probability(c.prob)}</span></td>' for c in preds)
        body.append(f"<tr><td class='pos'>{t}</td><th>{esc(tokens[t])}</th>{cells}</tr>")
    return f"""
<section id="next-tokens"><h2>Next-token top-{k}</h2>
  <p class="note">After reading tokens 0..i, the model's most likely next tokens and their
  softmax probabilities.</p>
  <div class="scroll"><table class="stats" id="next-table"><thead><tr><th>i</th><th>token</th>
  {head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>
</section>"""


def footer_html(data: dict) -> str:
    size = len(data["layers"]) * data["heads"] * data["T"] * data["S"]
    return f"""
<footer><p>Storage: attention weights are kept as round(w × {SCALE}) in 16 bits
(scale 1/{SCALE}, {size:,} weights), so every value shown is exact to {DECIMALS} decimals:
it equals <code>tfx trace … --select 'blocks.*.attn.pattern' --json</code> rounded the same
way (selecting one deeper layer alone runs the layers before it on the fused kernel, whose
float32 results can differ in the last bit). The page loads nothing from the network.</p></footer>"""


# ---------------------------------------------------------------- page

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "img-src data:; base-uri 'none'; form-action 'none'")


def json_script(data: dict) -> str:
    # "<" escaped so no token text can close the script element early
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def build_html(result: ReportResult) -> str:
    """The whole page as one string."""
    data = page_data(result)
    tokens = data["tokens"]
    title = f"tfx report · {result.model.name} · {tokens[:6]}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{STYLE}</style></head>
<body>
{header_html(result, data)}
<main>
{tokens_html(data)}
{model_view_html(data)}
{cross_view_html(data)}
{head_view_html(data)}
{layernorm_html(result, tokens)}
{next_tokens_html(result.next_tokens, tokens)}
</main>
{footer_html(data)}
<script type="application/json" id="tfx-data">{json_script(data)}</script>
<script>{SCRIPT}</script>
</body></html>
"""


STYLE = """
:root { --fg:#1d232b; --muted:#5b6573; --line:#d9dee5; --accent:#d0582d; --bg:#fbfbfa; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 18px 24px 40px; color: var(--fg);
  background: var(--bg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { margin: 0 0 6px; font-size: 22px; } h2 { font-size: 17px; margin: 26px 0 6px;
  border-bottom: 1px solid var(--line); padding-bottom: 3px; } h3 { font-size: 14px; margin: 12px 0 4px; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
.facts dt { color: var(--muted); } .facts dd { margin: 0; }
.note { color: var(--muted); margin: 2px 0 8px; max-width: 900px; }
.chips { display: flex; flex-wrap: wrap; gap: 4px; }
.tok { border: 1px solid var(--line); border-radius: 4px; padding: 1px 6px; background: #fff;
  font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre; }
.tok sub { color: var(--muted); margin-right: 3px; font-size: 9px; }
.scroll { overflow-x: auto; max-width: 100%; }
#model-grid, #cross-grid { border-collapse: collapse; }
#model-grid th, #cross-grid th { font-weight: normal; color: var(--muted);
  font-size: 11px; padding: 0 3px; white-space: nowrap; }
#model-grid td, #cross-grid td { padding: 2px; }
canvas.thumb { width: 56px; height: 56px; image-rendering: pixelated; cursor: pointer;
  border: 2px solid transparent; display: block; }
canvas.thumb:hover { border-color: #999; } canvas.thumb.selected { border-color: var(--accent); }
#head-canvas { display: block; margin-top: 6px; cursor: crosshair; }
.hover { font-family: ui-monospace, "DejaVu Sans Mono", monospace; padding: 4px 8px;
  background: #fff; border: 1px solid var(--line); border-radius: 4px; display: inline-block; min-width: 420px; }
.hover .label { color: var(--muted); margin-left: 8px; } .hover .label:first-child { margin-left: 0; }
#hover-value { font-weight: bold; }
table.stats { border-collapse: collapse; font-size: 11px; font-variant-numeric: tabular-nums; }
table.stats th, table.stats td { border: 1px solid var(--line); padding: 1px 5px; white-space: pre; }
table.stats thead th { font-family: ui-monospace, monospace; font-weight: normal; }
table.stats th.norm { text-align: left; font-family: ui-monospace, monospace; font-weight: normal; }
td.pos { color: var(--muted); text-align: right; } .prob { color: var(--muted); }
.tokname { font-family: ui-monospace, monospace; }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; border-top: 1px solid var(--line); }
"""

SCRIPT = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("tfx-data").textContent);
  const H = data.heads, SCALE = data.scale, DEC = data.decimals;

  // base64 -> little-endian uint16, one array per layer: index (h * T + i) * S + j
  function decode(b64) {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const out = new Uint16Array(bytes.length / 2);
    for (let k = 0; k < out.length; k++) out[k] = bytes[2 * k] | (bytes[2 * k + 1] << 8);
    return out;
  }
  // the grids of the page: self-attention, and an encoder-decoder's cross-attention
  // (rows the target's tokens, columns the source's)
  function grid(g) {
    const out = {T: g.T, S: g.S, layers: g.layers, rows: data.tokens,
                 cols: g.keys || data.tokens, patterns: {}};
    for (const layer of g.layers) out.patterns[layer] = decode(g.patterns[layer]);
    return out;
  }
  const grids = {self: grid(data)};
  if (data.cross) grids.cross = grid(data.cross);

  // viridis, the same stops the terminal uses
  const STOPS = [[0, 68, 1, 84], [0.25, 59, 82, 139], [0.5, 33, 145, 140],
                 [0.75, 94, 201, 98], [1, 253, 231, 37]];
  const LUT = [];
  for (let n = 0; n < 256; n++) {
    const f = n / 255;
    let k = 0; while (k < STOPS.length - 2 && f > STOPS[k + 1][0]) k++;
    const a = STOPS[k], b = STOPS[k + 1], u = (f - a[0]) / (b[0] - a[0]);
    LUT.push([0, 1, 2].map(c => Math.round(a[c + 1] + u * (b[c + 1] - a[c + 1]))));
  }
  // colour of a stored weight q (0..SCALE); rowMax for the "row" scale
  const scaleSelect = document.getElementById("colour-scale");
  function colour(q, rowMax) {
    const mode = scaleSelect ? scaleSelect.value : "linear";
    let f = q / SCALE;
    if (mode === "sqrt") f = Math.sqrt(f);
    else if (mode === "row") f = rowMax > 0 ? q / rowMax : 0;
    return LUT[Math.min(255, Math.round(f * 255))];
  }
  function weight(g, layer, h, i, j) {
    const G = grids[g];
    return G.patterns[layer][(h * G.T + i) * G.S + j];
  }
  function rowMax(g, layer, h, i) {
    let m = 0;
    for (let j = 0; j < grids[g].S; j++) m = Math.max(m, weight(g, layer, h, i, j));
    return m;
  }

  // the exact decimal string of a stored integer: 1234 -> "0.1234"
  function fixed(q) {
    const whole = Math.floor(q / SCALE), frac = String(q % SCALE).padStart(DEC, "0");
    return whole + "." + frac;
  }

  function drawThumb(canvas) {
    const g = canvas.dataset.grid || "self", G = grids[g];
    const layer = +canvas.dataset.layer, h = +canvas.dataset.head;
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(G.S, G.T);
    for (let i = 0; i < G.T; i++) for (let j = 0, m = rowMax(g, layer, h, i); j < G.S; j++) {
      const rgb = colour(weight(g, layer, h, i, j), m), p = 4 * (i * G.S + j);
      img.data[p] = rgb[0]; img.data[p + 1] = rgb[1]; img.data[p + 2] = rgb[2]; img.data[p + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }

  const canvas = document.getElementById("head-canvas");
  if (!canvas) return;
  const ctx = canvas.getContext("2d");
  const FONT = "11px ui-monospace, 'DejaVu Sans Mono', monospace";
  let current = null, cell = 0, left = 0, top = 0, step = 1;

  function layout(G) {  // cell size and label margins for one grid's matrix
    cell = Math.max(6, Math.min(36, Math.floor(640 / Math.max(G.T, G.S))));
    ctx.font = FONT;
    const width = t => ctx.measureText(t).width;
    const labelW = Math.ceil(Math.max(...G.rows.map(width), ...G.cols.map(width), 10)) + 10;
    left = labelW; top = labelW; step = Math.ceil(13 / cell);  // label every step-th token
    canvas.width = left + G.S * cell + 2; canvas.height = top + G.T * cell + 2;
    Object.assign(canvas.dataset, {cell: cell, left: left, top: top, rows: G.T, cols: G.S});
  }

  function drawHead(g, layer, h, hi, hj) {
    const G = grids[g];
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    for (let i = 0; i < G.T; i++) for (let j = 0, m = rowMax(g, layer, h, i); j < G.S; j++) {
      const rgb = colour(weight(g, layer, h, i, j), m);
      ctx.fillStyle = "rgb(" + rgb.join(",") + ")";
      ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
    }
    ctx.font = FONT; ctx.fillStyle = "#1d232b";
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let i = 0; i < G.T; i += step) {
      ctx.fillStyle = i === hi ? "#d0582d" : "#1d232b";
      ctx.fillText(G.rows[i], left - 4, top + (i + 0.5) * cell);
    }
    ctx.save(); ctx.rotate(-Math.PI / 2); ctx.textAlign = "left";
    for (let j = 0; j < G.S; j += step) {
      ctx.fillStyle = j === hj ? "#d0582d" : "#1d232b";
      ctx.fillText(G.cols[j], -(top - 4), left + (j + 0.5) * cell);
    }
    ctx.restore();
    if (hi !== undefined && hi >= 0) {
      ctx.strokeStyle = "#d0582d"; ctx.lineWidth = 2;
      ctx.strokeRect(left + hj * cell + 1, top + hi * cell + 1, cell - 2, cell - 2);
    }
  }

  function select(g, layer, h) {
    current = {grid: g, layer: layer, head: h};
    document.querySelectorAll("canvas.thumb.selected").forEach(c => c.classList.remove("selected"));
    const thumb = document.querySelector(
      `canvas.thumb[data-grid="${g}"][data-layer="${layer}"][data-head="${h}"]`);
    if (thumb) thumb.classList.add("selected");
    document.getElementById("head-title").textContent =
      (g === "cross" ? "cross-attention · " : "") + "layer " + layer + " · head " + h;
    canvas.dataset.grid = g; canvas.dataset.layer = layer; canvas.dataset.head = h;
    layout(grids[g]);
    drawHead(g, layer, h);
  }

  function hover(ev) {
    if (!current) return;
    const G = grids[current.grid];
    const box = canvas.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    const i = Math.floor((y - top) / cell), j = Math.floor((x - left) / cell);
    if (i < 0 || j < 0 || i >= G.T || j >= G.S) return;
    const q = weight(current.grid, current.layer, current.head, i, j);
    document.getElementById("hover-query").textContent = i + " " + JSON.stringify(G.rows[i]);
    document.getElementById("hover-key").textContent = j + " " + JSON.stringify(G.cols[j]);
    document.getElementById("hover-value").textContent = fixed(q);
    Object.assign(document.getElementById("hover").dataset, {i: i, j: j});
    drawHead(current.grid, current.layer, current.head, i, j);
  }

  document.querySelectorAll("canvas.thumb").forEach(c => {
    drawThumb(c);
    c.addEventListener("click", () => select(c.dataset.grid || "self", +c.dataset.layer,
                                             +c.dataset.head));
  });
  canvas.addEventListener("mousemove", hover);
  if (scaleSelect) scaleSelect.addEventListener("change", () => {
    document.querySelectorAll("canvas.thumb").forEach(drawThumb);
    if (current) drawHead(current.grid, current.layer, current.head);
  });
  select("self", data.layers[0], 0);
  document.body.dataset.ready = "1";
})();
"""
