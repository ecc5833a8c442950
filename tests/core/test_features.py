"""Features of sparse autoencoders: reading SAE folders, `tfx features`, and features as
intervention sites.

What must hold: features.acts equals the SAE's formula applied to `tfx trace --select
SITE` (within 1e-5) for ReLU, JumpReLU and TopK SAEs in SAELens's format, older flat
configs, Gemma Scope's params.npz and Gemma Scope 2's params.safetensors; the site
replaced by reconstruction plus error is the plain run bit for bit; ablating a feature
changes the site by exactly its decoder row times its activation; patching and
attribution over features agree with a hand-written reference. The SAEs are random,
written here file by file (no tfx writer), as SAELens would lay them out.
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
from tfx_cli.core import load as loading
from tfx_cli.core.analysis import feature_sites as fs
from tfx_cli.core.analysis import sites as iv
from tfx_cli.core.spec import ModelSpec
from tfx_cli.errors import ConfigError, RangeError, SelectError, UsageError, WeightsError

TEXT = "When you play game of thrones"
TINY = ["-c", "gpt2", "--layers", "2", "--d-model", "16", "--heads", "2", "-t", "word"]
MODEL = dict(config="gpt2", layers=2, d_model=16, heads=2, tokenizer="word")
D_SAE = 48


# -- SAE folders, written as SAELens and Gemma Scope write them ----------------------------
def weights(d_in: int, d_sae: int = D_SAE, seed: int = 0, d_out: int | None = None) -> dict:
    g = torch.Generator().manual_seed(seed)
    d_out = d_out or d_in
    return {"W_enc": torch.randn(d_in, d_sae, generator=g) * 0.4,
            "W_dec": torch.randn(d_sae, d_out, generator=g) * 0.4,
            "b_enc": torch.randn(d_sae, generator=g) * 0.2,
            "b_dec": torch.randn(d_out, generator=g) * 0.2,
            "threshold": torch.rand(d_sae, generator=g) * 0.5}


def saelens(folder: Path, arch: str, hook: str, d_in: int = 16, k: int | None = None,
            flat: bool = False, seed: int = 0, **cfg) -> dict:
    """A SAELens folder: cfg.json (v6, or a pre-6.0 flat config) + sae_weights.safetensors."""
    folder.mkdir(parents=True)
    w = weights(d_in, seed=seed)
    if arch != "jumprelu":
        w.pop("threshold")
    if flat:  # sae_lens < 6: hook_point, activation_fn_str, activation_fn_kwargs
        config = {"d_in": d_in, "d_sae": D_SAE, "hook_point": hook,
                  "activation_fn_str": "topk" if arch == "topk" else "relu",
                  "activation_fn_kwargs": {"k": k} if arch == "topk" else {},
                  "apply_b_dec_to_input": True, "normalize_activations": False, **cfg}
    else:
        config = {"architecture": arch, "d_in": d_in, "d_sae": D_SAE, "dtype": "float32",
                  "apply_b_dec_to_input": True, "normalize_activations": "none",
                  "metadata": {"hook_name": hook, "sae_lens_version": "6.18.0"}, **cfg}
        if k is not None:
            config["k"] = k
    (folder / "cfg.json").write_text(json.dumps(config))
    save_file(w, str(folder / "sae_weights.safetensors"))
    return {name: t.double().numpy() for name, t in w.items()}


def formula(x, w, arch, k=None, subtract_b_dec=True):
    """The SAE's encoder in float64 numpy, from the issue's formula."""
    x = np.asarray(x, dtype=np.float64)
    if subtract_b_dec:
        x = x - w["b_dec"]
    pre = x @ w["W_enc"] + w["b_enc"]
    if arch == "jumprelu":
        return np.where(pre > w["threshold"], np.maximum(pre, 0.0), 0.0)
    if arch == "topk":
        out = np.zeros_like(pre)
        top = np.argsort(-pre, axis=-1, kind="stable")[:, :k]
        rows = np.arange(len(pre))[:, None]
        out[rows, top] = np.maximum(pre[rows, top], 0.0)
        return out
    return np.maximum(pre, 0.0)


def cli_json(*args) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def traced(site: str) -> np.ndarray:
    doc = cli_json("trace", TEXT, *TINY, "--select", site)
    return np.asarray(doc["tensors"][site]["data"], dtype=np.float64)


# -- features.acts is the formula on the traced site ----------------------------------------
@pytest.mark.parametrize("arch, k, flat", [("standard", None, False), ("jumprelu", None, False),
                                           ("topk", 5, False), ("topk", 3, True),
                                           ("standard", None, True)])
def test_features_are_the_formula_on_the_traced_site(tmp_path, arch, k, flat):
    w = saelens(tmp_path / "sae", arch, "blocks.1.hook_resid_pre", k=k, flat=flat)
    doc = cli_json("features", TEXT, *TINY, "--sae", str(tmp_path / "sae"))
    x = traced("blocks.0.resid_out")  # TransformerLens's blocks.1.hook_resid_pre
    expect = formula(x, w, "topk" if flat and k else arch, k)
    acts = np.asarray(doc["tensors"]["features.acts"]["data"])
    assert doc["tensors"]["features.acts"]["dims"] == ["T", "F"]
    assert acts.shape == (6, D_SAE)
    assert np.abs(acts - expect).max() < 1e-5
    recon = np.asarray(doc["tensors"]["features.recon"]["data"])
    error = np.asarray(doc["tensors"]["features.error"]["data"])
    assert np.abs(recon - (expect @ w["W_dec"] + w["b_dec"])).max() < 1e-4
    assert np.abs(recon + error - x).max() < 1e-5
    result = doc["result"]
    assert result["sae"]["site"] == "blocks.1.resid_pre" and result["sae"]["name"] == \
        "blocks.0.resid_out"
    l0 = (expect != 0).sum(axis=-1)
    assert [p["l0"] for p in result["positions"]] == l0.tolist()
    assert result["l0_mean"] == pytest.approx(l0.mean())
    err = x - (expect @ w["W_dec"] + w["b_dec"])
    fvu = (err ** 2).sum() / ((x - x.mean(axis=0)) ** 2).sum()
    assert result["fvu"] == pytest.approx(fvu, rel=1e-4)
    top = result["positions"][2]["top"]
    ranked = [k for k in np.argsort(-expect[2], kind="stable")[:5] if expect[2, k] > 0]
    assert [t["index"] for t in top] == ranked
    if arch == "topk" or flat and k:
        assert l0.max() <= k


def test_gemma_scope_npz_and_gemma_scope_2_safetensors(tmp_path):
    """params.npz (W_enc ...) and params.safetensors (w_enc ...): JumpReLU, b_dec not
    subtracted from the input; the site from the folder's path."""
    w = {k: v.numpy() for k, v in weights(16).items()}
    one = tmp_path / "gemma-scope-2b-pt-res" / "layer_1" / "width_16k" / "average_l0_9"
    one.mkdir(parents=True)
    np.savez(one / "params.npz", **w)
    two = tmp_path / "resid_post" / "layer_0_width_16k_l0_small"
    two.mkdir(parents=True)
    save_file({name.lower(): torch.from_numpy(v) for name, v in w.items()},
              str(two / "params.safetensors"))
    expect = {one: formula(traced("blocks.1.resid_out"), w, "jumprelu", subtract_b_dec=False),
              two: formula(traced("blocks.0.resid_out"), w, "jumprelu", subtract_b_dec=False)}
    for folder, want in expect.items():
        doc = cli_json("features", TEXT, *TINY, "--sae", str(folder))
        acts = np.asarray(doc["tensors"]["features.acts"]["data"])
        assert np.abs(acts - want).max() < 1e-5
        assert doc["result"]["sae"]["apply_b_dec_to_input"] is False
    assert doc["result"]["sae"]["format"] == "gemma-scope-2"
    # a folder that says no site: --sae-site names it
    plain = tmp_path / "plain"
    plain.mkdir()
    np.savez(plain / "params.npz", **w)
    with pytest.raises(SelectError, match="--sae-site"):
        api.features(TEXT, sae=str(plain), **MODEL)
    r = api.features(TEXT, sae=str(plain), sae_site="blocks.0.hook_resid_post", **MODEL)
    assert np.abs(r.tensors["features.acts"] - expect[two]).max() < 1e-5


