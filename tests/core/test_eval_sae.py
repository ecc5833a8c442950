"""tfx eval-sae: SAEBench's core scores on a tiny random model. Exact cases (an SAE that
reconstructs its site perfectly scores FVU 0, CE-loss score 1, KL score 1; an all-zero SAE
CE-loss score 0), CE_clean against the plain model's mean next-token loss computed here
from `trace`'s logits, and every number against numpy on a small case (the replaced run
made here by putting numpy's reconstruction on the site)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tfx_cli import api
from tfx_cli.core.analysis.sites import editing
from tfx_cli.core.features import write_saelens, write_tfx

TINY = dict(config="gpt2", layers=2, d_model=32, heads=4)
D = 32
DOCS = ["The quick brown fox jumps over the lazy dog while the cat sleeps.",
        "import numpy as np\nx = np.arange(10)\nprint(x.sum())",
        "Paris is the capital of France, and Rome is the capital of Italy.",
        "a"]  # one token: no next token, still read for the site's numbers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A few documents, each shorter than the window, so that a window is a document."""
    path = tmp_path_factory.mktemp("eval") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    return path


@pytest.fixture(scope="module")
def model():
    return api.load(**TINY)


def _eval(corpus, sae, **kw):
    return api.eval_sae(corpus, sae=sae, ctx=64, batch_size=2, **TINY, **kw)


def _perfect(folder: Path, site: str) -> Path:
    I = torch.eye(D)
    return write_tfx(folder, activation="relu", W_enc=torch.cat([I, -I], 1),
                     W_dec=torch.cat([I, -I], 0), b_enc=torch.zeros(2 * D),
                     b_dec=torch.zeros(D), site=site, apply_b_dec_to_input=False)


@pytest.mark.parametrize("site", ["blocks.0.resid_out", "blocks.1.ffn.out"])
def test_a_perfect_sae_scores_fvu_0_and_ce_and_kl_scores_1(tmp_path, corpus, site):
    r = _eval(corpus, _perfect(tmp_path / "sae", site))
    assert abs(r.fvu) <= 1e-4 and abs(r.explained_variance - 1) <= 1e-4
    assert abs(r.ce_loss_score - 1) <= 1e-4
    assert abs(r.kl_score - 1) <= 1e-4
    assert abs(r.cosine - 1) <= 1e-4
    # the ablation moved the loss, so the score's denominator is not a rounding error
    assert abs(r.ce_ablation - r.ce_clean) > 1e-3 and r.kl_ablation > 1e-3
    assert r.l0 == pytest.approx(D)  # each coordinate is +x or −x: exactly one fires
    assert r.dead == 0


def test_an_all_zero_sae_scores_ce_loss_score_0(tmp_path, corpus):
    zero = write_tfx(tmp_path / "sae", activation="relu", W_enc=torch.zeros(D, 16),
                     W_dec=torch.zeros(16, D), b_enc=torch.zeros(16), b_dec=torch.zeros(D),
                     site="blocks.0.resid_out")
    r = _eval(corpus, zero)
    assert abs(r.ce_loss_score) <= 1e-4 and abs(r.kl_score) <= 1e-4
    assert r.ce_replaced == pytest.approx(r.ce_ablation, abs=1e-6)
    assert r.l0 == 0 and r.dead == 16 and r.dense == 0
    assert abs(r.fvu - 1) > 1e-3  # zero reconstruction of a non-centred site: FVU > 1


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _next_token_losses(logits: np.ndarray, ids) -> np.ndarray:
    lp = _log_softmax(logits[:-1])
    return -lp[np.arange(len(ids) - 1), np.asarray(ids[1:], dtype=np.int64)]


def test_ce_clean_is_the_plain_models_mean_next_token_loss(tmp_path, corpus, model):
    r = _eval(corpus, _perfect(tmp_path / "sae", "blocks.0.resid_out"))
    losses = []
    for text in DOCS:
        traced = model.trace(text, select=["logits"])
        ids, logits = traced.input.ids, traced.tensors["logits"]
        losses.append(_next_token_losses(np.asarray(logits), ids))
    every = np.concatenate(losses)
    assert r.predicted == len(every) and r.tokens == sum(len(l) + 1 for l in losses)
    assert abs(r.ce_clean - every.mean()) <= 1e-5 * max(1.0, abs(every.mean()))


