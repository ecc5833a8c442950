"""A small collect folder written by hand, for the tests of what reads one (train-sae,
api.activations, the bad-input rows): 64 tokens of blocks.0.resid_out, 8 wide, in one
shard whose sha256 the manifest lists, as tfx collect writes it."""
import hashlib
import json
from pathlib import Path

SITE = "blocks.0.resid_out"


def hand_collected(folder: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir()
    rows = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    shard = folder / "shard-00000.safetensors"
    save_file({SITE: rows}, str(shard))
    (folder / "manifest.json").write_text(json.dumps({
        "schema": "tfx/1", "kind": "activations", "complete": True, "tokens": 64,
        "options": {"dtype": "float32"}, "model": {"config": "gpt2"},
        "sites": [{"name": SITE, "dims": ["T", "C"], "shape": [64, 8], "dtype": "F32"}],
        "shards": [{"file": shard.name, "first_token": 0, "tokens": 64,
                    "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}]}))
    return folder
