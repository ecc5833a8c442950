"""train-sae and train-transcoder report the CE-loss score of what they wrote: the collect
folder's model rebuilt from its manifest, eval-sae's definition on the folder's last
windows. Each score against api.eval_sae run here on a corpus of the same documents
(each shorter than the window, so that a window is a document), with the same SAE, the
same layer's transcoder (as a SAELens transcoder folder) or the same set."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tfx_cli import api

TINY = dict(config="gpt2", layers=2, d_model=32, heads=4)
CTX = 64
TRAIN = dict(latents=64, batch_size=64, steps=40, lr=3e-3)
WORDS = ("the cat sat on a mat while dogs ran past quickly and birds sang loudly above "
         "them in trees near old stone walls").split()


def _docs(n: int = 40) -> list[str]:
    g = np.random.default_rng(0)
    return [" ".join(g.choice(WORDS, size=int(g.integers(6, 14)))) for _ in range(n)]


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("scores")
    corpus = root / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in _docs()))
    acts = api.collect(corpus, select=["blocks.*.ln2.out", "blocks.*.ffn.out",
                                       "blocks.0.resid_out"],
                       output=root / "acts", ctx=CTX, **TINY)
    assert acts.tokens > 300
    return corpus, root / "acts"


def _held_docs(acts_dir: Path, holdout: float, root: Path) -> tuple[Path, int]:
    """A corpus of the documents holding the folder's held-out (last) tokens, and their
    token count: read here from tokens.parquet, with the holdout's own rounding."""
    table = api.activations(acts_dir).tokens()
    doc = table.column("doc").to_numpy()
    held = max(1, int(round(len(doc) * holdout)))
    chosen = sorted(set(doc[len(doc) - held:].tolist()))
    texts = [json.loads(line)["text"] for line in
             (root / "docs.jsonl").read_text().splitlines()]
    path = root / f"held-{holdout}.jsonl"
    path.write_text("".join(json.dumps({"text": texts[i]}) + "\n" for i in chosen))
    return path, int(np.isin(doc, chosen).sum())


def _same(got, want):
    assert got is not None and want is not None
    assert abs(got - want) <= 1e-6 * max(1.0, abs(want)), (got, want)


def test_train_sae_scores_what_it_wrote_as_eval_sae_does(collected, tmp_path):
    corpus, acts = collected
    r = api.train_sae(acts, site="blocks.0.resid_out", output=tmp_path / "sae", k=8,
                      holdout=0.1, **TRAIN)
    held, tokens = _held_docs(acts, 0.1, corpus.parent)
    e = api.eval_sae(held, sae=tmp_path / "sae", ctx=CTX, **TINY)
    assert r.score_tokens == tokens == e.tokens
    _same(r.ce_loss_score, e.ce_loss_score)
    _same(r.ce_ablation_delta, e.ce_ablation - e.ce_clean)
    assert r.ce_loss_score_noisy == (e.ce_ablation - e.ce_clean < 0.05 * e.ce_clean)
    assert abs(e.ce_ablation - e.ce_clean) > 1e-3  # a score with a real denominator
    # the same command again (finished: nothing retrained) scores the same
    again = api.train_sae(acts, site="blocks.0.resid_out", output=tmp_path / "sae", k=8,
                          holdout=0.1, **TRAIN)
    assert again.ce_loss_score == r.ce_loss_score


def test_score_tokens_0_skips_the_score(collected, tmp_path):
    _, acts = collected
    r = api.train_sae(acts, site="blocks.0.resid_out", output=tmp_path / "sae", k=8,
                      score_tokens=0, **TRAIN)
    assert r.ce_loss_score is None and r.score_tokens is None
    assert "ce_loss_score" not in r.result_json() and "score_tokens" not in r.result_json()


def test_score_tokens_bounds_the_windows_scored(collected, tmp_path):
    _, acts = collected
    r = api.train_sae(acts, site="blocks.0.resid_out", output=tmp_path / "sae", k=8,
                      holdout=0.2, score_tokens=30, **TRAIN)
    assert 0 < r.score_tokens <= 30


