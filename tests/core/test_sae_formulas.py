"""The SAE architectures tfx reads, each against its formula written out here in numpy:
gated, layer-norm normalised, expected-average rescaled (its factor folded into the saved
weights) and JumpReLU transcoders, in SAELens's folder layout (cfg.json +
sae_weights.safetensors) with seeded random weights.

The formulas are SAELens's definitions (sae_lens 6: saes/gated_sae.py, saes/sae.py's
run-time normalisation, saes/transcoder.py, and the trainer folding the expected-average
factor into the weights it saves), re-derived here:

    gated        x' = x − b_dec;
                 f = [x'·W_enc + b_gate > 0] · ReLU(x'·(W_enc ⊙ e^r_mag) + b_mag)
    layer_norm   x_n = (x − mean x) / (std x + 1e-5)  (std with n − 1);
                 x̂ = (f·W_dec + b_dec) · std x + mean x
    rescaled     trained on c·x; saved as W_enc·c, W_dec / c, b_dec / c: on x the SAE is
                 the trained one on c·x, its reconstruction divided by c
    jumprelu     pre = x_in·W_enc + b_enc (b_dec is the output's bias, never subtracted);
    transcoder   f = ReLU(pre)·[pre > threshold]; out = f·W_dec + b_dec

tfx's own SAE (encode/decode) and `tfx features` / api.features must give the same numbers
within a tolerance scaled to their size.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core.features import SAE, read_sae
from tfx_cli.errors import WeightsError

TEXT = "When you play the game of thrones you win or you die"
MODEL = dict(config="gpt2", layers=2, d_model=16, heads=2, tokenizer="word", seed=7)
TINY = ["-c", "gpt2", "--layers", "2", "--d-model", "16", "--heads", "2", "-t", "word",
        "--seed", "7"]
D_IN, D_SAE = 16, 40


def _random(seed: int, **shapes) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {name: (torch.randn(*shape, generator=g) * scale).float()
            for name, (shape, scale) in shapes.items()}


def _folder(path: Path, cfg: dict, tensors: dict) -> Path:
    path.mkdir(parents=True)
    (path / "cfg.json").write_text(json.dumps({"d_in": D_IN, "d_sae": D_SAE,
                                               "dtype": "float32", **cfg}))
    save_file({k: v.contiguous() for k, v in tensors.items()},
              str(path / "sae_weights.safetensors"))
    return path


def _np(tensors: dict) -> dict:
    return {k: v.double().numpy() for k, v in tensors.items()}


def _site(name: str) -> np.ndarray:
    return api.trace(TEXT, select=[name], **MODEL).tensors[name].astype(np.float64)


def _close(got, want, what: str, rel: float = 1e-5) -> None:
    """Equal within float32 rounding scaled to the values' size."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    tol = rel * max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol, f"{what}: off by {err:.3g} (tolerance {tol:.3g})"


