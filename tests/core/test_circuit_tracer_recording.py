"""The circuit-tracer 0.5.0 recording is whole, self-consistent and readable here.

circuit-tracer cannot live in tfx's environment (it pins transformers and
transformer-lens), so bench/circuit_tracer_record.py ran it in an environment of its own on
tiny random models with random transcoders and wrote what it computed under
tests/recordings/circuit_tracer/ (see the README there). The attribution-graph tests
compare tfx with those numbers; this file only checks that the recording can be trusted
as their reference: every file it describes is there with the recorded bytes, the tensors
have the shapes the node order implies, the versions are written down, and tfx, loading
the same model folder, computes the same next-token logits circuit-tracer's replacement
model did.
"""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tfx_cli import api

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "recordings" / "circuit_tracer"
CASES = ("gpt2", "llama", "clt")
SETTINGS = ("freeze_attention", "free", "constrained_all", "constrained_from_1")


def _flat_yaml(text: str) -> dict:
    """The config.yaml the recording script writes: `key: value` lines and one list of
    `- item` lines (read here without a YAML package, which tfx does not depend on)."""
    out: dict = {}
    key = None
    for line in text.splitlines():
        if line.startswith("- "):
            out[key].append(line[2:].strip())
        elif line.strip():
            key, _, value = line.partition(":")
            out[key] = value.strip() or []
    return out


def _recording(case: str) -> dict:
    return json.loads((FOLDER / case / "recording.json").read_text())


def _layers(rec: dict) -> int:
    hf = rec["model"]["hf_config"]
    return hf.get("n_layer") or hf["num_hidden_layers"]


@pytest.mark.parametrize("case", CASES)
def test_the_recording_describes_these_bytes(case):
    rec = _recording(case)
    assert rec["fingerprint"]
    for name, sha in rec["fingerprint"].items():
        assert hashlib.sha256((FOLDER / case / name).read_bytes()).hexdigest() == sha, name
    assert sorted(p["tensors"] for p in rec["prompts"]) == \
        sorted(n for n in rec["fingerprint"] if "/" not in n)
    assert rec["versions"]["key"]["circuit-tracer"] == "0.5.0"
    for name in ("torch", "transformer-lens", "transformers"):
        assert rec["versions"]["key"][name]
        assert any(line.lower().startswith(name + "==") for line in
                   rec["versions"]["pip_freeze"]), name


@pytest.mark.parametrize("case", CASES)
def test_the_transcoder_set_is_in_circuit_tracers_layout(case):
    rec = _recording(case)
    config = _flat_yaml((FOLDER / case / "transcoders" / "config.yaml").read_text())
    assert config["model_kind"] == rec["transcoders"]["kind"]
    assert config["feature_input_hook"] == rec["transcoders"]["feature_input_hook"]
    assert config["feature_output_hook"] == rec["transcoders"]["feature_output_hook"]
    d = rec["model"]["transformer_lens"]["d_model"]
    f = rec["transcoders"]["d_transcoder"]
    if config["model_kind"] == "cross_layer_transcoder":
        _check_clt(case, _layers(rec), d, f)
        return
    assert config["model_kind"] == "transcoder_set"
    assert len(config["transcoders"]) == _layers(rec)
    for name in config["transcoders"]:
        t = load_file(str(FOLDER / case / "transcoders" / name))
        assert t["W_enc"].shape == t["W_dec"].shape == (f, d)
        assert t["b_enc"].shape == (f,) and t["b_dec"].shape == (d,)
        assert ("W_skip" in t) is rec["transcoders"]["skip"]
        if "W_skip" in t:
            assert t["W_skip"].shape == (d, d)
        jump = rec["transcoders"]["activation"] == "jumprelu"
        assert ("activation_function.threshold" in t) is jump
        assert all(np.isfinite(v).all() for v in t.values())


