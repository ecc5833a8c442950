"""The one core: fused and explicit attention agree, the cache changes nothing, taps
record only what is asked, and each family's switches run."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from tfx_cli.core.model import decoding
from tfx_cli.core.config import ModelConfig
from tfx_cli.core.model import KVCache, build_model, tap_names

FAMILIES = {
    "gpt": ModelConfig(vocab_size=50, context_length=32, d_model=32, n_heads=4, n_layers=2),
    "post_ln_relu_sinusoidal": ModelConfig(vocab_size=50, context_length=32, d_model=32,
                                           n_heads=4, n_layers=2, norm_position="post",
                                           activation="relu", positional="sinusoidal",
                                           causal=False),
    "llama_gqa_rope": ModelConfig(vocab_size=50, context_length=32, d_model=32, n_heads=4,
                                  n_kv_heads=2, n_layers=2, norm="rmsnorm",
                                  activation="swiglu", positional="rope", proj_bias=False,
                                  tie_embeddings=True),
    "bert": ModelConfig(vocab_size=50, context_length=32, d_model=32, n_heads=4, n_layers=2,
                        norm_position="post", activation="gelu", causal=False, token_types=2,
                        embed_norm=True, lm_head=False),
}
IDS = torch.tensor([[3, 14, 15, 9, 2, 6, 5]])


@pytest.mark.parametrize("family", FAMILIES)
def test_explicit_attention_equals_fused(family):
    model = build_model(FAMILIES[family], seed=0)
    fused = model(IDS)
    with model.record(["blocks.*.attn.pattern"]) as trace:
        explicit = model(IDS)
    assert len(trace) == 2
    assert torch.allclose(fused, explicit, atol=1e-5)


@pytest.mark.parametrize("family", ["gpt", "llama_gqa_rope"])
def test_kv_cache_matches_full_forward(family):
    cfg = FAMILIES[family]
    model = build_model(cfg, seed=1)
    full = model(IDS)
    cache = KVCache(cfg)
    steps = [model(IDS[:, :3], cache=cache)]
    for t in range(3, IDS.shape[1]):
        steps.append(model(IDS[:, t:t + 1], cache=cache))
    assert cache.length == IDS.shape[1]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5


def test_causal_pattern_rows_sum_to_one_and_hide_the_future():
    model = build_model(FAMILIES["gpt"], seed=2)
    with model.record(["blocks.0.attn.pattern"]) as trace:
        model(IDS)
    pattern = trace["blocks.0.attn.pattern"]  # (H, T, S)
    assert pattern.shape == (4, 7, 7) and trace.dims("blocks.0.attn.pattern") == ("H", "T", "S")
    assert abs(pattern.sum(-1) - 1).max() < 1e-6
    for i in range(7):
        assert (pattern[:, i, i + 1:] == 0).all()


def test_causal_blocks_give_the_whole_matrix_pattern_bit_for_bit():
    from tfx_cli.core.model import attention as core

    g = torch.Generator().manual_seed(0)
    T = 2 * core.CAUSAL_BLOCK + 44  # two whole blocks and a partial one
    q, k, v = (torch.randn(1, 3, T, 8, generator=g) for _ in range(3))
    keep = torch.ones(T, T, dtype=torch.bool).tril_()

    class Keep:  # a pattern tap that holds what it is given; nothing else recorded
        scores = scaled = masked = None

        def pattern(self, x):
            self.seen = x
            return x

    whole, blocked = Keep(), Keep()
    ctx_whole = core.explicit_attention(q, k, v, keep, 8 ** 0.5, taps=whole)
    ctx_blocked = core.explicit_attention(q, k, v, keep, 8 ** 0.5, taps=blocked, causal=True)
    assert blocked.seen.shape == (1, 3, T, T)
    assert torch.equal(blocked.seen, whole.seen)
    assert (blocked.seen.triu(1) == 0).all()
    assert torch.allclose(ctx_blocked, ctx_whole, atol=1e-6)


@pytest.mark.parametrize("family", ["gpt", "llama_gqa_rope"])
def test_model_records_the_same_pattern_with_and_without_causal_blocks(family, monkeypatch):
    from tfx_cli.core.model import attention as core

    cfg = replace(FAMILIES[family], context_length=320)
    model = build_model(cfg, seed=3)
    ids = torch.randint(0, 50, (1, 300), generator=torch.Generator().manual_seed(1))
    names = ["blocks.1.attn.pattern", "blocks.1.attn.masked", "logits"]
    with model.record(names) as blocked:
        model(ids)
    monkeypatch.setattr(core, "CAUSAL_BLOCK", 10 ** 6)  # one block: the whole-matrix path
    with model.record(names) as whole:
        model(ids)
    for name in names[:2]:
        assert np.array_equal(blocked[name], whole[name]), name
    assert np.allclose(blocked["logits"], whole["logits"], atol=1e-5)


def test_only_selected_taps_record_and_stop_after_skips_layers():
    model = build_model(FAMILIES["gpt"], seed=3)
    with model.record(["blocks.0.*"]) as trace:
        assert model(IDS, stop_after=0) is None
    assert trace.names() and all(n.startswith("blocks.0.") for n in trace.names())
    assert "blocks.0.attn.pattern" in trace and "blocks.0.ln1.mean" in trace


def test_trace_names_follow_design():
    names = tap_names(FAMILIES["gpt"])
    for name in ["tokens.ids", "embed.tok", "embed.pos", "embed.out", "blocks.1.ln1.mean",
                 "blocks.1.attn.q", "blocks.1.attn.scores", "blocks.1.attn.scaled",
                 "blocks.1.attn.masked", "blocks.1.attn.pattern", "blocks.1.attn.context",
                 "blocks.1.attn.concat", "blocks.1.attn.out", "blocks.1.resid_mid",
                 "blocks.1.ffn.hidden", "blocks.1.ffn.act", "blocks.1.ffn.out",
                 "blocks.1.resid_out", "ln_f.out", "logits"]:
        assert name in names, name
    rope = tap_names(FAMILIES["llama_gqa_rope"])
    assert "blocks.0.attn.q_rot" in rope and "embed.pos" not in rope


def test_gqa_query_heads_share_kv_heads():
    model = build_model(FAMILIES["llama_gqa_rope"], seed=4)
    with model.record(["blocks.0.attn.k_rot", "blocks.0.attn.v"]) as trace:
        model(IDS)
    k = trace["blocks.0.attn.k_rot"]
    assert k.shape[0] == 4
    assert (k[0] == k[1]).all() and (k[2] == k[3]).all() and not (k[1] == k[2]).all()


def test_tied_head_shares_storage():
    model = build_model(FAMILIES["llama_gqa_rope"], seed=5)
    assert model.lm_head.weight is model.embed.tok_emb.weight


@pytest.mark.parametrize("family", ["gpt", "llama_gqa_rope"])
def test_decoding_layout_puts_the_long_axis_in_memory_order_only(family):
    model = build_model(FAMILIES[family], seed=7)
    names = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    values = {k: v.clone() for k, v in model.state_dict().items()}
    before = model(IDS)
    decoding.decoding_layout(decoding.decoding_layout(model))  # a second call changes nothing
    ffn = model.blocks[0].ffn
    assert ffn.fc1.weight.stride() == (1, ffn.fc1.out_features)  # (out, in) stored (in, out)
    assert ffn.fc2.weight.is_contiguous()  # already long-axis major
    attn = model.blocks[0].attn
    assert attn.out_proj.weight.is_contiguous()  # square: left alone
    fused = decoding.fused_weight(attn)  # W_query, W_key, W_value: views of one (in, 3 out) buffer
    assert fused.shape == (3 * 32 if family == "gpt" else 32 + 2 * 16, 32)
    assert attn.W_key.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    if model.cfg.tie_embeddings:
        assert model.lm_head.weight is model.embed.tok_emb.weight
    else:
        assert not model.lm_head.weight.is_contiguous()
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == names
    assert all(torch.equal(values[k], v) for k, v in model.state_dict().items())
    assert torch.allclose(model(IDS), before, atol=1e-5)
    model.load_state_dict({k: v + 1 for k, v in values.items()})  # ordinary, writable
    assert decoding.fused_ok(attn) and torch.equal(attn.W_key.weight, values["blocks.0.attn.W_key.weight"] + 1)
    model.blocks[0].attn.W_value.weight.data = torch.zeros_like(attn.W_value.weight)
    assert not decoding.fused_ok(attn)  # a reassigned parameter: back to three products
    decoding.fuse_qkv(attn)
    assert decoding.fused_ok(attn)
    attn.W_key.weight = torch.nn.Parameter(attn.W_key.weight.detach().clone())
    assert not decoding.fused_ok(attn)  # so is a replaced one
    with model.record(["blocks.0.attn.v"]) as trace:
        model(IDS)
    assert (trace["blocks.0.attn.v"] == 0).all()


CAUSAL_WITH_HEAD = {
    **{k: FAMILIES[k] for k in ("gpt", "llama_gqa_rope")},
    "post_ln_sinusoidal_relu_types": ModelConfig(
        vocab_size=50, context_length=32, d_model=32, n_heads=4, n_layers=2, qkv_bias=True,
        norm_position="post", activation="relu", positional="sinusoidal", token_types=2,
        embed_norm=True),
    "rmsnorm_gelu_exact": ModelConfig(vocab_size=50, context_length=32, d_model=32, n_heads=4,
                                      n_layers=2, norm="rmsnorm", activation="gelu"),
}


@pytest.mark.parametrize("family", CAUSAL_WITH_HEAD)
@pytest.mark.parametrize("layout", [False, True])
def test_step_is_forward_for_one_cached_token(family, layout):
    cfg = CAUSAL_WITH_HEAD[family]
    model = build_model(cfg, seed=8)
    if layout:
        decoding.decoding_layout(model)
    ids = IDS[0].tolist()
    full = model(IDS)[0]  # (T, V)
    with torch.inference_mode():
        caches = KVCache(cfg), KVCache(cfg)
        model(IDS[:, :3], cache=caches[0])
        model(IDS[:, :3], cache=caches[1])
        for t in range(3, len(ids)):
            stepped = decoding.step(model, ids[t], caches[0])
            forwarded = model(IDS[:, t:t + 1], cache=caches[1], keep=None, head="last")[0, -1]
            assert caches[0].length == caches[1].length == t + 1
            assert torch.equal(stepped, forwarded)
            assert torch.allclose(stepped, full[t], atol=1e-5)
        for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):
            assert torch.equal(a[:, :, :len(ids)], b[:, :, :len(ids)])


_SEQ2SEQ = dict(vocab_size=50, context_length=32, d_model=32, n_heads=4, n_layers=2,
                n_decoder_layers=2, qkv_bias=True, causal=False, tie_embeddings=True)
SEQ2SEQ = {
    "paper": ModelConfig(**_SEQ2SEQ, norm_position="post", activation="relu",
                         positional="sinusoidal"),
    "marian": ModelConfig(**_SEQ2SEQ, norm_position="post", activation="silu",
                          positional="sinusoidal", sinusoidal_layout="halves",
                          embed_scale=True, logits_bias=True, decoder_start_id=7),
    "bart": ModelConfig(**_SEQ2SEQ, norm_position="post", activation="gelu", pos_offset=2,
                        embed_norm=True, logits_bias=True, decoder_start_id=2),
    "mbart": ModelConfig(**_SEQ2SEQ, norm_position="pre", activation="gelu", pos_offset=2,
                         embed_norm=True, embed_scale=True, logits_bias=True),
}


@pytest.mark.parametrize("family", SEQ2SEQ)
def test_decoder_step_is_forward_for_one_cached_target_token(family):
    """An encoder–decoder's lean decoding step gives forward's logits, cache and
    cross-attention memo bit for bit, from the first target token (which makes the
    memo) on."""
    cfg = SEQ2SEQ[family]
    model = build_model(cfg, seed=8)
    if cfg.logits_bias:  # a fresh bias is zeros: give it values that show
        model.final_logits_bias.copy_(torch.randn(cfg.vocab_size))
    assert decoding.supports(model)
    target = [cfg.start_id, 11, 4, 29, 8, 8]
    with torch.inference_mode():
        memory = model.encode(IDS)
        full = model(IDS, target=torch.tensor([target]))[0]  # (T, V)
        caches = KVCache(cfg), KVCache(cfg)
        for t, token in enumerate(target):
            stepped = decoding.decoder_step(model, token, caches[0], memory)
            forwarded = model(IDS, target=torch.tensor([[token]]), memory=memory,
                              cache=caches[1], keep=None, head="last")[0, -1]
            assert caches[0].length == caches[1].length == t + 1
            assert torch.equal(stepped, forwarded), t
            assert torch.allclose(stepped, full[t], atol=1e-5)
    for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v):
        assert torch.equal(a[:, :, :len(target)], b[:, :, :len(target)])
    for layer in range(cfg.n_decoder_layers):
        for a, b in zip(caches[0].memory_kv[layer], caches[1].memory_kv[layer]):
            assert torch.equal(a, b)


def test_record_keeps_decoding_off_the_lean_path():
    model = build_model(FAMILIES["gpt"], seed=9)
    assert model.recording == 0
    with model.record(["logits"]):
        with model.record(["blocks.0.attn.q"]):
            assert model.recording == 2
        assert model.recording == 1
    assert model.recording == 0


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("blocks", [0, 1])
def test_partial_build_is_the_whole_model_cut_short(family, blocks):
    cfg = FAMILIES[family]
    whole, part = build_model(cfg, seed=5), build_model(cfg, seed=5, blocks=blocks)
    made = dict(part.named_parameters())
    for name, p in whole.named_parameters():
        inside = name.startswith("embed.") or any(
            name.startswith(f"blocks.{i}.") for i in range(blocks))
        assert made[name].is_meta != inside, name  # built exactly where a forward reaches
        if inside:
            assert torch.equal(made[name], p), name  # same seed, same values, bit for bit
    if cfg.lm_head and cfg.tie_embeddings:
        assert part.lm_head.weight is part.embed.tok_emb.weight and not part.lm_head.weight.is_meta
    assert part.tap_names() == whole.tap_names()
    select = ["embed.out"] + [f"blocks.{i}.*" for i in range(blocks)]
    with whole.record(select) as a:
        whole(IDS, stop_after=blocks - 1)
    with part.record(select) as b:
        assert part(IDS, stop_after=blocks - 1) is None
    assert a.names() == b.names() and "embed.out" in b.names()
    for name in a.names():
        assert torch.equal(a.raw(name), b.raw(name)), name
    with pytest.raises(RuntimeError, match=f"built with {blocks} of 2 blocks"):
        part(IDS, stop_after=blocks)
    with pytest.raises(RuntimeError, match="build it whole"):
        part(IDS)


def test_partial_build_asking_for_every_block_is_the_whole_model():
    cfg = FAMILIES["gpt"]
    part = build_model(cfg, seed=5, blocks=9)
    assert part.built_blocks == 2 and not any(p.is_meta for p in part.parameters())
    assert torch.equal(part(IDS), build_model(cfg, seed=5)(IDS))


@pytest.mark.parametrize("family", ["gpt", "llama_gqa_rope"])
def test_a_run_resumes_from_any_block_input(family):
    model = build_model(FAMILIES[family], seed=3)
    with torch.inference_mode():
        with model.record(["embed.out", "blocks.*.resid_out"]) as trace:
            whole = model(IDS)
        context = model.attention_context(IDS.shape[1])
        for first in range(model.cfg.n_layers):
            entering = "embed.out" if first == 0 else f"blocks.{first - 1}.resid_out"
            resumed = model.run_blocks(trace.raw(entering)[None], context, first=first)
            assert torch.equal(resumed, whole), first
