"""What SAELens's own loader reads from a folder that `tfx train-sae` wrote.

SAELens pins versions that clash with tfx's, so it gets a virtual environment of its own,
outside the repository (install the CPU torch tfx uses first: any other torch requirement
would download gigabytes):

    python3 -m venv /work/venvs/saelens
    /work/venvs/saelens/bin/pip install torch==2.13.0
    /work/venvs/saelens/bin/pip install sae-lens

Then, from the repository root, with tfx's own environment:

    python bench/saelens_reads.py --saelens-python /work/venvs/saelens/bin/python

It makes two SAEs the same way every time (tfx collect of the seeded `repeated-tokens`
corpus on a tiny random model, then tfx train-sae with a seed: a TopK one and a ReLU one
with an L1 penalty) into tests/recordings/saelens_sae/{topk,relu}/ (a few KB each), traces
their site on a fixed text with tfx (the input), runs itself again under SAELens's Python
(`--read`, which imports SAELens and never tfx) to load each folder with
`SAE.load_from_disk` and encode/decode that input, and writes what SAELens read, with
each folder's fingerprint (each file's sha256 and how it was made), to
tests/recordings/saelens_reads.json. tests/core/test_saelens_reads.py checks
that tfx's view of the same folder agrees with the recording.
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
FOLDER = ROOT / "tests" / "recordings" / "saelens_sae"
RECORDING = ROOT / "tests" / "recordings" / "saelens_reads.json"
MODEL = dict(config="gpt2", layers=2, d_model=16, heads=2, seed=0)
SITE = "blocks.1.resid_out"
CORPUS = dict(source="repeated-tokens", max_docs=40)
COMMON = dict(site=SITE, latents=48, steps=300, batch_size=256, lr=3e-3, seed=0)
TRAINS = {"topk": dict(COMMON, k=4), "relu": dict(COMMON, l1=3e-3)}
TEXT = "The cat sat on the mat, and then the dog sat on the cat."
FILES = ("cfg.json", "sae_weights.safetensors")


def fingerprint(folder: Path) -> dict:
    """sha256 of each file of the SAE folder (what the recording describes)."""
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FILES}


def make(folder: Path) -> dict:
    """(tfx's environment) collect, then train-sae into folder/NAME for each of TRAINS;
    the input traced."""
    sys.path.insert(0, str(ROOT))
    from tfx_cli import api

    with tempfile.TemporaryDirectory() as tmp:
        acts = Path(tmp) / "acts"
        api.collect(CORPUS["source"], max_docs=CORPUS["max_docs"], select=[SITE],
                    output=acts, **MODEL)
        corpus = json.loads((acts / "manifest.json").read_text())["corpus"]
        fvu = {}
        for name, train in TRAINS.items():
            sae = Path(tmp) / name
            fvu[name] = api.train_sae(acts, output=sae, **train).fvu
            (folder / name).mkdir(parents=True, exist_ok=True)
            for file in FILES:
                shutil.copyfile(sae / file, folder / name / file)
    x = api.trace(TEXT, select=[SITE], **MODEL).tensors[SITE]
    return {"model": MODEL, "corpus": {**CORPUS, "sha256": corpus.get("sha256")},
            "train": TRAINS, "train_fvu": fvu, "text": TEXT,
            "input": [[float(v) for v in row] for row in x]}


def read(folder: Path, x: list) -> dict:
    """(SAELens's environment) what SAE.load_from_disk makes of the folder, and its
    encode/decode of the input rows."""
    import sae_lens
    import torch
    from sae_lens import SAE

    sae = SAE.load_from_disk(str(folder), device="cpu")
    cfg = sae.cfg
    params = {}
    for name, p in sae.state_dict().items():
        flat = p.detach().to(torch.float64).flatten()
        params[name] = {"shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch."),
                        "sum": float(flat.sum()), "abs_sum": float(flat.abs().sum()),
                        "first": [float(v) for v in flat[:6]]}
    inputs = torch.tensor(x, dtype=torch.float32)
    with torch.no_grad():
        acts = sae.encode(inputs)
        recon = sae.decode(acts)
    meta = cfg.metadata
    return {"sae_lens_version": sae_lens.__version__, "torch_version": torch.__version__,
            "class": type(sae).__name__, "architecture": cfg.architecture(),
            "d_in": cfg.d_in, "d_sae": cfg.d_sae, "k": getattr(cfg, "k", None),
            "rescale_acts_by_decoder_norm": getattr(cfg, "rescale_acts_by_decoder_norm",
                                                    None),
            "apply_b_dec_to_input": cfg.apply_b_dec_to_input,
            "normalize_activations": cfg.normalize_activations, "dtype": cfg.dtype,
            "hook_name": getattr(meta, "hook_name", None), "params": params,
            "encode": acts.tolist(), "decode": recon.tolist()}


def main() -> None:
    python = peer_python(__doc__, "--saelens-python", "the Python of SAELens's environment",
                         "--saelens-python is missing: the Python of SAELens's environment "
                         "(see this file's header for how to make it)", read)
    if python is None:
        return
    made = make(FOLDER)
    saelens = ask_peer(python, __file__, {name: FOLDER / name for name in TRAINS},
                       made["input"])
    record = {"what": "SAELens's SAE.load_from_disk of the folders under "
                      "tests/recordings/saelens_sae, made by bench/saelens_reads.py",
              "folder": "tests/recordings/saelens_sae",
              "fingerprint": {name: fingerprint(FOLDER / name) for name in TRAINS},
              "made_with": made, "saelens": saelens}
    RECORDING.write_text(json.dumps(record, indent=1) + "\n")
    for name, seen in saelens.items():
        print(f"{name}: SAELens {seen['sae_lens_version']} read a {seen['class']} "
              f"({seen['d_in']} -> {seen['d_sae']}, k {seen['k']})")


if __name__ == "__main__":
    main()
