"""`tfx graph`: the attribution graph of a text, pruned, as a typed result; the mapping the
graph.json writer and the HTML page read (`graph_payload`); the unpruned graph saved."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ...errors import UsageError
from ..progress import counting
from ..analysis.common import encode, input_info
from ..results.circuits import GraphNode, GraphResult, PathStep, graph_payload  # noqa: F401
from . import graph as G
from .attribution import attribute
from .graphfile import strongest_paths
from ..analysis.replacement import open_transcoders
from .labels import read_labels
from .setup import forward, targets


def check_threshold(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise UsageError(f"{name} {value} is outside (0, 1]; give the share of the influence "
                         f"to keep, e.g. {name} 0.8")


def target_ids(loaded, tokens: list[str] | None) -> list[int] | None:
    if not tokens:
        return None
    out = []
    for t in tokens:
        ids = loaded.tokenizer.encode(t)
        if len(ids) != 1:
            raise UsageError(f"--target {t!r} is {len(ids)} tokens; give one token (mind the "
                             "leading space)")
        out.append(ids[0])
    return out


def graph(loaded, text: str, *, transcoders: str, max_logits: int = 10,
          logit_prob: float = 0.95, target: list[str] | None = None,
          max_features: int | None = 7500, node_threshold: float = 0.8,
          edge_threshold: float = 0.98, batch_size: int = 512,
          save: str | None = None, truncate: bool = False,
          labels: list[str] | None = None, progress=None) -> GraphResult:
    check_threshold("--node-threshold", node_threshold)
    check_threshold("--edge-threshold", edge_threshold)
    if not 0 < logit_prob <= 1:
        raise UsageError(f"--logit-prob {logit_prob} is outside (0, 1]; e.g. --logit-prob 0.95")
    if max_logits < 1:
        raise UsageError("--max-logits must be at least 1")
    cfg = loaded.cfg
    tc = open_transcoders(loaded, transcoders)
    named = read_labels(list(labels), tc) if labels else {}
    ids = encode(loaded, text, truncate=truncate, bos=True)
    wanted = target_ids(loaded, target)
    started = time.perf_counter()
    with torch.no_grad():
        p = forward(loaded, ids, tc)
        logit_ids, probs, vecs = targets(p, max_logits=max_logits, logit_prob=logit_prob,
                                         ids=wanted)
        rows = min(max_features or p.n_features, p.n_features)
        with counting(progress, "attribution rows", total=rows, unit="rows") as update:
            full = attribute(p, logit_ids, probs, vecs, max_features=max_features,
                             batch_size=batch_size, on_rows=update)
    n_feat = len(full.selected)
    nodes, edges, cumulative = G.prune(full.adjacency, probs, n_features=n_feat,
                                       n_tokens=len(ids), node_threshold=node_threshold,
                                       edge_threshold=edge_threshold)
    replacement, completeness = G.scores(full.adjacency, probs, n_features=n_feat,
                                         n_tokens=len(ids), n_layers=cfg.n_layers)
    seconds = time.perf_counter() - started
    kept = torch.where(nodes)[0]
    pruned = full.adjacency[kept][:, kept] * edges[kept][:, kept]
    del edges
    listed = _nodes(loaded, full, kept, cumulative, named)
    result = GraphResult(
        model=loaded.info, input=input_info(loaded, text, ids), transcoders=str(transcoders),
        feature_input_hook=tc.input_hook, feature_output_hook=tc.output_hook,
        n_layers=cfg.n_layers, n_active_features=p.n_features, n_selected_features=n_feat,
        node_threshold=node_threshold, edge_threshold=edge_threshold,
        replacement_score=replacement, completeness_score=completeness, nodes=listed,
        n_edges=int((pruned != 0).sum()), seconds=seconds,
        paths=strongest_paths(pruned.numpy(), listed))
    result.tensors.add("graph.adjacency", pruned.numpy().astype(np.float32), ("N", "M"))
    if save:
        result.saved = _save(full, save)
    return result


def node_kinds(full, index: int) -> tuple:
    """(kind, layer, pos, feature-or-token) of node `index` of the unpruned graph."""
    p = full.prompt
    n_feat, T, L = len(full.selected), p.n_tokens, p.n_layers
    if index < n_feat:
        layer, pos, feat = p.active[full.selected[index]].tolist()
        return "feature", layer, pos, feat
    index -= n_feat
    if index < L * T:
        return "error", index // T, index % T, None
    index -= L * T
    if index < T:
        return "embedding", None, index, p.ids[index]
    return "logit", None, T - 1, full.logit_ids[index - T]


def _nodes(loaded, full, kept: torch.Tensor, cumulative: torch.Tensor,
           named: dict) -> list[GraphNode]:
    p, tok = full.prompt, loaded.tokenizer
    out, unlabelled = [], []
    for index in kept.tolist():
        kind, layer, pos, what = node_kinds(full, index)
        token = what if kind in ("embedding", "logit") else None
        act = float(p.activations[full.selected[index]]) if kind == "feature" else None
        node = GraphNode(kind, layer, pos, what if kind == "feature" else None, token,
                         tok.pieces([token])[0] if token is not None else None, act,
                         float(cumulative[index]))
        if kind == "logit":
            node.probability = float(full.probabilities[full.logit_ids.index(token)])
        if kind == "feature":  # its top examples (--labels), else its strongest outputs
            node.label = named.get((layer, what))
            if node.label is None:
                unlabelled.append(node)
        out.append(node)
    _output_labels(loaded, p, unlabelled)
    return out


def _output_labels(loaded, p, nodes: list[GraphNode], k: int = 3, chunk: int = 256) -> None:
    """Each feature's strongest output tokens: the largest entries of its decoder row
    times the unembedding (a cross-layer feature's rows into every layer, summed); the
    rows go through the unembedding a chunk at a time, one matrix product each."""
    tc = p.frozen.tc
    for start in range(0, len(nodes), chunk):
        part = nodes[start:start + chunk]
        rows = []
        for n in part:
            W = tc.W_dec[n.layer][n.feature]
            rows.append(W.sum(0) if W.ndim == 2 else W)
        top = torch.topk(torch.stack(rows) @ p.unembed.T, k, dim=1).indices.tolist()
        for n, ids in zip(part, top):
            n.label = " ".join(repr(s) for s in loaded.tokenizer.pieces(ids))


def _save(full, path: str) -> str:
    from safetensors.torch import save_file

    p = full.prompt
    tensors = {"adjacency": full.adjacency.contiguous(),
               "active_features": p.active.contiguous(),
               "activations": p.activations.contiguous(),
               "selected_features": full.selected.contiguous(),
               "input_ids": torch.tensor(p.ids), "logit_ids": torch.tensor(full.logit_ids),
               "logit_probabilities": full.probabilities.contiguous()}
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(target)
    return str(target)
