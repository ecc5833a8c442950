"""Decoding: the cache changes nothing but speed, sampling stays inside its filters,
greedy is seed 004's generate_text_simple, and the logit lens ends at the real output."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_cli.core.config import ModelConfig
from tfx_cli.core.analysis.sampling import Sampling, check_sampling, choose, filter_logits, top_k_mask, top_p_mask
from tfx_cli.core.analysis.decode import TextTracker, decode
from tfx_cli.core.model import build_model
from tfx_cli import api
from tfx_cli.errors import ConfigError, RangeError, UsageError

SMALL = ModelConfig(vocab_size=61, context_length=12, d_model=32, n_heads=4, n_layers=2)
LLAMA = ModelConfig(vocab_size=61, context_length=12, d_model=32, n_heads=4, n_kv_heads=2,
                    n_layers=2, d_ff=48, norm="rmsnorm", activation="swiglu",
                    positional="rope", proj_bias=False, tie_embeddings=True)
SPEC = dict(config="gpt124m", layers=2, d_model=64, heads=4, seed=5)


def simple_greedy(model, ids, new, ctx):
    """Seed 004's generate_text_simple, written out: crop, forward, argmax, append."""
    idx = torch.tensor([ids])
    for _ in range(new):
        with torch.no_grad():
            logits = model(idx[:, -ctx:])[:, -1, :]
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)
    return idx[0].tolist()


# -- the cache -----------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [SMALL, LLAMA], ids=["gpt", "llama"])
def test_cache_gives_same_tokens_and_logits_past_the_context(cfg):
    model = build_model(cfg, seed=3)
    prompt = [1, 7, 30, 2]  # 4 + 14 new tokens crosses the context length of 12
    runs = [decode(model, prompt, max_new_tokens=14, use_cache=c, keep_logits=True)
            for c in (True, False)]
    cached, plain = runs
    assert cached.ids == plain.ids
    for a, b in zip(cached.logits, plain.logits):
        assert (a - b).abs().max().item() < 1e-5
    assert [s.fed for s in cached.steps[:3]] == [4, 1, 1]  # prompt once, then one token
    assert cached.steps[-1].fed == cfg.context_length  # cropped: the window is recomputed
    assert [s.fed for s in plain.steps[:2]] == [4, 5]


def test_greedy_is_seed_004_generate_text_simple():
    model = build_model(SMALL, seed=11)
    prompt = [5, 17, 3]
    out = decode(model, prompt, max_new_tokens=15)
    assert out.ids == simple_greedy(model, prompt, 15, SMALL.context_length)


def test_sampling_with_cache_matches_without():
    model = build_model(SMALL, seed=2)
    s = Sampling(temperature=1.3, top_k=20, top_p=0.95)
    ids = [decode(model, [4, 9], max_new_tokens=12, sampling=s, use_cache=c,
                  generator=torch.Generator().manual_seed(8)).ids for c in (True, False)]
    assert ids[0] == ids[1]


def test_non_causal_model_recomputes_every_step():
    cfg = ModelConfig(vocab_size=20, context_length=8, d_model=16, n_heads=2, n_layers=1,
                      causal=False)
    model = build_model(cfg, seed=1)
    out = decode(model, [1, 2], max_new_tokens=3, use_cache=True)
    assert not out.cache_used and [s.fed for s in out.steps] == [2, 3, 4]


def test_select_records_each_step():
    model = build_model(SMALL, seed=3)
    out = decode(model, [1, 2, 3], max_new_tokens=3, select=["blocks.0.attn.pattern",
                                                             "logits"])
    assert out.trace.shape("step.0.blocks.0.attn.pattern") == (4, 3, 3)
    assert out.trace.shape("step.2.blocks.0.attn.pattern") == (4, 1, 5)  # one query, 5 keys
    assert out.trace.shape("step.1.logits") == (1, 61)
    rows = out.trace.array("step.2.blocks.0.attn.pattern").sum(-1)
    assert np.allclose(rows, 1, atol=1e-5)


# -- sampling ------------------------------------------------------------------------
def test_greedy_ignores_the_generator():
    model = build_model(SMALL, seed=4)
    a = decode(model, [3], max_new_tokens=6, generator=torch.Generator().manual_seed(1))
    b = decode(model, [3], max_new_tokens=6, generator=torch.Generator().manual_seed(2))
    assert a.ids == b.ids


def test_same_seed_same_sample():
    model = build_model(SMALL, seed=4)
    s = Sampling(temperature=2.0)
    runs = [decode(model, [3], max_new_tokens=10, sampling=s,
                   generator=torch.Generator().manual_seed(g)).ids for g in (9, 9, 10)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-30])
