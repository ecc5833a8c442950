"""The graph file (`tfx graph -o FILE.json`) that circuit-tracer's frontend and Neuronpedia
open, written from synthetic pruned graphs (tests/circuit_graphs.py).

The field checks are this project's own reading of circuit-tracer 0.5.0's pydantic models
(frontend/graph_models.py: Metadata, QParams, Node, Link, Model) and of Neuronpedia's
graph schema (a node's clerp is required there). circuit-tracer's models themselves judge
the file in its own venv: bench/circuit_tracer_validate.py, whose result is recorded in
tests/recordings/circuit_tracer/graph_json_validation.json and read here.
"""
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from circuit_graphs import VALIDATED, synthetic_graph
from tfx_cli.core import outputs
from tfx_cli.core.circuits import neuronpedia
from tfx_cli.core.circuits.neuronpedia import cantor, dumps, graph_json, write_graph_json
from tfx_cli.errors import DiskFullError, OutputFileError, TfxError

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings" / "circuit_tracer"
FEATURE_TYPES = {"cross layer transcoder", "mlp reconstruction error", "embedding", "logit"}


def _is(value, kind) -> bool:
    """isinstance, with bool not counted as an int or a float (JSON tells them apart)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _check_types(doc: dict) -> None:
    meta = doc["metadata"]
    for key in ("slug", "scan", "prompt"):
        assert _is(meta[key], str), key
    for key in ("transcoder_list", "prompt_tokens"):
        assert isinstance(meta[key], list) and all(_is(t, str) for t in meta[key]), key
    assert meta["node_threshold"] is None or _is(meta["node_threshold"], float)
    assert _is(meta["schema_version"], int)
    q = doc["qParams"]
    assert isinstance(q["pinnedIds"], list) and isinstance(q["supernodes"], list)
    for key in ("linkType", "clickedId", "sg_pos"):
        assert _is(q[key], str), key
    node_types = {"node_id": str, "feature": int, "layer": str, "ctx_idx": int,
                  "feature_type": str, "token_prob": float, "is_target_logit": bool,
                  "run_idx": int, "reverse_ctx_idx": int, "jsNodeId": str, "clerp": str}
    for node in doc["nodes"]:
        assert set(node) == set(node_types) | {"influence", "activation"}, node
        for key, kind in node_types.items():
            assert _is(node[key], kind), (key, node)
        for key in ("influence", "activation"):
            assert node[key] is None or _is(node[key], float), (key, node)
        assert node["feature_type"] in FEATURE_TYPES
        assert 0 <= node["ctx_idx"] < len(meta["prompt_tokens"])
    for link in doc["links"]:
        assert set(link) == {"source", "target", "weight"}
        assert _is(link["source"], str) and _is(link["target"], str)
        assert _is(link["weight"], float)


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(**VALIDATED)


@pytest.fixture(scope="module")
def doc(graph):
    return json.loads(dumps(graph_json(graph)))


def test_every_field_the_models_require_is_there_with_its_type(doc, graph):
    _check_types(doc)
    meta = doc["metadata"]
    assert meta["prompt_tokens"] == graph["tokens"] and meta["prompt"] == graph["prompt"]
    assert meta["scan"] == "gpt124m" and meta["node_threshold"] == 0.8
    assert meta["pruning_settings"] == {"node_threshold": 0.8, "edge_threshold": 0.98}
    assert meta["scores"] == {"replacement": 0.812346, "completeness": 0.934568}
    assert meta["generation_settings"]["feature_input_hook"] == "hook_resid_mid"
    assert doc["qParams"] == {"pinnedIds": [], "supernodes": [], "linkType": "both",
                              "clickedId": "", "sg_pos": ""}
    named = graph_json(dict(graph, scan="gemma-2-2b"))["metadata"]  # Neuronpedia's model id
    assert named["scan"] == "gemma-2-2b"


def test_node_ids_are_unique_and_every_link_joins_two_nodes(doc):
    ids = [node["node_id"] for node in doc["nodes"]]
    assert len(ids) == len(set(ids))
    known = set(ids)
    assert doc["links"] and all(l["source"] in known and l["target"] in known
                                for l in doc["links"])


def test_node_id_forms(doc, graph):
    """Each kind has circuit-tracer's form; the error node at (layer 1, position 0) and the
    layer-0 feature 1 at position 0, which circuit-tracer 0.5.0 would both call 0_1_0,
    are two nodes."""
    by_id = {node["node_id"]: node for node in doc["nodes"]}
    L, last = graph["n_layers"], len(graph["tokens"]) - 1
    feature, error = by_id["0_1_0"], by_id["1_-1_0"]
    assert (feature["feature_type"], feature["feature"], feature["layer"]) == (
        "cross layer transcoder", cantor(0, 1), "0")
    assert (error["feature_type"], error["feature"], error["layer"]) == (
        "mlp reconstruction error", -1, "1")
    for node in graph["nodes"]:
        if node["kind"] == "embedding":
            shown = by_id[f"E_{node['token']}_{node['pos']}"]
            assert (shown["layer"], shown["feature"], shown["jsNodeId"]) == (
                "E", node["pos"], f"E_{node['token']}-{node['pos']}")
        if node["kind"] == "logit":
            shown = by_id[f"{L + 1}_{node['token']}_{last}"]
            assert (shown["layer"], shown["feature"], shown["ctx_idx"]) == (
                str(L + 1), node["token"], last)
            assert shown["token_prob"] == pytest.approx(node["probability"], rel=1e-5)
            assert shown["clerp"] == f'Output "{node["text"]}" (p={node["probability"]:.3f})'
            assert shown["influence"] is None


def test_the_most_probable_logit_is_the_target(doc, graph):
    logits = [n for n in doc["nodes"] if n["feature_type"] == "logit"]
    assert len(logits) == VALIDATED["n_logits"]
    targets = [n for n in logits if n["is_target_logit"]]
    assert len(targets) == 1
    assert targets[0]["token_prob"] == max(n["token_prob"] for n in logits)
    # the viewer reads the probability back out of the clerp
    for n in logits:
        shown = float(n["clerp"].split("(p=")[1].split(")")[0])
        assert shown == pytest.approx(n["token_prob"], abs=5e-4)


def test_links_are_the_adjacency_rounded_to_four_digits(doc, graph):
    ids = neuronpedia.node_ids(graph)
    adjacency = graph["adjacency"]
    targets, sources = np.nonzero(adjacency)
    assert len(doc["links"]) == len(targets)
    got = {(l["source"], l["target"]): l["weight"] for l in doc["links"]}
    assert len(got) == len(doc["links"])  # no edge listed twice
    for t, s in zip(targets, sources):
        true = float(adjacency[t, s])
        assert got[(ids[s], ids[t])] == pytest.approx(true, rel=5e-4, abs=0), (s, t)


def test_unconnected_nodes_are_dropped_but_tokens_and_logits_kept(graph):
    g = dict(graph)
    adjacency = graph["adjacency"].copy()
    lonely = [i for i, n in enumerate(g["nodes"]) if n["kind"] == "feature"][3]
    embedding = next(i for i, n in enumerate(g["nodes"]) if n["kind"] == "embedding")
    adjacency[lonely, :] = adjacency[:, lonely] = 0
    adjacency[embedding, :] = adjacency[:, embedding] = 0
    g["adjacency"] = adjacency
    ids = neuronpedia.node_ids(g)
    kept = {n["node_id"] for n in graph_json(g)["nodes"]}
    assert ids[lonely] not in kept and ids[embedding] in kept
    assert {i for i, n in zip(ids, g["nodes"]) if n["kind"] == "logit"} <= kept


def test_a_feature_label_becomes_its_clerp(doc, graph):
    by_id = {node["node_id"]: node for node in doc["nodes"]}
    labelled = 0
    for node in graph["nodes"]:
        if node["kind"] != "feature":
            continue
        key = f"{node['layer']}_{node['feature']}_{node['pos']}"
        if key not in by_id:
            continue
        want = graph["labels"].get((node["layer"], node["feature"]), "")
        assert by_id[key]["clerp"] == want
        labelled += bool(want)
        assert by_id[key]["activation"] == pytest.approx(node["activation"], rel=1e-5)
        assert by_id[key]["influence"] == pytest.approx(node["influence"], rel=1e-5)
    assert labelled > 0
    # labels keyed by their text, as a JSON round trip leaves them, are read the same
    as_text = {f"({layer}, {feature})": label for (layer, feature), label in graph["labels"].items()}
    assert graph_json(dict(graph, labels=as_text))["nodes"] == doc["nodes"]


def test_the_file_is_compact(tmp_path, graph):
    path = write_graph_json(graph, tmp_path / "g.json")
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") == 1 and text.endswith("}\n")
    assert ": " not in text and ", " not in text.replace('" ', "")
    # every weight printed with at most 4 significant digits
    digits = [re.sub(r"e.*|[-.]", "", m).lstrip("0")
              for m in re.findall(r'"weight":(-?[0-9.e+-]+)', text)]
    assert digits and max(len(d) for d in digits) <= 4
    # the links are most of a real graph's file: each one short (ids of about 6 to 10
    # characters here, 55 bytes with its keys and weight)
    n_links = len(json.loads(text)["links"])
    assert len(text[text.index('"links":'):].encode()) / n_links < 60


def test_write_refuses_an_existing_file_without_force(tmp_path, graph):
    path = tmp_path / "mine.json"
    path.write_text("the user's own file\n")
    with pytest.raises(OutputFileError) as caught:
        write_graph_json(graph, path)
    error = caught.value
    assert error.exit_code == 2 and "\n" not in error.message
    assert "already exists" in error.message and "--force" in error.message
    assert path.read_text() == "the user's own file\n"
    write_graph_json(graph, path, force=True)
    assert json.loads(path.read_text())["metadata"]["slug"] == "mine"  # the file's name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json"]  # no temporary left


def test_write_refuses_a_folder_or_a_missing_folder(tmp_path, graph):
    for path, words in ((tmp_path, "is a folder"), (tmp_path / "no" / "g.json", "does not exist")):
        with pytest.raises(OutputFileError) as caught:
            write_graph_json(graph, path)
        assert words in caught.value.message and caught.value.exit_code == 2
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_file(tmp_path, graph, monkeypatch):
    """The disk fills as the file is moved into place: the old file stays, no temporary
    file is left, and the error says the disk is full."""
    path = tmp_path / "g.json"
    path.write_text("old\n")

    def full(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "replace", full)  # the one output layer's move
    with pytest.raises(DiskFullError):
        write_graph_json(graph, path, force=True)
    monkeypatch.undo()
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


def test_a_non_finite_weight_is_refused_not_written(tmp_path, graph):
    g = dict(graph)
    adjacency = graph["adjacency"].copy()
    t, s = np.argwhere(adjacency != 0)[0]
    adjacency[t, s] = np.nan
    g["adjacency"] = adjacency
    with pytest.raises(TfxError) as caught:
        write_graph_json(g, tmp_path / "g.json")
    assert "nan" in caught.value.message and not (tmp_path / "g.json").exists()


def test_circuit_tracers_own_models_accepted_this_file():
    """bench/circuit_tracer_validate.py ran circuit-tracer 0.5.0's models and local server
    on the file tfx writes for this synthetic graph; tfx still writes that file byte for
    byte, so the verdict holds for today's writer."""
    record = json.loads((RECORDINGS / "graph_json_validation.json").read_text())
    assert record["validated"] is True and record["served_by_local_server"] is True
    assert record["versions"]["circuit-tracer"] == "0.5.0"
    text = dumps(graph_json(synthetic_graph(**VALIDATED), slug=record["slug"]))
    assert len(text.encode()) == record["bytes"]
    assert hashlib.sha256(text.encode()).hexdigest() == record["sha256"]
    assert record["nodes"] == len(json.loads(text)["nodes"])


