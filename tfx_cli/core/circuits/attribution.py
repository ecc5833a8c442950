"""The attribution graph of one prompt (circuit-tracer 0.5.0's `attribute`): every active
transcoder feature, error term, token embedding and logit target is a node; an edge is a
source's direct effect on a target in the local replacement model (linear.py): the
target's input (a feature's pre-activation; a logit target's demeaned logit) changes by
the edge when the source is removed, with everything else frozen.

Rows are computed backwards, many targets at a time, by applying the transposed linear
map to (B, T, D) gradients layer by layer: no autograd graph and no copy of the model
per row, so memory is one batch of gradients."""
from __future__ import annotations

import torch

from ...errors import UsageError
from .graph import Graph, partial_influence
from .linear import Frozen
from .setup import Prompt, check_finite


def batch_rows(p: Prompt, layers: torch.Tensor, positions: torch.Tensor,
               vectors: torch.Tensor) -> torch.Tensor:
    """Edges into targets read at `layers` (L: the logits, through the final norm) and
    `positions` along `vectors` (an encoder row, or a demeaned unembedding column), from
    every feature, error and token node (B, its sources), in the prompt's node order
    (every active feature a node)."""
    fz: Frozen = p.frozen
    order = p.order()
    L, T = p.n_layers, p.n_tokens
    B, D = vectors.shape
    rows = torch.zeros(B, order.n_sources)
    g = torch.zeros(B, T, D)
    batch = torch.arange(B)
    top = layers == L
    if bool(top.any()):
        g[batch[top], positions[top]] = vectors[top]
        g = fz.ln_f.back(g)
    highest = int(layers[~top].max()) if bool((~top).any()) else -1
    for layer in range(L - 1, -1, -1):
        if layer > highest and not bool(top.any()):
            continue
        _read_features(p, g, rows, layer)
        rows[:, order.layer_errors(layer)] = torch.einsum("btd,td->bt", g, p.errors[layer])
        skip = fz.tc.W_skip[layer]
        g_site = g @ skip if skip is not None else torch.zeros_like(g)
        here = layers == layer
        if bool(here.any()):
            g_site[batch[here], positions[here]] = vectors[here]
        g = g + fz.site_back(layer, g_site)
        g = g + fz.attn[layer].back(g)
    rows[:, order.tokens] = torch.einsum("btd,td->bt", g, p.token_vecs)
    return rows


def _read_features(p: Prompt, g: torch.Tensor, rows: torch.Tensor, layer: int) -> None:
    """Edges from the features that write into `layer`'s FFN output: its own (a per-layer
    set), or every earlier-or-same layer's (a cross-layer transcoder, their parts into
    this layer summed per feature)."""
    tc = p.frozen.tc
    if not tc.cross:
        for pos, sel in p.feature_blocks[layer]:
            rows[:, sel] += g[:, pos] @ p.decoder_vecs[sel].T
        return
    for source in range(layer + 1):
        W = tc.decoder(source, layer)
        for pos, sel in p.feature_blocks[source]:
            vecs = W[p.active[sel, 2]] * p.activations[sel, None]
            rows[:, sel] += g[:, pos] @ vecs.T