def _saelens_transcoder(layer_file: Path, layer: int, folder: Path) -> Path:
    """circuit-tracer's layer file as a SAELens transcoder folder (W_enc stored (D, F))."""
    t = load_file(str(layer_file))
    folder.mkdir()
    D, F = t["W_enc"].shape[1], t["W_enc"].shape[0]
    (folder / "cfg.json").write_text(json.dumps({
        "architecture": "transcoder", "d_in": D, "d_sae": F, "d_out": D,
        "activation_fn": "relu", "apply_b_dec_to_input": False,
        "metadata": {"hook_name": f"blocks.{layer}.mlp.hook_in",
                     "hook_name_out": f"blocks.{layer}.hook_mlp_out"}}))
    save_file({"W_enc": t["W_enc"].T.contiguous(), "W_dec": t["W_dec"].contiguous(),
               "b_enc": t["b_enc"], "b_dec": t["b_dec"]},
              str(folder / "sae_weights.safetensors"))
    return folder


def test_train_transcoder_scores_each_layer_and_the_set(collected, tmp_path):
    corpus, acts = collected
    out = tmp_path / "tc"
    r = api.train_transcoder(acts, layer="all", output=out, l1=1e-3, holdout=0.1, **TRAIN)
    held, tokens = _held_docs(acts, 0.1, corpus.parent)
    whole = api.eval_sae(held, transcoders=out, ctx=CTX, **TINY)
    assert r.config is not None and r.score_tokens == tokens == whole.tokens
    _same(r.ce_loss_score, whole.ce_loss_score)
    scores = []
    for row in r.layers:
        one = _saelens_transcoder(out / f"layer_{row.layer}.safetensors", row.layer,
                                  tmp_path / f"saelens-{row.layer}")
        e = api.eval_sae(held, sae=one, ctx=CTX, **TINY)
        _same(row.ce_loss_score, e.ce_loss_score)
        # the score's denominator, and the flag it sets, as eval-sae's numbers say
        _same(row.ce_ablation_delta, e.ce_ablation - e.ce_clean)
        assert row.ce_loss_score_noisy == (e.ce_ablation - e.ce_clean < 0.05 * e.ce_clean)
        assert "ce_ablation_delta" in r.to_dict()["result"]["layers"][row.layer]
        scores.append(row.ce_loss_score)
    # one MLP replaced is not the whole set replaced
    assert all(abs(s - r.ce_loss_score) > 1e-6 for s in scores)


def test_the_score_leaves_the_written_files_as_they_were(collected, tmp_path):
    """The same bytes with and without the score."""
    _, acts = collected
    a = api.train_transcoder(acts, layer=1, output=tmp_path / "a", k=4, **TRAIN)
    b = api.train_transcoder(acts, layer=1, output=tmp_path / "b", k=4, score_tokens=0,
                             **TRAIN)
    assert a.layers[0].ce_loss_score is not None and b.layers[0].ce_loss_score is None
    assert a.ce_loss_score is None  # layer 0 has no file: no set yet
    name = "layer_1.safetensors"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    state = lambda d: json.loads((tmp_path / d / "state/layer_1/train-state.json").read_text())
    assert "ce_loss_score" not in state("a")["result"]  # the state records training alone
    assert {**state("a")["result"], "file": ""} == {**state("b")["result"], "file": ""}