def test_tiny_temperature_is_the_argmax_not_nan(temperature):
    # logits / 1e-320 overflowed to +inf and softmax gave NaN (found by the CLI fuzzer)
    logits = torch.tensor([1.0, 3.0, 2.0, -4.0])
    probs, kept = filter_logits(logits, Sampling(temperature=temperature))
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0] and kept.all()
    assert choose(logits, Sampling(temperature=temperature), torch.Generator())[0] == 1


def test_top_k_keeps_ties():
    logits = torch.tensor([1.0, 3.0, 2.0, 3.0, 2.0, 0.0])
    assert top_k_mask(logits, 2).tolist() == [False, True, False, True, False, False]
    assert top_k_mask(logits, 3).tolist() == [False, True, True, True, True, False]


def test_top_p_is_the_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    assert top_p_mask(probs, 0.5).tolist() == [True, False, False, False]
    assert top_p_mask(probs, 0.6).tolist() == [True, True, False, False]
    assert top_p_mask(probs, 0.95).tolist() == [True, True, True, False]
    assert top_p_mask(probs, 1.0).all()


logit_rows = st.lists(st.one_of(st.floats(-30, 30, width=32), st.sampled_from([0.0, 1.0, 5.0])),
                      min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(logits=logit_rows, top_k=st.one_of(st.none(), st.integers(1, 40)),
       top_p=st.one_of(st.none(), st.floats(0.01, 1.0)),
       temperature=st.one_of(st.just(0.0), st.floats(0.05, 5.0)), seed=st.integers(0, 2**31))
def test_sampling_never_leaves_the_allowed_set(logits, top_k, top_p, temperature, seed):
    row = torch.tensor(logits)
    n = len(logits)
    top_k = None if top_k is None else min(top_k, n)
    s = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    probs, kept = filter_logits(row, s)
    array = np.asarray(logits, dtype=np.float64)
    # top-k, from its definition: at least as large as the k-th largest logit
    if top_k is not None:
        kth = np.sort(array)[::-1][top_k - 1]
        assert not (kept.numpy() & (array < kth)).any()
    # top-p: upward closed in probability, holds at least p, and is no bigger than needed
    judge = torch.softmax(torch.where(top_k_mask(row.double(), top_k), row.double(),
                                      torch.tensor(-math.inf, dtype=torch.float64))
                          / (temperature or 1.0), -1).numpy()
    k = kept.numpy()
    assert k.any()
    assert judge[k].min() >= judge[~k].max(initial=-1.0)
    if top_p is not None:
        assert judge[k].sum() >= min(top_p, judge.sum()) - 1e-9
        smallest = judge[k].min()
        assert judge[k & (judge > smallest)].sum() < top_p + 1e-9
    # the draw itself, repeated with the same seed
    picks = [choose(row, s, torch.Generator().manual_seed(seed))[0] for _ in range(2)]
    assert picks[0] == picks[1] and k[picks[0]]
    if temperature == 0:
        assert picks[0] == int(np.argmax(array))
    else:
        assert abs(float(probs.sum()) - 1) < 1e-9 and (probs.numpy()[~k] == 0).all()


@pytest.mark.parametrize("s, vocab, error", [
    (Sampling(temperature=-0.5), 10, UsageError),
    (Sampling(temperature=math.nan), 10, UsageError),
    (Sampling(top_p=0.0), 10, UsageError),
    (Sampling(top_p=1.5), 10, UsageError),
    (Sampling(top_k=0), 10, UsageError),
    (Sampling(top_k=11), 10, RangeError),
])
def test_bad_sampling_settings(s, vocab, error):
    with pytest.raises(error):
        check_sampling(s, vocab)


# -- streaming text ------------------------------------------------------------------
def test_text_tracker_holds_partial_characters_and_cuts_at_stop():
    pieces = {0: b"Hi", 1: b" th", 2: b"ere", 3: b"\xe2\x82", 4: b"\xac", 5: b" END", 6: b"!"}

    def dec(ids):
        return b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")

    tracker = TextTracker(dec, 1, stops=["END"])
    shown = [tracker.update([0, *ids]) for ids in ([1], [1, 2], [1, 2, 3], [1, 2, 3, 4])]
    assert shown == [" th", "ere", "", "€"]
    assert not tracker.stopped
    assert tracker.update([0, 1, 2, 3, 4, 5]) == " "
    assert tracker.stopped and tracker.text == " there€ "


def test_text_tracker_holds_a_possible_stop_prefix():
    tracker = TextTracker(lambda ids: "".join("ab"[i] for i in ids), 0, stops=["bb"])
    assert tracker.update([0, 1]) == "a"  # "b" might start "bb"
    assert tracker.update([0, 1, 0]) == "ba"
    assert tracker.flush() == ""


# -- stages --------------------------------------------------------------------------
def test_generate_stage_result():
    r = api.generate("Hello, I am", max_new_tokens=4, candidates=3, **SPEC)
    assert r.prompt_ids == [15496, 11, 314, 716]
    assert len(r.ids) == 8 and r.ids[:4] == r.prompt_ids
    assert r.text == "Hello, I am" + r.completion
    assert [s.position for s in r.steps] == [4, 5, 6, 7]
    assert all(len(s.candidates) == 3 for s in r.steps)
    assert r.steps[0].candidates[0].id == r.steps[0].id  # greedy = top 1


def test_generate_needs_tokens_and_steps():
    with pytest.raises(UsageError):
        api.generate("hi", max_new_tokens=0, **SPEC)
    with pytest.raises(ConfigError):
        api.generate("hi", max_new_tokens=1, config="minilm")


def test_next_token_filters():
    res = api.next("Hello, I am", temperature=0.7, top_k=3, candidates=5, **SPEC)
    assert [c.kept for c in res.candidates] == [True, True, True, False, False]
    assert res.kept_tokens == 3
    assert abs(sum(c.final_prob for c in res.candidates) - 1) < 1e-9
    probs = [c.prob for c in res.candidates]
    assert probs == sorted(probs, reverse=True)


@pytest.mark.parametrize("config", ["gpt124m", "toy"])
def test_lens_last_row_is_the_output(config):
    res = api.lens("When you play game of thrones", config=config, layers=2, d_model=32,
                   heads=4)
    assert res.layers == ["embed", "0", "1"]
    assert res.top_ids[-1] == res.output_top_ids
    T = len(res.top_ids[0])
    assert all(len(row) == T - 1 for row in res.next_token_probs)
    assert all(0 <= p <= 1 for row in res.top_probs for p in row)


@pytest.mark.slow
def test_book_ids_through_the_stage():
    res = api.generate("Hello, I am", max_new_tokens=6, config="gpt124m", seed=123)
    assert res.ids == [15496, 11, 314, 716, 27018, 24086, 47843, 30961, 42348, 7267]


# -- against transformers --------------------------------------------------------------
def test_greedy_matches_hf_generate_step_by_step(tmp_path):
    from checkpoint_makers import gpt2_folder

    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    hf = gpt2_folder(tmp_path / "tiny-gpt2", n_positions=32)
    cfg = checkpoint_config(str(tmp_path / "tiny-gpt2"))
    model = load_weights(str(tmp_path / "tiny-gpt2"), cfg, use_cache=False)
    prompt = [5, 17, 99, 3]
    ours = decode(model, prompt, max_new_tokens=12, keep_logits=True)
    out = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                      max_new_tokens=12, min_new_tokens=12, do_sample=False, use_cache=True,
                      pad_token_id=0, eos_token_id=None, output_logits=True,
                      return_dict_in_generate=True)
    assert ours.ids == out.sequences[0].tolist()
    for a, b in zip(ours.logits, out.logits):
        assert (a - b[0]).abs().max().item() < 1e-4