def attribute(p: Prompt, logit_ids: list[int], probabilities: torch.Tensor,
              logit_vecs: torch.Tensor, *, max_features: int | None = None,
              batch_size: int = 512, update_interval: int = 4,
              on_rows=None) -> Graph:
    """circuit-tracer's order of work: the logits' rows; then, when only max_features of
    the active features may have rows, the features ranked by their influence through
    the rows so far, update_interval batches at a time; the adjacency is square with the
    rows of features never visited left zero. `on_rows(done)`, when given, is told how
    many feature rows are computed (of min(max_features, active features)), batch by
    batch."""
    order = p.order(len(logit_ids))  # every active feature a node, while rows are made
    n_feat, K = order.n_features, order.n_logits
    budget = min(max_features or n_feat, n_feat)
    if max_features is not None and max_features < 1:
        raise UsageError("--max-features must be at least 1")
    edges = torch.zeros(budget + K, order.size)
    row_node = torch.zeros(budget + K, dtype=torch.long)
    for i in range(0, K, batch_size):
        vec = logit_vecs[i:i + batch_size]
        n = vec.shape[0]
        edges[i:i + n, :order.n_sources] = batch_rows(
            p, torch.full((n,), p.n_layers), torch.full((n,), p.n_tokens - 1), vec)
        row_node[i:i + n] = torch.arange(i, i + n) + order.logits.start
    visited = torch.zeros(n_feat, dtype=torch.bool)
    st, done = K, 0
    while done < budget:
        if budget == n_feat:
            pending = torch.arange(n_feat)
        else:
            infl = partial_influence(edges[:st], probabilities, row_node[:st])
            rank = torch.argsort(infl[order.features], descending=True)
            pending = rank[~visited[rank]][:min(update_interval * batch_size, budget - done)]
        # the queue's rows in layer order: a batch then starts its backward pass at the
        # highest layer it holds (the rows, and which features get them, are unchanged)
        pending = pending[torch.argsort(p.feature_layer[pending], descending=True, stable=True)]
        for start in range(0, len(pending), batch_size):
            idx = pending[start:start + batch_size]
            done += len(idx)
            rows = batch_rows(p, p.feature_layer[idx], p.feature_pos[idx], p.encoder_vecs[idx])
            edges[st:st + len(idx), :order.n_sources] = rows
            row_node[st:st + len(idx)] = idx
            visited[idx] = True
            st += len(idx)
            if on_rows is not None:
                on_rows(done)
    selected = torch.where(visited)[0]
    if budget < n_feat:  # the graph's nodes: the features with rows, then the rest
        edges = edges[:, torch.cat([selected, torch.arange(order.errors.start, order.size)])]
    edges = edges[torch.argsort(row_node)]  # feature rows (in selected's order), logits
    graph = Graph(list(p.ids), p.n_layers, p.active, p.activations, selected,
                  list(logit_ids), probabilities, torch.zeros(0, 0), prompt=p)
    final = graph.order
    graph.adjacency = torch.zeros(final.size, final.size)
    graph.adjacency[final.features] = edges[:budget]
    graph.adjacency[final.logits] = edges[budget:]
    check_finite(graph.adjacency, p.frozen.tc, "the graph's edges")
    return graph


def constant_inputs(p: Prompt, logit_vecs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What each feature's pre-activation and each logit target's demeaned logit would be
    with every node removed (no token embedding, no feature, no error): the biases, the
    position embeddings, the norms' shifts and position 0's stream, carried through the
    same frozen model. A target's input is its incoming edges plus this constant (the
    sum rule the tests hold)."""
    fz = p.frozen
    stream = p.constant_embed.clone()
    sites = []
    for layer in range(p.n_layers):
        mid = stream + fz.attn[layer].forward(stream)
        site = fz.site_forward(layer, mid)
        sites.append(site)
        out = fz.tc.b_dec[layer].expand_as(mid).clone()
        skip = fz.tc.skip(layer, site)
        if skip is not None:
            out += skip
        out[0] += p.unexplained0[layer]
        stream = mid + out
    sites = torch.stack(sites)
    layer, pos, feat = p.active.unbind(1)
    W = torch.stack([fz.tc.W_enc[int(l)][int(f)] for l, f in zip(layer, feat)]) \
        if len(layer) else torch.zeros(0, stream.shape[1])
    b = torch.stack([fz.tc.b_enc[int(l)][int(f)] for l, f in zip(layer, feat)]) \
        if len(layer) else torch.zeros(0)
    features = (sites[layer, pos] * W).sum(-1) + b
    logits = logit_vecs @ fz.ln_f.forward(stream)[-1]
    return features, logits
