"""Stage functions: each returns the numbers the seeds compute, from the one model."""
import json
from pathlib import Path
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfx_cli import api
from tfx_cli.core import load as loading
from tfx_cli.core.analysis import common
from tfx_cli.core.spec import ModelSpec, spec_config
from tfx_cli.core.analysis.inputs import attend_inputs
from tfx_cli.errors import InputTextError, RangeError, SelectError

TOY = dict(config="toy")
SMALL = dict(layers=2, d_model=64, heads=4)  # gpt124m's shape, shrunk
LLAMA = dict(config="smollm2-135m", layers=2, d_model=72, tokenizer="gpt2")  # 9 q / 3 kv heads
SENTENCE = "When you play game of thrones"
PROMPT = "Hello, I am a student of the"


# -- posenc -----------------------------------------------------------------------------
def test_posenc_toy_is_seed_001_formula():
    res = api.posenc(SENTENCE, **TOY)
    table = res.tensors["posenc.table"]
    assert table.shape == (6, 6) and res.tensors.dims("posenc.table") == ("T", "C")
    d = 6
    for pos in range(6):
        for i in range(d // 2):  # computed here independently, in plain python
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-7)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-7)
    assert res.tensors["posenc.angle"][5, 1] == pytest.approx(5 / 10000 ** (2 / 6))
    # the table is the one the model adds: embed.pos of the same text
    assert np.array_equal(table, api.embed(SENTENCE, **TOY).tensors["encoder.embed.pos"])
    assert res.input.tokens == SENTENCE.split()


