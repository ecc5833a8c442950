"""circuit-tracer 0.5.0 reads the set tfx train-transcoder writes, and computes what tfx
computes from it. circuit-tracer cannot live in tfx's environment (it pins transformers
4.57 and transformer-lens 3.2), so bench/circuit_tracer_loads.py made two small sets (ReLU
with a skip path, JumpReLU) under tests/recordings/circuit_tracer_transcoders/, loaded each
in circuit-tracer's own environment with `load_transcoder_set` on config.yaml's paths, and recorded its
encode/decode of each block's MLP input on a fixed text (versions written down). Here tfx
reads the same files and must give the same numbers (≤ 1e-5 of their scale), and the
recorded input must be what tfx's model computes at those sites."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tfx_cli import api
from tfx_cli.core.features.transcoder_set import read_transcoders

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "recordings" / "circuit_tracer_transcoders"
RECORDING = json.loads((HERE / "recording.json").read_text())
SEEN = RECORDING["circuit_tracer"]
MADE = RECORDING["made_with"]


SETS = {"relu_skip": (["relu", "relu"], True), "jumprelu": (["JumpReLU", "JumpReLU"], False)}


@pytest.mark.parametrize("name", SETS)
def test_the_recording_is_of_these_files_and_versions(name):
    for file, sha in RECORDING["fingerprint"][name].items():
        assert hashlib.sha256((HERE / name / file).read_bytes()).hexdigest() == sha, file
    seen = SEEN[name]
    assert seen["versions"]["circuit-tracer"] == "0.5.0"
    assert (seen["activation"], seen["skip_connection"]) == SETS[name]
    assert seen["n_layers"] == 2
    assert seen["feature_input_hook"] == "mlp.hook_in"
    assert seen["feature_output_hook"] == "hook_mlp_out"


@pytest.mark.parametrize("name", SETS)
def test_tfx_encodes_and_decodes_the_set_as_circuit_tracer_does(name):
    seen = SEEN[name]
    tc = read_transcoders(HERE / name, n_layers=seen["n_layers"],
                          d_model=len(MADE["input"][0][0]))
    for layer in range(seen["n_layers"]):
        tensors = load_file(str(HERE / name / f"layer_{layer}.safetensors"))
        x = torch.tensor(MADE["input"][layer], dtype=torch.float32)
        f = tc.encode(layer, x)
        want_f = np.asarray(seen["encode"][layer])
        want_y = np.asarray(seen["decode"][layer])
        assert (want_f > 0).sum() > 0 and (want_f == 0).sum() > 0  # sparse, not empty
        if name == "jumprelu":  # some pre-activations lie between 0 and θ: the gate matters
            pre = x @ tensors["W_enc"].T + tensors["b_enc"]
            theta = tensors["activation_function.threshold"]
            assert int(((pre > 0) & (pre <= theta)).sum()) > 0
        assert np.abs(f.numpy() - want_f).max() <= 1e-5 * max(1.0, np.abs(want_f).max())
        y = tc.decode(layer, f, x).numpy()
        assert np.abs(y - want_y).max() <= 1e-5 * max(1.0, np.abs(want_y).max())


def test_the_recorded_input_is_the_models_mlp_input():
    traced = api.trace(MADE["text"], select=MADE["input_sites"], **MADE["model"]).tensors
    for layer, name in enumerate(MADE["input_sites"]):
        want = np.asarray(MADE["input"][layer])
        assert np.abs(traced[name] - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
