"""The encoder–decoder of seed 001 and the paper: masks, cross-attention, decoding with a
cache, the paper's parameter counts, and training as the seed describes it."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core.presets import PRESETS
from tfx_cli.core.config import ModelConfig
from tfx_cli.core.analysis.decode import decode
from tfx_cli.core.model import build_model

SOURCE, TARGET = "When you play game of thrones", "you win or you die"
PAIRS = "samples/seed001.tsv"


def test_toy_is_seed_001s_model():
    cfg = PRESETS["toy"]
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.n_decoder_layers) == (6, 2, 1, 1)
    assert (cfg.norm_position, cfg.activation, cfg.positional) == ("post", "relu", "sinusoidal")
    names = build_model(cfg, device="meta").tap_names()
    assert names[0] == "encoder.tokens.ids" and names[-1] == "logits"
    for name in ("encoder.blocks.0.attn.pattern", "decoder.blocks.0.attn.pattern",
                 "decoder.blocks.0.cross.pattern", "decoder.blocks.0.ln3.out",
                 "decoder.blocks.0.resid_cross"):
        assert name in names


@pytest.mark.parametrize("config, vocab, total", [("vaswani", 37000, 63_082_496),
                                                  ("vaswani-big", 37000, 214_245_376)])
def test_the_papers_parameter_counts(config, vocab, total):
    """Table 3 of the paper rounds these to 65M and 213M (shared 37000-token vocabulary,
    tied to the output layer)."""
    counted = api.count_params(config=config, vocab_size=vocab, verify=True)
    assert counted.total == total and counted.verify.verified
    assert counted.parts["decoder_blocks"] > counted.parts["encoder_blocks"]  # + cross
    assert counted.decoder_per_block.parts["cross_attention"] == 4 * (512 * 512 + 512) \
        if config == "vaswani" else True


def test_masks_decoder_causal_cross_sums_to_one_and_hides_padding():
    self_attn = api.attend(SOURCE, config="toy", target=TARGET)
    pattern = self_attn.tensors["decoder.blocks.0.attn.pattern"]  # (H, T, T)
    assert pattern.shape == (2, 6, 6)
    assert (np.triu(pattern, k=1) == 0).all()  # exactly 0 above the diagonal
    cross = api.attend(SOURCE, config="toy", target=TARGET, cross=True)
    weights = cross.tensors["decoder.blocks.0.cross.pattern"]  # (H, T, S)
    assert weights.shape == (2, 6, 6) and cross.mask == "none"
    assert np.abs(weights.sum(-1) - 1).max() < 1e-6
    padded = api.attend(SOURCE, config="toy", target=TARGET, cross=True, valid_lens=4)
    hidden = padded.tensors["decoder.blocks.0.cross.pattern"]
    assert (hidden[..., 4:] == 0).all() and np.abs(hidden.sum(-1) - 1).max() < 1e-6
    assert not np.allclose(hidden[..., :4], weights[..., :4])  # padding changed the rest


def test_explain_spells_out_a_target_word_reading_the_source():
    res = api.attend(SOURCE, config="toy", target=TARGET, cross=True, explain=True,
                     query_pos=2, head=1)
    ex = res.explain
    assert ex.query_token == "win" and [k.token for k in ex.keys] == SOURCE.split()
    assert ex.max_abs_diff_vs_pattern < 1e-6


@pytest.mark.parametrize("config", ["toy", "vaswani"])
def test_cached_decoding_equals_recomputing_and_the_encoder_runs_once(config):
    cfg = PRESETS[config]
    model = build_model(cfg, 123)
    source = list(range(4, 36)) if config == "vaswani" else [4, 5, 6, 7, 8, 9]
    cached = decode(model, source, max_new_tokens=12, keep_logits=True)
    assert model.encoder_runs == 1
    plain = decode(model, source, max_new_tokens=12, keep_logits=True, use_cache=False)
    assert model.encoder_runs == 2  # once per decode, cached or not
    assert cached.ids == plain.ids and cached.ids[0] == cfg.start_id
    for a, b in zip(cached.logits, plain.logits):
        # toy's logits are O(1): 1e-5 absolute; vaswani's random tied head gives O(100)
        # logits, held to 1e-5 of their size (float32 rounds the sums differently)
        assert (a - b).abs().max() <= 1e-5 * max(1.0, float(a.abs().max()))
    assert [s.fed for s in cached.steps] == [1] * 12  # one new target token per step


def test_forward_matches_a_by_hand_decoder_block():
    """The decoder block is the paper's: ln1(x + self), ln2(x + cross(x, memory)),
    ln3(x + ffn(x)); recomputed here from the modules' weights with plain torch."""
    cfg = PRESETS["toy"]
    model = build_model(cfg, 5)
    src, tgt = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 9, 10]])
    with torch.inference_mode():
        logits = model(src, target=tgt)[0]
        memory = model.encode(src)
        dec = model.decoder
        x = dec.embed.tok_emb(tgt) + dec.embed.pe[:3][None]
        block = dec.blocks[0]

        def attention(mod, q_in, kv_in, causal):
            H, D = cfg.n_heads, cfg.head_dim
            q = mod.W_query(q_in).view(1, -1, H, D).transpose(1, 2)
            k = mod.W_key(kv_in).view(1, -1, H, D).transpose(1, 2)
            v = mod.W_value(kv_in).view(1, -1, H, D).transpose(1, 2)
            s = q @ k.transpose(-1, -2) / D ** 0.5
            if causal:
                s = s.masked_fill(torch.ones(s.shape[-2:]).triu(1).bool(), float("-inf"))
            out = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, -1, H * D)
            return mod.out_proj(out)

        x = block.ln1.fused(x + attention(block.attn, x, x, True))
        x = block.ln2.fused(x + attention(block.cross, x, memory, False))
        x = block.ln3.fused(x + block.ffn(x))
        want = model.lm_head(x)[0]
    assert (logits - want).abs().max() < 1e-5


