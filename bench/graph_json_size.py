"""How large graph.json (`tfx graph -o`) is for a 73-token prompt, against circuit-tracer's
way of writing the same graph.

    PYTHONPATH=. python bench/graph_json_size.py [--out DIR] [--links 50000,100000,343696]

Synthetic pruned graphs (tests/circuit_graphs.py) shaped like a Gemma-2-2B graph: 73
tokens, 26 layers, 16,384 latents per transcoder, 1,500 active features kept by pruning,
every (layer, position) error node, 10 logit targets, and as many edges as asked
(343,696 edges and 1,489 nodes: a circuit-tracer graph of Gemma-2-2B on "The capital of
state containing Dallas is", pruned at its default 0.8 / 0.98 thresholds, as reported in
the public repository peppinob-ol/attribution-graph-probing,
docs/NEURONPEDIA_UPLOAD_COMPLETE.md). For each: tfx's file (compact, weights to 4
significant digits) and the same document as circuit-tracer 0.5.0 writes it
(`model_dump_json(indent=2)`: two-space indentation, every float32 in full), so the two
sizes are of one graph. Prints a table; --out keeps the tfx files (the validator in
bench/circuit_tracer_validate.py can then be run on them).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from circuit_graphs import synthetic_graph  # noqa: E402

from tfx_cli.core.circuits.neuronpedia import graph_json, write_graph_json  # noqa: E402

SHAPE = {"n_tokens": 73, "n_layers": 26, "n_features": 1500, "d_sae": 16384, "n_logits": 10}
LIMIT = 5_000_000  # bytes: the bound for a 73-token prompt's pruned graph.json


def with_links(n_links: int, seed: int = 0) -> dict:
    """The shape above with about `n_links` edges: the density that gives them."""
    probe = synthetic_graph(**SHAPE, density=1.0, seed=seed)
    possible = int(np.count_nonzero(probe["adjacency"]))
    return synthetic_graph(**SHAPE, density=min(1.0, n_links / possible), seed=seed)


def circuit_tracer_bytes(graph: dict) -> int:
    """The document circuit-tracer writes for this graph: the same fields with the
    float32 values in full (as pydantic prints a Python float), indented by two."""
    doc = graph_json(graph)
    adjacency = graph["adjacency"]
    targets, sources = np.nonzero(adjacency)  # the links' order
    for link, weight in zip(doc["links"], adjacency[targets, sources].tolist()):
        link["weight"] = weight
    return len(json.dumps(doc, indent=2, ensure_ascii=False).encode())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--links", default="50000,100000,343696")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    print(f"{'edges':>9} {'nodes':>6} {'tfx bytes':>11} {'B/edge':>7} {'write s':>8} "
          f"{'circuit-tracer bytes':>21} {'≤ 5 MB':>7}")
    for n in (int(x) for x in args.links.split(",")):
        graph = with_links(n)
        start = time.perf_counter()
        path = write_graph_json(graph, out / f"tfx-73-tokens-{n}.json", force=True)
        seconds = time.perf_counter() - start
        size = path.stat().st_size
        doc = json.loads(path.read_text(encoding="utf-8"))
        links = len(doc["links"])
        print(f"{links:>9,} {len(doc['nodes']):>6,} {size:>11,} {size / links:>7.1f} "
              f"{seconds:>8.2f} {circuit_tracer_bytes(graph):>21,} "
              f"{'yes' if size <= LIMIT else 'no':>7}")
    print(f"files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