def test_long_generation_changes_the_layout_not_the_tokens():
    from tfx_cli.core.analysis.decode import LONG_GENERATION

    cfg = ModelConfig(vocab_size=61, context_length=64, d_model=32, n_heads=4, n_layers=2)
    model = build_model(cfg, seed=4)
    prompt = [3, 9, 27]
    with torch.inference_mode():  # as the benchmarks call it
        plain = decode(model, prompt, max_new_tokens=LONG_GENERATION, use_cache=False,
                       keep_logits=True)
        assert model.lm_head.weight.is_contiguous()  # uncached: no layout change
        cached = decode(model, prompt, max_new_tokens=LONG_GENERATION, keep_logits=True)
    assert not model.lm_head.weight.is_contiguous()
    assert not model.lm_head.weight.is_inference()
    assert cached.ids == plain.ids
    for a, b in zip(cached.logits, plain.logits):
        assert (a - b).abs().max().item() < 1e-5


def test_entropy_counts_impossible_tokens_as_zero():
    from tfx_cli.core.analysis.sampling import describe

    finite = torch.tensor([1.0, 2.0, 0.5])
    masked = torch.tensor([1.0, -math.inf, 2.0, 0.5, -math.inf])
    assert describe(masked, 0)[0] == pytest.approx(describe(finite, 0)[0], abs=1e-6)
    assert describe(torch.zeros(4), 0)[0] == pytest.approx(math.log(4), abs=1e-6)
