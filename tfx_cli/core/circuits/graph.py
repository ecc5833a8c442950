"""Influence, pruning and the two scores of an attribution graph, with circuit-tracer
0.5.0's definitions (graph.py there: normalize_matrix, compute_influence, find_threshold,
prune_graph, compute_graph_scores, compute_partial_influences). The adjacency is
targets × sources; nodes are ordered features, errors (layer-major), tokens, logits."""
from __future__ import annotations

import torch


def normalized(matrix: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """|A| with each row (a target's inputs) summing to 1 (rows of zeros stay zero);
    in_place: overwrite `matrix` (a copy fewer of an N × N graph)."""
    a = matrix.abs_() if in_place else matrix.abs()
    return a.div_(a.sum(dim=1, keepdim=True).clamp_(min=1e-10))


def influence(A: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """weights·(A + A² + A³ + …): the graph is acyclic, so the powers reach zero."""
    step = weights @ A
    total = step.clone()
    for _ in range(max_iter):
        if not bool(step.any()):
            return total
        step = step @ A
        total += step
    raise RuntimeError(f"influence did not converge in {max_iter} steps")


def _threshold(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """The score at which the largest scores (all ≥ 0) reach `keep` of the total. Only the
    positive scores are sorted: trailing zeros add nothing to the running sum, and when
    the threshold falls past the positive ones it is the smallest score, zero."""
    positive = scores[scores > 0]
    if positive.numel() == 0:
        return scores.new_zeros(())
    ordered = torch.sort(positive, descending=True).values
    cumulative = torch.cumsum(ordered, 0) / ordered.sum()
    index = int(torch.searchsorted(cumulative, keep).item())
    if index >= len(ordered):
        return ordered[-1] if positive.numel() == scores.numel() else scores.new_zeros(())
    return ordered[index]


def logit_weights(n_nodes: int, probabilities: torch.Tensor) -> torch.Tensor:
    w = torch.zeros(n_nodes)
    w[n_nodes - len(probabilities):] = probabilities
    return w


def prune(adjacency: torch.Tensor, probabilities: torch.Tensor, *, n_features: int,
          n_tokens: int, node_threshold: float = 0.8, edge_threshold: float = 0.98):
    """(node mask, edge mask, cumulative influence per node): the nodes carrying
    node_threshold of the influence on the logits (tokens and logits always kept), then
    the edges carrying edge_threshold of the influence through the nodes kept, then the
    features and errors left without an edge out (features: or in) dropped, repeatedly."""
    n_logits = len(probabilities)
    weights = logit_weights(adjacency.shape[0], probabilities)
    node_influence = influence(normalized(adjacency), weights)
    nodes = node_influence >= _threshold(node_influence, node_threshold)
    fixed = n_logits + n_tokens
    nodes[-fixed:] = True
    pruned = adjacency.clone()
    pruned[~nodes] = 0
    pruned[:, ~nodes] = 0
    norm = normalized(pruned, in_place=True)
    through = influence(norm, weights) + weights
    edge_scores = norm.mul_(through[:, None])  # the normalised matrix is not read again
    edges = edge_scores >= _threshold(edge_scores.flatten(), edge_threshold)
    del norm, edge_scores, pruned
    inner = slice(0, adjacency.shape[0] - fixed)
    while True:
        before = nodes.clone()
        edges[~nodes] = False
        edges[:, ~nodes] = False
        nodes[inner] &= edges[:, inner].any(0)
        nodes[:n_features] &= edges[:n_features].any(1)
        if bool((nodes == before).all()):
            break
    order_scores, order = torch.sort(node_influence, descending=True)
    cumulative = torch.zeros_like(node_influence)
    cumulative[order] = torch.cumsum(order_scores, 0) / order_scores.sum()
    return nodes, edges, cumulative


def scores(adjacency: torch.Tensor, probabilities: torch.Tensor, *, n_features: int,
           n_tokens: int, n_layers: int) -> tuple[float, float]:
    """(replacement score, completeness score): the share of the tokens' and errors'
    influence on the logits that is the tokens'; and the influence-weighted share of the
    nodes' inputs that does not come from error nodes."""
    err0, err1 = n_features, n_features + n_tokens * n_layers
    weights = logit_weights(adjacency.shape[0], probabilities)
    norm = normalized(adjacency)
    node_influence = influence(norm, weights)
    tokens = node_influence[err1:err1 + n_tokens].sum()
    errors = node_influence[err0:err1].sum()
    replacement = tokens / (tokens + errors)
    not_error = 1 - norm[:, err0:err1].sum(dim=-1)
    out = node_influence + weights
    completeness = (not_error * out).sum() / out.sum()
    return float(replacement), float(completeness)


def partial_influence(rows: torch.Tensor, probabilities: torch.Tensor,
                      row_nodes: torch.Tensor, max_iter: int = 128) -> torch.Tensor:
    """Each node's influence on the logits through the rows computed so far (rows[i] is
    node row_nodes[i]'s inputs; the logits' rows first): how circuit-tracer ranks the
    features still to visit when only --max-features of them get rows."""
    norm = rows.abs()  # the one copy: normalised in place
    norm /= norm.sum(dim=1, keepdim=True).clamp_(min=1e-8)
    total = torch.zeros(rows.shape[1])
    prod = torch.zeros(rows.shape[1])
    prod[-len(probabilities):] = probabilities
    for _ in range(max_iter):
        prod = prod[row_nodes] @ norm
        if not bool(prod.any()):
            return total
        total += prod
    raise RuntimeError("the feature ranking did not converge")
