"""`tfx top --html FILE`: one self-contained page (no network request; CSS, script and
data inline), a card per unit with its examples as token strips, each token shaded by
the unit's value there; hovering a token shows its value. Reads the TopResult only."""
from __future__ import annotations

import html
import json

from ..core.tokenizers.base import visible

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;background:#fafafa;color:#222}
h1{font-size:20px;margin:0 0 4px}.meta{color:#666;margin-bottom:16px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px 16px;margin:0 0 14px}
.card h2{font-size:15px;margin:0 0 8px}.ex{display:flex;gap:10px;align-items:baseline;margin:3px 0}
.val{font:12px monospace;width:80px;text-align:right;color:#333}.where{font:11px monospace;color:#888;width:90px}
.tok{font:13px monospace;white-space:pre;padding:1px 0;border-radius:2px}
.tok.at{outline:2px solid #c0392b}#tip{position:fixed;display:none;background:#222;color:#fff;
font:12px monospace;padding:3px 6px;border-radius:4px;pointer-events:none}
"""

SCRIPT = """
const tip=document.getElementById('tip');
document.querySelectorAll('.tok').forEach(t=>{
 t.addEventListener('mouseenter',e=>{tip.textContent=t.dataset.piece+' = '+t.dataset.value;
  tip.style.display='block';});
 t.addEventListener('mousemove',e=>{tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';});
 t.addEventListener('mouseleave',()=>{tip.style.display='none';});
});
"""


def _shade(value, high: float) -> str:
    if value is None or high <= 0 or value <= 0:
        return "transparent"
    alpha = min(1.0, value / high)
    return f"rgba(230,126,34,{alpha:.3f})"


def build_page(result) -> str:
    model = result.model.name if result.model else "model"
    noun = "feature" if getattr(result, "sae", None) is not None else "unit"
    cards = []
    for unit in result.units:
        high = max((v for e in unit.examples for v in e.context.values if v is not None),
                   default=0.0)
        rows = []
        for e in unit.examples:
            toks = []
            for i, (piece, value) in enumerate(zip(e.context.tokens, e.context.values)):
                shown = html.escape(visible(piece))
                number = "" if value is None else f"{value:.4f}"
                cls = "tok at" if i == e.context.at else "tok"
                toks.append(f'<span class="{cls}" style="background:{_shade(value, high)}" '
                            f'data-piece="{html.escape(json.dumps(piece))}" '
                            f'data-value="{number}">{shown}</span>')
            rows.append(f'<div class="ex"><span class="val">{e.value:.4f}</span>'
                        f'<span class="where">doc {e.doc}:{e.position}</span>'
                        f'<span>{"".join(toks)}</span></div>')
        cards.append(f'<div class="card" id="unit-{unit.unit}"><h2>{html.escape(result.site)}'
                     f' · {noun} {unit.unit}</h2>{"".join(rows) or "<i>no token</i>"}</div>')
    corpus = result.corpus
    meta = (f"{html.escape(model)} · corpus {html.escape(str(corpus['source']))} · "
            f"{result.documents:,} documents, {result.tokens:,} tokens · top {result.k} per "
            f"{noun}, {result.context} tokens either side")
    if noun == "feature":
        meta += f" · SAE {html.escape(result.sae.path)} ({html.escape(result.sae.architecture)}" \
                f", {result.sae.d_sae:,} features)"
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>tfx top · {html.escape(result.site)}</title><style>{CSS}</style></head>"
            f"<body><h1>tfx top · {html.escape(result.site)}</h1><div class='meta'>{meta}</div>"
            f"{''.join(cards)}<div id='tip'></div><script>{SCRIPT}</script></body></html>\n")
