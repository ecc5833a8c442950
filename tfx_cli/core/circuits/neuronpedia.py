"""`tfx graph -o FILE.json`: the pruned attribution graph as the JSON file circuit-tracer's
frontend (its local server) and Neuronpedia's graph viewer open.

The layout is circuit-tracer 0.5.0's (`frontend/graph_models.py`, filled in by
`utils/create_graph_files.py`): `metadata` (slug, scan, transcoder_list, prompt_tokens,
prompt, node_threshold, schema_version), `qParams` (the viewer's saved state, empty), one
entry per node and one `{source, target, weight}` per edge. Node ids:

  feature    `{layer}_{feature}_{pos}`     feature = Cantor pair of (layer, feature)
  error      `{layer}_-1_{pos}`            feature = -1
  embedding  `E_{token id}_{pos}`          layer "E", feature = pos
  logit      `{n_layers + 1}_{token id}_{pos}`   pos = the last position

circuit-tracer 0.5.0 writes an error node as `0_{layer}_{pos}`, which is also the id of
the layer-0 feature numbered `layer` at that position, and the viewer keys its nodes by
id, so one of the two disappears; circuit-tracer's later releases use `{layer}_-1_{pos}`
(feature -1 is never a real index), as here. Everything else follows 0.5.0: a node with
no edge left is dropped unless it is a token or a logit, the most probable logit is the
target logit, a logit's `clerp` is `Output "TOKEN" (p=0.123)` (the viewer reads the
probability back from it), a feature's `clerp` is its label when the graph has one.

Small on purpose (no indentation; edge weights to 4 significant digits, node values to 6),
since the edges are most of the file; written to a temporary file beside the target and
moved into place, and an existing file is replaced only with force. Pure Python and
NumPy: no torch, no typer, no rich.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...errors import TfxError
from ..outputs import atomic_file, check_output_file

SCHEMA_VERSION = 1
FEATURE_TYPES = {"feature": "cross layer transcoder", "error": "mlp reconstruction error",
                 "embedding": "embedding", "logit": "logit"}
WEIGHT_DIGITS = 4   # significant digits of an edge weight
VALUE_DIGITS = 6    # of a node's activation, influence or probability
REQUIRED = ("prompt", "tokens", "model", "n_layers", "nodes", "adjacency", "node_threshold")


def cantor(x: int, y: int) -> int:
    """The Cantor pairing of two non-negative integers: the frontend's one number for a
    (layer, feature) pair."""
    return (x + y) * (x + y + 1) // 2 + y


def _round(value, digits: int):
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        raise TfxError(f"cannot write the graph file: it holds a value {value}; the graph "
                       "is broken (rerun with --debug and report it)")
    return float(f"{value:.{digits}g}")


def slug_of(text: str, limit: int = 40) -> str:
    """A name for the graph in the viewer's list: the text's words, lower case, joined by
    dashes (letters and digits only), at most `limit` characters."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    slug = ""
    for word in words:
        if len(slug) + len(word) + 1 > limit:
            break
        slug = f"{slug}-{word}" if slug else word
    return slug or "tfx-graph"


def label_of(graph: Mapping[str, Any], layer: int, feature: int) -> str:
    """A feature's label in `graph["labels"]`, keyed by the tuple (layer, feature) or by
    its text "(layer, feature)" (as JSON keeps it); "" when it has none."""
    labels = graph.get("labels") or {}
    label = labels.get((layer, feature), labels.get(f"({layer}, {feature})"))
    return "" if label is None else str(label)


def node_ids(graph: Mapping[str, Any]) -> list[str]:
    """The frontend's id of every node of `graph`, in its order."""
    n_layers, last = int(graph["n_layers"]), len(graph["tokens"]) - 1
    ids = []
    for node in graph["nodes"]:
        kind, pos = node["kind"], int(node["pos"])
        if kind == "feature":
            ids.append(f"{int(node['layer'])}_{int(node['feature'])}_{pos}")
        elif kind == "error":
            ids.append(f"{int(node['layer'])}_-1_{pos}")
        elif kind == "embedding":
            ids.append(f"E_{int(node['token'])}_{pos}")
        elif kind == "logit":
            ids.append(f"{n_layers + 1}_{int(node['token'])}_{last}")
        else:
            raise ValueError(f"node kind {kind!r} is not one of {sorted(FEATURE_TYPES)}")
    return ids