def _kl(p_logits, q_logits) -> np.ndarray:
    a, b = _log_softmax(p_logits[:-1]), _log_softmax(q_logits[:-1])
    return (np.exp(a) * (a - b)).sum(-1)


def test_every_number_against_numpy(tmp_path, corpus, model):
    """A random ReLU SAE at block 0's output (b_dec subtracted from its input): each
    score from numpy, the ablated run through the model's own --ablate and the replaced
    run with numpy's reconstruction put on the site."""
    site, F = "blocks.0.resid_out", 48
    g = np.random.default_rng(3)
    W_enc, W_dec = g.normal(0, 0.3, (D, F)), g.normal(0, 0.3, (F, D))
    b_enc, b_dec = g.normal(0, 0.1, F), g.normal(0, 0.1, D)
    t = lambda a: torch.tensor(a, dtype=torch.float32)
    write_saelens(tmp_path / "sae", activation="relu", W_enc=t(W_enc), W_dec=t(W_dec),
                  b_enc=t(b_enc), b_dec=t(b_dec), hook_name="blocks.0.hook_resid_post")
    r = _eval(corpus, tmp_path / "sae")
    f32 = lambda a: np.asarray(a, np.float32).astype(np.float64)
    W_enc, W_dec, b_enc, b_dec = map(f32, (W_enc, W_dec, b_enc, b_dec))
    xs, recons, acts, ce, kl = [], [], [], {"c": [], "a": [], "r": []}, {"a": [], "r": []}
    for text in DOCS:
        traced = model.trace(text, select=[site, "logits"])
        ids, tr = traced.input.ids, traced.tensors
        x = np.asarray(tr[site], np.float64)
        f = np.maximum((x - b_dec) @ W_enc + b_enc, 0)
        recon = f @ W_dec + b_dec
        xs.append(x), recons.append(recon), acts.append(f)
        clean = np.asarray(tr["logits"])
        ablated = np.asarray(model.trace(text, select=["logits"], ablate=[site])
                             .tensors["logits"])
        put = torch.tensor(recon, dtype=torch.float32)[None]
        with editing(model.module, [(site, lambda v: put.to(v.dtype))]):
            replaced = np.asarray(model.trace(text, select=["logits"]).tensors["logits"])
        if len(ids) < 2:
            continue
        for key, logits in (("c", clean), ("a", ablated), ("r", replaced)):
            ce[key].append(_next_token_losses(logits, ids))
        kl["a"].append(_kl(clean, ablated)), kl["r"].append(_kl(clean, replaced))
    x, recon, f = np.concatenate(xs), np.concatenate(recons), np.concatenate(acts)
    fvu = ((x - recon) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    cos = (x * recon).sum(-1) / np.linalg.norm(x, axis=-1) / np.linalg.norm(recon, axis=-1)
    c, a, rr = (np.concatenate(ce[k]).mean() for k in "car")
    kl_a, kl_r = np.concatenate(kl["a"]).mean(), np.concatenate(kl["r"]).mean()
    density = (f > 0).mean(0)
    close = lambda got, want: abs(got - want) <= 1e-4 * max(1.0, abs(want))
    assert 0.05 < fvu < 50 and 1 < (f > 0).sum(-1).mean() < F - 1  # a case with something in it
    assert close(r.fvu, fvu) and close(r.explained_variance, 1 - fvu)
    assert close(r.cosine, cos.mean()) and close(r.l0, (f > 0).sum(-1).mean())
    assert close(r.ce_clean, c) and close(r.ce_ablation, a) and close(r.ce_replaced, rr)
    assert close(r.ce_loss_score, (a - rr) / (a - c))
    assert close(r.kl_ablation, kl_a) and close(r.kl_replaced, kl_r)
    assert close(r.kl_score, (kl_a - kl_r) / kl_a)
    got = np.asarray(r.tensors["eval.density"])
    assert np.abs(got - density).max() <= 1e-6
    assert r.dead == int((density == 0).sum()) and r.dense == int((density > 0.1).sum())


def test_a_killed_run_resumes_to_the_same_result(tmp_path, corpus):
    """-o DIR: the sums after every chunk; a second run over a finished folder reads it
    back and gives the same numbers (and one of another SAE is refused)."""
    sae = _perfect(tmp_path / "sae", "blocks.0.resid_out")
    first = _eval(corpus, sae, output=tmp_path / "run").to_dict()
    again = _eval(corpus, sae, output=tmp_path / "run").to_dict()
    assert first["result"] == again["result"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["result"] == \
        first["result"]


def test_a_transcoder_is_judged_on_the_site_it_writes(tmp_path, corpus, model):
    """A SAELens transcoder reading block 0's MLP input and writing its output: FVU of the
    output, and the replaced run with the output site set to the reconstruction."""
    F = 48
    g = np.random.default_rng(5)
    w = {"W_enc": g.normal(0, 0.3, (D, F)), "W_dec": g.normal(0, 0.3, (F, D)),
         "b_enc": g.normal(0, 0.1, F), "b_dec": g.normal(0, 0.1, D)}
    folder = tmp_path / "tc"
    folder.mkdir()
    (folder / "cfg.json").write_text(json.dumps({
        "architecture": "transcoder", "d_in": D, "d_sae": F, "d_out": D,
        "apply_b_dec_to_input": False, "metadata": {"hook_name": "blocks.0.mlp.hook_in",
                                                    "hook_name_out": "blocks.0.hook_mlp_out"}}))
    from safetensors.torch import save_file

    save_file({k: torch.tensor(v, dtype=torch.float32) for k, v in w.items()},
              str(folder / "sae_weights.safetensors"))
    w = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in w.items()}
    r = _eval(corpus, folder)
    assert r.sae.site_out == "blocks.0.ffn.out"
    ys, recons, ce = [], [], []
    for text in DOCS:
        traced = model.trace(text, select=["blocks.0.ln2.out", "blocks.0.ffn.out"])
        x = np.asarray(traced.tensors["blocks.0.ln2.out"], np.float64)
        recon = np.maximum(x @ w["W_enc"] + w["b_enc"], 0) @ w["W_dec"] + w["b_dec"]
        ys.append(np.asarray(traced.tensors["blocks.0.ffn.out"], np.float64))
        recons.append(recon)
        put = torch.tensor(recon, dtype=torch.float32)[None]
        with editing(model.module, [("blocks.0.ffn.out", lambda v: put.to(v.dtype))]):
            logits = np.asarray(model.trace(text, select=["logits"]).tensors["logits"])
        if len(traced.input.ids) > 1:
            ce.append(_next_token_losses(logits, traced.input.ids))
    y, recon = np.concatenate(ys), np.concatenate(recons)
    fvu = ((y - recon) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()
    assert abs(r.fvu - fvu) <= 1e-4 * max(1.0, fvu)
    want = np.concatenate(ce).mean()
    assert abs(r.ce_replaced - want) <= 1e-4 * max(1.0, abs(want))


def test_encoding_a_few_rows_at_a_time_changes_nothing(tmp_path, corpus, monkeypatch):
    from tfx_cli.core.datasets import evaluate

    g = torch.Generator().manual_seed(2)
    sae = write_tfx(tmp_path / "sae", activation="topk", k=5, W_enc=torch.randn(D, 40, generator=g),
                    W_dec=torch.randn(40, D, generator=g), b_enc=torch.zeros(40),
                    b_dec=torch.zeros(D), site="blocks.0.resid_out")
    whole = _eval(corpus, sae)
    monkeypatch.setattr(evaluate, "ROWS", 7)
    parts = _eval(corpus, sae)
    assert (parts.l0, parts.dead, parts.dense, parts.tokens) == \
        (whole.l0, whole.dead, whole.dense, whole.tokens)
    assert np.array_equal(parts.tensors["eval.density"], whole.tensors["eval.density"])
    for name in ("fvu", "cosine", "ce_replaced", "ce_loss_score", "kl_replaced", "kl_score"):
        a, b = getattr(parts, name), getattr(whole, name)  # float32 products: last bits
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), name