# -- against the file circuit-tracer 0.5.0 wrote ------------------------------------
CASE = RECORDINGS / "gpt2"


def _recorded_graph() -> tuple[dict, dict]:
    """circuit-tracer's graph of the gpt2 case's first prompt, pruned by its own masks,
    as the mapping `tfx graph` hands the writer (its node order: features, errors, tokens,
    logits); and the graph file circuit-tracer's create_graph_files wrote from it."""
    from safetensors.numpy import load_file

    record = json.loads((CASE / "recording.json").read_text())
    prompt = record["prompts"][0]
    t = load_file(str(CASE / prompt.get("tensors", "prompt0.safetensors")))
    written = json.loads((CASE / record["graph_json"]).read_text())
    n_layers, n_pos = record["model"]["hf_config"]["n_layer"], prompt["n_pos"]
    scores = t["graph.prune.cumulative_scores"]
    nodes = []
    for i, chosen in enumerate(t["graph.selected_features"]):
        layer, pos, feature = (int(v) for v in t["graph.active_features"][chosen])
        nodes.append({"kind": "feature", "layer": layer, "pos": pos, "feature": feature,
                      "activation": float(t["graph.activation_values"][chosen])})
    for layer in range(n_layers):
        nodes += [{"kind": "error", "layer": layer, "pos": pos} for pos in range(n_pos)]
    nodes += [{"kind": "embedding", "layer": None, "pos": pos, "token": int(token)}
              for pos, token in enumerate(t["input_ids"])]
    for k, target in enumerate(prompt["graph"]["logit_targets"]):
        nodes.append({"kind": "logit", "layer": None, "pos": n_pos - 1,
                      "token": target["vocab_idx"], "text": target["token_str"],
                      "probability": float(t["graph.logit_probabilities"][k])})
    for node, score in zip(nodes, scores):
        node["influence"] = None if node["kind"] == "logit" else float(score)
    keep = np.flatnonzero(t["graph.prune.node_mask"])
    pruned = t["graph.adjacency"] * t["graph.prune.edge_mask"]
    graph = {"prompt": prompt["input_string"], "model": written["metadata"]["scan"],
             # circuit-tracer decodes each id alone; tfx's tokenizer is not the point here
             "tokens": written["metadata"]["prompt_tokens"],
             "ids": [int(i) for i in t["input_ids"]], "n_layers": n_layers,
             "nodes": [nodes[i] for i in keep], "adjacency": pruned[np.ix_(keep, keep)],
             "node_threshold": record["prune"]["node_threshold"],
             "edge_threshold": record["prune"]["edge_threshold"]}
    return graph, written