def test_posenc_learned_and_rope_and_length():
    learned = api.posenc(length=5, **SMALL)
    loaded = loading.load(ModelSpec(**SMALL))
    assert np.array_equal(learned.tensors["posenc.table"],
                          loaded.model.embed.pos_emb.weight[:5].numpy())
    assert learned.tensors.dims("posenc.table") == ("P", "C") and learned.input is None

    from tfx_cli.core.model import rope_angles

    rope = api.posenc(length=7, **LLAMA)
    cfg = spec_config(ModelSpec(**LLAMA))
    D = cfg.head_dim
    angles = rope_angles(torch.arange(7), D, cfg.rope_theta).numpy()
    assert np.array_equal(rope.tensors["posenc.angle"], angles)
    cos = rope.tensors["posenc.cos"]
    assert cos.shape == (7, D) and np.allclose(cos[:, :D // 2], np.cos(angles))
    assert np.allclose(rope.tensors["posenc.sin"][:, D // 2:], np.sin(angles))
    assert rope.tensors["posenc.angle"][3, 1] == pytest.approx(
        3 * cfg.rope_theta ** (-2 / D), rel=1e-6)


def test_posenc_needs_exactly_one_of_text_and_length():
    with pytest.raises(InputTextError):
        api.posenc(**TOY)
    with pytest.raises(InputTextError):
        api.posenc("a b", length=3, **TOY)
    with pytest.raises(RangeError):
        api.posenc(length=65, **TOY)


# -- embed --------------------------------------------------------------------------
def test_embed_sum_and_row_stats():
    res = api.embed(SENTENCE, **TOY)  # toy's encoder
    tok, pos, out = (res.tensors[n] for n in ("encoder.embed.tok", "encoder.embed.pos",
                                              "encoder.embed.out"))
    assert np.allclose(out, tok + pos)
    rows = res.rows["encoder.embed.out"]
    assert np.allclose(rows.norm, np.linalg.norm(out, axis=1), atol=1e-5)
    assert np.allclose(rows.std, out.std(axis=1), atol=1e-5)
    assert all(name.startswith("encoder.embed.") for name in res.tensors.names())


# -- attend -------------------------------------------------------------------------
def test_attend_records_only_layer_and_pattern_is_a_distribution():
    res = api.attend(PROMPT, layer=1, **SMALL)
    names = res.tensors.names()
    assert names and all(name.startswith("blocks.1.attn.") for name in names)
    pattern = res.tensors["blocks.1.attn.pattern"]
    T = len(res.input.ids)
    assert pattern.shape == (4, T, T)
    assert np.abs(pattern.sum(-1) - 1).max() < 1e-6
    for i in range(T):
        assert (pattern[:, i, i + 1:] == 0).all()  # causal: exactly zero above the diagonal
    scaled = res.tensors["blocks.1.attn.scaled"]
    assert np.allclose(scaled, res.tensors["blocks.1.attn.scores"] / 4.0)  # √16 = 4
    assert np.isneginf(res.tensors["blocks.1.attn.masked"][0, 0, 1])


def test_explicit_attention_equals_fused_through_the_model():
    loaded = loading.load(ModelSpec(**SMALL))
    ids = common.encode(loaded, PROMPT)
    fused = common.run(loaded, ids, ["blocks.1.attn.out"], stop_after=1)
    explicit = common.run(loaded, ids, ["blocks.1.attn.out", "blocks.1.attn.pattern"],
                          stop_after=1)
    assert "blocks.1.attn.pattern" in explicit and "blocks.1.attn.pattern" not in fused
    assert np.abs(fused["blocks.1.attn.out"] - explicit["blocks.1.attn.out"]).max() < 1e-5
    # and against F.scaled_dot_product_attention on the very q, k, v recorded
    qkv = common.run(loaded, ids, ["blocks.1.attn.[qkv]", "blocks.1.attn.context"],
                     stop_after=1)
    q, k, v = (torch.from_numpy(qkv[f"blocks.1.attn.{n}"]) for n in "qkv")
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ref - torch.from_numpy(qkv["blocks.1.attn.context"])).abs().max() < 1e-5


def test_one_head_and_explain_agree_with_the_model():
    full = api.attend(PROMPT, layer=0, **SMALL)
    one = api.attend(PROMPT, layer=0, head=2, explain=True, query_pos=3, **SMALL)
    assert one.tensors.shape("blocks.0.attn.pattern")[0] == 1 and one.heads == [2]
    assert np.array_equal(one.tensors["blocks.0.attn.pattern"][0],
                          full.tensors["blocks.0.attn.pattern"][2])
    ex = one.explain
    assert ex.head == 2 and ex.query_pos == 3 and ex.d_k == 16
    weights = np.array([k.weight for k in ex.keys])
    assert np.abs(weights - full.tensors["blocks.0.attn.pattern"][2, 3]).max() < 1e-6
    assert ex.max_abs_diff_vs_pattern < 1e-6
    assert [k.visible for k in ex.keys] == [j <= 3 for j in range(len(ex.keys))]
    assert np.allclose(ex.context, full.tensors["blocks.0.attn.context"][2, 3], atol=1e-5)
    q = full.tensors["blocks.0.attn.q"][2, 3].astype(np.float64)
    k0 = full.tensors["blocks.0.attn.k"][2, 0].astype(np.float64)
    assert ex.keys[0].dot == pytest.approx(q @ k0, rel=1e-6)
    assert ex.keys[0].scaled == pytest.approx(q @ k0 / 4, rel=1e-6)
    assert math.fsum(k.exp for k in ex.keys) == pytest.approx(ex.sum_exp)
    default = api.attend(PROMPT, explain=True, **SMALL).explain
    assert default.head == 0 and default.query_pos == len(one.input.ids) - 1


def test_mask_override_and_valid_lens():
    res = api.attend(PROMPT, mask="none", **SMALL)
    pattern = res.tensors["blocks.0.attn.pattern"]
    assert (pattern[:, 0, 1:] > 0).all() and res.mask == "none"
    padded = api.attend(SENTENCE, valid_lens=4, **TOY)
    pattern = padded.tensors["encoder.blocks.0.attn.pattern"]
    assert (pattern[..., 4:] == 0).all() and np.abs(pattern.sum(-1) - 1).max() < 1e-6


def test_cross_attention_of_a_text_with_itself_is_self_attention():
    own = api.attend(SENTENCE, **TOY)
    cross = api.attend(SENTENCE, kv=SENTENCE, **TOY)
    for name in ("q", "k", "v", "pattern", "out"):
        key = f"encoder.blocks.0.attn.{name}"
        assert np.allclose(own.tensors[key], cross.tensors[key], atol=1e-6), name
    other = api.attend("you win or you die", kv=SENTENCE, **TOY)
    assert other.tensors.shape("encoder.blocks.0.attn.pattern") == (2, 5, 6)
    assert other.tensors.shape("encoder.blocks.0.attn.k") == (2, 6, 3)
    assert other.input.kv.tokens == SENTENCE.split()
    assert other.cross_attention is True
    deep = api.attend("Hello there", kv=PROMPT, layer=1, **SMALL)
    assert deep.tensors.shape("blocks.1.attn.pattern")[1:] == (2, len(deep.input.kv.ids))
    with pytest.raises(RangeError, match="causal"):
        api.attend("you win", kv=SENTENCE, mask="causal", **TOY)


def test_gqa_groups_and_rope_taps():
    res = api.attend(PROMPT, **LLAMA)
    assert res.kv_groups == {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7, 8]}
    names = res.tensors.names()
    assert "blocks.0.attn.q_rot" in names and "blocks.0.attn.k_rot" in names
    k = res.tensors["blocks.0.attn.k"]
    assert np.array_equal(k[0], k[2]) and not np.array_equal(k[2], k[3])  # shared kv heads
    assert np.array_equal(res.tensors["blocks.0.attn.q"][:, 0], res.tensors["blocks.0.attn.q_rot"][:, 0])


def test_attend_range_errors():
    with pytest.raises(RangeError, match="--layer 2"):
        api.attend(PROMPT, layer=2, **SMALL)
    with pytest.raises(RangeError, match="--head 4"):
        api.attend(PROMPT, head=4, **SMALL)
    with pytest.raises(RangeError, match="--valid-lens"):
        api.attend(SENTENCE, valid_lens=7, **TOY)
    with pytest.raises(RangeError, match="--valid-lens"):
        api.attend(SENTENCE, valid_lens=0, **TOY)
    with pytest.raises(RangeError, match="--query-pos"):
        api.attend(SENTENCE, explain=True, query_pos=6, **TOY)
    with pytest.raises(SelectError, match="q_rot"):
        api.attend(SENTENCE, show=["q_rot"], **TOY)  # sinusoidal: no rotation


# -- attend --inputs ---------------------------------------------------------------------
SEED000 = {"x": [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]],
           "w_q": [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]],
           "w_k": [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]],
           "w_v": [[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]}