def test_an_sae_of_attention_z_reads_the_heads_joined(tmp_path):
    """TransformerLens's attn.hook_z is tfx's attn.context (H, T, D), read per position
    with the heads joined: (T, H·D)."""
    w = saelens(tmp_path / "z", "standard", "blocks.1.attn.hook_z")
    context = traced("blocks.1.attn.context")  # (H, T, D)
    joined = context.transpose(1, 0, 2).reshape(6, 16)
    r = api.features(TEXT, sae=str(tmp_path / "z"), **MODEL)
    assert r.sae.name == "blocks.1.attn.context"
    assert np.abs(r.tensors["features.acts"] - formula(joined, w, "standard")).max() < 1e-5
    assert r.tensors.dims("features.recon") == ("T", "A")


def test_tfx_format_and_normalising_saes(tmp_path):
    from tfx_cli.core.features import write_tfx

    w = weights(16)
    write_tfx(tmp_path / "mine", activation="topk", k=4, site="blocks.0.ffn.out",
              W_enc=w["W_enc"], W_dec=w["W_dec"], b_enc=w["b_enc"], b_dec=w["b_dec"])
    r = api.features(TEXT, sae=str(tmp_path / "mine"), **MODEL)
    x = traced("blocks.0.ffn.out")
    wn = {k: v.double().numpy() for k, v in w.items()}
    assert np.abs(r.tensors["features.acts"] - formula(x, wn, "topk", 4)).max() < 1e-5
    # SAELens's constant_norm_rescale: x · sqrt(d_in) / |x| in, divided back out
    wl = saelens(tmp_path / "norm", "standard", "blocks.0.hook_mlp_out",
                 normalize_activations="constant_norm_rescale")
    r = api.features(TEXT, sae=str(tmp_path / "norm"), **MODEL)
    coeff = np.sqrt(16) / np.linalg.norm(x, axis=-1, keepdims=True)
    acts = formula(x * coeff, wl, "standard")
    assert np.abs(r.tensors["features.acts"] - acts).max() < 1e-5
    recon = (acts @ wl["W_dec"] + wl["b_dec"]) / coeff
    assert np.abs(r.tensors["features.recon"] - recon).max() < 1e-4


