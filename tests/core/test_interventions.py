"""Interventions: ablation, steering, activation patching and direct logit attribution.

What must hold: an edit that changes nothing leaves the run bit for bit as it was;
patching CLEAN into CLEAN is the plain run; patching block 0's input at the one position
where the texts differ restores the clean answer (effect 1) and nothing else does
(effect 0); batching patched runs changes nothing beyond float rounding; attribution
parts sum to the logit difference.
"""
import numpy as np
import pytest
from pathlib import Path
import torch

from tfx_cli import api
from tfx_cli.core.analysis import attribution, patching
from tfx_cli.core.analysis import sites as iv
from tfx_cli.core import load as loading
from tfx_cli.core.analysis import common
from tfx_cli.core.spec import ModelSpec
from tfx_cli.errors import InputTextError, RangeError, SelectError, UsageError

SMALL = dict(config="gpt124m", layers=2, d_model=64, heads=4)  # gpt124m's shape, shrunk
LLAMA = dict(config="smollm2-135m", layers=2, d_model=72, tokenizer="gpt2")  # 9 q / 3 kv heads
# seed 001's 6-wide post-LN encoder as one stack with a head (toy itself is an
# encoder–decoder, which interventions refuse): post-LN attribution through every norm
TOY = dict(config=str(Path(__file__).resolve().parents[1] / "post_ln_words.json"))
CLEAN, CORRUPT = "The capital of France is", "The capital of Italy is"
ANSWER, WRONG = " Paris", " Rome"


def loaded(**spec):
    return loading.load(ModelSpec(**spec))


def ids_of(model, text):
    return model.tokenizer.encode(text)


def plain_metric(model, ids, answer, wrong):
    with torch.inference_mode():
        logits = model.model(torch.tensor([ids]), head="last")
    return iv._metric(logits, answer, wrong)[0].item()


# -- sites --------------------------------------------------------------------------------
def test_sites_resolve_resid_pre_and_narrowing():
    m = loaded(**SMALL).model
    assert iv.parse_site(m, "blocks.0.resid_pre").name == "embed.out"
    site = iv.parse_site(m, "blocks.1.resid_pre:p=2")
    assert (site.name, site.pos, site.head, site.dims) == ("blocks.0.resid_out", 2, None,
                                                            ("T", "C"))
    site = iv.parse_site(m, "blocks.1.attn.pattern:h=3:p=1")
    assert (site.head, site.pos, site.pos_axis) == (3, 1, 1)  # pattern's p is the query row
    assert iv.parse_site(m, "blocks.0.attn.k:h=0").pos_axis == 1  # (H, S, D)
    names = iv.site_names(m)
    assert names.index("blocks.1.resid_pre") == names.index("blocks.1.ln1.in") - 1
    for hidden in ("tokens.ids", "logits", "blocks.0.ln1.mean", "blocks.0.attn.scores"):
        assert hidden not in names


def test_rotary_keys_are_edited_after_the_rotation():
    m = loaded(**LLAMA).model
    assert "blocks.0.attn.k_rot" in iv.site_names(m)
    with pytest.raises(SelectError, match="flow on are attn.k_rot"):
        iv.parse_site(m, "blocks.0.attn.k")


@pytest.mark.parametrize("spec, error, message", [
    ("bogus", SelectError, "valid sites: embed.tok"),
    ("blocks.0.attn.scores", SelectError, "recomputed from q and k"),
    ("blocks.0.ln1.var", SelectError, "norm's statistic"),
    ("blocks.7.attn.out", RangeError, "block 7 is out of range: this model has 2 layers"),
    ("blocks.0.attn.out:h=1", SelectError, "has no heads"),
    ("blocks.0.attn.context:h=4", RangeError, "head 4 is out of range"),
    ("blocks.0.attn.context:p=-1", RangeError, "count from 0"),
    ("blocks.0.attn.context:x=1", UsageError, "not a narrowing"),
    ("blocks.0.attn.context:h=1:h=2", UsageError, "once each"),
])
def test_bad_sites(spec, error, message):
    with pytest.raises(error, match=message):
        iv.parse_site(loaded(**SMALL).model, spec)


# -- ablation -------------------------------------------------------------------------------
def test_no_interventions_is_the_plain_result():
    plain = api.next(CLEAN, **SMALL).to_dict()
    assert api.next(CLEAN, ablate=[], **SMALL).to_dict() == plain
    assert "interventions" not in plain["result"]


