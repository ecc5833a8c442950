"""circuit-tracer 0.5.0 reads the set tfx train-transcoder writes, and computes what tfx
computes from it. circuit-tracer cannot live in tfx's environment (it pins transformers
4.57 and transformer-lens 3.2), so bench/circuit_tracer_loads.py made a small set in
tests/recordings/circuit_tracer_transcoders/set/, loaded it in circuit-tracer's own
environment with `load_transcoder_set` on config.yaml's paths, and recorded its
encode/decode of each block's MLP input on a fixed text (versions written down). Here tfx
reads the same files and must give the same numbers (≤ 1e-5 of their scale), and the
recorded input must be what tfx's model computes at those sites."""
import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from tfx_cli import api
from tfx_cli.core.features.transcoders import decode, encode

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "recordings" / "circuit_tracer_transcoders"
RECORDING = json.loads((HERE / "recording.json").read_text())
SEEN = RECORDING["circuit_tracer"]
MADE = RECORDING["made_with"]


def test_the_recording_is_of_these_files_and_versions():
    for name, sha in RECORDING["fingerprint"].items():
        assert hashlib.sha256((HERE / "set" / name).read_bytes()).hexdigest() == sha, name
    assert SEEN["versions"]["circuit-tracer"] == "0.5.0"
    assert SEEN["n_layers"] == 2 and SEEN["skip_connection"] is True
    assert SEEN["activation"] == ["relu", "relu"]  # no threshold in the files: ReLU
    assert SEEN["feature_input_hook"] == "mlp.hook_in"
    assert SEEN["feature_output_hook"] == "hook_mlp_out"


def test_tfx_encodes_and_decodes_the_set_as_circuit_tracer_does():
    for layer in range(SEEN["n_layers"]):
        tensors = load_file(str(HERE / "set" / f"layer_{layer}.safetensors"))
        x = torch.tensor(MADE["input"][layer], dtype=torch.float32)
        f = encode(tensors, x)
        want_f = np.asarray(SEEN["encode"][layer])
        want_y = np.asarray(SEEN["decode"][layer])
        assert (want_f > 0).sum() > 0 and (want_f == 0).sum() > 0  # sparse, not empty
        assert np.abs(f.numpy() - want_f).max() <= 1e-5 * max(1.0, np.abs(want_f).max())
        y = decode(tensors, f, x).numpy()
        assert np.abs(y - want_y).max() <= 1e-5 * max(1.0, np.abs(want_y).max())


def test_the_recorded_input_is_the_models_mlp_input():
    traced = api.trace(MADE["text"], select=MADE["input_sites"], **MADE["model"]).tensors
    for layer, name in enumerate(MADE["input_sites"]):
        want = np.asarray(MADE["input"][layer])
        assert np.abs(traced[name] - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
