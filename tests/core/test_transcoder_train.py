"""tfx train-transcoder on a tiny random model: the trainer's hand-written transcoder step
(no b_dec off the input, a target other than the input, a skip path) equals autograd's
gradients; the written files are circuit-tracer's layout and reproduce the trainer's
reconstruction from raw activations; the held-out FVU is the files' own on the last
tokens; config.yaml appears once every layer has its file; a run killed with SIGKILL and
started again ends with the bytes of an uninterrupted one."""
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
from safetensors import safe_open
from safetensors.torch import load_file

from tfx_cli import api
from tfx_cli.core.features.trainer import Trainer
from tfx_cli.core.features.formats import read_metadata
from tfx_cli.errors import OutputFileError, RangeError, SelectError, UsageError

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(config="gpt2", layers=2, d_model=32, heads=4)
SHORT = dict(latents=64, batch_size=128, lr=3e-3)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """~3k tokens of python-docs: each block's MLP input and output, in one pass."""
    out = tmp_path_factory.mktemp("tc") / "acts"
    api.collect("python-docs", select=["blocks.*.ln2.out", "blocks.*.ffn.out"], output=out,
                max_tokens=3000, **TINY)
    return out


# -- the step ------------------------------------------------------------------------------
def _autograd(trainer: Trainer, x: torch.Tensor, y: torch.Tensor):
    """The transcoder's loss as trainer.py states it, differentiated by autograd in
    float64 (core.load turns gradients off process-wide: on again here)."""
    with torch.enable_grad():
        p = {n: t.clone().double().requires_grad_(True) for n, t in trainer.p.items()}
        x, y = x.double(), y.double()
        pre = x @ p["W_enc"].T + p["b_enc"]
        if trainer.activation == "relu":
            f = torch.relu(pre)
        else:
            index = torch.topk(pre.detach(), trainer.k).indices
            f = torch.zeros_like(pre).scatter(-1, index, torch.relu(pre.gather(-1, index)))
        recon = f @ p["W_dec"] + p["b_dec"] + x @ p["W_skip"].T
        loss = ((recon - y) ** 2).sum() / len(x)
        if trainer.activation == "relu":
            loss = loss + trainer.l1 * f.sum() / len(x)
        loss.backward()
    return float(loss.detach()), {n: t.grad for n, t in p.items()}


@pytest.mark.parametrize("activation", ["topk", "relu"])
def test_the_transcoder_step_is_autograds(activation):
    torch.manual_seed(0)
    trainer = Trainer(16, 64, activation=activation, k=4, l1=0.3, seed=1, b_dec=torch.randn(16),
                      transcoder=True, d_out=16, skip=True)
    trainer.p["b_enc"] = torch.randn(64) * 0.1
    trainer.p["W_skip"] = torch.randn(16, 16) * 0.2
    x, y = torch.randn(32, 16), torch.randn(32, 16) * 2 + 1
    loss, grads, _ = trainer.loss_and_grads(x, y)
    want_loss, want = _autograd(trainer, x, y)
    assert set(grads) == set(want) == {"W_enc", "W_dec", "b_enc", "b_dec", "W_skip"}
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for name in want:
        scale = float(want[name].abs().max())
        assert float((grads[name].double() - want[name]).abs().max()) <= 1e-4 * scale, name