def _node(node: Mapping[str, Any], node_id: str, graph: Mapping[str, Any],
          target: bool) -> dict:
    """One node as the frontend reads it (every field circuit-tracer writes)."""
    kind, pos = node["kind"], int(node["pos"])
    n_layers = int(graph["n_layers"])
    out = {"node_id": node_id, "feature": 0, "layer": "", "ctx_idx": pos,
           "feature_type": FEATURE_TYPES[kind], "token_prob": 0.0, "is_target_logit": False,
           "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": "", "clerp": "",
           "influence": _round(node.get("influence"), VALUE_DIGITS), "activation": None}
    if kind == "feature":
        layer, feature = int(node["layer"]), int(node["feature"])
        out.update(feature=cantor(layer, feature), layer=str(layer),
                   jsNodeId=f"{layer}_{feature}-0", clerp=label_of(graph, layer, feature),
                   activation=_round(node.get("activation"), VALUE_DIGITS))
    elif kind == "error":
        layer = int(node["layer"])
        out.update(feature=-1, layer=str(layer), jsNodeId=f"{layer}_{pos}-0")
    elif kind == "embedding":
        out.update(feature=pos, layer="E", jsNodeId=f"E_{int(node['token'])}-{pos}")
    else:  # logit: at the last position, one layer above the model, no influence
        token = int(node["token"])
        pos = len(graph["tokens"]) - 1
        prob = float(node.get("probability") or 0.0)
        text = node.get("text")
        text = str(token) if text is None else str(text)
        out.update(feature=token, layer=str(n_layers + 1), ctx_idx=pos,
                   token_prob=_round(prob, VALUE_DIGITS), is_target_logit=target,
                   jsNodeId=f"L_{token}-{pos}", clerp=f'Output "{text}" (p={prob:.3f})',
                   influence=None)
    return out


def _check(graph: Mapping[str, Any]) -> np.ndarray:
    missing = [key for key in REQUIRED if key not in graph]
    if missing:
        raise ValueError(f"the graph lacks {', '.join(missing)}")
    adjacency = np.asarray(graph["adjacency"])
    n = len(graph["nodes"])
    if adjacency.shape != (n, n):
        raise ValueError(f"the adjacency is {adjacency.shape}, not ({n}, {n}) for {n} nodes")
    return adjacency


def _links(adjacency: np.ndarray, ids: list[str]) -> tuple[list[dict], set[int]]:
    """One link per nonzero entry, source -> target, in row-major order of the
    (targets x sources) matrix as circuit-tracer lists them; and the nodes they touch."""
    targets, sources = np.nonzero(adjacency)
    weights = adjacency[targets, sources].astype(np.float64)
    bad = ~np.isfinite(weights)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise TfxError(f"cannot write the graph file: the edge {ids[sources[k]]} -> "
                       f"{ids[targets[k]]} has weight {weights[k]}; the graph is broken "
                       "(rerun with --debug and report it)")
    links = [{"source": ids[s], "target": ids[t], "weight": float(f"{w:.{WEIGHT_DIGITS}g}")}
             for s, t, w in zip(sources.tolist(), targets.tolist(), weights.tolist())]
    return links, set(sources.tolist()) | set(targets.tolist())


def edge_scores(graph: Mapping[str, Any]) -> np.ndarray:
    """circuit-tracer's edge score over the pruned graph (targets x sources): each target's
    inputs as shares of its |inputs| (normalize_matrix), times the influence on the logits
    that passes through the target, the logits weighted by their probabilities
    (prune_graph's ranking of edges, computed on the graph that pruning kept)."""
    a = np.abs(np.asarray(graph["adjacency"], dtype=np.float64))
    a /= np.maximum(a.sum(axis=1, keepdims=True), 1e-10)
    weights = np.array([float(node.get("probability") or 0.0) if node["kind"] == "logit"
                        else 0.0 for node in graph["nodes"]])
    through, step = weights.copy(), weights @ a
    for _ in range(len(weights) + 1):  # acyclic: the powers of `a` reach zero
        if not step.any():
            break
        through += step
        step = step @ a
    return a * through[:, None]


