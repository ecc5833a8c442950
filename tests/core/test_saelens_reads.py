"""SAELens's own loader against tfx on a folder `tfx train-sae` wrote.

SAELens cannot live in tfx's environment (its pins clash), so bench/saelens_reads.py ran
it in an environment of its own: `SAE.load_from_disk` on the folders under
tests/recordings/saelens_sae/ (made by tfx collect + train-sae, seeded: a TopK SAE and a
ReLU one), recording what it read (its class and config,
every tensor's shape, sums and first values, its encode and decode of fixed input rows)
in tests/recordings/saelens_reads.json with the folder's sha256s. Here tfx reads the same
bytes and must see the same SAE: the same architecture, sizes, k, site and tensors, and
the same encode/decode (within float32 rounding scaled to the values). Nothing here is
compared with an earlier output of tfx.
"""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tfx_cli import api
from tfx_cli.core.features import SAE, hook_name, read_sae

ROOT = Path(__file__).resolve().parents[2]
RECORDING = json.loads((ROOT / "tests" / "recordings" / "saelens_reads.json").read_text())
FOLDER = ROOT / RECORDING["folder"]
MADE = RECORDING["made_with"]
# what SAELens names each kind of SAE that train-sae writes
CLASSES = {"topk": ("TopKSAE", "topk"), "relu": ("StandardSAE", "standard")}


def _close(got, want, what, rel=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    tol = rel * max(1.0, float(np.abs(want).max()))
    assert float(np.abs(got - want).max()) <= tol, what


def test_the_recording_describes_these_bytes():
    assert sorted(RECORDING["saelens"]) == sorted(RECORDING["fingerprint"]) == \
        sorted(CLASSES) == sorted(p.name for p in FOLDER.iterdir())
    for kind, files in RECORDING["fingerprint"].items():
        for name, sha in files.items():
            assert hashlib.sha256((FOLDER / kind / name).read_bytes()).hexdigest() == sha
        assert sorted(p.name for p in (FOLDER / kind).iterdir()) == sorted(files)


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_tfx_reads_the_sae_saelens_read(kind):
    SEEN = RECORDING["saelens"][kind]
    file = read_sae(FOLDER / kind)
    assert file.format == "saelens"
    assert (SEEN["class"], SEEN["architecture"]) == CLASSES[kind]
    assert file.architecture == SEEN["architecture"]
    assert (file.d_in, file.d_sae, file.k) == (SEEN["d_in"], SEEN["d_sae"], SEEN["k"])
    assert file.apply_b_dec_to_input is SEEN["apply_b_dec_to_input"]
    assert file.normalize == SEEN["normalize_activations"] == "none"
    assert file.rescale_by_decoder_norm is bool(SEEN["rescale_acts_by_decoder_norm"])
    assert SEEN["dtype"] == "float32"
    # the site: SAELens's hook name is the one tfx maps to the site it trained on
    assert SEEN["hook_name"] == hook_name(MADE["train"][kind]["site"])
    assert file.site == MADE["train"][kind]["site"]
    assert sorted(file.tensors) == sorted(SEEN["params"])
    for name, seen in SEEN["params"].items():
        t = file.tensors[name]
        assert list(t.shape) == seen["shape"] and str(t.dtype) == "torch." + seen["dtype"]
        flat = t.to(torch.float64).flatten()
        assert flat[:6].tolist() == seen["first"], name  # the same float32 bytes
        assert float(flat.sum()) == pytest.approx(seen["sum"], abs=1e-9 * seen["abs_sum"])
        assert float(flat.abs().sum()) == pytest.approx(seen["abs_sum"], rel=1e-12)


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_tfx_encodes_and_decodes_as_saelens(kind):
    SEEN = RECORDING["saelens"][kind]
    sae = SAE(read_sae(FOLDER / kind), site="x", site_out="x", spec="x")
    x = torch.tensor(MADE["input"], dtype=torch.float32)
    acts = sae.encode(x)
    want = np.asarray(SEEN["encode"])
    on = (want != 0).sum(-1)
    if kind == "topk":
        assert (on == SEEN["k"]).all()  # k features on in every row
        # the k-th and the (k+1)-th pre-activations far apart: rounding cannot swap them
        xc = x.double() - sae.b_dec.double()
        pre = xc @ sae.W_enc.double() + sae.encoder.b_enc.double()
        top = torch.topk(pre, SEEN["k"] + 1, dim=-1).values
        assert float((top[:, -2] - top[:, -1]).min()) > 1e-3
    else:  # a ReLU SAE: some features on and some off in every row
        assert ((on > 0) & (on < SEEN["d_sae"])).all()
    _close(acts.numpy(), want, "encode")
    _close(sae.decode(acts, x).numpy(), SEEN["decode"], "decode")
    # `tfx features` on the text the input was traced from: the same features
    r = api.features(MADE["text"], sae=str(FOLDER / kind), **MADE["model"])
    _close(r.tensors["features.acts"], want, "features.acts", rel=1e-4)
    _close(r.tensors["features.recon"], SEEN["decode"], "features.recon", rel=1e-4)