def _as_0_5_0(node_id: str) -> str:
    """An error node's id as circuit-tracer 0.5.0 writes it (`0_{layer}_{pos}`)."""
    layer, feature, pos = node_id.split("_") if node_id[0] != "E" else ("", "", "")
    return f"0_{layer}_{pos}" if feature == "-1" else node_id


def test_same_file_as_circuit_tracer_wrote_for_its_graph():
    """Written from circuit-tracer's own pruned graph, tfx's file has the same metadata,
    the same nodes in the same order with the same fields, types and values (ids alike
    but for the error form), and the same links with the weights to 4 digits."""
    graph, written = _recorded_graph()
    doc = json.loads(dumps(graph_json(graph, slug=written["metadata"]["slug"])))
    _check_types(written)  # the checks above hold circuit-tracer's own file too
    _check_types(doc)
    for key, value in written["metadata"].items():
        assert doc["metadata"][key] == value, key
    assert doc["qParams"] == written["qParams"]
    assert len(doc["nodes"]) == len(written["nodes"])
    for ours, theirs in zip(doc["nodes"], written["nodes"]):
        assert set(ours) == set(theirs)
        assert _as_0_5_0(ours["node_id"]) == theirs["node_id"]
        for key, value in theirs.items():
            if key == "node_id":
                continue
            assert type(ours[key]) is type(value), (key, theirs)
            if isinstance(value, float):
                assert ours[key] == pytest.approx(value, rel=1e-5), (key, theirs)
            else:
                assert ours[key] == value, (key, theirs)
    mine = {(_as_0_5_0(l["source"]), _as_0_5_0(l["target"])): l["weight"] for l in doc["links"]}
    theirs = {(l["source"], l["target"]): l["weight"] for l in written["links"]}
    assert set(mine) == set(theirs) and len(mine) == len(doc["links"]) == len(written["links"])
    for pair, weight in theirs.items():
        assert mine[pair] == pytest.approx(weight, rel=5e-4), pair


