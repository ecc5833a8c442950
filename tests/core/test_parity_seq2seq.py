"""Parity of the encoder–decoder families (Marian, BART, mBART) with transformers.

For each family transformers builds a tiny random model (2 + 2 layers, d_model 64, 4
heads, 300 words) with its own config class, every parameter and the final_logits_bias
jiggled so no tensor is trivially ones or zeros, saves it with `save_pretrained` and a
byte-level tokenizer.json beside it; tfx loads the folder with `--weights DIR` and must
give transformers' eager forward's logits (<= 1e-5), encoder self-attention, decoder
self-attention and cross-attention patterns and both stacks' hidden states, its greedy
`generate`, and run every command on the folder.
"""
import json

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json, need
from parity import bound
from ranks import assert_ranked

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
SOURCE = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201]
TARGET = [11, 12, 13, 200, 8]  # after the start id
VALID = 6  # source positions that are not padding, in the padding tests
SIZE = dict(vocab_size=300, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
            decoder_ffn_dim=96, max_position_embeddings=64)

# family -> (config class, model class, config overrides): Marian as the Helsinki-NLP
# models are configured (scaled embeddings, swish, start and pad 299, end 0); BART with
# its defaults (start 2, exact GELU, unscaled); mBART with scaled embeddings and start 5
FAMILIES = {
    "marian": ("MarianConfig", "MarianMTModel",
               {"scale_embedding": True, "activation_function": "swish", "pad_token_id": 299,
                "decoder_start_token_id": 299, "eos_token_id": 0, "forced_eos_token_id": 0}),
    "bart": ("BartConfig", "BartForConditionalGeneration", {}),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration",
              {"scale_embedding": True, "decoder_start_token_id": 5}),
}


def make_folder(path, family: str):
    need("transformers", "pip install transformers")
    import transformers

    config_name, model_name, overrides = FAMILIES[family]
    config = getattr(transformers, config_name)(**SIZE, **overrides,
                                                attn_implementation="eager")
    torch.manual_seed(sum(map(ord, family)))
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # fresh norms are ones and biases zeros: jiggle everything
        for name, p in model.named_parameters():
            if p.requires_grad:  # Marian's sinusoidal tables are frozen and never saved
                p.add_(torch.randn_like(p) * 0.05)
        model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(path)
    byte_tokenizer_json(path, SIZE["vocab_size"])
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    return request.param, path, make_folder(path, request.param)


def _load(path):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    cfg = checkpoint_config(str(path))
    return cfg, load_weights(str(path), cfg)


def _hidden_names(cfg, stack: str, n: int) -> list[str]:
    """tfx's names of transformers' hidden states: the embedding, every block's output,
    the last one through the final norm when the stack has one (pre-LN, mBART)."""
    last = f"{stack}.ln_f.out" if cfg.has_final_norm else f"{stack}.blocks.{n - 1}.resid_out"
    return [f"{stack}.embed.out"] + [f"{stack}.blocks.{i}.resid_out" for i in range(n - 1)] \
        + [last]


def _diff(a, b) -> float:
    return float((torch.as_tensor(a) - b).abs().max())


def test_config_is_the_family(family):
    name, path, hf = family
    cfg, _ = _load(path)
    assert (cfg.n_layers, cfg.n_decoder_layers, cfg.d_model, cfg.n_heads, cfg.d_ff,
            cfg.vocab_size) == (2, 2, 64, 4, 96, 300)
    assert cfg.start_id == hf.config.decoder_start_token_id
    assert cfg.logits_bias and cfg.tie_embeddings
    assert cfg.embed_scale == hf.config.scale_embedding
    want = {"marian": ("sinusoidal", "halves", 0, "post", "silu", False),
            "bart": ("learned", "interleaved", 2, "post", "gelu", True),
            "mbart": ("learned", "interleaved", 2, "pre", "gelu", True)}[name]
    assert (cfg.positional, cfg.sinusoidal_layout, cfg.pos_offset, cfg.norm_position,
            cfg.activation, cfg.embed_norm) == want


