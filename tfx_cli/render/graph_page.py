"""`tfx graph --html FILE`: the pruned attribution graph as one self-contained page.

No network request at all (inline CSS and script, the data in a `<script
type="application/json">` block, the report's Content-Security-Policy), so it opens the
same from file://, an attachment or an offline laptop. Drawn as SVG by the page's script:

  x    the prompt's tokens, one column each (logits sit in the last one)
  y    token embeddings at the bottom, then the model's layers (a layer's features and
       its error node in one row), the logit targets on top
  node circle: a transcoder feature · grey square: an error node (what the transcoder
       misses) · green square: a token embedding · orange diamond: a logit target
  edge source -> target, width by |weight| (square root, relative to the largest),
       blue when positive, red when negative

Clicking a node lists its inputs and its outputs, strongest first, with their weights
(an entry there is itself clickable), and lights its edges. Past MAX_EDGES edges only
the strongest are drawn (the header says so); a click still lists every edge. A node's `data-id` is its id in graph.json. The header gives the
replacement and completeness scores and the pruning thresholds. As graph.json does, a
feature or error node left without an edge is not drawn; tokens and logits always are.
Reads the graph mapping only (NumPy for the edges): no torch.
"""
from __future__ import annotations

import html
import math
from typing import Any, Mapping

import numpy as np

from ..core.circuits.neuronpedia import label_of, node_ids
from .common import display_tokens
from .report import CSP, json_script

MAX_EDGES = 20_000  # drawn, the strongest first: more SVG paths make a click take seconds

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:14px 20px;border-bottom:1px solid #ddd;background:#fff}
h1{font-size:18px;margin:0 0 4px}.meta{color:#555;font-size:13px}
.scores span{display:inline-block;margin:6px 16px 0 0}.scores b{font-variant-numeric:tabular-nums}
#wrap{display:flex;align-items:flex-start}
#canvas{overflow:auto;flex:1;max-height:calc(100vh - 110px);background:#fff}
#side{width:340px;padding:12px 16px;border-left:1px solid #ddd;background:#fff;
 max-height:calc(100vh - 110px);overflow:auto;font-size:13px}