def _tfx(folder: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tfx's own SAE object on x: (encode, decode of that encoding)."""
    sae = SAE(read_sae(folder), site="x", site_out="x", spec="x")
    xt = torch.from_numpy(x).float()
    acts = sae.encode(xt)
    return acts.double().numpy(), sae.decode(acts, xt).double().numpy()


def _features(folder: Path) -> dict:
    doc = CliRunner().invoke(app, ["features", TEXT, *TINY, "--sae", str(folder), "--json"],
                             env={"TFX_QUIET": "1"})
    assert doc.exit_code == 0, doc.stderr
    tensors = json.loads(doc.stdout)["tensors"]
    return {name: np.asarray(t["data"], np.float64) for name, t in tensors.items()}


def _some_on_some_off(acts: np.ndarray) -> None:
    """The case separates the formula's branches: features both on and off."""
    on = (acts != 0).mean()
    assert 0.05 < on < 0.95, on


# -- gated ----------------------------------------------------------------------------
def gated_formula(x, w):
    xc = x - w["b_dec"]
    gate = (xc @ w["W_enc"] + w["b_gate"]) > 0
    mag = np.maximum(xc @ (w["W_enc"] * np.exp(w["r_mag"])) + w["b_mag"], 0.0)
    return gate * mag


def test_gated_sae_is_its_formula(tmp_path):
    t = _random(1, W_enc=((D_IN, D_SAE), 0.4), W_dec=((D_SAE, D_IN), 0.4),
                b_dec=((D_IN,), 0.2), b_gate=((D_SAE,), 0.3), r_mag=((D_SAE,), 0.5),
                b_mag=((D_SAE,), 0.3))
    folder = _folder(tmp_path / "gated", {
        "architecture": "gated", "apply_b_dec_to_input": True,
        "normalize_activations": "none", "metadata": {"hook_name": "blocks.1.hook_resid_pre"}},
        t)
    w, x = _np(t), _site("blocks.0.resid_out")
    acts = gated_formula(x, w)
    _some_on_some_off(acts)
    # the gate and the magnitude disagree somewhere: a formula that used one path for
    # both would differ there
    xc = x - w["b_dec"]
    gate_on = xc @ w["W_enc"] + w["b_gate"] > 0
    mag_on = xc @ (w["W_enc"] * np.exp(w["r_mag"])) + w["b_mag"] > 0
    assert (gate_on & ~mag_on).any() and (~gate_on & mag_on).any()
    recon = acts @ w["W_dec"] + w["b_dec"]
    got_acts, got_recon = _tfx(folder, x)
    _close(got_acts, acts, "gated encode")
    _close(got_recon, recon, "gated decode")
    out = _features(folder)
    _close(out["features.acts"], acts, "tfx features acts")
    _close(out["features.recon"], recon, "tfx features recon")
    _close(out["features.error"], x - recon, "tfx features error")
    # only some features asked (top --sae's path): the same columns
    sae = SAE(read_sae(folder), site="x", site_out="x", spec="x")
    units = [3, 0, 17]
    _close(sae.encode_units(torch.from_numpy(x).float(), units).double().numpy(),
           acts[:, units], "gated encode_units")


# -- layer_norm -------------------------------------------------------------------------
@pytest.mark.parametrize("subtract_b_dec", [True, False])
def test_layer_norm_sae_is_its_formula(tmp_path, subtract_b_dec):
    t = _random(2, W_enc=((D_IN, D_SAE), 0.4), W_dec=((D_SAE, D_IN), 0.4),
                b_enc=((D_SAE,), 0.2), b_dec=((D_IN,), 0.3))
    folder = _folder(tmp_path / "ln", {
        "architecture": "standard", "apply_b_dec_to_input": subtract_b_dec,
        "normalize_activations": "layer_norm",
        "metadata": {"hook_name": "blocks.0.hook_mlp_out"}}, t)
    w, x = _np(t), _site("blocks.0.ffn.out")
    mu = x.mean(-1, keepdims=True)
    std = (x - mu).std(-1, ddof=1, keepdims=True)  # torch's std: n − 1
    xn = (x - mu) / (std + 1e-5)
    acts = np.maximum((xn - w["b_dec"] * subtract_b_dec) @ w["W_enc"] + w["b_enc"], 0.0)
    _some_on_some_off(acts)
    recon = (acts @ w["W_dec"] + w["b_dec"]) * std + mu
    got_acts, got_recon = _tfx(folder, x)
    _close(got_acts, acts, "layer_norm encode")
    _close(got_recon, recon, "layer_norm decode")
    out = _features(folder)
    _close(out["features.acts"], acts, "tfx features acts")
    _close(out["features.recon"], recon, "tfx features recon")


# -- expected_average_only_in ----------------------------------------------------------------
def test_rescaled_sae_runs_as_trained_on_the_scaled_input(tmp_path):
    """An SAE trained on c·x (normalize_activations expected_average_only_in, c the factor
    that makes the mean norm sqrt(d_in)) is saved with c folded in; read from disk it
    must act on x as the trained SAE on c·x, its reconstruction divided by c."""
    trained = _np(_random(3, W_enc=((D_IN, D_SAE), 0.4), W_dec=((D_SAE, D_IN), 0.4),
                          b_enc=((D_SAE,), 0.2), b_dec=((D_IN,), 0.3)))
    x = _site("blocks.0.resid_out")
    c = np.sqrt(D_IN) / np.linalg.norm(x, axis=-1).mean()
    assert abs(c - 1) > 0.2  # a factor that shows: a folder read unfolded would be far off
    saved = {"W_enc": trained["W_enc"] * c, "W_dec": trained["W_dec"] / c,
             "b_enc": trained["b_enc"], "b_dec": trained["b_dec"] / c}
    cfg = {"architecture": "standard", "apply_b_dec_to_input": True,
           "normalize_activations": "expected_average_only_in",
           "metadata": {"hook_name": "blocks.1.hook_resid_pre"}}
    folder = _folder(tmp_path / "scaled", cfg,
                     {k: torch.from_numpy(v).float() for k, v in saved.items()})
    acts = np.maximum((c * x - trained["b_dec"]) @ trained["W_enc"] + trained["b_enc"], 0.0)
    _some_on_some_off(acts)
    recon = (acts @ trained["W_dec"] + trained["b_dec"]) / c
    got_acts, got_recon = _tfx(folder, x)
    _close(got_acts, acts, "rescaled encode")
    _close(got_recon, recon, "rescaled decode")
    out = _features(folder)
    _close(out["features.acts"], acts, "tfx features acts")
    _close(out["features.recon"], recon, "tfx features recon")
    # a finetuning scaling_factor of ones changes nothing; another one is refused by name
    ones = {**{k: torch.from_numpy(v).float() for k, v in saved.items()},
            "scaling_factor": torch.ones(D_SAE)}
    _close(_tfx(_folder(tmp_path / "ones", cfg, ones), x)[0], acts, "scaling_factor 1")
    ones["scaling_factor"] = torch.full((D_SAE,), 2.0)
    with pytest.raises(WeightsError, match="scaling_factor"):
        read_sae(_folder(tmp_path / "twos", cfg, ones))


def _normalised(x, how):
    if how == "layer_norm":
        centred = x - x.mean(-1, keepdims=True)
        return centred / (centred.std(-1, ddof=1, keepdims=True) + 1e-5)
    if how == "constant_norm_rescale":  # x · sqrt(d_in) / |x|
        return x * np.sqrt(x.shape[-1]) / np.linalg.norm(x, axis=-1, keepdims=True)
    return x


# -- jumprelu_transcoder ------------------------------------------------------------------
@pytest.mark.parametrize("normalize", ["none", "layer_norm", "constant_norm_rescale"])
def test_jumprelu_transcoder_is_its_formula(tmp_path, normalize):
    """A transcoder normalises its input as an SAE does, but its output is another site:
    nothing is scaled back (SAELens's Transcoder.decode skips the out-normalisation)."""
    t = _random(4, W_enc=((D_IN, D_SAE), 0.4), W_dec=((D_SAE, D_IN), 0.4),
                b_enc=((D_SAE,), 0.2), b_dec=((D_IN,), 0.3))
    g = torch.Generator().manual_seed(5)
    t["threshold"] = torch.rand(D_SAE, generator=g) * 0.6
    folder = _folder(tmp_path / "tc", {
        "architecture": "jumprelu_transcoder", "d_out": D_IN, "apply_b_dec_to_input": False,
        "normalize_activations": normalize,
        "metadata": {"hook_name": "blocks.0.hook_resid_mid",
                     "hook_name_out": "blocks.0.hook_mlp_out"}}, t)
    w = _np(t)
    x_in, x_out = _site("blocks.0.resid_mid"), _site("blocks.0.ffn.out")
    if normalize != "none":  # a scale far from 1: scaling the output back would show
        assert np.abs(_normalised(x_in, normalize) - x_in).max() > 0.5
    pre = _normalised(x_in, normalize) @ w["W_enc"] + w["b_enc"]
    acts = np.where(pre > w["threshold"], np.maximum(pre, 0.0), 0.0)
    _some_on_some_off(acts)
    # the threshold matters: some positive pre-activations stay under it
    assert ((pre > 0) & (pre <= w["threshold"])).any()
    out_hat = acts @ w["W_dec"] + w["b_dec"]
    got_acts, got_out = _tfx(folder, x_in)
    _close(got_acts, acts, "transcoder encode")
    _close(got_out, out_hat, "transcoder decode")
    out = _features(folder)
    _close(out["features.acts"], acts, "tfx features acts")
    _close(out["features.recon"], out_hat, "tfx features recon (of the output site)")
    _close(out["features.error"], x_out - out_hat, "tfx features error (output − recon)")


# -- one class per architecture ------------------------------------------------------------
@pytest.mark.parametrize("name", ["standard", "relu", "topk", "jumprelu", "gated",
                                  "transcoder", "jumprelu_transcoder"])
def test_each_architecture_encodes_some_features_as_it_encodes_all(tmp_path, name):
    """Every SAELens architecture name reads as its class, and that class's features of
    a few units are the whole encoding's columns (top --sae's path)."""
    from tfx_cli.core.features.formats import ARCHITECTURES

    kind = ARCHITECTURES[name]
    shapes = {"W_enc": ((D_IN, D_SAE), 0.4), "W_dec": ((D_SAE, D_IN), 0.4),
              "b_dec": ((D_IN,), 0.2)}
    shapes.update({t: ((D_SAE,), 0.3) for t in kind.tensors})
    cfg = {"architecture": name, "metadata": {"hook_name": "blocks.1.hook_resid_pre",
                                              "hook_name_out": "blocks.1.hook_mlp_out"}}
    if kind.needs_k:
        cfg["k"] = 6
    sae = SAE(read_sae(_folder(tmp_path / name, cfg, _random(3, **shapes))), site="x",
              site_out="x", spec="x")
    assert type(sae.encoder) is kind and sae.file.transcoder == name.endswith("transcoder")
    x = torch.randn(9, D_IN, generator=torch.Generator().manual_seed(4))
    acts = sae.encode(x).double().numpy()
    _some_on_some_off(acts)
    units = [5, 0, 31, 12]
    _close(sae.encode_units(x, units).double().numpy(), acts[:, units], f"{name} units")