def test_a_folder_that_names_no_buildable_model_trains_without_the_score(tmp_path):
    """By default the score is left out with the reason; asked for, refused before any
    training (nothing written)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from collect_folders import SITE, hand_collected

    from tfx_cli.errors import UsageError

    acts = hand_collected(tmp_path / "acts")
    r = api.train_sae(acts, site=SITE, output=tmp_path / "sae", k=2, latents=8,
                      batch_size=16, steps=3)
    assert r.ce_loss_score is None and "tokens.parquet" in r.score_note
    with pytest.raises(UsageError, match="tokens.parquet"):
        api.train_sae(acts, site=SITE, output=tmp_path / "other", k=2, latents=8,
                      batch_size=16, steps=3, score_tokens=100)
    assert not (tmp_path / "other").exists()


def test_an_older_manifest_rebuilds_its_model_from_the_config_it_records(collected, tmp_path):
    """A collect folder written before the manifest named its model's options: the preset
    and the sizes it records rebuild it, and the score is the same."""
    import shutil

    corpus, acts = collected
    old = tmp_path / "old"
    shutil.copytree(acts, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["model_spec"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    kw = dict(site="blocks.0.resid_out", k=8, holdout=0.1, **TRAIN)
    a = api.train_sae(acts, output=tmp_path / "a", **kw)
    b = api.train_sae(old, output=tmp_path / "b", **kw)
    assert b.score_note is None and b.ce_loss_score == a.ce_loss_score
    # a manifest whose options build another model is refused by name when asked
    manifest["model"]["d_ff"] = 64
    (old / "manifest.json").write_text(json.dumps(manifest))
    from tfx_cli.errors import UsageError

    with pytest.raises(UsageError, match="d_ff"):
        api.train_sae(old, output=tmp_path / "c", score_tokens=100, **kw)


def test_a_folder_collected_with_another_tokenizer_is_scored_with_it(tmp_path):
    words = dict(TINY, tokenizer="word")
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in _docs(30)))
    api.collect(corpus, select=["blocks.0.resid_out"], output=tmp_path / "acts", ctx=CTX,
                **words)
    r = api.train_sae(tmp_path / "acts", site="blocks.0.resid_out", output=tmp_path / "sae",
                      k=8, holdout=0.1, **TRAIN)
    held, tokens = _held_docs(tmp_path / "acts", 0.1, tmp_path)
    e = api.eval_sae(held, sae=tmp_path / "sae", ctx=CTX, **words)
    assert r.score_tokens == tokens
    _same(r.ce_loss_score, e.ce_loss_score)


def test_a_score_over_a_small_ablation_is_flagged_noisy():
    from tfx_cli.core.datasets.train_score import NOISY_BELOW, ablation_delta

    assert NOISY_BELOW == 0.05
    # SmolLM2's layer 9 on 446 positions: zeroing its MLP adds 0.042 to a clean 2.410
    delta, noisy = ablation_delta(2.410, 2.452)
    assert abs(delta - 0.042) < 1e-9 and noisy is True
    assert ablation_delta(2.410, 2.714) == (2.714 - 2.410, False)  # its layer 1: 0.30
    assert ablation_delta(None, 2.0) == (None, None)


def test_the_table_marks_a_noisy_score_and_says_why(collected, tmp_path):
    from rich.console import Console

    from tfx_cli.render.views import ViewOptions, render

    _, acts = collected
    r = api.train_transcoder(acts, layer="all", output=tmp_path / "tc", l1=1e-3, **TRAIN)
    r.layers[1].ce_loss_score_noisy, r.layers[1].ce_ablation_delta = True, 0.0123
    r.layers[0].ce_loss_score_noisy = False
    console = Console(record=True, width=200)
    render(r, console, ViewOptions(precision=3))
    text = console.export_text()
    assert "*" in next(line for line in text.splitlines() if line.strip().startswith("1 "))
    assert "* layer 1: noisy: zeroing the MLP adds under 5% of the clean loss (+0.0123" \
        in text


def test_train_transcoders_default_score_tokens_shrink_with_the_layers(collected, tmp_path,
                                                                      monkeypatch):
    """4096 tokens for one layer, shared out among more (at least 512): the scoring
    costs about the same whatever the layer count. Here scaled down to the fixture."""
    from tfx_cli.core.datasets import train_score

    assert [train_score.default_score_tokens(n) for n in (1, 2, 4, 8, 30)] == \
        [4096, 2048, 1024, 512, 512]
    _, acts = collected
    monkeypatch.setattr(train_score, "DEFAULT_SCORE_TOKENS", 120)
    monkeypatch.setattr(train_score, "LEAST_LAYER_TOKENS", 10)
    kw = dict(l1=1e-3, holdout=0.5, **TRAIN)  # held-out windows enough for 120 tokens
    both = api.train_transcoder(acts, layer="all", output=tmp_path / "tc", **kw)
    one = api.train_transcoder(acts, layer=0, output=tmp_path / "one", **kw)
    assert 0 < both.score_tokens <= 60 < one.score_tokens <= 120
    asked = api.train_transcoder(acts, layer="all", output=tmp_path / "tc", score_tokens=120,
                                 **kw)
    assert asked.score_tokens > 60  # given, --score-tokens is taken as it is