@pytest.mark.parametrize("spec", [SMALL, LLAMA, TOY], ids=["gpt", "llama", "toy"])
def test_an_edit_that_changes_nothing_leaves_the_run_as_it_was(spec):
    """The identity at every site: bit for bit, except where an edited value makes its
    sublayer take the written-out path (the pattern, a norm's rows) instead of the fused
    kernel; those agree to float rounding, as tfx trace's do."""
    model = loaded(**spec)
    ids = torch.tensor([ids_of(model, "When you play game of thrones you win")])
    m = model.model
    with torch.inference_mode():
        plain = m(ids)
        for name in iv.site_names(m):
            site = iv.parse_site(m, name)
            with iv.editing(m, [(site.name, lambda x: x)]):
                out = m(ids)
            if name.endswith((".attn.pattern", ".normed")):
                assert torch.allclose(out, plain, atol=1e-4, rtol=0), name
            else:
                assert torch.equal(out, plain), name
    assert m.recording == 0 and all(tap.edit is None for tap in m.taps.values())


def test_zero_ablation_is_a_zeroed_sublayer():
    """Zeroing blocks.1.attn.out is the model whose output projection is all zeros."""
    model = loaded(**SMALL)
    text = "When you play game of thrones"
    ablated = api.trace(text, select=["logits"], ablate=["blocks.1.attn.out"], **SMALL)
    proj = model.model.blocks[1].attn.out_proj
    saved = proj.weight.data.clone(), proj.bias.data.clone()
    try:
        proj.weight.data.zero_()
        proj.bias.data.zero_()
        zeroed = common.run(model, ids_of(model, text), ["logits"]).array("logits")
    finally:
        proj.weight.data.copy_(saved[0])
        proj.bias.data.copy_(saved[1])
    assert np.array_equal(ablated.tensors["logits"], zeroed)
    assert ablated.interventions[0].mode == "zero"


def test_mean_ablation_narrowed_to_one_head_and_one_position():
    text = "When you play game of thrones"
    name = "blocks.0.attn.context"
    plain = api.trace(text, select=[name], **SMALL).tensors[name]  # (H, T, D)
    mean = api.trace(text, select=[name], ablate=[name + ":h=2"], ablate_mode="mean",
                     **SMALL).tensors[name]
    assert np.allclose(mean[2], plain[2].mean(axis=0), atol=1e-7)
    assert np.array_equal(np.delete(mean, 2, axis=0), np.delete(plain, 2, axis=0))
    one = api.trace(text, select=[name], ablate=[name + ":h=1:p=3"], **SMALL).tensors[name]
    changed = np.argwhere((one != plain).any(axis=-1))
    assert changed.tolist() == [[1, 3]] and not one[1, 3].any()


def test_an_edited_pattern_is_formed_whole_on_long_texts():
    """Past CAUSAL_BLOCK positions attention works in row blocks and forms the context
    before the pattern tap; an edited pattern must come first."""
    text = " ".join(["word"] * 150)
    name = "blocks.0.attn.context"
    out = api.trace(text, select=[name], ablate=["blocks.0.attn.pattern:h=0:p=140"],
                    **SMALL).tensors[name]
    assert not out[0, 140].any() and out[0, 139].any()


def test_an_unreached_site_is_refused():
    with pytest.raises(RangeError, match="never reached"):
        api.attend("hi there", layer=0, ablate=["blocks.1.attn.out"], **SMALL)
    assert api.attend("hi there", layer=1, ablate=["blocks.1.attn.q"], **SMALL).interventions


def test_a_position_past_the_text_is_refused():
    with pytest.raises(RangeError, match="position 9 is out of range: the text has 2 tokens"):
        api.next("hi there", ablate=["blocks.0.resid_out:p=9"], **SMALL)


def test_edits_are_removed_after_an_error():
    model = loaded(**SMALL).model
    with pytest.raises(RangeError):
        api.next("hi there", ablate=["blocks.0.resid_out:p=9"], **SMALL)
    assert model.recording == 0 and all(tap.edit is None for tap in model.taps.values())


# -- steering ---------------------------------------------------------------------------
def test_steering_adds_the_difference_from_the_first_position():
    text, site = "When you play game of thrones", "blocks.1.resid_pre"
    toward, away = " love", " hate"
    model = loaded(**SMALL)
    acts = [common.run(model, ids_of(model, t), ["blocks.0.resid_out"]).raw(
        "blocks.0.resid_out") for t in (toward, away)]
    vector = acts[0] - acts[1]  # (1, C): one position
    steered = api.trace(text, select=["blocks.0.resid_out", "logits"], steer=site,
                        toward=toward, away=away, scale=4, **SMALL)
    plain = api.trace(text, select=["blocks.0.resid_out", "logits"], **SMALL)
    got, base = steered.tensors["blocks.0.resid_out"], plain.tensors["blocks.0.resid_out"]
    assert np.array_equal(got[0], (torch.from_numpy(base[0]) + 4 * vector[0]).numpy())
    assert np.array_equal(got[1:], base[1:])  # only the first position: the texts' length
    change = steered.interventions[0]
    assert (change.kind, change.name, change.toward_tokens, change.scale) == \
        ("steer", "blocks.0.resid_out", [" love"], 4.0)
    assert change.vector_norm == pytest.approx(float(vector.double().norm()))
    zero = api.trace(text, select=["logits"], steer=site, toward=toward, away=away, scale=0,
                     **SMALL)
    assert np.array_equal(zero.tensors["logits"], plain.tensors["logits"])