# -- the files -----------------------------------------------------------------------------
@pytest.mark.parametrize("how", [dict(k=8), dict(l1=1e-3)])
def test_the_files_reproduce_the_trainers_reconstruction(collected, tmp_path, how):
    r = api.train_transcoder(collected, layer="all", output=tmp_path / "set", skip=True,
                             steps=60, **SHORT, **how)
    assert r.config == str(tmp_path / "set" / "config.yaml") and r.missing == []
    config = (tmp_path / "set" / "config.yaml").read_text()
    assert "model_kind: transcoder_set" in config
    assert "feature_input_hook: mlp.hook_in" in config
    assert "feature_output_hook: hook_mlp_out" in config
    assert config.index("- layer_0.safetensors") < config.index("- layer_1.safetensors")
    acts = api.activations(collected)
    for row in r.layers:
        t = load_file(str(tmp_path / "set" / f"layer_{row.layer}.safetensors"))
        assert {n: tuple(v.shape) for n, v in t.items()} == {
            "W_enc": (64, 32), "W_dec": (64, 32), "b_enc": (64,), "b_dec": (32,),
            "W_skip": (32, 32)}
        meta = read_metadata(tmp_path / "set" / f"layer_{row.layer}.safetensors")
        assert meta["activation"] == ("topk" if "k" in how else "relu")
        # the held-out FVU, from the file's tensors on the raw last rows, in numpy
        x = np.asarray(acts[f"blocks.{row.layer}.ln2.out"], np.float64)[-row.holdout_tokens:]
        y = np.asarray(acts[f"blocks.{row.layer}.ffn.out"], np.float64)[-row.holdout_tokens:]
        W = {n: v.double().numpy() for n, v in t.items()}
        pre = x @ W["W_enc"].T + W["b_enc"]
        if "k" in how:
            cut = np.sort(pre, axis=1)[:, -8][:, None]
            pre = np.where(pre >= cut, pre, 0)
        f = np.maximum(pre, 0)
        recon = f @ W["W_dec"] + W["b_dec"] + x @ W["W_skip"].T
        fvu = ((y - recon) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()
        assert abs(row.fvu - fvu) <= 1e-4 * max(1.0, fvu)
        assert row.fvu < 0.9  # it learned something in 60 steps
        assert row.l0 == pytest.approx((f > 0).sum(1).mean(), abs=1e-6)


def test_the_trainer_and_the_file_agree_on_scaled_rows(collected, tmp_path):
    """The scales trained with are folded out: the file on raw x gives the trainer's
    reconstruction of y·c_out, divided by c_out."""
    from tfx_cli.core.features.formats import flip_encoder

    g = torch.Generator().manual_seed(0)
    trainer = Trainer(8, 24, activation="topk", k=3, seed=2, transcoder=True, d_out=8,
                      scale=0.37, scale_out=5.1, skip=True, b_dec=torch.randn(8, generator=g))
    trainer.p["b_enc"] = torch.randn(24, generator=g)
    trainer.p["W_skip"] = torch.randn(8, 8, generator=g)
    x = torch.randn(10, 8, generator=g) * 3
    xs = x * trainer.scale
    _, pre = trainer._pre(xs)
    acts, index = trainer._topk(pre, 3)
    f = torch.zeros_like(pre).scatter_(-1, index, acts)
    want = (f @ trainer.p["W_dec"] + trainer.p["b_dec"] + xs @ trainer.p["W_skip"].T) / 5.1
    t = flip_encoder(trainer.weights())  # the layer file's W_enc (F, D)
    pre = x @ t["W_enc"].T + t["b_enc"]
    v, i = torch.topk(pre, 3)
    f2 = torch.zeros_like(pre).scatter_(-1, i, torch.relu(v))
    got = f2 @ t["W_dec"] + t["b_dec"] + x @ t["W_skip"].T
    assert torch.allclose(got, want, atol=1e-4 * float(want.abs().max()))
    assert torch.allclose(trainer.encode(x), f2, atol=1e-5 * float(f2.abs().max()))


def test_config_yaml_waits_for_every_layer(collected, tmp_path):
    one = api.train_transcoder(collected, layer=1, output=tmp_path / "set", steps=5,
                               l1=1e-3, **SHORT)
    assert one.config is None and one.missing == [0]
    assert not (tmp_path / "set" / "config.yaml").exists()
    again = api.train_transcoder(collected, layer=1, output=tmp_path / "set", steps=5,
                                 l1=1e-3, **SHORT)
    assert again.layers[0].resumed_from == 5  # already trained: nothing done
    assert again.layers[0].fvu == one.layers[0].fvu
    with pytest.raises(UsageError, match="another set"):  # another width beside layer 1
        api.train_transcoder(collected, layer=0, output=tmp_path / "set", steps=5, l1=1e-3,
                             **{**SHORT, "latents": 32})
    both = api.train_transcoder(collected, layer=0, output=tmp_path / "set", steps=5,
                                l1=1e-3, **SHORT)
    assert both.missing == [] and (tmp_path / "set" / "config.yaml").is_file()


def test_refusals(collected, tmp_path):
    with pytest.raises(RangeError, match="has 2 layers"):
        api.train_transcoder(collected, layer=2, output=tmp_path / "o", steps=2, **SHORT)
    with pytest.raises(UsageError, match="--input-site"):
        api.train_transcoder(collected, layer=0, output=tmp_path / "o", input_site="ffn.act",
                             steps=2, **SHORT)
    with pytest.raises(SelectError, match="no blocks.0.resid_mid"):
        api.train_transcoder(collected, layer=0, output=tmp_path / "o", input_site="resid_mid",
                             steps=2, **SHORT)
    assert not (tmp_path / "o").exists()


def _train_command(collected, out):
    return [sys.executable, "-c",
            "import sys; from tfx_cli import api; api.train_transcoder(sys.argv[1], "
            "output=sys.argv[2], layer='all', steps=400, checkpoint_every=20, k=8, latents=64, "
            "batch_size=128, lr=3e-3, skip=True)", str(collected), str(out)]


def test_a_killed_run_resumes_to_the_same_bytes(collected, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    whole = tmp_path / "whole"
    subprocess.run(_train_command(collected, whole), check=True, env=env, timeout=300)
    cut = tmp_path / "cut"
    proc = subprocess.Popen(_train_command(collected, cut), env=env)
    state = cut / "state" / "layer_1" / "train-state.safetensors"
    deadline = time.time() + 240
    while not state.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "layer_1.safetensors").exists(), "killed after it finished"
    r = api.train_transcoder(collected, output=cut, layer="all", steps=400,
                             checkpoint_every=20, k=8, latents=64, batch_size=128, lr=3e-3,
                             skip=True)
    assert r.layers[0].resumed_from == 400 and 0 < r.layers[1].resumed_from < 400
    for name in ("layer_0.safetensors", "layer_1.safetensors", "config.yaml"):
        if name.endswith(".safetensors"):
            a, b = load_file(str(cut / name)), load_file(str(whole / name))
            assert {n: float((a[n] - b[n]).abs().max()) for n in a} == {n: 0.0 for n in a}, name
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name


class _JumpReLU(torch.autograd.Function):
    """pre·[pre > θ] and [pre > θ] with the pseudo-derivatives of Rajamanoharan et al.
    2024 for θ (rectangle kernel of bandwidth ε), written here apart from trainer.py."""

    @staticmethod
    def forward(ctx, pre, theta, eps):
        ctx.save_for_backward(pre, theta)
        ctx.eps = eps
        gate = (pre > theta).to(pre.dtype)
        return pre * gate, gate

    @staticmethod
    def backward(ctx, g_f, g_gate):
        pre, theta = ctx.saved_tensors
        eps = ctx.eps
        gate = (pre > theta).to(pre.dtype)
        kernel = (((pre - theta) / eps).abs() < 0.5).to(pre.dtype)
        g_theta = (g_f * -(theta / eps) * kernel).sum(0) + (g_gate * -(1 / eps) * kernel).sum(0)
        return g_f * gate, g_theta, None


def test_the_jumprelu_step_is_the_papers_straight_through_gradient():
    torch.manual_seed(0)
    trainer = Trainer(16, 64, activation="jumprelu", l1=0.3, seed=1, b_dec=torch.randn(16),
                      transcoder=True, d_out=16, skip=True)
    trainer.bandwidth = 0.5  # wide enough that many pre-activations fall in the kernel
    trainer.p["b_enc"] = torch.randn(64) * 0.1
    trainer.p["log_threshold"] = torch.randn(64) * 0.3 - 1
    trainer.p["W_skip"] = torch.randn(16, 16) * 0.2
    x, y = torch.randn(32, 16), torch.randn(32, 16) * 2 + 1
    loss, grads, _ = trainer.loss_and_grads(x, y)
    with torch.enable_grad():
        p = {n: t.clone().double().requires_grad_(True) for n, t in trainer.p.items()}
        xd, yd = x.double(), y.double()
        pre = xd @ p["W_enc"].T + p["b_enc"]
        f, gate = _JumpReLU.apply(pre, p["log_threshold"].exp(), 0.5)
        recon = f @ p["W_dec"] + p["b_dec"] + xd @ p["W_skip"].T
        want_loss = ((recon - yd) ** 2).sum() / 32 + 0.3 * gate.sum() / 32
        want_loss.backward()
    assert loss == pytest.approx(float(want_loss.detach()), rel=1e-5)
    assert float(p["log_threshold"].grad.abs().max()) > 0  # the kernel caught something
    for name, t in p.items():
        scale = float(t.grad.abs().max())
        assert float((grads[name].double() - t.grad).abs().max()) <= 1e-4 * scale, name


def test_a_jumprelu_set_writes_circuit_tracers_threshold(collected, tmp_path):
    r = api.train_transcoder(collected, layer=0, output=tmp_path / "set", jumprelu=1e-3,
                             steps=60, **SHORT)
    t = load_file(str(tmp_path / "set" / "layer_0.safetensors"))
    theta = t["activation_function.threshold"]
    assert theta.shape == (64,) and bool((theta > 0).all())
    acts = api.activations(collected)
    x = torch.from_numpy(np.asarray(acts["blocks.0.ln2.out"][-r.layers[0].holdout_tokens:]))
    pre = x @ t["W_enc"].T + t["b_enc"]
    f = pre * (pre > theta)
    assert r.layers[0].l0 == pytest.approx(float((f != 0).sum(1).double().mean()), abs=1e-6)
    assert r.architecture == "jumprelu" and r.jumprelu == 1e-3 and r.layers[0].fvu < 1


def test_a_topk_set_is_read_back_as_topk(collected, tmp_path):
    """tfx graph's reader keeps each row's k largest latents of a TopK set: read as a ReLU
    it would switch on every positive latent and reconstruct something else."""
    from tfx_cli.core.features.transcoder_set import read_transcoders

    api.train_transcoder(collected, layer="all", output=tmp_path / "set", k=4, steps=30,
                         **SHORT)
    tc = read_transcoders(tmp_path / "set", n_layers=2, d_model=32)
    assert tc.topk == [4, 4]
    x = torch.from_numpy(np.asarray(api.activations(collected)["blocks.1.ln2.out"][:50]))
    f = tc.activate(1, tc.pre(1, x))
    assert bool(((f != 0).sum(1) <= 4).all())
    relu = torch.relu(tc.pre(1, x))
    assert float((relu != 0).sum(1).float().mean()) > 4  # the difference TopK makes
    t = load_file(str(tmp_path / "set" / "layer_1.safetensors"))
    pre = x @ t["W_enc"].T + t["b_enc"]
    values, index = torch.topk(pre, 4)
    want = torch.zeros_like(pre).scatter_(-1, index, torch.relu(values))
    assert torch.allclose(f, want, atol=1e-6 * float(want.abs().max()))


def test_a_written_config_never_pairs_another_tools_layers(collected, tmp_path):
    """Beside circuit-tracer's own files of another width (--force), layer 0 is written
    but no config.yaml pairs it with their layer 1: the set waits for a layer 1 tfx wrote,
    which must match layer 0. The other tool's config.yaml is left as it was."""
    from safetensors.torch import save_file

    folder = tmp_path / "set"
    folder.mkdir()
    theirs = "model_kind: transcoder_set\ntranscoders: [layer_0.safetensors, layer_1.safetensors]\n"
    (folder / "config.yaml").write_text(theirs)
    save_file({"W_enc": torch.zeros(48, 32), "W_dec": torch.zeros(48, 32),
               "b_enc": torch.zeros(48), "b_dec": torch.zeros(32)},
              str(folder / "layer_1.safetensors"))
    with pytest.raises(OutputFileError, match="did not write"):
        api.train_transcoder(collected, layer=0, output=folder, steps=5, l1=1e-3, **SHORT)
    r = api.train_transcoder(collected, layer=0, output=folder, steps=5, l1=1e-3, force=True,
                             **SHORT)
    assert r.config is None and r.missing == [1]
    assert (folder / "config.yaml").read_text() == theirs
    with pytest.raises(UsageError, match="another set than this run's"):
        api.train_transcoder(collected, layer=1, output=folder, steps=5, l1=1e-3, force=True,
                             **{**SHORT, "latents": 48})
    r = api.train_transcoder(collected, layer=1, output=folder, steps=5, l1=1e-3, force=True,
                             **SHORT)
    assert r.config == str(folder / "config.yaml") and r.missing == []
    assert (folder / "config.yaml").read_text().startswith("# a per-layer transcoder set")


def test_a_diverged_run_is_refused_and_leaves_no_layer(collected, tmp_path):
    """--lr 1e9 blows the loss up (finite): refused naming --lr; the layer trained before
    in the folder stays, the diverged one leaves no file and no state."""
    api.train_transcoder(collected, layer=0, output=tmp_path / "set", steps=5, l1=1e-3,
                         **SHORT)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "set").rglob("*"))
    with pytest.raises(RangeError, match=r"layer 1's transcoder diverged: its loss rose .*"
                                         r"lower --lr \(now 1e\+09\)"):
        api.train_transcoder(collected, layer=1, output=tmp_path / "set", steps=30, l1=1e-3,
                             **{**SHORT, "lr": 1e9})
    assert sorted(p.relative_to(tmp_path).as_posix()
                  for p in (tmp_path / "set").rglob("*")) == before