def test_a_transcoder_reads_one_site_and_reconstructs_another(tmp_path):
    folder = tmp_path / "tc"
    folder.mkdir()
    w = weights(16)
    w.pop("threshold")
    (folder / "cfg.json").write_text(json.dumps({
        "architecture": "transcoder", "d_in": 16, "d_sae": D_SAE, "d_out": 16,
        "apply_b_dec_to_input": False, "metadata": {"hook_name": "blocks.0.mlp.hook_in",
                                                    "hook_name_out": "blocks.0.hook_mlp_out"}}))
    save_file(w, str(folder / "sae_weights.safetensors"))
    r = api.features(TEXT, sae=str(folder), **MODEL)
    wn = {k: v.double().numpy() for k, v in w.items()}
    acts = formula(traced("blocks.0.ln2.out"), wn, "standard", subtract_b_dec=False)
    assert np.abs(r.tensors["features.acts"] - acts).max() < 1e-5
    out = traced("blocks.0.ffn.out")
    assert np.abs(r.tensors["features.error"] - (out - acts @ wn["W_dec"] - wn["b_dec"])
                  ).max() < 1e-4
    assert r.sae.site_out == "blocks.0.ffn.out"
    # ablating a transcoder's feature edits the output site by its decoder row
    k = int(np.argmax(acts[3]))
    t = api.trace(TEXT, select=["blocks.0.ffn.out"], sae=str(folder),
                  ablate=[f"features.{k}:p=3"], **MODEL)
    moved = t.tensors["blocks.0.ffn.out"] - out
    assert np.abs(moved[3] + acts[3, k] * wn["W_dec"][k]).max() < 1e-5
    assert np.abs(np.delete(moved, 3, axis=0)).max() == 0


# -- features as sites ------------------------------------------------------------------------
def loaded():
    return loading.load(ModelSpec(**MODEL))


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_pre", "blocks.0.hook_mlp_out",
                                  "blocks.1.attn.hook_z", "blocks.1.hook_resid_post"])
def test_reconstruction_plus_error_is_the_plain_run_bit_for_bit(tmp_path, hook):
    saelens(tmp_path / "sae", "topk", hook, k=6)
    m = loaded()
    ids = m.tokenizer.encode(TEXT)
    with torch.inference_mode():
        plain = m.model(torch.tensor([ids]))
        sae = fs.open_sae(m, tmp_path / "sae")
        with iv.editing(m.model, [(sae.site_out, fs.feature_edit(sae, []))]):
            spliced = m.model(torch.tensor([ids]))
    assert torch.equal(plain, spliced)
    # the same through the CLI: --steer-feature adding 0 is the plain run's tensors
    a = cli_json("trace", TEXT, *TINY, "-s", "logits,blocks.*.resid_out")
    b = cli_json("trace", TEXT, *TINY, "-s", "logits,blocks.*.resid_out", "--steer-feature",
                 f"{tmp_path / 'sae'}:3", "--scale", "0")
    assert a["tensors"] == b["tensors"]
    assert b["result"]["interventions"][0]["feature"] == 3


