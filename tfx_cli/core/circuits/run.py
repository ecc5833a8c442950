"""`tfx graph`: the attribution graph of a text as a Graph (made, labelled, saved), and
any Graph (a run's, or one read back from its file) pruned into the typed result the
terminal, --json, graph.json and the HTML page read."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ...errors import UsageError
from ..progress import counting
from ..analysis.common import encode, input_info
from ..results import InputInfo
from ..results.circuits import GraphNode, GraphResult, PathStep, graph_payload  # noqa: F401
from .attribution import attribute
from .graph import Graph, GraphSource
from .graphfile import strongest_paths
from ..analysis.replacement import open_transcoders
from ..features.transcoder_set import TranscoderSet
from .labels import read_labels
from .setup import forward, targets as logit_targets


def target_ids(loaded, tokens: list[str] | None) -> list[int] | None:
    """The ids of --target's tokens, each one token and each named once: a token twice
    would be two logit nodes with one id (graph.json keys nodes by id) and would weigh
    its probability twice in the influence on the logits."""
    if not tokens:
        return None
    out, given = [], {}
    for t in tokens:
        ids = loaded.tokenizer.encode(t)
        if len(ids) != 1:
            raise UsageError(f"--target {t!r} is {len(ids)} tokens; give one token (mind the "
                             "leading space)")
        if ids[0] in given:
            same = "twice" if given[ids[0]] == t else f"as {given[ids[0]]!r} and {t!r}"
            raise UsageError(f"--target names the token {t!r} {same}; give each logit "
                             "target once")
        given[ids[0]] = t
        out.append(ids[0])
    return out


def build(loaded, text: str, *, tc: TranscoderSet, max_logits: int, logit_prob: float,
          targets: list[str] | None, max_features: int, truncate: bool,
          progress=None) -> Graph:
    """The unpruned graph of `text`'s next token on the set `tc` (open_transcoders'),
    with what names its nodes."""
    ids = encode(loaded, text, truncate=truncate, bos=True)
    wanted = target_ids(loaded, targets)
    with torch.no_grad():
        p = forward(loaded, ids, tc)
        logit_ids, probs, vecs = logit_targets(p, max_logits=max_logits,
                                               logit_prob=logit_prob, ids=wanted)
        rows = min(max_features, p.n_features)
        with counting(progress, "attribution rows", total=rows, unit="rows") as update:
            g = attribute(p, logit_ids, probs, vecs, max_features=max_features,
                          on_rows=update)
    tok = loaded.tokenizer
    g.source = GraphSource(text, input_info(loaded, text, ids).tokens,
                           tok.pieces(logit_ids), loaded.info, str(tc.folder),
                           tc.input_hook, tc.output_hook, _left_out(loaded, text, ids))
    return g


def _left_out(loaded, text: str, ids: list[int]) -> int:
    """How many of the text's tokens --truncate left out of `ids` (a special token put
    first is no token of the text)."""
    own = loaded.tokenizer.encode(text)
    specials = getattr(loaded.tokenizer, "special_ids", ())
    put_first = bool(ids) and ids[0] in specials and not (own and own[0] in specials)
    return len(own) - (len(ids) - put_first)


def graph(loaded, text: str, *, transcoders: str, max_logits: int, logit_prob: float,
          targets: list[str] | None, max_features: int, node_threshold: float,
          edge_threshold: float, truncate: bool, labels: list[str] | None = None,
          save: str | None = None, force: bool = False, progress=None) -> GraphResult:
    """`tfx graph TEXT`: the graph made, saved unpruned (`save`), pruned and labelled
    (`labels`: `tfx top` folders; else each feature's strongest output tokens)."""
    tc = open_transcoders(loaded, transcoders)
    named = read_labels(list(labels), tc) if labels else {}
    started = time.perf_counter()
    g = build(loaded, text, tc=tc, max_logits=max_logits,
              logit_prob=logit_prob, targets=targets, max_features=max_features,
              truncate=truncate, progress=progress)
    pruned = g.prune(node_threshold, edge_threshold)
    scores = g.scores()
    seconds = time.perf_counter() - started
    features = range(g.order.features.stop)  # every feature node when saved, else the kept
    _label(g, loaded, named, features if save else
           [i for i in pruned.kept.tolist() if i in features], progress)
    result = result_of(g, pruned, scores, node_threshold=node_threshold,
                       edge_threshold=edge_threshold, seconds=seconds)
    if save:
        result.saved = str(g.save(save, force=force))
    return result


def open_saved(path: str | Path, *, node_threshold: float,
               edge_threshold: float) -> GraphResult:
    """`tfx graph --open FILE.safetensors`: the unpruned graph a run saved, pruned at
    these thresholds, as that run would have shown it."""
    g = Graph.load(path)
    result = result_of(g, g.prune(node_threshold, edge_threshold), g.scores(),
                       node_threshold=node_threshold, edge_threshold=edge_threshold)
    result.opened = str(path)
    return result


def result_of(g: Graph, pruned, scores: tuple[float, float], *, node_threshold: float,
              edge_threshold: float, seconds: float = 0.0) -> GraphResult:
    """The typed result of graph `g` pruned (`pruned`: Graph.prune's), its nodes named
    by its source and labels, with the graph's two scores."""
    src = g.source
    listed = [_node(g, index, float(pruned.cumulative[index]))
              for index in pruned.kept.tolist()]
    adjacency = pruned.adjacency.numpy().astype(np.float32)
    result = GraphResult(
        model=src.model, input=InputInfo(text=src.text, tokens=list(src.tokens),
                                         ids=list(g.ids)),
        transcoders=src.transcoders, feature_input_hook=src.input_hook,
        feature_output_hook=src.output_hook,
        n_layers=g.n_layers, n_active_features=len(g.active),
        n_selected_features=len(g.selected), node_threshold=node_threshold,
        edge_threshold=edge_threshold, replacement_score=scores[0],
        completeness_score=scores[1], nodes=listed, n_edges=int(np.count_nonzero(adjacency)),
        seconds=seconds, paths=strongest_paths(adjacency, listed),
        truncated=src.truncated or None)
    result.tensors.add("graph.adjacency", adjacency, ("N", "M"))
    return result


def _node(g: Graph, index: int, influence: float) -> GraphNode:
    """Node `index` of `g` as the result lists it."""
    kind, i, pos = g.order.kind(index)
    if kind == "feature":
        layer, pos, feature, activation = g.feature(i)
        return GraphNode(kind, layer, pos, feature, None, None, activation, influence,
                         label=g.labels.get(i))
    if kind == "error":
        return GraphNode(kind, i, pos, None, None, None, None, influence)
    if kind == "embedding":
        return GraphNode(kind, None, i, None, g.ids[i], g.source.tokens[i], None, influence)
    return GraphNode(kind, None, len(g.ids) - 1, None, g.logit_ids[i], g.source.logit_texts[i],
                     None, influence, probability=float(g.probabilities[i]))


def _label(g: Graph, loaded, named: dict, indices, progress=None) -> None:
    """Label the feature nodes `indices` not labelled yet: by their top examples
    (`named`: --labels), else by their strongest output tokens."""
    todo = [i for i in indices if i not in g.labels]
    unnamed = []
    for i in todo:
        layer, _, feature, _ = g.feature(i)
        g.labels[i] = named.get((layer, feature))
        if g.labels[i] is None:
            unnamed.append(i)
    _output_labels(g, loaded, unnamed, progress)


def _output_labels(g: Graph, loaded, indices: list[int], progress=None, k: int = 3,
                   chunk: int = 256) -> None:
    """Each feature's strongest output tokens: the largest entries of its decoder row
    times the unembedding (a cross-layer feature's rows into every layer, summed), once
    per (layer, feature) however many positions it is active at; the rows go through the
    unembedding a chunk at a time, one matrix product each."""
    p = g.prompt
    tc = p.frozen.tc
    nodes: dict[tuple[int, int], list[int]] = {}
    for i in indices:
        layer, _, feature, _ = g.feature(i)
        nodes.setdefault((layer, feature), []).append(i)
    keys = list(nodes)
    shown = progress if len(keys) > chunk else None  # seconds only for --save's many
    with counting(shown, "feature labels", total=len(keys), unit="features") as update:
        for start in range(0, len(keys), chunk):
            part = keys[start:start + chunk]
            rows = [tc.W_dec[layer][feature] for layer, feature in part]
            rows = [W.sum(0) if W.ndim == 2 else W for W in rows]
            top = torch.topk(torch.stack(rows) @ p.unembed.T, k, dim=1).indices.tolist()
            for key, ids in zip(part, top):
                label = " ".join(repr(s) for s in loaded.tokenizer.pieces(ids))
                g.labels.update((i, label) for i in nodes[key])
            update(start + len(part))
