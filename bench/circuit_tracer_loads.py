"""What circuit-tracer's own loader reads from a transcoder set that `tfx train-transcoder`
wrote.

circuit-tracer 0.5.0 pins transformers 4.57 and transformer-lens 3.2, so it lives in a
virtual environment of its own, outside the repository (/work/venvs/circuit-tracer here,
with the CPU torch tfx uses). From the repository root, with tfx's own environment:

    python bench/circuit_tracer_loads.py --circuit-tracer-python /work/venvs/circuit-tracer/bin/python

It makes two sets the same way every time (tfx collect of the seeded `repeated-tokens`
corpus on a tiny random 2-layer model, both MLP sites of each block in one pass, then
tfx train-transcoder --layers all with a seed: ReLU with an L1 penalty and a skip path,
and JumpReLU with an L0 penalty, the two kinds circuit-tracer's load_relu_transcoder
reads) into tests/recordings/circuit_tracer_transcoders/{relu_skip,jumprelu}/
(config.yaml and one small layer_{i}.safetensors per layer), traces every block's MLP input on a fixed text with tfx
(the input), runs itself again under circuit-tracer's Python (`--read`, which imports
circuit-tracer and never tfx) to load the set with `load_transcoder_set` on the config's
paths (relative to the set's folder) and encode/decode that input layer by layer, and
writes what circuit-tracer computed, with the versions it ran and each file's sha256, to
tests/recordings/circuit_tracer_transcoders/recording.json.
tests/core/test_circuit_tracer_transcoders.py checks tfx's encode/decode of the same set
against the recording.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from peer_venv import ask_peer, peer_python

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "recordings" / "circuit_tracer_transcoders"
RECORDING = HERE / "recording.json"
MODEL = dict(config="gpt2", layers=2, d_model=16, heads=2, seed=0)
CORPUS = dict(source="repeated-tokens", max_docs=40)
COMMON = dict(layer="all", latents=48, steps=300, batch_size=256, lr=3e-3, seed=0)
SETS = {"relu_skip": dict(COMMON, l1=3e-3, skip=True), "jumprelu": dict(COMMON, jumprelu=0.05)}
TEXT = "The cat sat on the mat, and then the dog sat on the cat."
INPUT = "blocks.{i}.ln2.out"


def fingerprint(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def make() -> dict:
    """(tfx's environment) collect, then train-transcoder into HERE/NAME for each of SETS;
    the input traced."""
    sys.path.insert(0, str(ROOT))
    from tfx_cli import api

    with tempfile.TemporaryDirectory() as tmp:
        acts = Path(tmp) / "acts"
        api.collect(CORPUS["source"], max_docs=CORPUS["max_docs"], output=acts,
                    select=["blocks.*.ln2.out", "blocks.*.ffn.out"], **MODEL)
        corpus = json.loads((acts / "manifest.json").read_text())["corpus"]
        fvu = {}
        for name, train in SETS.items():
            out, folder = Path(tmp) / name, HERE / name
            fvu[name] = [row.fvu for row in api.train_transcoder(acts, output=out,
                                                                 **train).layers]
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            for p in out.iterdir():
                if p.is_file():
                    shutil.copyfile(p, folder / p.name)
    names = [INPUT.format(i=i) for i in range(MODEL["layers"])]
    traced = api.trace(TEXT, select=names, **MODEL).tensors
    return {"model": MODEL, "corpus": {**CORPUS, "sha256": corpus.get("sha256")},
            "train": SETS, "train_fvu": fvu, "text": TEXT,
            "input_sites": names,
            "input": [[[float(v) for v in row] for row in traced[n]] for n in names]}


def read(folder: Path, x: list) -> dict:
    """(circuit-tracer's environment) load_transcoder_set on config.yaml's paths, and each
    layer's encode/decode of its input rows."""
    import importlib.metadata as meta

    import torch
    import yaml
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set

    config = yaml.safe_load((folder / "config.yaml").read_text())
    paths = {i: str(folder / p) for i, p in enumerate(config["transcoders"])}
    tset = load_transcoder_set(paths, scan="tfx-train-transcoder",
                               feature_input_hook=config["feature_input_hook"],
                               feature_output_hook=config["feature_output_hook"],
                               device=torch.device("cpu"), dtype=torch.float32,
                               lazy_encoder=False, lazy_decoder=False)
    encode, decode = [], []
    with torch.no_grad():
        for i, transcoder in enumerate(tset):
            inputs = torch.tensor(x[i], dtype=torch.float32)
            acts = transcoder.encode(inputs)
            encode.append(acts.tolist())
            decode.append(transcoder.decode(acts, inputs).tolist())
    versions = {name: meta.version(name) for name in
                ("circuit-tracer", "torch", "transformer-lens", "transformers", "safetensors")}
    versions["python"] = sys.version.split()[0]
    return {"versions": versions, "n_layers": tset.n_layers,
            "d_transcoder": tset.d_transcoder, "skip_connection": tset.skip_connection,
            "feature_input_hook": tset.feature_input_hook,
            "feature_output_hook": tset.feature_output_hook,
            "activation": ["JumpReLU" if hasattr(t.activation_function, "threshold") else
                           getattr(t.activation_function, "__name__", "?") for t in tset],
            "encode": encode, "decode": decode}


def main() -> None:
    python = peer_python(__doc__, "--circuit-tracer-python",
                         "the Python of circuit-tracer's venv",
                         "--circuit-tracer-python is missing: the Python of circuit-tracer's "
                         "environment (see this file's header)", read)
    if python is None:
        return
    made = make()
    seen = ask_peer(python, __file__, {name: HERE / name for name in SETS}, made["input"])
    record = {"what": "circuit-tracer's load_transcoder_set of the sets under "
                      "tests/recordings/circuit_tracer_transcoders/, made by "
                      "bench/circuit_tracer_loads.py",
              "fingerprint": {name: fingerprint(HERE / name) for name in SETS},
              "made_with": made, "circuit_tracer": seen}
    RECORDING.write_text(json.dumps(record, indent=1) + "\n")
    for name, got in seen.items():
        print(f"{name}: circuit-tracer {got['versions']['circuit-tracer']}, "
              f"{got['n_layers']} layers × {got['d_transcoder']} features, skip "
              f"{got['skip_connection']}, activation {got['activation']}; held-out FVU in "
              f"training {made['train_fvu'][name]}")


if __name__ == "__main__":
    main()