def test_ablating_a_feature_moves_the_site_by_its_decoder_row_times_its_activation(tmp_path):
    w = saelens(tmp_path / "sae", "standard", "blocks.1.hook_resid_pre")
    plain = api.trace(TEXT, select=["blocks.0.resid_out", "logits"], **MODEL)
    x = torch.from_numpy(plain.tensors["blocks.0.resid_out"])
    acts = torch.from_numpy(api.features(TEXT, sae=str(tmp_path / "sae"),
                                         **MODEL).tensors["features.acts"])
    k = int(acts.sum(dim=0).argmax())
    W = torch.from_numpy(w["W_dec"]).float()
    ablated = api.trace(TEXT, select=["blocks.0.resid_out", "logits"], sae=str(tmp_path / "sae"),
                        ablate=[f"features.{k}"], **MODEL)
    edited = torch.from_numpy(ablated.tensors["blocks.0.resid_out"])
    assert torch.equal(edited, x + (-acts[:, k:k + 1]) * W[k])  # exactly, every position
    assert not np.array_equal(ablated.tensors["logits"], plain.tensors["logits"])
    record = ablated.interventions[0]
    assert (record.kind, record.site, record.feature, record.name, record.mode) == (
        "ablate", f"features.{k}", k, "blocks.0.resid_out", "zero")
    # one position, and the mean over positions
    one = api.trace(TEXT, select=["blocks.0.resid_out"], sae=str(tmp_path / "sae"),
                    ablate=[f"features.{k}:p=2"], **MODEL).tensors["blocks.0.resid_out"]
    assert np.array_equal(np.delete(one, 2, axis=0), np.delete(x.numpy(), 2, axis=0))
    assert torch.equal(torch.from_numpy(one[2]), x[2] + (-acts[2, k]) * W[k])
    mean = api.trace(TEXT, select=["blocks.0.resid_out"], sae=str(tmp_path / "sae"),
                     ablate=[f"features.{k}"], ablate_mode="mean", **MODEL)
    change = acts[:, k].mean() - acts[:, k]
    assert torch.allclose(torch.from_numpy(mean.tensors["blocks.0.resid_out"]),
                          x + change[:, None] * W[k], atol=1e-6)
    # steering a feature adds K × its decoder row at every position
    steered = api.trace(TEXT, select=["blocks.0.resid_out"],
                        steer_feature=f"{tmp_path / 'sae'}:{k}", scale=3.0,
                        **MODEL).tensors["blocks.0.resid_out"]
    assert torch.allclose(torch.from_numpy(steered), x + 3.0 * W[k], atol=1e-6)


def test_feature_site_refusals(tmp_path):
    saelens(tmp_path / "sae", "standard", "blocks.1.hook_resid_pre")
    sae = str(tmp_path / "sae")
    with pytest.raises(UsageError, match="add --sae DIR"):
        api.next(TEXT, ablate=["features.3"], **MODEL)
    with pytest.raises(UsageError, match="no features.K was given"):
        api.next(TEXT, sae=sae, **MODEL)
    with pytest.raises(RangeError, match="the SAE has 48 features"):
        api.next(TEXT, sae=sae, ablate=["features.48"], **MODEL)
    with pytest.raises(RangeError, match="position 9"):
        api.next(TEXT, sae=sae, ablate=["features.1:p=9"], **MODEL)
    with pytest.raises(UsageError, match="DIR:INDEX"):
        api.next(TEXT, steer_feature=sae, **MODEL)
    with pytest.raises(UsageError, match="both given"):
        api.next(TEXT, steer_feature=f"{sae}:1", steer="embed.out", toward="a", away="b",
                 **MODEL)
    with pytest.raises(ConfigError, match="48 wide|16 wide"):
        saelens(tmp_path / "wide", "standard", "blocks.0.hook_resid_post", d_in=32)
        api.features(TEXT, sae=str(tmp_path / "wide"), **MODEL)
    with pytest.raises(RangeError, match="block 5 is out of range"):
        saelens(tmp_path / "deep", "standard", "blocks.5.hook_resid_post")
        api.features(TEXT, sae=str(tmp_path / "deep"), **MODEL)
    with pytest.raises(SelectError, match="does not map"):
        saelens(tmp_path / "result", "standard", "blocks.0.attn.hook_result")
        api.features(TEXT, sae=str(tmp_path / "result"), **MODEL)
    with pytest.raises(WeightsError, match="no SAE tfx reads"):
        (tmp_path / "empty").mkdir()
        api.features(TEXT, sae=str(tmp_path / "empty"), **MODEL)
    with pytest.raises(WeightsError, match="lack threshold"):
        saelens(tmp_path / "jr", "standard", "blocks.0.hook_resid_post")
        cfg = json.loads((tmp_path / "jr" / "cfg.json").read_text())
        (tmp_path / "jr" / "cfg.json").write_text(json.dumps({**cfg, "architecture": "jumprelu"}))
        api.features(TEXT, sae=str(tmp_path / "jr"), **MODEL)