def strongest_links(graph: Mapping[str, Any], max_links: int | None) -> tuple[dict, int]:
    """(graph with at most `max_links` edges, how many it had): the edges of largest
    score (`edge_scores`) kept, the others zeroed (ties: the earlier in row-major order
    first). None or a graph within the budget: the graph unchanged."""
    adjacency = np.asarray(graph["adjacency"])
    total = int(np.count_nonzero(adjacency))
    if max_links is None or total <= max_links:
        return dict(graph), total
    score = np.where(adjacency != 0, edge_scores(graph), -1.0).ravel()
    keep = np.argsort(-score, kind="stable")[:max_links]
    capped = np.zeros_like(adjacency).ravel()
    capped[keep] = adjacency.ravel()[keep]
    return {**graph, "adjacency": capped.reshape(adjacency.shape), "links_before_cap": total,
            "max_links": max_links}, total


def _settings(graph: Mapping[str, Any]) -> dict:
    """How the graph was made, as far as the mapping says: the transcoders and their
    hooks, and how many features were active and how many got rows (which `tfx graph
    --open` shows again)."""
    out: dict[str, Any] = {key: str(graph[key]) for key in (
        "transcoders", "feature_input_hook", "feature_output_hook") if graph.get(key)}
    for key, name in (("n_active_features", "active_features"),
                      ("n_selected_features", "features_with_rows")):
        if graph.get(key) is not None:
            out[name] = int(graph[key])
    return out


def graph_json(graph: Mapping[str, Any], slug: str | None = None) -> dict:
    """The graph file's content for a pruned `graph` (the mapping `tfx graph` builds:
    prompt, tokens, ids, model, n_layers, nodes, adjacency, scores, thresholds,
    transcoders, hooks, labels). `slug` names the graph in the viewer (default: from the
    prompt); `write_graph_json` uses the file's name, which the local server needs."""
    adjacency = _check(graph)
    ids = node_ids(graph)
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        twice = next(i for i in ids if i in seen or seen.add(i))
        raise ValueError(f"two nodes of the graph have the id {twice}")
    links, linked = _links(adjacency, ids)
    kinds = [node["kind"] for node in graph["nodes"]]
    logits = [i for i, kind in enumerate(kinds) if kind == "logit"]
    target = max(logits, key=lambda i: graph["nodes"][i].get("probability") or 0.0,
                 default=None)  # max keeps the first of equals: circuit-tracer's first
    nodes = [_node(node, ids[i], graph, i == target) for i, node in enumerate(graph["nodes"])
             if i in linked or kinds[i] in ("embedding", "logit")]
    metadata = {
        "slug": slug or slug_of(str(graph["prompt"])),
        # Neuronpedia takes the scan as its model id (gemma-2-2b): a graph may name one
        "scan": str(graph.get("scan") or graph["model"]),
        "transcoder_list": [],
        "prompt_tokens": [str(t) for t in graph["tokens"]],
        "prompt": str(graph["prompt"]),
        "node_threshold": _round(graph["node_threshold"], VALUE_DIGITS),
        "schema_version": SCHEMA_VERSION,
        "info": {"generator": {"name": "tfx"}},
        "generation_settings": _settings(graph),
        "pruning_settings": {"node_threshold": _round(graph["node_threshold"], VALUE_DIGITS),
                             "edge_threshold": _round(graph.get("edge_threshold"),
                                                      VALUE_DIGITS),
                             **({"max_links": int(graph["max_links"]),
                                 "links_before_cap": int(graph["links_before_cap"])}
                                if graph.get("max_links") is not None else {})},
        "scores": {"replacement": _round(graph.get("replacement_score"), VALUE_DIGITS),
                   "completeness": _round(graph.get("completeness_score"), VALUE_DIGITS)},
    }
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "",
               "sg_pos": ""}
    return {"metadata": metadata, "qParams": qparams, "nodes": nodes, "links": links}


def dumps(doc: dict) -> str:
    """The file's text: one line, no spaces, UTF-8 as is, no NaN."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"


def write_graph_json(graph: Mapping[str, Any], path, force: bool = False,
                     option: str = "-o") -> Path:
    """Write `graph_json(graph)` to `path` (its slug the file's name without .json, as
    the local server looks graphs up by slug). An existing file is kept unless `force`;
    the file appears whole or not at all, as an ordinary file. Returns the path written."""
    path = check_output_file(path, force, option=option, example="graph.json")
    text = dumps(graph_json(graph, slug=path.stem))
    with atomic_file(path, force=force, mode="umask") as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


__all__ = ["edge_scores", "strongest_links", "graph_json", "write_graph_json", "node_ids", "label_of", "cantor", "dumps", "slug_of"]
