"""Values past what train-sae, top and collect can hold, through the Python API: each is
refused with the tfx_cli.errors class the CLI prints (or, where a value is legal, the run
finishes), never a ZeroDivisionError, OverflowError or TypeError from deep inside.
"""
import json

import numpy as np
import pytest

from collect_folders import hand_collected
from tfx_cli import api
from tfx_cli.errors import NonFiniteError, RangeError, UsageError

SMALL = dict(config="gpt124m", layers=1, d_model=16, heads=2, tokenizer="byte", context=32)
SITE = "blocks.0.resid_out"


@pytest.fixture
def acts(tmp_path):
    return hand_collected(tmp_path / "acts")


def train(acts, output, **options):
    return api.train_sae(acts, site=SITE, output=output,
                         **{"latents": 16, "k": 4, "steps": 3, "batch_size": 16, **options})


@pytest.mark.parametrize("every", [0, -1, 1.5, "x", [2]])
def test_checkpoint_every_is_read_like_every_count(acts, tmp_path, every):
    with pytest.raises(UsageError, match="checkpoint-every"):
        train(acts, tmp_path / "sae", checkpoint_every=every)
    assert not (tmp_path / "sae").exists()


def test_checkpoint_every_none_is_the_default(acts, tmp_path):
    assert train(acts, tmp_path / "sae", checkpoint_every=None).steps == 3


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1])
def test_a_seed_at_the_top_of_its_range_trains(acts, tmp_path, seed):
    result = train(acts, tmp_path / "sae", seed=seed)
    assert result.seed == seed and np.isfinite(result.fvu)


def test_dead_after_past_any_run_means_never(acts, tmp_path):
    assert train(acts, tmp_path / "sae", dead_after=10**30).dead_in_training == 0


@pytest.mark.parametrize("option", ["lr", "l1", "aux_coef", "expansion", "epochs",
                                    "holdout"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), np.float32("nan")])
def test_rates_and_fractions_are_finite(acts, tmp_path, option, value):
    extra = {"k": None, "steps": None} if option in ("l1", "epochs") else {}
    extra = {**extra, "latents": None} if option == "expansion" else extra
    with pytest.raises(UsageError, match="must be a finite number"):
        train(acts, tmp_path / "sae", **{option: value, **extra})


@pytest.mark.parametrize("options, phrase", [
    ({"latents": 10**30}, "give a smaller width"),
    ({"expansion": 1e30, "latents": None}, "give a smaller one"),
    ({"steps": 10**30}, "give fewer steps"),
    ({"epochs": 1e30, "steps": None}, "give fewer epochs")])
def test_sizes_past_any_sae_are_refused(acts, tmp_path, options, phrase):
    with pytest.raises(RangeError, match=phrase):
        train(acts, tmp_path / "sae", **options)


@pytest.mark.parametrize("steps", [1, 3])
def test_a_diverged_run_leaves_no_sae(acts, tmp_path, steps):
    """The loss (or, after the last step, the held-out FVU) turns NaN: the run names --lr
    and the folder it made is gone."""
    with pytest.raises(NonFiniteError, match="lower --lr"):
        train(acts, tmp_path / "sae", lr=1e30, steps=steps)
    assert not (tmp_path / "sae").exists()