def test_logits_patterns_and_hidden_states_match(family):
    name, path, hf = family
    cfg, model = _load(path)
    src = torch.tensor([SOURCE])
    tgt = torch.tensor([[cfg.start_id] + TARGET])
    with torch.inference_mode():
        ref = hf(input_ids=src, decoder_input_ids=tgt, output_attentions=True,
                 output_hidden_states=True)
        with model.record(["*"]) as tr:
            model(src, target=tgt)
    assert _diff(tr.array("logits"), ref.logits[0]) <= LOGITS, name
    for i in range(2):
        for ours, theirs in ((f"encoder.blocks.{i}.attn", ref.encoder_attentions),
                             (f"decoder.blocks.{i}.attn", ref.decoder_attentions),
                             (f"decoder.blocks.{i}.cross", ref.cross_attentions)):
            assert _diff(tr.array(ours + ".pattern"), theirs[i][0]) <= 1e-5, (name, ours)
    for stack, states in (("encoder", ref.encoder_hidden_states),
                          ("decoder", ref.decoder_hidden_states)):
        names = _hidden_names(cfg, stack, 2)
        assert len(names) == len(states)
        for ours, theirs in zip(names, states):
            assert _diff(tr.array(ours), theirs[0]) <= 1e-5, (name, ours)
    # the fused attention path (nothing recorded) gives the same logits
    with torch.inference_mode():
        assert _diff(model(src, target=tgt)[0], ref.logits[0]) <= LOGITS, name


def test_positions_are_transformers_rows(family):
    """Marian's positions are no tensor of the checkpoint: tfx computes the table
    transformers computes (sines in the first half, cosines in the second); BART's are
    read from row position + 2 of its table, as `posenc` shows them."""
    from tfx_cli import api

    name, path, hf = family
    _, model = _load(path)
    shown = torch.as_tensor(api.posenc(weights=str(path), length=8).tensors["posenc.table"])
    if name == "marian":
        for stack in ("encoder", "decoder"):
            want = getattr(hf.model, stack).embed_positions.weight
            assert torch.equal(getattr(model, stack).embed.pe, want)
        assert torch.equal(shown, hf.model.encoder.embed_positions.weight[:8])
    else:
        assert torch.equal(shown, hf.model.encoder.embed_positions.weight[2:10])


def test_an_older_save_with_every_copy_loads(family, tmp_path):
    """Older saves are pytorch_model.bin files holding every name of the state dict: the
    token table under all four names (shared, both stacks, the head), Marian's sinusoidal
    tables; files older still lack final_logits_bias, which transformers then leaves at
    zero. tfx reads one table, leaves the sinusoids to its own and zeroes the bias."""
    import shutil

    name, path, hf = family
    old = tmp_path / "old"
    shutil.copytree(path, old)
    (old / "model.safetensors").unlink()
    state = {k: v.clone() for k, v in hf.state_dict().items() if k != "final_logits_bias"}
    assert {"model.shared.weight", "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight", "lm_head.weight"} <= set(state)
    torch.save(state, old / "pytorch_model.bin")
    _, model = _load(old)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([[hf.config.decoder_start_token_id]
                                                     + TARGET])
    with torch.inference_mode():
        want = hf(input_ids=src, decoder_input_ids=tgt).logits[0] - hf.final_logits_bias
        assert _diff(model(src, target=tgt)[0], want) <= 1e-5, name
    assert not model.final_logits_bias.any()


