"""train-sae and train-transcoder end with one stderr note when training looks unfinished
(the loss still falling over the last tenth of the steps, or a large share of dead
latents), naming the fix; a run that has settled gets none."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfx_cli import api
from tfx_cli.core.features.convergence import (DEAD_SHARE, STILL_FALLING, convergence_note,
                                               dead_share, still_falling)

SITE = "blocks.0.resid_out"
ROOT = Path(__file__).resolve().parents[2]


def _collected(folder: Path, rows: np.ndarray) -> Path:
    """A collect folder of one site holding `rows` (no model: the score is left out)."""
    from safetensors.numpy import save_file

    folder.mkdir()
    shard = folder / "shard-00000.safetensors"
    save_file({SITE: rows.astype(np.float32)}, str(shard))
    n, d = rows.shape
    (folder / "manifest.json").write_text(json.dumps({
        "schema": "tfx/1", "kind": "activations", "complete": True, "tokens": n,
        "options": {"dtype": "float32"}, "model": {"config": "gpt2"},
        "sites": [{"name": SITE, "dims": ["T", "C"], "shape": [n, d], "dtype": "F32"}],
        "shards": [{"file": shard.name, "first_token": 0, "tokens": n,
                    "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}]}))
    return folder


@pytest.fixture(scope="module")
def acts(tmp_path_factory) -> Path:
    """Gaussian rows about a mean of 3: an 8-latent TopK SAE learns the mean smoothly (a
    short run from a zero decoder bias is still learning it) and then settles at the
    noise floor it cannot pass."""
    rows = 3.0 + np.random.default_rng(0).standard_normal((2048, 16))
    return _collected(tmp_path_factory.mktemp("conv") / "acts", rows)


def test_a_curve_still_falling_is_named_and_a_flat_one_is_not():
    flat = [1.0 + 0.001 * (-1) ** i for i in range(100)]
    assert still_falling(flat) is None
    falling = [2.0 - 0.01 * i for i in range(100)]  # last tenth ~10% under the one before
    got = still_falling(falling)
    assert got is not None and got > STILL_FALLING
    assert abs(got - (0.1 / 1.095)) < 0.01
    # just inside and just outside the threshold, on a curve flat but for its last tenth
    for drop, warns in ((STILL_FALLING * 0.5, False), (STILL_FALLING * 2, True)):
        curve = [1.0] * 90 + [1.0 - drop] * 10
        assert (still_falling(curve) is not None) is warns
    assert still_falling(falling[:10]) is None  # too short to tell


def test_dead_share_threshold():
    assert dead_share(0, 64) is None
    assert dead_share(int(DEAD_SHARE * 64), 64) is None
    assert dead_share(int(DEAD_SHARE * 64) + 1, 64) > DEAD_SHARE
    note = convergence_note([(3, [1.0] * 100, 40, 64), (5, [1.0] * 100, 0, 64)], "topk")
    assert "62% of the latents are dead" in note and "(layer 3)" in note
    assert "--aux-k" in note and "--lr" in note
    assert convergence_note([(None, [1.0] * 100, 0, 64)], "standard") is None


def test_a_short_run_warns_and_a_settled_one_does_not(acts, tmp_path):
    train = dict(site=SITE, latents=8, k=2, batch_size=64, seed=0, holdout=0.1)
    short = api.train_sae(acts, output=tmp_path / "short", steps=100, lr=1e-3,
                          b_dec_init="zeros", **train)
    assert short.not_converged is not None
    assert "the loss still fell" in short.not_converged
    assert "more --steps or --epochs" in short.not_converged
    settled = api.train_sae(acts, output=tmp_path / "settled", steps=600, lr=1e-2, **train)
    assert settled.not_converged is None, settled.not_converged
    assert settled.dead_in_training <= DEAD_SHARE * settled.latents
    # its curve's last tenth is within the threshold of the tenth before
    tenth = len(settled.losses) // 10
    last, before = (np.mean(settled.losses[-tenth:]),
                    np.mean(settled.losses[-2 * tenth:-tenth]))
    assert (before - last) / before <= STILL_FALLING


def test_dead_latents_warn_with_their_fix(acts, tmp_path):
    """An L1 penalty far too strong for the data switches every ReLU latent off."""
    r = api.train_sae(acts, site=SITE, output=tmp_path / "dead", latents=16, l1=100.0,
                      batch_size=64, steps=300, lr=3e-2, dead_after=512, holdout=0.1)
    assert r.dead_in_training > DEAD_SHARE * r.latents
    assert "of the latents are dead" in r.not_converged
    assert "a smaller --l1" in r.not_converged


def test_the_cli_prints_the_note_once_on_stderr(acts, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_cli", "train-sae", str(acts), "--site", SITE, "-o",
         str(tmp_path / "cli"), "--latents", "8", "--k", "2", "--batch-size", "64",
         "--steps", "100", "--lr", "1e-3", "--b-dec-init", "zeros", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "training looks unfinished" in line]
    assert len(notes) == 1 and notes[0].startswith("tfx: warning: ")
    doc = json.loads(proc.stdout)
    assert doc["result"]["not_converged"] in notes[0]
