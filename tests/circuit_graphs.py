"""Synthetic pruned attribution graphs in the mapping `tfx graph` hands its writers
(prompt, tokens, ids, model, n_layers, nodes, adjacency targets x sources, scores,
thresholds, transcoders, hooks, labels), for the graph file's and the page's tests and
the size bench. Seeded: the same arguments give the same graph on any machine.

Edges run only where the replacement model has them: from a token embedding, a feature
or an error at an earlier layer (or from the embedding) and at the same or an earlier
position, into a feature or error; every earlier node at the last position or before feeds
the logits. Weights are heavy-tailed (normal times log-normal), as attributions are.
"""
from __future__ import annotations

import numpy as np

WORDS = ("The", " capital", " of", " the", " state", " containing", " Dallas", " is",
         " Austin", ",", " and", " a", " cat", " sat", " on", " mat", "\n", " \"quoted\"",
         " <tag>", " naïve")


def synthetic_graph(n_tokens: int = 6, n_layers: int = 3, n_features: int = 12,
                    d_sae: int = 64, n_logits: int = 3, density: float = 0.3,
                    seed: int = 0, collide: bool = True) -> dict:
    """A pruned graph of `n_features` active features spread over layers and positions,
    an error node per (layer, position), one embedding per token and `n_logits` logit
    targets; each possible edge kept with probability `density`. With `collide`, the
    layer-0 feature numbered 1 is active at position 0, where the layer-1 error node is:
    circuit-tracer 0.5.0's ids give the two the same name."""
    rng = np.random.default_rng(seed)
    tokens = [WORDS[i % len(WORDS)] for i in range(n_tokens)]
    ids = [int(i) for i in rng.integers(0, 500, n_tokens)]
    cells = set()
    if collide:
        cells.add((0, 0, 1))
    while len(cells) < n_features:
        cells.add((int(rng.integers(0, n_layers)), int(rng.integers(0, n_tokens)),
                   int(rng.integers(0, d_sae))))
    nodes = []
    for layer, pos, feature in sorted(cells):
        nodes.append({"kind": "feature", "layer": layer, "pos": pos, "feature": feature,
                      "token": None, "text": None,
                      "activation": float(rng.gamma(2.0, 1.5)),
                      "influence": float(rng.uniform(0.01, 0.8))})
    for layer in range(n_layers):
        for pos in range(n_tokens):
            nodes.append({"kind": "error", "layer": layer, "pos": pos, "feature": None,
                          "token": None, "text": None, "activation": None,
                          "influence": float(rng.uniform(0.01, 0.8))})
    for pos in range(n_tokens):
        nodes.append({"kind": "embedding", "layer": None, "pos": pos, "feature": None,
                      "token": ids[pos], "text": tokens[pos], "activation": None,
                      "influence": float(rng.uniform(0.01, 0.8))})
    probs = np.sort(rng.dirichlet(np.ones(n_logits + 1)))[::-1][:n_logits]
    for k in range(n_logits):
        nodes.append({"kind": "logit", "layer": None, "pos": n_tokens - 1, "feature": None,
                      "token": 1000 + k, "text": WORDS[(k + 8) % len(WORDS)],
                      "activation": None, "influence": None, "probability": float(probs[k])})
    adjacency = _edges(nodes, n_layers, density, rng)
    labels = {(n["layer"], n["feature"]): f"feature {n['feature']} says \"{n['layer']}\""
              for n in nodes[:n_features:2]}
    return {"prompt": "".join(tokens), "tokens": tokens, "ids": ids, "model": "gpt124m",
            "n_layers": n_layers, "nodes": nodes, "adjacency": adjacency,
            "replacement_score": 0.8123456, "completeness_score": 0.9345678,
            "node_threshold": 0.8, "edge_threshold": 0.98,
            "transcoders": "/data/transcoders/gpt124m-relu",
            "feature_input_hook": "hook_resid_mid", "feature_output_hook": "hook_mlp_out",
            "labels": labels}


def _edges(nodes, n_layers, density, rng) -> np.ndarray:
    """The (targets x sources) weights: zero where the replacement model has no edge or
    the draw dropped it."""
    kind = np.array([n["kind"] for n in nodes])
    level = np.array([-1 if n["kind"] == "embedding" else
                      n_layers if n["kind"] == "logit" else n["layer"] for n in nodes])
    pos = np.array([n["pos"] for n in nodes])
    possible = ((level[None, :] < level[:, None]) & (pos[None, :] <= pos[:, None])
                & (kind[None, :] != "logit") & (kind[:, None] != "embedding"))
    keep = possible & (rng.random(possible.shape) < density)
    weights = rng.normal(size=possible.shape) * rng.lognormal(-1.0, 1.2, possible.shape)
    return np.where(keep, weights, 0.0).astype(np.float32)


# The graph file bench/circuit_tracer_validate.py checks (and tests/core/test_graph_json.py
# regenerates byte for byte): `python tests/circuit_graphs.py OUT.json`
VALIDATED = {"n_tokens": 8, "n_layers": 4, "n_features": 40, "d_sae": 96, "n_logits": 4,
             "density": 0.25, "seed": 35}

if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tfx_cli.core.circuits.neuronpedia import write_graph_json

    print(write_graph_json(synthetic_graph(**VALIDATED), sys.argv[1], force=True))