def _check_clt(case: str, n_layers: int, d: int, f: int):
    """circuit-tracer's cross-layer layout: per layer W_enc_I.safetensors (W_enc_I, b_enc_I,
    b_dec_I) and W_dec_I.safetensors (W_dec_I: one decoder into each layer from I on)."""
    folder = FOLDER / case / "transcoders"
    assert sorted(p.name for p in folder.glob("W_*.safetensors")) == sorted(
        f"W_{kind}_{i}.safetensors" for kind in ("enc", "dec") for i in range(n_layers))
    for i in range(n_layers):
        enc = load_file(str(folder / f"W_enc_{i}.safetensors"))
        assert sorted(enc) == sorted([f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}"])
        assert enc[f"W_enc_{i}"].shape == (f, d) and enc[f"b_enc_{i}"].shape == (f,)
        dec = load_file(str(folder / f"W_dec_{i}.safetensors"))
        assert list(dec) == [f"W_dec_{i}"] and dec[f"W_dec_{i}"].shape == (f, n_layers - i, d)


def _check_graph(p: dict, t: dict, prefix: str, n_layers: int, d_transcoder: int):
    g = p[prefix]
    n_pos = p["n_pos"]
    active, selected = t[f"{prefix}.active_features"], t[f"{prefix}.selected_features"]
    n_logits = len(g["logit_targets"])
    n = len(selected) + n_layers * n_pos + n_pos + n_logits
    assert g["n_nodes"] == n and g["n_selected_features"] == len(selected)
    assert t[f"{prefix}.adjacency"].shape == t[f"{prefix}.prune.edge_mask"].shape == (n, n)
    assert t[f"{prefix}.prune.node_mask"].shape == (n,)
    assert int(t[f"{prefix}.prune.node_mask"].sum()) == g["pruned_nodes"]
    assert active.shape == (g["n_active_features"], 3)
    assert t[f"{prefix}.activation_values"].shape == (len(active),)
    assert (t[f"{prefix}.activation_values"] > 0).all()
    assert active[:, 0].max() < n_layers and active[:, 1].max() < n_pos
    assert active[:, 2].max() < d_transcoder and active[:, 1].min() >= 1
    assert (np.diff(selected) > 0).all() and selected.max() < len(active)
    assert t[f"{prefix}.logit_token_ids"].tolist() == \
        [lt["vocab_idx"] for lt in g["logit_targets"]]
    probs = t[f"{prefix}.logit_probabilities"]
    assert np.allclose(probs, g["logit_probabilities"], rtol=1e-6, atol=0)
    assert 1 <= n_logits <= 10 and (n_logits == 10 or probs.sum() >= 0.95)
    assert 0 < g["replacement_score"] <= 1 and 0 < g["completeness_score"] <= 1
    # error and token nodes have no inputs in circuit-tracer's adjacency
    assert not t[f"{prefix}.adjacency"][len(selected):n - n_logits].any()


@pytest.mark.parametrize("case", CASES)
def test_the_shapes_follow_the_node_order(case):
    rec = _recording(case)
    n_layers, f = _layers(rec), rec["transcoders"]["d_transcoder"]
    vocab = rec["model"]["hf_config"]["vocab_size"]
    for p in rec["prompts"]:
        t = load_file(str(FOLDER / case / p["tensors"]))
        assert t["input_ids"].tolist() == p["input_ids"] and len(p["input_ids"]) == p["n_pos"]
        assert t["clean_logits"].shape == (p["n_pos"], vocab)
        _check_graph(p, t, "graph", n_layers, f)
        _check_graph(p, t, "graph_limited", n_layers, f)
        assert p["graph_limited"]["n_selected_features"] == p["graph_limited"]["max_feature_nodes"]
        assert sorted(p["interventions"]["settings"]) == sorted(SETTINGS)
        for s in SETTINGS:
            assert t[f"intervention.{s}.logits"].shape == (p["n_pos"], vocab)
            assert t[f"intervention.{s}.activations"].shape == (n_layers, p["n_pos"], f)
            # an intervention that changes nothing would not test anything; each setting
            # keeps the last layer's, which moves the last position
            assert not np.allclose(t[f"intervention.{s}.logits"][-1], t["clean_logits"][-1])


def test_the_graph_json_is_the_frontends_file():
    rec = _recording("gpt2")
    graph = json.loads((FOLDER / "gpt2" / rec["graph_json"]).read_text())
    assert set(graph) == {"metadata", "qParams", "nodes", "links"}
    p = rec["prompts"][0]
    t = load_file(str(FOLDER / "gpt2" / p["tensors"]))
    kinds = [n["feature_type"] for n in graph["nodes"]]
    assert kinds.count("embedding") == p["n_pos"]
    assert kinds.count("logit") == len(p["graph"]["logit_targets"])
    assert len(graph["nodes"]) <= int(t["graph.prune.node_mask"].sum())
    assert len(graph["links"]) <= int(t["graph.prune.edge_mask"].sum())
    assert graph["metadata"]["prompt_tokens"][1:] == \
        [tok.replace("Ġ", " ") for tok in p["tokens"][1:]]


@pytest.mark.parametrize("case", CASES)
def test_tfx_computes_circuit_tracers_clean_logits(case):
    """The same folder in tfx: the same token ids for the prompt (the BOS first, from the
    tokenizer's post-processor) and the same logits at every position."""
    rec = _recording(case)
    model = api.load(weights=str(FOLDER / case / "model"))
    for p in rec["prompts"]:
        ids = model.tokenizer.encode(p["prompt"])
        assert ids == p["input_ids"]
        with torch.no_grad():
            logits = model.module(torch.tensor([ids]))[0].double().numpy()
        want = load_file(str(FOLDER / case / p["tensors"]))["clean_logits"].astype(np.float64)
        assert logits.shape == want.shape
        assert np.abs(logits - want).max() <= 1e-4 * np.abs(want).max()
