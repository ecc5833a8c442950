"""tfx eval-sae --transcoders: a whole transcoder set judged with every MLP replaced at once,
on a tiny random model. The replaced run against a reference made here with plain torch
forward hooks on the model's modules (each MLP's output swapped for its transcoder's
reconstruction of the replaced run's own ln2 output); an all-zero set scores 0; CE_clean is
the plain model's mean next-token loss; the per-layer numbers against numpy on the clean
run's MLP inputs and outputs; the set's pooled FVU and mean L0 from the layers'."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tfx_cli import api

TINY = dict(config="gpt2", layers=2, d_model=32, heads=4)
TINY_ARGS = ["-c", "gpt2", "--layers", "2", "--d-model", "32", "--heads", "4"]
D, F, L = 32, 48, 2
DOCS = ["The quick brown fox jumps over the lazy dog while the cat sleeps.",
        "import numpy as np\nx = np.arange(10)\nprint(x.sum())",
        "Paris is the capital of France, and Rome is the capital of Italy.",
        "a"]  # one token: no next token, still read for the layers' numbers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("evalset") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    return path


@pytest.fixture(scope="module")
def model():
    return api.load(**TINY)


def write_set(folder: Path, layers: list[dict], input_hook="mlp.hook_in") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, tensors in enumerate(layers):
        save_file({k: v.contiguous() for k, v in tensors.items()},
                  str(folder / f"layer_{i}.safetensors"))
        names.append(f"  - layer_{i}.safetensors")
    (folder / "config.yaml").write_text(
        "model_kind: transcoder_set\n"
        f"feature_input_hook: {input_hook}\nfeature_output_hook: hook_mlp_out\n"
        "transcoders:\n" + "\n".join(names) + "\n")
    return folder


def random_layer(seed: int, skip: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    t = {"W_enc": torch.randn(F, D, generator=g) * 0.4,
         "W_dec": torch.randn(F, D, generator=g) * 0.3,
         "b_enc": torch.randn(F, generator=g) * 0.1 - 0.2,
         "b_dec": torch.randn(D, generator=g) * 0.1}
    if skip:
        t["W_skip"] = torch.randn(D, D, generator=g) * 0.1
    return t


def _eval(corpus, folder, **kw):
    return api.eval_sae(corpus, transcoders=folder, ctx=64, batch_size=2, **TINY, **kw)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _losses(logits: np.ndarray, ids) -> np.ndarray:
    lp = _log_softmax(logits[:-1])
    return -lp[np.arange(len(ids) - 1), np.asarray(ids[1:], dtype=np.int64)]


def _kl(p, q) -> np.ndarray:
    a, b = _log_softmax(p[:-1]), _log_softmax(q[:-1])
    return (np.exp(a) * (a - b)).sum(-1)


def _transcode(t: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    f = torch.relu(x @ t["W_enc"].T + t["b_enc"])
    y = f @ t["W_dec"] + t["b_dec"]
    return (y + x @ t["W_skip"].T if "W_skip" in t else y), f


def _replaced_logits(model, text: str, layers: list[dict], inputs=None) -> np.ndarray:
    """Plain torch: a forward hook on each block's ln2 keeps its output, one on its MLP
    returns the transcoder's reconstruction of it instead of the MLP's output (of
    `inputs[i]` instead, where given: the clean run's, errors not compounding)."""
    seen, handles = {}, []
    if inputs is not None:
        seen = {i: torch.tensor(np.array(x))[None] for i, x in inputs.items()}
    for i, block in enumerate(model.module.blocks):
        if inputs is None:
            handles.append(block.ln2.register_forward_hook(
                lambda mod, args, out, i=i: seen.__setitem__(i, out)))
        handles.append(block.ffn.register_forward_hook(
            lambda mod, args, out, i=i: _transcode(layers[i], seen[i].float())[0].to(out.dtype)))
    try:
        return np.asarray(model.trace(text, select=["logits"]).tensors["logits"])
    finally:
        for h in handles:
            h.remove()


def test_the_replaced_run_is_every_mlp_swapped_for_its_transcoder(tmp_path, corpus, model):
    layers = [random_layer(1, skip=True), random_layer(2)]
    r = _eval(corpus, write_set(tmp_path / "set", layers))
    ce = {"c": [], "a": [], "r": [], "f": []}
    kl = {"a": [], "r": []}
    per = {i: {"x": [], "y": [], "f": []} for i in range(L)}
    for text in DOCS:
        sites = [f"blocks.{i}.{s}" for i in range(L) for s in ("ln2.out", "ffn.out")]
        traced = model.trace(text, select=["logits", *sites])
        ids, tr = traced.input.ids, traced.tensors
        for i in range(L):
            x = torch.tensor(np.asarray(tr[f"blocks.{i}.ln2.out"]), dtype=torch.float32)
            recon, f = _transcode(layers[i], x)
            per[i]["x"].append(recon.double().numpy())
            per[i]["y"].append(np.asarray(tr[f"blocks.{i}.ffn.out"], np.float64))
            per[i]["f"].append(f.numpy())
        clean = np.asarray(tr["logits"])
        ablated = np.asarray(model.trace(text, select=["logits"], ablate=[
            f"blocks.{i}.ffn.out" for i in range(L)]).tensors["logits"])
        replaced = _replaced_logits(model, text, layers)
        frozen = _replaced_logits(model, text, layers, {
            i: np.asarray(tr[f"blocks.{i}.ln2.out"]) for i in range(L)})
        if len(ids) < 2:
            continue
        for key, logits in (("c", clean), ("a", ablated), ("r", replaced), ("f", frozen)):
            ce[key].append(_losses(logits, ids))
        kl["a"].append(_kl(clean, ablated)), kl["r"].append(_kl(clean, replaced))
    c, a, rr = (np.concatenate(ce[k]).mean() for k in "car")
    kl_a, kl_r = (np.concatenate(kl[k]).mean() for k in "ar")
    close = lambda got, want, tol=1e-5: abs(got - want) <= tol * max(1.0, abs(want))
    # a case with something in it: replacing moves the loss, less than zeroing does not
    assert abs(rr - c) > 1e-3 and abs(a - c) > 1e-3
    # and the errors compound: read from the clean run, the later layer gives another loss
    assert abs(np.concatenate(ce["f"]).mean() - rr) > 1e-3
    assert close(r.ce_clean, c) and close(r.ce_ablation, a) and close(r.ce_replaced, rr)
    assert close(r.ce_loss_score, (a - rr) / (a - c), 1e-4)
    assert close(r.kl_ablation, kl_a, 1e-4) and close(r.kl_replaced, kl_r, 1e-4)
    assert close(r.kl_score, (kl_a - kl_r) / kl_a, 1e-4)
    rss = spread = 0.0
    for i, row in enumerate(r.layers):
        recon, y, f = (np.concatenate(per[i][k]) for k in "xyf")
        layer_rss, layer_spread = ((y - recon) ** 2).sum(), ((y - y.mean(0)) ** 2).sum()
        rss, spread = rss + layer_rss, spread + layer_spread
        assert row.layer == i
        assert close(row.fvu, layer_rss / layer_spread, 1e-4)
        assert close(row.l0, (f > 0).sum(-1).mean(), 1e-6)
        cos = (y * recon).sum(-1) / np.linalg.norm(y, axis=-1) / np.linalg.norm(recon, axis=-1)
        assert close(row.cosine, cos.mean(), 1e-4)
        density = (f > 0).mean(0)
        assert np.abs(np.asarray(r.tensors["eval.density"])[i] - density).max() <= 1e-6
        assert row.dead == int((density == 0).sum()) and row.dense == int((density > 0.1).sum())
        assert 1 < row.l0 < F - 1
    assert close(r.fvu, rss / spread, 1e-4)
    assert close(r.l0, np.mean([row.l0 for row in r.layers]), 1e-9)
    assert np.asarray(r.tensors["eval.density"]).shape == (L, F)
    assert r.transcoders.n_layers == L and r.transcoders.skip and r.sae is None


def test_an_all_zero_set_scores_ce_loss_score_0(tmp_path, corpus):
    zero = {"W_enc": torch.zeros(F, D), "W_dec": torch.zeros(F, D), "b_enc": torch.zeros(F),
            "b_dec": torch.zeros(D)}
    r = _eval(corpus, write_set(tmp_path / "zero", [zero, zero]))
    assert r.ce_replaced == pytest.approx(r.ce_ablation, rel=1e-6)
    assert abs(r.ce_loss_score) <= 1e-5 and abs(r.kl_score) <= 1e-5
    assert r.l0 == 0 and r.dead == L * F and r.dense == 0
    assert abs(r.ce_ablation - r.ce_clean) > 1e-3  # the score's denominator is not noise


def test_ce_clean_is_the_plain_models_mean_next_token_loss(tmp_path, corpus, model):
    r = _eval(corpus, write_set(tmp_path / "set", [random_layer(5), random_layer(6)]))
    every = []
    for text in DOCS:
        traced = model.trace(text, select=["logits"])
        every.append(_losses(np.asarray(traced.tensors["logits"]), traced.input.ids))
    every = np.concatenate(every)
    assert r.predicted == len(every)
    assert abs(r.ce_clean - every.mean()) <= 1e-5 * max(1.0, abs(every.mean()))


def test_the_terminal_shows_each_layer_and_the_set_scores(tmp_path, corpus):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    folder = write_set(tmp_path / "set", [random_layer(7), random_layer(8)])
    got = CliRunner().invoke(app, ["eval-sae", str(corpus), "--transcoders", str(folder),
                                   "--ctx", "64", "-c", "gpt2", "--layers", "2",
                                   "--d-model", "32", "--heads", "4"])
    assert got.exit_code == 0, got.output
    assert "per layer" in got.output and "CE-loss score" in got.output
    assert "every MLP replaced" in got.output


def test_a_cross_layer_transcoder_writes_every_later_layer(tmp_path, corpus, model):
    """circuit-tracer's CLT layout: layer 1's MLP output is rebuilt from layer 0's and
    layer 1's features (each from its own input in the replaced run), plus b_dec_1."""
    folder = tmp_path / "clt"
    folder.mkdir()
    g = torch.Generator().manual_seed(11)
    enc, dec = [], []
    for i in range(L):
        enc.append({f"W_enc_{i}": torch.randn(F, D, generator=g) * 0.4,
                    f"b_enc_{i}": torch.randn(F, generator=g) * 0.1 - 0.2,
                    f"b_dec_{i}": torch.randn(D, generator=g) * 0.1})
        dec.append({f"W_dec_{i}": torch.randn(F, L - i, D, generator=g) * 0.2})
        save_file(enc[i], str(folder / f"W_enc_{i}.safetensors"))
        save_file(dec[i], str(folder / f"W_dec_{i}.safetensors"))
    (folder / "config.yaml").write_text(
        "model_kind: cross_layer_transcoder\nfeature_input_hook: mlp.hook_in\n"
        "feature_output_hook: hook_mlp_out\n")
    r = _eval(corpus, folder)
    seen, handles = {}, []

    def rebuilt(i):
        out = enc[i][f"b_dec_{i}"].clone()
        for k in range(i + 1):
            f = torch.relu(seen[k] @ enc[k][f"W_enc_{k}"].T + enc[k][f"b_enc_{k}"])
            out = out + f @ dec[k][f"W_dec_{k}"][:, i - k]
        return out

    for i, block in enumerate(model.module.blocks):
        handles.append(block.ln2.register_forward_hook(
            lambda mod, args, out, i=i: seen.__setitem__(i, out.float())))
        handles.append(block.ffn.register_forward_hook(
            lambda mod, args, out, i=i: rebuilt(i).to(out.dtype)))
    losses = []
    try:
        for text in DOCS:
            traced = model.trace(text, select=["logits"])
            if len(traced.input.ids) > 1:
                losses.append(_losses(np.asarray(traced.tensors["logits"]), traced.input.ids))
    finally:
        for h in handles:
            h.remove()
    want = np.concatenate(losses).mean()
    assert abs(r.ce_replaced - want) <= 1e-5 * max(1.0, abs(want))
    assert abs(r.ce_replaced - r.ce_clean) > 1e-3 and r.transcoders.kind == "cross_layer_transcoder"


def test_a_run_kept_with_o_resumes_to_the_same_numbers(tmp_path, corpus):
    folder = write_set(tmp_path / "set", [random_layer(21), random_layer(22)])
    first = _eval(corpus, folder, output=tmp_path / "run")
    again = _eval(corpus, folder, output=tmp_path / "run")
    plain = _eval(corpus, folder)
    for r in (again, plain):
        assert r.ce_loss_score == first.ce_loss_score and r.fvu == first.fvu
        assert [row.fvu for row in r.layers] == [row.fvu for row in first.layers]
    assert (tmp_path / "run" / "result.json").is_file()


def test_a_score_over_a_tiny_denominator_is_flagged_noisy(tmp_path):
    """eval-sae on a two-token corpus: the score's denominator (what zeroing adds to the
    loss) is one position's, so the score is flagged noisy, in the result and on the
    terminal, as train-transcoder flags its own; the flag is that denominator under 5% of
    the clean loss."""
    from typer.testing import CliRunner

    from tfx_cli.cli import app
    from tfx_cli.core.datasets.evaluate import NOISY_BELOW

    tiny = tmp_path / "two.jsonl"
    tiny.write_text(json.dumps({"text": "hello world"}) + "\n")
    flags = []
    for seed in range(1, 12):
        folder = write_set(tmp_path / f"set{seed}", [random_layer(seed), random_layer(seed + 50)])
        r = _eval(tiny, folder)
        assert r.ce_ablation_delta == pytest.approx(r.ce_ablation - r.ce_clean, abs=1e-12)
        assert r.ce_loss_score_noisy == (r.ce_ablation_delta < NOISY_BELOW * abs(r.ce_clean))
        flags.append(r.ce_loss_score_noisy)
        if r.ce_loss_score_noisy:
            got = CliRunner().invoke(app, ["eval-sae", str(tiny), "--transcoders", str(folder),
                                           "--ctx", "64", *TINY_ARGS])
            assert got.exit_code == 0, got.output
            assert "noisy: zeroing every MLP adds under 5% of the clean loss" in \
                " ".join(got.output.split())
            break
    assert any(flags)