def test_steering_texts_must_line_up():
    with pytest.raises(InputTextError, match=r"--toward is 1 token \[' love'\] and --away is "
                                             r"2 tokens \['H', 'ate'\]"):
        api.next(CLEAN, steer="blocks.1.resid_pre", toward=" love", away="Hate", **SMALL)
    with pytest.raises(UsageError, match="--toward applies to --steer"):
        api.next(CLEAN, toward=" love", **SMALL)
    with pytest.raises(UsageError, match="--away is missing"):
        api.next(CLEAN, steer="blocks.1.resid_pre", toward=" love", **SMALL)


def test_generate_with_an_intervention_recomputes_every_step():
    """No KV cache: a cached step would skip the edit at earlier positions. The result
    is what decoding the edited model without a cache gives."""
    edited = api.generate("Hello, I am", max_new_tokens=4, ablate=["blocks.0.attn.out"],
                          **SMALL)
    assert not edited.settings.cache and edited.interventions[0].site == "blocks.0.attn.out"
    model = loaded(**SMALL)
    from tfx_cli.core.analysis.decode import greedy_ids

    site = iv.parse_site(model.model, "blocks.0.attn.out")
    with iv.editing(model.model, [(site.name, iv.ablation(site, "zero"))]):
        ids = greedy_ids(model.model, ids_of(model, "Hello, I am"), 4, use_cache=False)
    assert edited.ids == ids
    assert edited.ids != api.generate("Hello, I am", max_new_tokens=4, **SMALL).ids