def write(tmp_path, data, name="in.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_inputs_reproduce_seed_000(tmp_path):
    res = attend_inputs(write(tmp_path, {**SEED000, "scale": 1}), explain=True,
                               query_pos=0)
    assert res.tensors["attn.q"][0].tolist() == [[1, 0, 2], [2, 2, 2], [2, 1, 3]]
    assert res.tensors["attn.scores"][0].tolist() == [[2, 4, 4], [4, 16, 12], [4, 12, 10]]
    row = np.exp([2, 4, 4]) / np.exp([2, 4, 4]).sum()
    assert np.allclose(res.tensors["attn.pattern"][0, 0], row)
    assert np.allclose(res.tensors["attn.context"][0, 0], row @ np.array(
        [[1, 2, 3], [2, 8, 0], [2, 6, 3]]))
    assert res.explain.context == pytest.approx([1.9366, 6.6831, 1.5951], abs=1e-4)
    default = attend_inputs(write(tmp_path, SEED000))
    assert np.allclose(default.tensors["attn.scaled"], default.tensors["attn.scores"] / math.sqrt(3))


def test_inputs_mask_and_output_projection(tmp_path):
    data = {**SEED000, "mask": "causal", "w_o": [[1, 0], [0, 1], [1, 1]]}
    res = attend_inputs(write(tmp_path, data))
    pattern = res.tensors["attn.pattern"][0]
    assert pattern[0].tolist() == [1.0, 0.0, 0.0]
    assert np.allclose(res.tensors["attn.out"],
                       res.tensors["attn.context"][0] @ np.array(data["w_o"]))
    given = attend_inputs(write(tmp_path, {**SEED000, "mask": [[1, 0, 1]] * 3}))
    assert (given.tensors["attn.pattern"][0, :, 1] == 0).all()


def test_the_shipped_sample_is_seed_000():
    res = attend_inputs("samples/seed000.json")
    assert res.tensors["attn.q"][0].tolist() == [[1, 0, 2], [2, 2, 2], [2, 1, 3]]
    assert res.scale == 1


@pytest.mark.parametrize("data, message", [
    ('{"x": [[1, 2]], ', "line 1, column"),
    ("[1, 2]", "JSON object"),
    ({k: v for k, v in SEED000.items() if k != "w_k"}, "missing key 'w_k'"),
    ({**SEED000, "x": [[1, 0, 1, 0], [0, 2, 0]]}, "ragged"),
    ({**SEED000, "w_q": [[1, 0, 1], [1, 0, 0], [0, 0, 1]]}, "needs 4 rows"),
    ({**SEED000, "w_k": [[0, 0], [1, 1], [0, 1], [1, 1]]}, "same number of columns"),
    ({**SEED000, "x": [[1, 0, "a", 0], [0, 2, 0, 2], [1, 1, 1, 1]]}, r'x\[0\]\[2\] is "a"'),
    ({**SEED000, "x": []}, "must be a matrix"),
    ({**SEED000, "scale": 0}, "scale must be"),
    ({**SEED000, "mask": [[1, 1], [1, 1]]}, "mask"),
    ({**SEED000, "mask": [[0, 0, 0], [1, 1, 1], [1, 1, 1]]}, "hides every key"),
    ({**SEED000, "w_o": [[1], [2]]}, "w_o needs 3 rows"),
    ({**SEED000, "wq": 1}, "unknown key 'wq'"),
])
def test_malformed_inputs(tmp_path, data, message):
    with pytest.raises(InputTextError, match=message):
        attend_inputs(write(tmp_path, data))


# -- layernorm and ffn ----------------------------------------------------------------
def test_layernorm_pre_ln_normalises_block_input():
    res = api.layernorm(PROMPT, layer=1, which="ln2", **SMALL)
    t = res.tensors
    x = t["blocks.1.ln2.in"].astype(np.float64)
    assert np.allclose(t["blocks.1.ln2.mean"], x.mean(1), atol=1e-5)
    assert np.allclose(t["blocks.1.ln2.var"], x.var(1), atol=1e-4)
    normed = t["blocks.1.ln2.normed"]
    assert np.abs(normed.mean(1)).max() < 1e-5 and np.abs(normed.var(1) - 1).max() < 1e-3
    assert np.allclose(t["blocks.1.ln2.out"],
                       normed * t["blocks.1.ln2.scale"] + t["blocks.1.ln2.shift"], atol=1e-6)
    assert max(abs(v - 1) for v in res.normed_var) < 1e-3
    final = api.layernorm(PROMPT, which="ln_f", **SMALL)
    assert "ln_f.normed" in final.tensors and final.layer is None


def test_layernorm_post_ln_shows_the_residual_sum_first():
    res = api.layernorm(SENTENCE, which="ln1", **TOY)
    t = res.tensors
    assert res.residual == ["encoder.embed.out", "encoder.blocks.0.attn.out"]
    assert np.allclose(t["encoder.blocks.0.ln1.in"],
                       t["encoder.embed.out"] + t["encoder.blocks.0.attn.out"], atol=1e-6)
    with pytest.raises(RangeError, match="ln_f"):
        api.layernorm(SENTENCE, which="ln_f", **TOY)  # post-LN ends normalised


def test_ffn_activation():
    toy = api.ffn(SENTENCE, **TOY).tensors
    assert toy.shape("encoder.blocks.0.ffn.hidden") == (6, 24)
    assert np.array_equal(toy["encoder.blocks.0.ffn.act"],
                          np.maximum(toy["encoder.blocks.0.ffn.hidden"], 0))
    gpt = api.ffn(PROMPT, layer=1, **SMALL)
    hidden = torch.from_numpy(gpt.tensors["blocks.1.ffn.hidden"])
    assert np.allclose(gpt.tensors["blocks.1.ffn.act"],
                       F.gelu(hidden, approximate="tanh").numpy(), atol=1e-6)
    assert gpt.tensors.shape("blocks.1.ffn.out") == gpt.tensors.shape("blocks.1.ln2.out")
    assert gpt.activation == "gelu_tanh"


# -- partial builds -----------------------------------------------------------------------
@pytest.mark.parametrize("spec", [SMALL, LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("stage, kw, built", [
    ("embed", {}, 0), ("attend", {"layer": 0}, 1), ("ffn", {"layer": 0}, 1),
    ("layernorm", {"layer": 0, "which": "ln2"}, 1), ("attend", {"layer": 1}, 2)])
def test_stages_that_stop_early_build_only_what_they_run(spec, stage, kw, built):
    loading._CACHE.clear()
    loading.load(ModelSpec(**spec))  # the whole model, kept: the stage below reuses it
    whole = getattr(api, stage)(SENTENCE, **kw, **spec)
    loading._CACHE.clear()
    part = getattr(api, stage)(SENTENCE, **kw, **spec)
    (model, _), = loading._CACHE.values()
    assert model.built_blocks == built
    assert any(p.is_meta for p in model.parameters()) == (built < 2)
    assert whole.tensors.names() == part.tensors.names() and part.tensors.names()
    for name in whole.tensors.names():
        assert np.array_equal(whole.tensors[name], part.tensors[name]), name
    assert json.dumps(whole.to_dict(), sort_keys=True) == json.dumps(part.to_dict(), sort_keys=True)
    loading.load(ModelSpec(**spec))  # a later whole-model stage builds it whole again
    (model, _), = loading._CACHE.values()
    assert not any(p.is_meta for p in model.parameters())


# -- attend --inputs with several heads, keys from another input, and padding --------------
def _reference(x, x_kv, w_q, w_k, w_v, keep, scale):
    """softmax(mask(x w_q (x_kv w_k)^T / scale)) x_kv w_v per head, in numpy."""
    q, k, v = x @ w_q, x_kv @ w_k, x_kv @ w_v
    s = np.where(keep, q @ k.T / scale, -np.inf)
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    return w, w @ v


def test_the_seed_003_sample_pads_keys_past_the_valid_length():
    res = attend_inputs("samples/seed003.json")
    data = json.loads(Path("samples/seed003.json").read_text())
    x, x_kv = np.array(data["x"], float), np.array(data["x_kv"], float)
    pattern = res.tensors["attn.pattern"]
    assert pattern.shape == (2, 4, 6) and res.n_heads == 2 and res.valid_lens == 3
    assert (pattern[..., 3:] == 0).all()  # keys 3, 4, 5 are padding
    keep = np.arange(6)[None, :] < 3
    for h in range(2):
        w, ctx = _reference(x, x_kv, *(np.array(data[n][h], float) for n in ("w_q", "w_k", "w_v")),
                            keep, math.sqrt(2))
        assert np.allclose(pattern[h], w) and np.allclose(res.tensors["attn.context"][h], ctx)
    concat = np.concatenate([res.tensors["attn.context"][h] for h in range(2)], axis=1)
    assert np.allclose(res.tensors["attn.concat"], concat)
    assert np.allclose(res.tensors["attn.out"], concat @ np.array(data["w_o"], float))
    # pinned: query q3 = (2, 0) against keys k0 = (1, 0), k1 = (0, 1), k2 = (1, 1) in head 0
    e = np.exp(np.array([2, 0, 2]) / math.sqrt(2))
    assert pattern[0, 3, :3] == pytest.approx(e / e.sum())


def test_valid_lens_per_query_row_is_d2l_2d_form(tmp_path):
    data = json.loads(Path("samples/seed003.json").read_text())
    res = attend_inputs(write(tmp_path, {**data, "valid_lens": [1, 2, 3, 6]}))
    pattern = res.tensors["attn.pattern"][0]
    assert pattern[0].tolist()[1:] == [0] * 5 and pattern[0, 0] == 1.0
    assert (pattern[1, 2:] == 0).all() and (pattern[3] > 0).all()


def test_the_seed_001_two_head_sample_is_masked_self_attention_with_identities():
    res = attend_inputs("samples/seed001-two-heads.json", head=1, explain=True, query_pos=3)
    data = json.loads(Path("samples/seed001-two-heads.json").read_text())
    x = np.array(data["x"], float)
    keep = np.tril(np.ones((4, 4), bool))
    w, ctx = _reference(x, x, np.eye(4), np.eye(4), np.eye(4), keep, 2.0)  # sqrt(d_k = 4)
    assert np.allclose(res.tensors["attn.pattern"][0], w)  # head 1 alone, both heads equal
    assert res.heads == [1] and res.explain.head == 1
    assert res.explain.context == pytest.approx(ctx[3].tolist())
    full = attend_inputs("samples/seed001-two-heads.json")
    assert np.allclose(full.tensors["attn.out"], ctx)  # W_o averages two identical heads
    assert (full.tensors["attn.pattern"][:, 0, 1:] == 0).all()  # the first row sees itself


@pytest.mark.parametrize("data, message", [
    ({**SEED000, "w_k": [[[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]] * 2}, "give each one"),
    ({**SEED000, "x_kv": [[1, 0]], "w_k": [[1, 0, 0], [0, 1, 0]]}, "x_kv is 1×2 but w_v"),
    ({**SEED000, "valid_lens": 0}, "valid_lens must be"),
    ({**SEED000, "valid_lens": [1, 2]}, "one per query"),
    ({**SEED000, "x_kv": [[1, 0, 0, 0]] * 2, "mask": "causal"}, "as many queries"),
])
def test_malformed_multihead_inputs(tmp_path, data, message):
    with pytest.raises(InputTextError, match=message):
        attend_inputs(write(tmp_path, data))