#side h2{font-size:15px;margin:0 0 6px}#side h3{font-size:13px;margin:12px 0 4px}
#side ol{margin:0;padding-left:20px}#side li{cursor:pointer;margin:1px 0}
#side li:hover{text-decoration:underline}.w{font:12px monospace;float:right}
.pos{color:#2166ac}.neg{color:#b2182b}
svg text{font:11px monospace;fill:#333}svg .axis{fill:#777}
.edge{fill:none;stroke-linecap:round}.edge.p{stroke:#2166ac}.edge.n{stroke:#b2182b}
.node{cursor:pointer;stroke:#333;stroke-width:.8}.node.feature{fill:#f5f5f5}
.node.error{fill:#bbb}.node.embedding{fill:#7fc97f}.node.logit{fill:#fdb462}
svg.focus .edge{opacity:.06}svg.focus .edge.lit{opacity:.9}
svg.focus .node{opacity:.25}svg.focus .node.near,svg.focus .node.selected{opacity:1}
.node.selected{stroke:#000;stroke-width:2.5}
"""

SCRIPT = r"""
const D=JSON.parse(document.getElementById('tfx-data').textContent);
const probe=document.createElement('div');probe.innerHTML='<svg></svg>';
const NS=probe.firstChild.namespaceURI,COL=26,ROW=70,LEFT=70,TOP=20;
const rows=D.n_layers+2,row=n=>n.kind==='embedding'?0:n.kind==='logit'?rows-1:n.layer+1;
const cells=new Map();D.nodes.forEach((n,i)=>{const k=n.pos+','+row(n);
 if(!cells.has(k))cells.set(k,[]);cells.get(k).push(i);});
let per=1;cells.forEach(v=>per=Math.max(per,v.length));
const cw=Math.max(90,per*COL),W=LEFT+cw*D.tokens.length+20,H=TOP+ROW*rows+50;
const X=[],Y=[];cells.forEach(v=>v.forEach((i,j)=>{const n=D.nodes[i];
 X[i]=LEFT+n.pos*cw+(j+.5)*cw/v.length;Y[i]=TOP+(rows-1-row(n))*ROW+ROW/2;}));
const svg=document.createElementNS(NS,'svg');svg.setAttribute('width',W);svg.setAttribute('height',H);
const el=(tag,at,parent)=>{const e=document.createElementNS(NS,tag);
 for(const k in at)e.setAttribute(k,at[k]);(parent||svg).appendChild(e);return e;};
const label=(x,y,s,cls)=>{const t=el('text',{x:x,y:y,class:cls||''});t.textContent=s;return t;};
for(let r=0;r<rows;r++)label(4,TOP+(rows-1-r)*ROW+ROW/2+4,
 r===0?'tokens':r===rows-1?'logits':'L'+(r-1),'axis');
D.tokens.forEach((t,p)=>label(LEFT+p*cw+4,TOP+ROW*rows+16,p+' '+t,'axis'));
const big=D.edges.reduce((m,e)=>Math.max(m,Math.abs(e[2])),0)||1;
const ins=D.nodes.map(()=>[]),outs=D.nodes.map(()=>[]),edgeEls=new Array(D.edges.length);
const gE=el('g',{id:'edges'}),gN=el('g',{id:'nodes'});
D.edges.forEach((e,k)=>{ins[e[1]].push(k);outs[e[0]].push(k);});
const order=D.edges.map((e,k)=>k).sort((a,b)=>Math.abs(D.edges[b][2])-Math.abs(D.edges[a][2]));
order.slice(0,D.drawn).reverse().forEach(k=>{const [s,t,w]=D.edges[k];  // strongest on top
 const mx=(X[s]+X[t])/2,path=`M${X[s]},${Y[s]} Q${mx+(Y[s]-Y[t])*.08},${(Y[s]+Y[t])/2} ${X[t]},${Y[t]}`;
 edgeEls[k]=el('path',{d:path,class:'edge '+(w>0?'p':'n'),'stroke-width':
  (.3+3.7*Math.sqrt(Math.abs(w)/big)).toFixed(2),'stroke-opacity':.55,
  'data-source':D.nodes[s].id,'data-target':D.nodes[t].id,'data-weight':w},gE);});
const nodeEls=D.nodes.map((n,i)=>{let e;const x=X[i],y=Y[i],a={class:'node '+n.kind,'data-id':n.id};
 if(n.kind==='feature')e=el('circle',Object.assign(a,{cx:x,cy:y,r:7}),gN);
 else if(n.kind==='logit')e=el('path',Object.assign(a,{d:`M${x},${y-9}L${x+9},${y}L${x},${y+9}L${x-9},${y}Z`}),gN);
 else e=el('rect',Object.assign(a,{x:x-6,y:y-6,width:12,height:12}),gN);
 el('title',{},e).textContent=n.name;e.addEventListener('click',()=>pick(i));return e;});
const fmt=w=>(w>0?'+':'')+w.toPrecision(3);
function list(id,keys,end){const ol=document.getElementById(id);ol.innerHTML='';
 keys.slice().sort((a,b)=>Math.abs(D.edges[b][2])-Math.abs(D.edges[a][2])).forEach(k=>{
  const e=D.edges[k],other=e[end],li=document.createElement('li');
  li.dataset.id=D.nodes[other].id;li.dataset.weight=e[2];li.textContent=D.nodes[other].name;
  const w=document.createElement('span');w.className='w '+(e[2]>0?'pos':'neg');
  w.textContent=fmt(e[2]);li.appendChild(w);li.addEventListener('click',()=>pick(other));
  ol.appendChild(li);});
 document.getElementById(id+'-count').textContent=keys.length;}
let marked=[];
function pick(i){const n=D.nodes[i];svg.classList.add('focus');
 marked.forEach(e=>e.classList.remove('selected','near','lit'));marked=[nodeEls[i]];
 nodeEls[i].classList.add('selected');
 ins[i].concat(outs[i]).forEach(k=>{const e=edgeEls[k],a=nodeEls[D.edges[k][0]],b=nodeEls[D.edges[k][1]];
  if(e){e.classList.add('lit');marked.push(e);}
  a.classList.add('near');b.classList.add('near');marked.push(a,b);});
 document.getElementById('picked').textContent=n.name;
 document.getElementById('picked-info').textContent=n.info;
 list('inputs',ins[i],0);list('outputs',outs[i],1);
 document.getElementById('side').dataset.node=n.id;}
document.getElementById('canvas').appendChild(svg);document.body.dataset.ready='1';
"""

SIDE = """<aside id="side"><h2 id="picked">Click a node</h2><div id="picked-info"></div>
<h3>inputs (<span id="inputs-count">0</span>)</h3><ol id="inputs"></ol>
<h3>outputs (<span id="outputs-count">0</span>)</h3><ol id="outputs"></ol></aside>"""


def _num(value, digits: int = 4) -> str:
    return "—" if value is None else f"{float(value):.{digits}g}"


def _name(node: Mapping[str, Any], tokens: list[str], labels: Mapping) -> tuple[str, str]:
    """A node's one-line name (its tooltip and list entry) and its detail line."""
    kind, pos = node["kind"], int(node["pos"])
    where = f"position {pos} {tokens[pos]}" if 0 <= pos < len(tokens) else f"position {pos}"
    influence = f"influence {_num(node.get('influence'))}"
    if kind == "feature":
        layer, feature = int(node["layer"]), int(node["feature"])
        label = label_of({"labels": labels}, layer, feature)
        name = f"L{layer} #{feature} @{pos}" + (f" {label}" if label else "")
        return name, (f"feature {feature} of layer {layer}'s transcoder, {where}, "
                      f"activation {_num(node.get('activation'))}, {influence}")
    if kind == "error":
        layer = int(node["layer"])
        return (f"error L{layer} @{pos}",
                f"layer {layer}'s MLP output the transcoder misses, {where}, {influence}")
    text = display_tokens([str(node.get("text") or "")])[0]
    if kind == "embedding":
        return f"token {text} @{pos}", f"embedding of token id {node['token']}, {where}, {influence}"
    prob = node.get("probability")
    return (f"logit {text} p={_num(prob, 3)}",
            f"logit target: token id {node['token']}, probability {_num(prob)}")


def page_data(graph: Mapping[str, Any], max_edges: int = MAX_EDGES) -> dict:
    """What the page's script draws: the nodes left after dropping features and errors
    without an edge, the edges as [source index, target index, weight], and how many of
    them (the strongest) are drawn."""
    tokens = display_tokens([str(t) for t in graph["tokens"]]) or []
    labels = graph.get("labels") or {}
    adjacency = np.asarray(graph["adjacency"])
    targets, sources = np.nonzero(adjacency)
    linked = set(targets.tolist()) | set(sources.tolist())
    keep = [i for i, n in enumerate(graph["nodes"])
            if i in linked or n["kind"] in ("embedding", "logit")]
    index = {old: new for new, old in enumerate(keep)}
    ids = node_ids(graph)
    nodes = []
    for i in keep:
        node = graph["nodes"][i]
        name, info = _name(node, tokens, labels)
        nodes.append({"id": ids[i], "kind": node["kind"], "pos": int(node["pos"]),
                      "layer": None if node.get("layer") is None else int(node["layer"]),
                      "name": name, "info": info})
    weights = adjacency[targets, sources].astype(float)
    edges = [[index[s], index[t], float(f"{w:.4g}")]
             for s, t, w in zip(sources.tolist(), targets.tolist(), weights.tolist())
             if math.isfinite(w)]
    return {"tokens": tokens, "n_layers": int(graph["n_layers"]), "nodes": nodes,
            "edges": edges, "drawn": min(len(edges), int(max_edges))}


def _header(graph: Mapping[str, Any], data: dict) -> str:
    esc = html.escape
    scores = [("replacement score", graph.get("replacement_score")),
              ("completeness score", graph.get("completeness_score")),
              ("node threshold", graph.get("node_threshold")),
              ("edge threshold", graph.get("edge_threshold"))]
    drawn, total = data["drawn"], len(data["edges"])
    shown_edges = (f'<span id="edges-note">; the {drawn:,} strongest drawn, every edge listed '
                   'on a click</span>' if drawn < total else "")
    shown = "".join(f'<span>{name} <b id="{name.split()[0]}-{name.split()[1]}">'
                    f'{_num(value)}</b></span>' for name, value in scores)
    return (f'<header><h1>tfx graph · <span id="prompt">{esc(str(graph["prompt"]))}</span></h1>'
            f'<div class="meta">model {esc(str(graph.get("model", "")))} · transcoders '
            f'{esc(str(graph.get("transcoders", "")))} · {len(data["nodes"]):,} nodes, '
            f'{len(data["edges"]):,} edges (pruned){shown_edges}</div>'
            f'<div class="scores">{shown}</div></header>')


def graph_html(graph: Mapping[str, Any], max_edges: int = MAX_EDGES) -> str:
    """The whole page for a pruned graph (the mapping `tfx graph` builds) as one string;
    the `max_edges` strongest edges are drawn (all of them are listed on a click)."""
    data = page_data(graph, max_edges)
    title = f"tfx graph · {graph['prompt']}"[:120]
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<link rel="icon" href="data:,">\n<title>{html.escape(title)}</title>\n'
            f'<style>{STYLE}</style></head>\n<body>\n{_header(graph, data)}\n'
            f'<div id="wrap"><div id="canvas"></div>{SIDE}</div>\n'
            f'<script type="application/json" id="tfx-data">{json_script(data)}</script>\n'
            f'<script>{SCRIPT}</script>\n</body></html>\n')


__all__ = ["graph_html", "page_data"]
