"""`tfx graph --open FILE.json`: a pruned attribution graph read back from its graph.json,
the file `tfx graph -o` writes and circuit-tracer's `create_graph_files` writes (the
layout Neuronpedia serves too), as the result `tfx graph` gives from its own run.

What the file holds becomes the result: the nodes in the file's order (a feature's
`clerp` its label; a logit's token text and probability from its `clerp` and
`token_prob`; an embedding's token id from its `E_{id}_{pos}` name and its text from
`metadata.prompt_tokens`), the links as graph.adjacency (targets × sources), the scores
and thresholds where the metadata has them (tfx writes them; circuit-tracer's files
have no scores, and then they are None). Nodes are read by their fields, not their
names, except a feature's index (its name `{layer}_{feature}_{pos}`) and an embedding's
token id, so circuit-tracer 0.5.0's error names (`0_{layer}_{pos}`) read as well as
later releases' (`{layer}_-1_{pos}`).

Also `strongest_paths`, the terminal tree's paths, which the run uses too, and
`is_safetensors`, which tells the unpruned graph of `--save` (graph.Graph.load reads it)
from a graph.json. NumPy only: no torch, so opening a graph.json loads no model
machinery.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputTextError
from ..results import InputInfo, ModelInfo
from ..results.circuits import GraphNode, GraphResult, PathStep

KINDS = {"cross layer transcoder": "feature", "mlp reconstruction error": "error",
         "embedding": "embedding", "logit": "logit"}
_OUTPUT = re.compile(r'^Output "(.*)" \(p=[^)]*\)$', re.DOTALL)
_FIX = "give the graph.json that `tfx graph -o` or circuit-tracer wrote"


def strongest_paths(A: np.ndarray, nodes: list[GraphNode], depth: int = 4,
                    width: tuple = (3, 2, 2, 1)) -> list[PathStep]:
    """From each logit target back towards the tokens: each node's strongest inputs."""
    def inputs(i: int, level: int) -> list[PathStep]:
        if level >= depth or nodes[i].kind == "embedding":
            return []
        row = A[i]
        order = [j for j in np.argsort(-np.abs(row), kind="stable") if row[j] != 0]
        return [PathStep(int(j), float(row[j]), inputs(int(j), level + 1))
                for j in order[:width[level]]]

    return [PathStep(i, 1.0, inputs(i, 0)) for i, n in enumerate(nodes) if n.kind == "logit"]


def is_safetensors(path: str | Path) -> bool:
    """Whether the file at `path` starts as a safetensors file does (an 8-byte header
    length within safetensors' 100 MB limit, then the header's JSON object; a JSON text's
    first 8 bytes read as a length are far larger): the unpruned graph of `tfx graph
    --save`, which core/circuits/saved.py reads (and refuses, cut short); anything else
    is read as graph.json."""
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            head = handle.read(9)
    except OSError:
        return False
    length = int.from_bytes(head[:8], "little")
    return len(head) == 9 and head[8:9] == b"{" and 0 < length <= 100_000_000


def _bad(path: Path, problem: str) -> InputTextError:
    return InputTextError(f"--open {path}: {problem}; {_FIX}")