def test_pre_ln_variant_has_final_norms(tmp_path):
    cfg = dict(PRESETS["toy"].to_dict(), norm_position="pre", name=None)
    cfg.pop("name")
    path = tmp_path / "pre.json"
    path.write_text(json.dumps(cfg))
    res = api.trace(SOURCE, config=str(path), target=TARGET, select=["*ln_f.out", "logits"])
    assert set(res.tensors.names()) == {"encoder.ln_f.out", "decoder.ln_f.out", "logits"}
    counted = api.count_params(config=str(path), verify=True)
    assert counted.verify.verified and "decoder.ln_f.scale" in \
        [row.name for row in counted.breakdown]


def test_train_learns_the_seed_pair_and_writes_the_same_bytes(tmp_path):
    """tfx train on the seed's pair: with --seed 123 the model answers the exact target
    and stops at <end>; the same seed writes byte-identical files."""
    runner = CliRunner()
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        result = runner.invoke(app, ["train", "-c", "toy", "--pairs", PAIRS, "--seed", "123",
                                     "-o", str(out), "--json"], env={"TFX_QUIET": "1"})
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)["result"]
        assert doc["all_exact"] is True and doc["loss_last"] < doc["loss_first"] / 100
    for name in ("model.safetensors", "tfx-model.json", "vocab.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    gen = runner.invoke(app, ["generate", SOURCE, "--weights", str(outs[0]), "--json"],
                        env={"TFX_QUIET": "1"})
    doc = json.loads(gen.stdout)["result"]
    assert doc["text"] == TARGET and doc["stopped"] == "eos"
    # and every stage command reads the trained folder
    cross = api.attend(SOURCE, weights=str(outs[0]), target=TARGET, cross=True)
    assert cross.tensors["decoder.blocks.0.cross.pattern"].shape == (2, 6, 6)
    assert api.next(SOURCE, weights=str(outs[0]), target="you win or").greedy.token == "you"