def test_cached_decoding_is_transformers_greedy_generate(family):
    from tfx_cli.core.analysis.decode import decode

    name, path, hf = family
    cfg, model = _load(path)
    cached = decode(model, SOURCE, max_new_tokens=12, keep_logits=True)
    plain = decode(model, SOURCE, max_new_tokens=12, use_cache=False, keep_logits=True)
    assert cached.ids == plain.ids, name
    for a, b in zip(cached.logits, plain.logits):
        assert (a - b).abs().max() <= 1e-5, name
    with torch.inference_mode():  # no end token, nothing forced: 12 argmax steps
        out = hf.generate(torch.tensor([SOURCE]), attention_mask=torch.ones(1, len(SOURCE),
                          dtype=torch.long), max_new_tokens=12, do_sample=False, num_beams=1,
                          decoder_start_token_id=cfg.start_id, eos_token_id=None,
                          forced_eos_token_id=None, forced_bos_token_id=None)
    assert cached.ids == out[0].tolist(), name
    assert model.encoder_runs == 2  # once per decode: the cached one and the plain one


def test_padded_source_gets_no_attention(family):
    """--valid-lens on an encoder–decoder pads the source: the encoder's and the
    cross-attention's keys past it get weight exactly 0, as transformers' attention_mask
    gives them, and what the padding holds changes nothing."""
    name, path, hf = family
    cfg, model = _load(path)
    src = torch.tensor([SOURCE])
    tgt = torch.tensor([[cfg.start_id] + TARGET])
    mask = torch.tensor([[1] * VALID + [0] * (len(SOURCE) - VALID)])
    with torch.inference_mode():
        ref = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt,
                 output_attentions=True)
        with model.record(["*.pattern", "logits"]) as tr:
            model(src, target=tgt, source_len=VALID)
        plain = model(src, target=tgt, source_len=VALID)
        other = src.clone()
        other[0, VALID:] = torch.tensor([1, 2, 3, 4])
        repadded = model(other, target=tgt, source_len=VALID)
    assert _diff(tr.array("logits"), ref.logits[0]) <= LOGITS, name
    for i in range(2):
        for ours, theirs in ((f"encoder.blocks.{i}.attn", ref.encoder_attentions),
                             (f"decoder.blocks.{i}.cross", ref.cross_attentions)):
            pattern = torch.as_tensor(tr.array(ours + ".pattern"))
            assert _diff(pattern, theirs[i][0]) <= 1e-5, (name, ours)
            assert (pattern[..., VALID:] == 0).all(), (name, ours)
    assert torch.equal(repadded, plain), name


def test_count_params_is_transformers_count(family):
    """tfx counts what transformers counts, tied tables once and final_logits_bias (a
    buffer) not at all, except Marian's two sinusoidal tables: transformers holds them as
    frozen parameters, tfx as fixed buffers."""
    from tfx_cli import api

    name, path, hf = family
    counted = api.count_params(weights=str(path), verify=True)
    assert counted.verify.verified, (name, counted.verify.mismatched)
    frozen = {n: p.numel() for n, p in hf.named_parameters() if not p.requires_grad}
    if name == "marian":
        assert set(frozen) == {"model.encoder.embed_positions.weight",
                               "model.decoder.embed_positions.weight"}
    else:
        assert not frozen
    assert counted.total == hf.num_parameters() - sum(frozen.values()), name


def _cli(args):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    return CliRunner().invoke(app, args, env={"TFX_QUIET": "1"})