# -- patching and attribution over features -------------------------------------------------
def test_patching_a_feature_is_the_run_with_that_activation_replaced(tmp_path):
    w = saelens(tmp_path / "sae", "standard", "blocks.1.hook_resid_pre")
    corrupt = "When you play game of you"
    r = api.patch(TEXT, corrupt=corrupt, answer="win", wrong="die", site="features",
                  sae=str(tmp_path / "sae"), **MODEL)
    alone = api.patch(TEXT, corrupt=corrupt, answer="win", wrong="die", site="features",
                      sae=str(tmp_path / "sae"), batch=1, **MODEL)
    metric = r.tensors["patch.metric"]
    assert r.tensors.dims("patch.effect") == ("F", "T") and metric.shape[1] == 6
    assert 0 < metric.shape[0] <= 32 and len(r.features) == metric.shape[0]
    assert np.abs(metric - alone.tensors["patch.metric"]).max() < 1e-5
    # the texts differ at the last position only: every other cell is m_corrupt, unrun
    assert np.all(metric[:, :5] == r.m_corrupt)
    # a cell against the run with that one feature's activation replaced, by hand
    clean_x, bad_x = (torch.from_numpy(api.trace(t, select=["blocks.0.resid_out"], **MODEL)
                                       .tensors["blocks.0.resid_out"]).double()
                      for t in (TEXT, corrupt))
    enc = {name: torch.from_numpy(v) for name, v in w.items()}
    f = lambda x: torch.relu((x - enc["b_dec"]) @ enc["W_enc"] + enc["b_enc"])  # noqa: E731
    k = r.features[0]
    delta = (f(clean_x)[5, k] - f(bad_x)[5, k]) * enc["W_dec"][k]
    m = loaded()
    tap = m.model.taps["blocks.0.resid_out"]

    def edit(x):
        out = x.clone()
        out[0, 5] += delta.float()
        return out

    tap.edit = edit
    try:
        with torch.inference_mode():
            logits = m.model(torch.tensor([m.tokenizer.encode(corrupt)]), head="last")[0, -1]
    finally:
        tap.edit = None
    win, die = (m.tokenizer.encode(t)[0] for t in ("win", "die"))
    assert float(logits[win] - logits[die]) == pytest.approx(metric[0, 5], abs=1e-5)


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post",
                                  "blocks.1.hook_resid_mid", "blocks.0.hook_mlp_out",
                                  "blocks.1.hook_attn_out", "blocks.1.attn.hook_z"])
def test_attribution_over_features_sums_to_the_logit_difference(tmp_path, hook):
    saelens(tmp_path / "sae", "jumprelu", hook)
    r = api.attribute(TEXT, answer="win", wrong="die", sae=str(tmp_path / "sae"), **MODEL)
    plain = api.attribute(TEXT, answer="win", wrong="die", **MODEL)
    assert r.logit_diff == plain.logit_diff
    assert abs(r.unexplained) < 1e-5
    names = [p.name for p in r.parts]
    assert "features.bias" in names and "features.error" in names
    assert any(n.startswith("features.") and n[9:].isdigit() for n in names)
    split = sum(p.value for p in r.parts if p.name.startswith("features."))
    if hook.endswith(("mlp_out", "attn_out", "hook_z")):  # the sublayer's part, split
        sub = "blocks.0.ffn.out" if "mlp" in hook else "blocks.1.attn.out"
        whole = next(p.value for p in plain.parts if p.name == sub)
        # attention's z goes through W_O, whose bias joins the remainder
        moved = r.parts[-1].value - plain.parts[-1].value
        assert split + moved == pytest.approx(whole, abs=1e-6)
        assert (moved != 0) == hook.endswith("hook_z")
        assert sub not in names
    else:  # the stream at the site: everything before it replaced
        assert "embed.tok" not in names
    assert r.sae.site == fs.open_sae(loaded(), tmp_path / "sae").spec