def test_train_a_decoder_only_model_on_a_text(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat and the dog sat on the log\n")
    res = api.train(config="gpt2", layers=1, d_model=16, heads=2, text=text, steps=150,
                    lr=0.02, output=tmp_path / "gpt")
    assert res.losses[-1] < res.losses[0] and res.all_exact is None
    out = api.generate("the cat", weights=str(tmp_path / "gpt"), max_new_tokens=4)
    assert out.text.startswith("the cat sat on")


def test_config_refuses_a_causal_encoder():
    with pytest.raises(Exception, match="set causal to false"):
        ModelConfig(d_model=8, n_heads=2, n_layers=1, n_decoder_layers=1, causal=True)


# -- interventions on an encoder–decoder ------------------------------------------------
def test_ablating_a_cross_attention_head_hides_the_source_from_it_alone():
    """decoder.blocks.0.cross.pattern:h=1 zeroes head 1's weights on the source; head 0
    and the encoder are as in the plain run, and the result says what was changed."""
    m = api.load(config="toy")
    select = ["encoder.blocks.0.resid_out", "decoder.blocks.0.cross.*"]
    plain = m.trace(SOURCE, target="you win", select=select)
    cut = m.trace(SOURCE, target="you win", select=select,
                  ablate=["decoder.blocks.0.cross.pattern:h=1"])
    a, b = plain.tensors, cut.tensors
    assert np.array_equal(a["encoder.blocks.0.resid_out"], b["encoder.blocks.0.resid_out"])
    pattern, context = b["decoder.blocks.0.cross.pattern"], b["decoder.blocks.0.cross.context"]
    assert not pattern[1].any() and not context[1].any()  # (H, T, S) and (H, T, D)
    assert np.array_equal(pattern[0], a["decoder.blocks.0.cross.pattern"][0])
    assert np.array_equal(context[0], a["decoder.blocks.0.cross.context"][0])
    assert not np.array_equal(b["decoder.blocks.0.cross.out"], a["decoder.blocks.0.cross.out"])
    assert cut.interventions[0].name == "decoder.blocks.0.cross.pattern"
    assert cut.interventions[0].head == 1


def test_an_encoder_site_changes_the_memory_the_decoder_reads():
    """Zeroing the encoder's output leaves every source position the same to the
    decoder: cross-attention's keys are then one row repeated, and the next-word
    distribution moves."""
    m = api.load(config="toy")
    cut = m.trace(SOURCE, target="you win", select=["decoder.blocks.0.cross.k"],
                  ablate=["encoder.blocks.0.resid_out"])
    keys = cut.tensors["decoder.blocks.0.cross.k"]  # (H, S, D)
    assert np.allclose(keys, keys[:, :1], atol=0, rtol=0)
    plain = m.next(SOURCE, target="you win")
    moved = m.next(SOURCE, target="you win", ablate=["encoder.blocks.0.resid_out"])
    assert [c.prob for c in plain.candidates] != [c.prob for c in moved.candidates]


def test_generate_with_an_ablation_runs_the_encoder_once_and_edits_every_step():
    """With an intervention every step recomputes the target without the cache (an edit
    at earlier positions must hold), and the encoder still runs once; the steps agree
    with next() run on each prefix with the same ablation."""
    m = api.load(config="toy")
    site = ["decoder.blocks.0.ffn.out:p=0"]  # the <start> position, there at every step
    before = m.module.encoder_runs
    out = m.generate(SOURCE, max_new_tokens=3, ignore_eos=True, ablate=site)
    assert m.module.encoder_runs == before + 1
    assert out.settings.cache is False
    from tfx_cli.core.analysis import sites as interventions

    loaded = m._loaded
    source = torch.tensor([loaded.tokenizer.encode(SOURCE)])
    with interventions.applied(loaded, interventions.plan(loaded, ablate=site)), \
            torch.inference_mode():
        for i, step in enumerate(out.steps):  # the whole target so far, edited
            logits = m.module(source, target=torch.tensor([out.ids[:i + 1]]))[0, -1]
            probs = torch.softmax(logits.double(), dim=-1)
            assert int(logits.argmax()) == step.id
            assert abs(float(probs[step.id]) - step.prob) < 1e-6
    plain = m.generate(SOURCE, max_new_tokens=3, ignore_eos=True)
    assert [s.prob for s in plain.steps] != [s.prob for s in out.steps]


@pytest.mark.parametrize("option", [{"dtype": "bfloat16"}, {"device": "cuda"},
                                    {"max_memory": "1GB"}])
def test_train_refuses_the_run_options_it_would_ignore(option, tmp_path):
    from tfx_cli.errors import UsageError

    with pytest.raises(UsageError, match="trains in float32 on the CPU"):
        api.train(config="toy", pairs=str(Path(__file__).parents[2] / PAIRS),
                  output=str(tmp_path / "out"), **option)
    assert not (tmp_path / "out").exists()