# -- patching -----------------------------------------------------------------------------
@pytest.mark.parametrize("site", patching.PATCH_SITES)
@pytest.mark.parametrize("spec", [SMALL, LLAMA], ids=["gpt", "llama"])
def test_patching_clean_into_clean_is_the_plain_run(spec, site):
    model = loaded(**spec)
    ids = ids_of(model, CLEAN)
    a, w = ids_of(model, ANSWER)[0], ids_of(model, WRONG)[0]
    plain = plain_metric(model, ids, a, w)
    alone = patching.sweep(model.model, ids, ids, a, w, site, batch=1)
    assert alone.m_clean == alone.m_corrupt == plain
    assert (alone.metric == plain).all()  # bit for bit, every cell
    batched = patching.sweep(model.model, ids, ids, a, w, site)
    assert batched.batched_runs == spec["layers"]  # one batch per layer
    assert np.allclose(batched.metric, plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("spec", [SMALL, LLAMA, TOY], ids=["gpt", "llama", "toy"])
def test_patching_block_0_at_the_differing_position_restores_the_answer(spec):
    clean, corrupt = (CLEAN, CORRUPT) if spec is not TOY else \
        ("When you play game of thrones", "When you play game of you")
    answer, wrong = (ANSWER, WRONG) if spec is not TOY else ("win", "die")
    model = loaded(**spec)
    alone = api.patch(clean, corrupt=corrupt, answer=answer, wrong=wrong, batch=1, **spec)
    effect = alone.tensors["patch.effect"]
    (diff,) = alone.differing_positions
    assert effect[0, diff] == 1.0
    assert (np.delete(effect[0], diff) == 0.0).all()
    batched = api.patch(clean, corrupt=corrupt, answer=answer, wrong=wrong, **spec)
    assert np.allclose(batched.tensors["patch.effect"], effect, rtol=0, atol=1e-4)
    assert batched.m_clean == alone.m_clean == plain_metric(
        model, ids_of(model, clean), alone.answer.id, alone.wrong.id)


@pytest.mark.parametrize("site", patching.PATCH_SITES)
def test_a_patched_cell_is_the_run_with_that_one_activation_replaced(site):
    """Each cell against the plain model run with one hand-made edit, cell by cell."""
    model = loaded(**LLAMA)
    m = model.model
    clean, corrupt = ids_of(model, CLEAN), ids_of(model, CORRUPT)
    a, w = ids_of(model, ANSWER)[0], ids_of(model, WRONG)[0]
    got = patching.sweep(m, clean, corrupt, a, w, site, batch=1).metric
    layer, cell = 1, 3 if site != "heads" else 5
    name = patching._source(site, layer)
    source = common.run(model, clean, [name]).raw(name)

    def put(x):
        x = x.clone()
        x[0, cell] = source[cell]  # a position of (T, C), or a head of (H, T, D)
        return x

    with iv.editing(m, [(name, put)]), torch.inference_mode():
        want = iv._metric(m(torch.tensor([corrupt]), head="last"), a, w)[0]
    assert abs(float(got[layer, cell]) - float(want)) < 1e-5


def test_patch_refuses_texts_of_different_lengths_and_split_answers():
    with pytest.raises(InputTextError, match=r"CLEAN is 5 tokens \['The', ' capital'.*"
                                             r"CORRUPT is 6 tokens"):
        api.patch(CLEAN, corrupt="The capital of the USA is", answer=ANSWER, wrong=WRONG,
                  **SMALL)
    with pytest.raises(InputTextError, match=r"splits it into 2 tokens: ' Paris' \+ 'ian'"):
        api.patch(CLEAN, corrupt=CORRUPT, answer=" Parisian", wrong=WRONG, **SMALL)
    with pytest.raises(InputTextError, match="same logit difference"):
        api.patch(CLEAN, corrupt=CLEAN, answer=ANSWER, wrong=WRONG, **SMALL)


# -- attribution ------------------------------------------------------------------------
@pytest.mark.parametrize("per_head", [False, True], ids=["layers", "heads"])
@pytest.mark.parametrize("spec", [TOY, SMALL, LLAMA, dict(config="gpt124m")],
                         ids=["toy", "gpt-small", "llama", "gpt124m"])
def test_attribution_parts_sum_to_the_logit_difference(spec, per_head):
    text, answer, wrong = (CLEAN, ANSWER, WRONG) if spec is not TOY else \
        ("When you play game of", "thrones", "you")
    r = api.attribute(text, answer=answer, wrong=wrong, per_head=per_head, **spec)
    model = loaded(**spec)
    logits = common.run(model, ids_of(model, text), ["logits"]).array("logits")[-1]
    assert r.logit_diff == pytest.approx(float(logits[r.answer.id]) -
                                         float(logits[r.wrong.id]), abs=1e-5)
    assert abs(sum(p.value for p in r.parts) - r.logit_diff) < 1e-4
    assert abs(r.unexplained) < 1e-4 and r.parts[-1].name == "remainder"
    cfg = model.cfg
    per_layer = cfg.n_heads if per_head else 1
    assert len(r.parts) == len([n for n in ("embed.tok", "embed.pos") if n in model.model.taps]) \
        + cfg.n_layers * (per_layer + 1) + 1


def test_the_heads_of_a_layer_add_up_to_its_attention_part():
    """Per head, the output bias moves to the remainder: heads + bias = the layer."""
    layers = api.attribute(CLEAN, answer=ANSWER, wrong=WRONG, **SMALL)
    heads = api.attribute(CLEAN, answer=ANSWER, wrong=WRONG, per_head=True, **SMALL)
    by_name = {p.name: p.value for p in heads.parts}
    model = loaded(**SMALL).model
    tr = common.run(loaded(**SMALL), ids_of(loaded(**SMALL), CLEAN), ["ln_f.var"])
    scale = float((tr.raw("ln_f.var")[-1].double() + model.ln_f.eps).sqrt())
    direction = (model.lm_head.weight[heads.answer.id] -
                 model.lm_head.weight[heads.wrong.id]).double()
    for part in layers.parts:
        if part.name.endswith("attn.out"):
            i = int(part.name.split(".")[1])
            bias = attribution._frozen_norm(model.blocks[i].attn.out_proj.bias.double()[None],
                                   model.ln_f, scale)[0] @ direction
            total = sum(by_name[f"{part.name}:h={h}"] for h in range(4)) + float(bias)
            assert total == pytest.approx(part.value, abs=1e-6)


def test_attribution_with_the_answer_alone_and_refusals():
    r = api.attribute(CLEAN, answer=ANSWER, **SMALL)
    assert r.wrong is None and "wrong" not in r.to_dict()["result"]
    assert abs(r.unexplained) < 1e-4
    with pytest.raises(InputTextError, match="same token"):
        api.attribute(CLEAN, answer=ANSWER, wrong=ANSWER, **SMALL)
    from tfx_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="no output head"):
        api.attribute("hello", answer="hello", config="minilm")


def test_an_answer_is_one_token_without_the_specials_every_text_gets():
    """Gemma's tokenizer puts <bos> before every text and BERT's [CLS] ... [SEP] around
    it; those are not part of an answer."""
    from types import SimpleNamespace

    from tfx_cli.core.tokenizers import get_tokenizer

    tok = get_tokenizer("minilm")
    assert len(tok.encode("paris")) == 3  # [CLS] paris [SEP]
    fake = SimpleNamespace(tokenizer=tok, cfg=SimpleNamespace(vocab_size=tok.vocab_size))
    assert iv.one_token(fake, "paris", "--answer").token == "paris"
    with pytest.raises(InputTextError, match="splits it into 2 tokens: 'paris' \\+ 'france'"):
        iv.one_token(fake, "paris france", "--answer")