def test_a_diverged_run_keeps_the_users_files(acts, tmp_path):
    (tmp_path / "sae").mkdir()
    (tmp_path / "sae" / "notes.txt").write_text("mine")
    with pytest.raises(NonFiniteError):
        train(acts, tmp_path / "sae", lr=1e30, force=True)
    assert sorted(p.name for p in (tmp_path / "sae").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("hook", [3, "x", [print]])
def test_hooks_are_functions(acts, tmp_path, hook):
    with pytest.raises(UsageError, match="takes a function"):
        train(acts, tmp_path / "sae", progress=hook)
    with pytest.raises(UsageError, match="takes a function"):
        api.route("hello", config="tiny-moe", notice=hook)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("you win or you die\nthe cat sat on the mat\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("unit_map", [3, "x", {"labels": [0]}])
def test_top_unit_map_is_a_map(corpus, unit_map):
    with pytest.raises(UsageError, match="unit_map must be"):
        api.top(corpus, site="blocks.0.ffn.act", unit_map=unit_map, **SMALL)


@pytest.mark.parametrize("options, phrase", [({"k": 10**30}, "examples per unit"),
                                             ({"around": 10**6}, "no window holds more")])
def test_top_sizes_are_bounded(corpus, options, phrase):
    with pytest.raises(UsageError, match=phrase):
        api.top(corpus, site="blocks.0.ffn.act", **SMALL, **options)


def test_collect_refuses_a_shard_size_past_any_corpus(corpus, tmp_path):
    with pytest.raises(UsageError, match="--shard-tokens"):
        api.collect(corpus, select=SITE, output=tmp_path / "a", shard_tokens=10**30, **SMALL)
    assert not (tmp_path / "a").exists()


def test_collect_a_site_shared_by_the_batch(corpus, tmp_path):
    """Learned positions are one (1, T, C) tensor for a batch of windows: every window's
    row at position p is that embedding's row p (a batch of two was an IndexError)."""
    api.collect(corpus, select="embed.pos", output=tmp_path / "a", batch_size=2, **SMALL)
    acts = api.activations(tmp_path / "a")
    rows, where = acts["embed.pos"], acts.tokens().column("position").to_numpy()
    assert len(rows) == len(where) == 40
    pos = api.load(**SMALL).trace("x" * 32, select="embed.pos").tensors["embed.pos"]
    np.testing.assert_allclose(rows, pos[where], rtol=1e-6, atol=1e-6 * np.abs(pos).max())


@pytest.mark.parametrize("model, norm", [(SMALL, "layernorm"),
                                         (dict(config="tiny-moe"), "rmsnorm")])
def test_norm_statistics_are_read_for_every_window(corpus, tmp_path, model, norm):
    """A norm's variance is computed lazily for one text when its rows are not recorded;
    over a corpus every window's is collected (it was a RuntimeError), and an RMSNorm,
    which takes no mean, offers none (its mean was a KeyError)."""
    api.collect(corpus, select="blocks.0.ln1.*", output=tmp_path / "a", batch_size=2,
                **model)
    acts = api.activations(tmp_path / "a")
    x = acts["blocks.0.ln1.in"].astype(np.float64)
    expected = x.var(axis=1) if norm == "layernorm" else (x ** 2).mean(axis=1)
    np.testing.assert_allclose(acts["blocks.0.ln1.var"][:, 0], expected, rtol=1e-5,
                               atol=1e-6 * expected.max())
    assert ("blocks.0.ln1.mean" in json.loads((tmp_path / "a" / "manifest.json").read_text(
        ))["options"]["select"]) == (norm == "layernorm")
    top = api.top(corpus, site="blocks.0.ln1.var", k=2, **model)
    best = max(expected)
    assert top.to_dict()["result"]["units"][0]["examples"][0]["value"] == pytest.approx(
        best, rel=1e-5)


def test_scan_leaves_out_a_metric_no_query_qualifies_for(tmp_path):
    """No byte repeats in 'abcdefg': duplicate_token and induction have no query. They
    are left out (they were all-NaN tensors in an exit-0 answer), their 0 counted."""
    path = tmp_path / "once.txt"
    path.write_text("abcdefg", encoding="utf-8")
    result = api.scan(path, **SMALL)
    assert result.queries["induction"] == result.queries["duplicate_token"] == 0
    assert result.metrics == ["entropy", "sink", "prev_token"]
    assert sorted(k for k in result.tensors if k.startswith("scan.") and
                  k.split(".")[1] in ("duplicate_token", "induction")) == []
    text = json.dumps(result.to_dict(), allow_nan=False)
    assert '"nan"' not in text and "NaN" not in text


def test_none_is_the_default_for_every_keyword(corpus, tmp_path, acts):
    """None means "not given" (the CLI's absent option) even where the default is not
    None: k=None was a TypeError, engine=None an AttributeError deep in the run."""
    top = api.top(corpus, site="blocks.0.ffn.act", k=None, around=None, engine=None,
                  field=None, batch_size=None, units="0", **SMALL)
    assert top.k == 10 and top.context == 8
    api.collect(corpus, select=SITE, output=tmp_path / "a", batch_size=None, **SMALL)
    sae = train(acts, tmp_path / "sae", lr=None, seed=None, holdout=None, skip_first=None,
                b_dec_init=None, aux_coef=None)
    assert sae.lr == 4e-4 and sae.holdout == 0.05 and sae.b_dec_init == "median"


@pytest.mark.parametrize("collect, error", [(None, "COLLECT_DIR is missing"),
                                            (3, "takes a path"), ([], "takes a path")])
def test_train_sae_reads_its_folder_like_any_path(tmp_path, collect, error):
    with pytest.raises(UsageError, match=error):
        api.train_sae(collect, site=SITE, output=tmp_path / "sae")