COMMANDS = {
    "attend-cross": ["attend", "--target", "Hi", "--cross", "--layer", "1"],
    "attend": ["attend", "--layer", "1"],
    "next": ["next", "--target", "Hi"],
    "generate": ["generate", "-n", "4", "--ignore-eos"],
    "trace": ["trace", "--target", "Hi", "-s", "decoder.blocks.1.*"],
    "layernorm": ["layernorm", "--which", "ln3", "--target", "Hi"],
    "embed": ["embed", "--target", "Hi"],
    "posenc": ["posenc", "--length", "8"],
    "lens": ["lens", "--target", "Hi"],
    "ffn": ["ffn", "--target", "Hi", "--layer", "1"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_runs_on_the_family(family, command, tmp_path):
    name, path, _ = family
    cmd, *extra = COMMANDS[command]
    text = [] if cmd == "posenc" else ["Hello there"]
    result = _cli([cmd, *text, "-w", str(path), "--json", *extra])
    assert result.exit_code == 0, (name, command, result.stderr)
    doc = json.loads(result.stdout)
    assert doc["model"]["weights"] == str(path)
    if "--target" in extra:  # the decoder ran on the start id and "Hi"
        assert doc["input"]["target"]["ids"][0] == doc["model"]["decoder_start_id"]


def test_cli_answers_are_transformers(family):
    """`next --target` ranks transformers' logits, `generate` writes its greedy tokens,
    and `attend --cross --valid-lens` shows its masked cross-attention."""
    name, path, hf = family
    source = list("Hello there".encode())  # the byte tokenizer: id = byte
    target = [hf.config.decoder_start_token_id] + list(b"Hi")
    mask = torch.tensor([[1] * 4 + [0] * (len(source) - 4)])
    with torch.inference_mode():
        ref = hf(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]))
        padded = hf(input_ids=torch.tensor([source]), attention_mask=mask,
                    decoder_input_ids=torch.tensor([target]), output_attentions=True)
        out = hf.generate(torch.tensor([source]), attention_mask=torch.ones_like(mask),
                          max_new_tokens=5, do_sample=False, num_beams=1, eos_token_id=None,
                          forced_eos_token_id=None, forced_bos_token_id=None)
    nxt = json.loads(_cli(["next", "Hello there", "-w", str(path), "--target", "Hi",
                           "--json"]).stdout)["result"]
    assert_ranked([nxt["greedy"]["id"]], ref.logits[0, -1], 1e-5)
    top = nxt["candidates"][0]
    assert abs(top["logit"] - float(ref.logits[0, -1, top["id"]])) <= 1e-5
    gen = json.loads(_cli(["generate", "Hello there", "-w", str(path), "-n", "5",
                           "--ignore-eos", "--json"]).stdout)["result"]
    assert gen["ids"] == out[0].tolist(), name
    att = _cli(["attend", "Hello there", "-w", str(path), "--target", "Hi", "--cross",
                "--layer", "1", "--valid-lens", "4", "--json"])
    assert att.exit_code == 0, att.stderr
    pattern = torch.tensor(json.loads(att.stdout)["tensors"]["decoder.blocks.1.cross.pattern"]
                           ["data"])
    assert (pattern[..., 4:] == 0).all()
    assert _diff(pattern, padded.cross_attentions[1][0]) <= 1e-5, name


def test_target_goes_on_without_the_end_token(tmp_path):
    """A real BART tokenizer wraps every text in <s> … </s>. The source keeps both, as
    transformers' tokenizer gives them; the target is the decoder's input so far, which
    goes on: <s> and its words, no </s> (what transformers' generate feeds after the
    start token)."""
    need("tokenizers", "pip install tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    from tfx_cli.core.tokenizers.hf import _BYTE_OF

    path = tmp_path / "tiny-bart-specials"
    bos, eos = 256, 257
    hf = make_folder(path, "bart")
    vocab = {**_BYTE_OF, "<s>": bos, "</s>": eos}
    vocab.update({f"<unused{i}>": i for i in range(len(vocab), SIZE["vocab_size"])})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)])
    tok.save(str(path / "tokenizer.json"))
    result = _cli(["next", "Hello", "-w", str(path), "--target", "Hi", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    source, target = doc["input"]["ids"], doc["input"]["target"]["ids"]
    assert source == [bos, *b"Hello", eos]
    assert target == [hf.config.decoder_start_token_id, bos, *b"Hi"]
    with torch.inference_mode():
        want = hf(input_ids=torch.tensor([source]),
                  decoder_input_ids=torch.tensor([target])).logits[0, -1]
    top = doc["result"]["candidates"][0]
    assert_ranked([top["id"]], want, 1e-5)
    assert abs(top["logit"] - float(want[top["id"]])) <= 1e-5