def test_edge_scores_are_prune_graphs_on_the_kept_graph(graph):
    """The cap's ranking is circuit-tracer's edge score, here by NumPy; the torch functions
    the pruning uses (held to circuit-tracer's recordings) give the same numbers."""
    import torch

    from tfx_cli.core.circuits import graph as G

    adjacency = torch.from_numpy(np.asarray(graph["adjacency"], dtype=np.float64))
    probs = torch.tensor([n["probability"] for n in graph["nodes"] if n["kind"] == "logit"],
                         dtype=torch.float64)
    weights = G.logit_weights(len(graph["nodes"]), probs).double()
    norm = G.normalized(adjacency)
    want = (norm * (G.influence(norm, weights) + weights)[:, None]).numpy()
    got = neuronpedia.edge_scores(graph)
    assert want.max() > 0
    # logit_weights holds the probabilities in float32: agreement to its precision
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9 * want.max())


def test_max_links_keeps_the_strongest_edges(graph):
    total = int(np.count_nonzero(graph["adjacency"]))
    same, n = neuronpedia.strongest_links(graph, None)
    assert n == total and same["adjacency"] is graph["adjacency"]
    budget = total // 3
    capped, n = neuronpedia.strongest_links(graph, budget)
    assert n == total and np.count_nonzero(capped["adjacency"]) == budget
    score = neuronpedia.edge_scores(graph)
    kept = capped["adjacency"] != 0
    dropped = (np.asarray(graph["adjacency"]) != 0) & ~kept
    assert score[kept].min() >= score[dropped].max()  # no dropped edge outranks a kept one
    assert np.array_equal(capped["adjacency"][kept], np.asarray(graph["adjacency"])[kept])
    doc = graph_json(capped)
    assert len(doc["links"]) == budget
    assert doc["metadata"]["pruning_settings"]["max_links"] == budget
    assert doc["metadata"]["pruning_settings"]["links_before_cap"] == total