@pytest.mark.slow
def test_the_readme_sae_on_smollm2(tmp_path):
    """docs/features.md: eight unit unembedding directions of SmolLM2 as an SAE at the
    last block's output; taking the ' Paris' one out takes Paris out of the answer."""
    from tfx_cli.core.features import write_saelens

    m = api.load(weights="smollm2")
    words = [" Paris", " Rome", " London", " Berlin", " Madrid", " France", " Italy",
             " capital"]
    rows = torch.stack([m.module.lm_head.weight[m.tokenizer.encode(w)[0]] for w in words])
    rows = rows / rows.norm(dim=-1, keepdim=True)
    sae = write_saelens(tmp_path / "city-sae", activation="relu", W_enc=rows.T, W_dec=rows,
                        b_enc=torch.zeros(8), b_dec=torch.zeros(576),
                        apply_b_dec_to_input=False, hook_name="blocks.29.hook_resid_post")
    text = "The capital of France is"
    f = m.features(text, sae=str(sae), per_token=3)
    assert [a.index for a in f.positions[4].top] == [0, 2, 5]
    assert f.positions[4].top[0].activation == pytest.approx(95.5, abs=0.1)
    assert f.fvu == pytest.approx(1.43, abs=0.01)
    plain = m.next(text)
    assert plain.greedy.token == " Paris" and plain.greedy.prob == pytest.approx(0.773, abs=1e-3)
    ablated = m.next(text, sae=str(sae), ablate=["features.0"], candidates=200)
    assert " Paris" not in [c.token for c in ablated.candidates]
    assert ablated.greedy.token == " the"
    parts = {p.name: p.value for p in m.attribute(text, answer=" Paris", wrong=" Rome",
                                                  sae=str(sae)).parts}
    assert parts["features.0"] == pytest.approx(7.21, abs=0.01)
    assert parts["features.1"] == pytest.approx(-4.85, abs=0.01)


def test_hook_names_round_trip_and_the_metrics():
    from tfx_cli.core.features import hook_name, metrics, tfx_site

    for site in ("blocks.3.resid_out", "blocks.0.resid_pre", "blocks.2.resid_mid",
                 "blocks.2.attn.context", "blocks.1.ffn.out", "blocks.1.ln2.out", "embed.tok"):
        assert tfx_site(hook_name(site)) == site
    assert hook_name("blocks.3.resid_out") == "blocks.3.hook_resid_post"
    assert hook_name("blocks.1.ln1.out") == "blocks.1.ln1.out"  # no hook: the tfx name
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert metrics.fvu(x, x) == 0.0 and metrics.fvu(x[:1], x[:1]) is None
    assert metrics.fvu(x, x.mean(dim=0).expand(3, 2)) == pytest.approx(1.0)
    acts = torch.tensor([[0.0, 2.0, 0.0], [1.0, 3.0, 0.0]])
    assert metrics.l0(acts).tolist() == [1, 2] and metrics.dead(acts) == 1


def test_hook_mlp_in_is_the_stream_before_ln2():
    """TransformerLens hooks hook_mlp_in on the residual stream before ln2
    (`self.hook_mlp_in(resid_mid.clone())`, then `self.ln2(mlp_in)`): an SAE on it reads
    tfx's resid_mid, not ln2's output, which is circuit-tracer's mlp.hook_in."""
    from tfx_cli.core.features.hooks import hook_name, tfx_site

    assert tfx_site("blocks.3.hook_mlp_in", "--sae x reads") == "blocks.3.resid_mid"
    assert tfx_site("blocks.3.mlp.hook_in", "--sae x reads") == "blocks.3.ln2.out"
    assert tfx_site("blocks.3.mlp.hook_out", "--sae x writes") == "blocks.3.ffn.out"
    assert hook_name("blocks.3.resid_mid") == "blocks.3.hook_resid_mid"
    assert hook_name("blocks.3.ln2.out") == "blocks.3.mlp.hook_in"