def read_document(path: str | Path) -> dict:
    """The file's JSON object, checked to be a graph (metadata with prompt_tokens, a
    nodes list, a links list)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputTextError(f"--open {path} is a folder; give the graph's .json file "
                             f"(e.g. {path / 'graph.json'})")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputTextError(f"--open {path} does not exist; {_FIX}") from None
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not UTF-8 text (byte {exc.start}), so not JSON") from None
    except OSError as exc:
        raise InputTextError(f"--open {path} cannot be read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise _bad(path, f"not JSON ({getattr(exc, 'msg', exc)}{where})") from None
    except RecursionError:  # json's reader recurses once per level
        raise _bad(path, "JSON nested deeper than any graph (lists or objects inside each "
                   "other thousands of times)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) \
            or not isinstance(doc.get("links"), list):
        raise _bad(path, "JSON, but not a graph: it has no \"nodes\" and \"links\" lists")
    meta = doc.get("metadata")
    tokens = meta.get("prompt_tokens") if isinstance(meta, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise _bad(path, "a graph without metadata.prompt_tokens (the prompt's tokens)")
    return doc


def _int(node: dict, key: str, what: str) -> int:
    value = node.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"its {key} {value!r} is not {what}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"its {key} {value!r} is not {what}") from None


F32_MAX = float(np.finfo(np.float32).max)


def finite(value: Any, limit: float = math.inf) -> float | None:
    """`value` as a float when it is a number (not a bool) of size at most `limit`;
    else None (an integer of 400 digits too, which float() cannot hold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= limit else None


def _number(node: dict, key: str) -> float | None:
    value = node.get(key)
    if value is None:
        return None
    number = finite(value)
    if number is None:
        raise ValueError(f"its {key} {_short(value)} is not a finite number")
    return number


def _short(value: Any) -> str:
    """A value as a message quotes it: a number of hundreds of digits cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "…" + f" ({len(text)} characters)"


def _feature_index(node: dict, layer: int, pos: int) -> int:
    """The feature's index in its layer's transcoder: from the name `{layer}_{F}_{pos}`
    both writers give, else by undoing the Cantor pairing of (layer, F) in `feature`."""
    parts = str(node["node_id"]).split("_")
    if len(parts) == 3 and all(re.fullmatch(r"-?\d+", p) for p in parts) \
            and int(parts[0]) == layer and int(parts[2]) == pos and int(parts[1]) >= 0:
        return int(parts[1])
    paired = _int(node, "feature", "a number")
    w = (math.isqrt(8 * paired + 1) - 1) // 2 if paired >= 0 else -1
    index = paired - w * (w + 1) // 2
    if w < 0 or w - index != layer:
        raise ValueError(f"neither its name nor its feature {paired} gives a feature of "
                         f"layer {layer}")
    return index


def _node(node: Any, tokens: list[str], last: int) -> tuple[GraphNode, int | None]:
    """One file node as the result's GraphNode, and (for a logit) its layer number."""
    if not isinstance(node, dict) or not isinstance(node.get("node_id"), str):
        raise ValueError("it is not an object with a node_id")
    kind = KINDS.get(node.get("feature_type"))
    if kind is None:
        raise ValueError(f"its feature_type {node.get('feature_type')!r} is none of "
                         f"{', '.join(KINDS)}")
    pos = _int(node, "ctx_idx", "a position")
    if not 0 <= pos <= last:
        raise ValueError(f"its position {pos} is outside the prompt's {last + 1} tokens")
    influence = _number(node, "influence")
    clerp = node.get("clerp") if isinstance(node.get("clerp"), str) else ""
    if kind in ("feature", "error"):
        layer = _int(node, "layer", "a layer number")
        feature = _feature_index(node, layer, pos) if kind == "feature" else None
        activation = _number(node, "activation") if kind == "feature" else None
        return GraphNode(kind, layer, pos, feature, None, None, activation, influence,
                         label=(clerp or None) if kind == "feature" else None), None
    if kind == "embedding":
        name = node["node_id"].split("_")
        if len(name) != 3 or name[0] != "E" or not re.fullmatch(r"\d+", name[1]):
            raise ValueError("its name is not E_{token id}_{position}")
        token = int(name[1])
        return GraphNode(kind, None, pos, None, token, tokens[pos], None, influence), None
    token = _int(node, "feature", "a token id")
    said = _OUTPUT.match(clerp)
    probability = _number(node, "token_prob")
    return GraphNode(kind, None, pos, None, token, said.group(1) if said else None, None,
                     influence, probability=probability), _int(node, "layer", "a layer number")


def _nodes(path: Path, doc: dict) -> tuple[list[GraphNode], dict[str, int], int]:
    """(nodes, node id -> index, the model's layer count: a logit's layer less one)."""
    tokens = [str(t) for t in doc["metadata"]["prompt_tokens"]]
    nodes, index, logit_layers = [], {}, set()
    for i, raw in enumerate(doc["nodes"]):
        try:
            node, layer = _node(raw, tokens, len(tokens) - 1)
        except (ValueError, KeyError) as exc:
            name = raw.get("node_id") if isinstance(raw, dict) else None
            raise _bad(path, f"node {i}" + (f" ({name})" if name else "") + f": {exc}") \
                from None
        if raw["node_id"] in index:
            raise _bad(path, f"two nodes have the id {raw['node_id']}, so a link naming it "
                       "could mean either (circuit-tracer 0.5.0 names an error node like a "
                       "layer-0 feature; write the graph again with tfx graph -o)")
        index[raw["node_id"]] = i
        nodes.append(node)
        if layer is not None:
            logit_layers.add(layer)
    if len(logit_layers) != 1:
        problem = ("no logit node (nothing the graph explains)" if not logit_layers else
                   f"logit nodes on different layers ({sorted(logit_layers)})")
        raise _bad(path, f"a graph with {problem}")
    return nodes, index, logit_layers.pop() - 1


def _adjacency(path: Path, links: list, index: dict[str, int]) -> np.ndarray:
    """targets × sources, float32, from the links {source, target, weight}."""
    A = np.zeros((len(index), len(index)), dtype=np.float32)
    seen = set()
    for k, link in enumerate(links):
        if not isinstance(link, dict):
            raise _bad(path, f"link {k} is not an object {{source, target, weight}}")
        ends = []
        for end in ("source", "target"):
            name = link.get(end)
            if name not in index:
                raise _bad(path, f"link {k} names the {end} {name!r}, which is not one of "
                           "the file's nodes")
            ends.append(index[name])
        weight = finite(link.get("weight"), F32_MAX)
        if weight is None:
            raise _bad(path, f"link {k} ({link['source']} -> {link['target']}) has the "
                       f"weight {_short(link.get('weight'))}, not a finite number within "
                       "float32's range (±3.4e38)")
        if (ends[1], ends[0]) in seen:
            raise _bad(path, f"the edge {link['source']} -> {link['target']} is listed twice")
        seen.add((ends[1], ends[0]))
        A[ends[1], ends[0]] = weight
    return A


def _setting(meta: dict, group: str | None, key: str, kind=float):
    """metadata[group][key] (metadata[key] for no group) when it is a `kind` (bool never
    counts as a number; a number only when finite)."""
    where = meta if group is None else meta.get(group)
    value = where.get(key) if isinstance(where, dict) else None
    if kind is float:
        return finite(value)
    return None if isinstance(value, bool) or not isinstance(value, kind) else value


def open_graph(path: str | Path) -> GraphResult:
    """The graph file at `path` as a GraphResult: nodes, graph.adjacency, the strongest
    paths; scores, thresholds, transcoders and feature counts where the file has them."""
    path = Path(path).expanduser()
    doc = read_document(path)
    meta = doc["metadata"]
    nodes, index, n_layers = _nodes(path, doc)
    A = _adjacency(path, doc["links"], index)
    tokens = [str(t) for t in meta["prompt_tokens"]]
    by_pos = {n.pos: n.token for n in nodes if n.kind == "embedding"}
    ids = [by_pos.get(p) for p in range(len(tokens))]
    node_threshold = _setting(meta, "pruning_settings", "node_threshold")
    if node_threshold is None:
        node_threshold = _setting(meta, None, "node_threshold")
    result = GraphResult(
        model=ModelInfo(config=str(meta.get("scan") or "")),
        input=InputInfo(text=str(meta.get("prompt", "")), tokens=tokens,
                        ids=None if None in ids else ids),
        transcoders=_setting(meta, "generation_settings", "transcoders", str),
        feature_input_hook=_setting(meta, "generation_settings", "feature_input_hook", str),
        feature_output_hook=_setting(meta, "generation_settings", "feature_output_hook", str),
        n_layers=n_layers,
        n_active_features=_setting(meta, "generation_settings", "active_features", int),
        n_selected_features=_setting(meta, "generation_settings", "features_with_rows", int),
        node_threshold=node_threshold,
        edge_threshold=_setting(meta, "pruning_settings", "edge_threshold"),
        replacement_score=_setting(meta, "scores", "replacement"),
        completeness_score=_setting(meta, "scores", "completeness"),
        nodes=nodes, n_edges=int(np.count_nonzero(A)), paths=strongest_paths(A, nodes),
        opened=str(path))
    result.tensors.add("graph.adjacency", A, ("N", "M"))
    return result
