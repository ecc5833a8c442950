"""tfx train-sae and tfx top --sae on a tiny random model: the hand-written step equals
autograd's gradients; training lowers held-out FVU; the written folder reads back with
--sae and encodes as the trainer does; a run killed with SIGKILL and started again ends
with the bytes of an uninterrupted one; top's SAE features are the exact top-K of
`tfx features` over the corpus."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tfx_cli import api
from tfx_cli.core.features import read_sae, write_saelens
from tfx_cli.core.features.sae import SAE
from tfx_cli.core.features.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(config="gpt2", layers=2, d_model=32, heads=4)
SITE = "blocks.1.resid_out"
SHORT = dict(site=SITE, k=8, latents=128, batch_size=256, lr=3e-3)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """~3k tokens of python-docs at one site of the tiny model."""
    out = tmp_path_factory.mktemp("sae") / "acts"
    api.collect("python-docs", select=[SITE], output=out, max_tokens=3000, **TINY)
    return out


# -- the step ------------------------------------------------------------------------------
def _autograd(trainer: Trainer, x: torch.Tensor):
    """The loss trainer.py states, differentiated by autograd in float64 (core.load turns
    gradients off process-wide: on again here)."""
    with torch.enable_grad():
        return _autograd_on(trainer, x)


def _autograd_on(trainer: Trainer, x: torch.Tensor):
    p = {n: t.clone().double().requires_grad_(True) for n, t in trainer.p.items()}
    x = x.double()
    pre = (x - p["b_dec"]) @ p["W_enc"].T + p["b_enc"]
    if trainer.activation == "relu":
        f = torch.relu(pre)
        recon = f @ p["W_dec"] + p["b_dec"]
        loss = ((recon - x) ** 2).sum() / len(x) + trainer.l1 * f.sum() / len(x)
    else:
        index = torch.topk(pre.detach(), trainer.k).indices
        f = torch.zeros_like(pre).scatter(-1, index, torch.relu(pre.gather(-1, index)))
        recon = f @ p["W_dec"] + p["b_dec"]
        loss = ((recon - x) ** 2).sum() / len(x)
        dead = trainer.dead
        resid = (x - recon).detach()
        index = torch.topk(pre.detach().masked_fill(~dead, -math.inf),
                           min(trainer.aux_k, int(dead.sum()))).indices
        f2 = torch.zeros_like(pre).scatter(-1, index, torch.relu(pre.gather(-1, index)))
        loss = loss + trainer.aux_coef * ((f2 @ p["W_dec"] - resid) ** 2).sum() / len(x)
    loss.backward()
    return float(loss.detach()), {n: t.grad for n, t in p.items()}


@pytest.mark.parametrize("activation", ["topk", "relu"])
def test_the_hand_written_gradients_are_autograds(activation):
    torch.manual_seed(0)
    trainer = Trainer(16, 64, activation=activation, k=4, l1=0.3, aux_k=8, dead_after=10,
                      seed=1, b_dec=torch.randn(16))
    trainer.p["b_enc"] = torch.randn(64) * 0.1
    trainer.since_fired[::3] = 100  # a third of the latents dead: AuxK runs
    x = torch.randn(50, 16)
    loss, grads, _ = trainer.loss_and_grads(x)
    want_loss, want = _autograd(trainer, x)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for name, g in grads.items():
        scale = float(want[name].abs().max())
        assert float((g.double() - want[name]).abs().max()) < 1e-5 * scale, name


# -- training ----------------------------------------------------------------------------
def test_training_lowers_heldout_fvu_and_keeps_decoder_rows_unit(collected, tmp_path):
    r = api.train_sae(collected, output=tmp_path / "sae", steps=300, **SHORT)
    assert r.holdout_tokens == 150 and r.train_tokens == 2850
    assert r.fvu < 0.4  # from 1.0 (b_dec alone) on tokens it never saw
    assert r.l0 <= 8 and r.loss_last < 0.5 * r.loss_first
    W_dec = read_sae(tmp_path / "sae").tensors["W_dec"]
    assert torch.allclose(W_dec.norm(dim=1), torch.ones(128), atol=1e-5)
    assert not (tmp_path / "sae" / "train-state.safetensors").exists()
    relu = api.train_sae(collected, output=tmp_path / "relu", site=SITE, l1=0.02, latents=128,
                         batch_size=256, lr=3e-3, steps=300)
    assert relu.architecture == "standard" and relu.fvu < 0.6 and 0 < relu.l0 < 128


def test_the_folder_reads_back_as_the_trainer_encodes(collected, tmp_path):
    r = api.train_sae(collected, output=tmp_path / "sae", steps=100, **SHORT)
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert (cfg["architecture"], cfg["d_in"], cfg["d_sae"], cfg["k"]) == ("topk", 32, 128, 8)
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post"
    file = read_sae(tmp_path / "sae")
    trainer = Trainer(32, 128, activation="topk", k=8)  # the saved weights, scale folded in
    trainer.p = {"W_enc": file.tensors["W_enc"].T.contiguous(), "W_dec": file.tensors["W_dec"],
                 "b_enc": file.tensors["b_enc"], "b_dec": file.tensors["b_dec"]}
    text = "The for statement is used to iterate over the elements of a sequence"
    feats = api.features(text, sae=str(tmp_path / "sae"), **TINY)
    x = api.trace(text, select=[SITE], **TINY).tensors[SITE]
    got = feats.tensors["features.acts"]
    assert np.abs(got - trainer.encode(torch.from_numpy(x)).numpy()).max() < 1e-4
    # and the held-out numbers the trainer reported are the read-back SAE's
    rows = torch.from_numpy(api.activations(collected)[SITE][-r.holdout_tokens:])
    sae = SAE(file, site=SITE, site_out=SITE, spec=SITE)
    acts = sae.encode(rows)
    from tfx_cli.core.features import metrics

    assert metrics.fvu(rows, sae.decode(acts, rows)) == pytest.approx(r.fvu, abs=1e-6)
    assert float(metrics.l0(acts).double().mean()) == pytest.approx(r.l0)


def test_skip_first_leaves_out_each_windows_first_rows(collected, tmp_path):
    """--skip-first 1 trains and judges on the rows past each window's first token: the
    held-out numbers are those of the read-back SAE on exactly those rows."""
    table = api.activations(collected).tokens()
    positions = table.column("position").to_numpy()
    kept = np.flatnonzero(positions % 1024 >= 1)
    assert 0 < len(kept) < len(positions)  # python-docs' paragraphs: many windows
    r = api.train_sae(collected, output=tmp_path / "sae", steps=50, skip_first=1, **SHORT)
    assert r.skip_first == 1 and r.train_tokens + r.holdout_tokens == len(kept)
    rows = torch.from_numpy(api.activations(collected)[SITE][kept][-r.holdout_tokens:])
    sae = SAE(read_sae(tmp_path / "sae"), site=SITE, site_out=SITE, spec=SITE)
    from tfx_cli.core.features import metrics

    assert metrics.fvu(rows, sae.decode(sae.encode(rows), rows)) == pytest.approx(r.fvu,
                                                                              abs=1e-6)
    # another --skip-first is another run: refused in the same folder without --force
    from tfx_cli.errors import TfxError

    with pytest.raises(TfxError, match="skip_first"):
        api.train_sae(collected, output=tmp_path / "sae", steps=50, **SHORT)


# the options part of train-state.json's identity, key by key as tfx has written it: a run
# killed under one version resumes under the next only while these stay the same
TOPK_IDENTITY = {"architecture": "topk", "latents": 128, "k": 8, "l1": None, "lr": 3e-3,
                 "batch_size": 256, "steps": 3, "b_dec_init": "median", "dead_after": 2850,
                 "aux_k": 64, "aux_coef": 1 / 32}
RELU_IDENTITY = {**TOPK_IDENTITY, "architecture": "standard", "k": None, "l1": 0.02,
                 "aux_k": 0, "aux_coef": None}


@pytest.mark.parametrize("given, options", [
    (SHORT, TOPK_IDENTITY),
    ({**{k: v for k, v in SHORT.items() if k != "k"}, "l1": 0.02}, RELU_IDENTITY)])
def test_the_state_file_names_the_run_as_before(collected, tmp_path, given, options):
    """The run's identity in train-state.json: its keys in their order and their values
    (defaults that depend on the data filled in: dead_after, aux_k)."""
    api.train_sae(collected, output=tmp_path / "sae", steps=3, **given)
    state = json.loads((tmp_path / "sae" / "train-state.json").read_text(encoding="utf-8"))
    manifest = json.loads((collected / "manifest.json").read_text(encoding="utf-8"))
    assert list(state["identity"].items()) == list({
        "site": SITE, "seed": 0, "holdout": 0.05, **options,
        "collect": str(collected.resolve()), "collect_tokens": 3000,
        "collect_sha256": manifest["tokens_sha256"]}.items())


def _train_command(collected, out):
    return [sys.executable, "-c",
            "import sys; from tfx_cli import api; api.train_sae(sys.argv[1], output=sys.argv[2], "
            "steps=400, checkpoint_every=20, site=%r, k=8, latents=128, batch_size=256, "
            "lr=3e-3)" % SITE, str(collected), str(out)]


def test_a_killed_run_resumes_to_the_same_bytes(collected, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    whole = tmp_path / "whole"
    subprocess.run(_train_command(collected, whole), check=True, env=env, timeout=300)
    cut = tmp_path / "cut"
    proc = subprocess.Popen(_train_command(collected, cut), env=env)
    deadline = time.time() + 240
    while not (cut / "train-state.safetensors").exists() and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "sae_weights.safetensors").exists(), "killed after it finished"
    r = api.train_sae(collected, output=cut, steps=400, checkpoint_every=20, **SHORT)
    assert 0 < r.resumed_from < 400
    assert (cut / "sae_weights.safetensors").read_bytes() == \
        (whole / "sae_weights.safetensors").read_bytes()


# -- tfx top --sae -------------------------------------------------------------------------
DOCS = ["The for statement iterates over the items of any sequence in order.",
        "A function definition defines a user-defined function object.",
        "The while statement is used for repeated execution as long as an expression is true.",
        "Classes provide a means of bundling data and functionality together.",
        "The import statement finds a module, loads and initializes it if necessary."]


def _brute_force(sae_dir, units, k):
    """Every (value, doc, position) of each unit over DOCS by tfx features, sorted as top
    sorts: value down, then document and position up."""
    found = {u: [] for u in units}
    for d, text in enumerate(DOCS):
        acts = api.features(text, sae=str(sae_dir), **TINY).tensors["features.acts"]
        for u in units:
            found[u] += [(float(v), d, t) for t, v in enumerate(acts[:, u])]
    return {u: sorted(rows, key=lambda e: (-e[0], e[1], e[2]))[:k] for u, rows in found.items()}


@pytest.mark.parametrize("activation", ["topk", "relu"])
def test_top_sae_is_the_exact_top_k_of_features(tmp_path, activation):
    g = torch.Generator().manual_seed(3)
    folder = tmp_path / activation
    write_saelens(folder, activation=activation, k=6 if activation == "topk" else None,
                  W_enc=torch.randn(32, 48, generator=g), W_dec=torch.randn(48, 32, generator=g),
                  b_enc=torch.randn(48, generator=g), b_dec=torch.randn(32, generator=g),
                  hook_name="blocks.1.hook_resid_post")
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    units = [0, 5, 17, 40]
    r = api.top(str(corpus), sae=str(folder), units=units, k=4, batch_size=2, **TINY)
    assert r.site == SITE and r.sae.d_sae == 48
    want = _brute_force(folder, units, 4)
    for unit in r.units:
        got = [(e.value, e.doc, e.position) for e in unit.examples]
        expect = want[unit.unit]
        assert [v for v, _, _ in got] == pytest.approx([v for v, _, _ in expect], abs=1e-4)
        for (v, d, p), (wv, wd, wp) in zip(got, expect):
            if v > 0:  # zeros of a TopK SAE tie; the others are one token each
                assert (d, p) == (wd, wp)
