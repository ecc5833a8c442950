"""Parity of T5, Flan-T5 and UMT5 with transformers, through the encoder–decoder path.

For each kind transformers builds a tiny random model (checkpoint_makers.t5_folder: 2
encoder + 3 decoder layers, d_model 64, 4 heads 8 wide, 8 relative buckets up to
distance 12, every parameter jiggled), saves it with `save_pretrained` and a byte-level
tokenizer.json; tfx loads the folder with `--weights DIR` and must give transformers'
eager forward's logits (<= 1e-4 with a target: the issue's bound; the numbers come out
within 3e-5 of logits about 30 in size), its attention patterns, hidden states and the
relative position bias each layer adds, its greedy `generate` from the cached decoder,
and its parameter count. T5Model (no head) and T5EncoderModel (the encoder alone) load
too, and transformers' bucket function is held to tfx's over a long range of distances.
"""
import json

import pytest
import torch
from checkpoint_makers import T5_KINDS, need, t5_folder
from parity import bound
from ranks import assert_ranked

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
SOURCE = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 33, 44, 55, 66, 77, 88, 99, 100, 101, 102,
          103, 104, 105, 106, 107]  # 25 positions: distances past max_distance 12
TARGET = [11, 12, 13, 200, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]
VALID = 6  # source positions that are not padding, in the padding test


_MADE: dict = {}


def _made(name, tmp_path_factory):
    if name not in _MADE:
        path = tmp_path_factory.mktemp(name) / name
        _MADE[name] = (name, path, t5_folder(path, name))
    return _MADE[name]


@pytest.fixture(scope="module", params=list(T5_KINDS))
def kind(request, tmp_path_factory):
    return _made(request.param, tmp_path_factory)


# decoding and the CLI on the three arithmetics (mT5's is Flan-T5's, its head unscaled)
@pytest.fixture(scope="module", params=["t5", "flan-t5", "umt5"])
def decoding_kind(request, tmp_path_factory):
    return _made(request.param, tmp_path_factory)


def _load(path):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    cfg = checkpoint_config(str(path))
    return cfg, load_weights(str(path), cfg)


def _diff(a, b) -> float:
    return float((torch.as_tensor(a) - b).abs().max())


def test_buckets_are_transformers_buckets():
    need("transformers", "pip install transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    from tfx_cli.core.model.positions import relative_buckets

    distance = torch.arange(-700, 701)
    for both_ways in (True, False):
        for buckets, far in ((32, 128), (8, 20), (64, 256)):
            want = T5Attention._relative_position_bucket(distance, both_ways, buckets, far)
            got = relative_buckets(distance, bidirectional=both_ways, buckets=buckets,
                                   max_distance=far)
            assert torch.equal(got, want), (both_ways, buckets, far)


def test_config_is_the_family(kind):
    name, path, hf = kind
    cfg, _ = _load(path)
    assert (cfg.n_layers, cfg.n_decoder_layers, cfg.d_model, cfg.n_heads, cfg.head_dim,
            cfg.d_ff, cfg.vocab_size) == (2, 3, 64, 4, 8, 96, 300)
    assert (cfg.positional, cfg.relative_buckets, cfg.relative_max_distance) == \
        ("relative", 8, 12)
    assert (cfg.norm, cfg.norm_position, cfg.attn_scalar, cfg.qkv_bias, cfg.proj_bias) == \
        ("rmsnorm", "pre", 1.0, False, False)
    tied = name == "t5"  # the others' heads are their own, never rescaled
    assert (cfg.tie_embeddings, cfg.unembed_scale) == (tied, tied)
    assert cfg.activation == ("relu" if name == "t5" else "geglu")
    assert cfg.relative_per_layer == (name == "umt5")
    assert (cfg.start_id, cfg.eos_ids) == (0, (1,))


def test_logits_patterns_bias_and_hidden_states_match(kind):
    name, path, hf = kind
    cfg, model = _load(path)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([[cfg.start_id] + TARGET])
    with torch.inference_mode():
        ref = hf(input_ids=src, decoder_input_ids=tgt, output_attentions=True,
                 output_hidden_states=True)
        with model.record(["*"]) as tr:
            model(src, target=tgt)
        fused = model(src, target=tgt)  # nothing recorded: the fused attention
    assert _diff(tr.array("logits"), ref.logits[0]) <= LOGITS, name
    assert _diff(fused[0], ref.logits[0]) <= LOGITS, name
    for stack, n, attentions in (("encoder", 2, ref.encoder_attentions),
                                 ("decoder", 3, ref.decoder_attentions)):
        for i in range(n):
            ours = f"{stack}.blocks.{i}.attn"
            assert _diff(tr.array(ours + ".pattern"), attentions[i][0]) <= 1e-5, (name, ours)
            # the bias transformers adds in this layer (T5: the first layer's, shared)
            layer = getattr(hf, stack).block[i if name == "umt5" else 0].layer[0]
            T = tgt.shape[1] if stack == "decoder" else src.shape[1]
            want = layer.SelfAttention.compute_bias(T, src.shape[1] if stack == "encoder"
                                                    else T)[0]
            assert torch.equal(torch.as_tensor(tr.array(ours + ".position_bias")), want), \
                (name, ours)
    for i in range(3):
        assert _diff(tr.array(f"decoder.blocks.{i}.cross.pattern"),
                     ref.cross_attentions[i][0]) <= 1e-5, name
    # transformers' hidden states: each block's input, then the final norm's output
    for stack, n, states in ((("encoder", 2, ref.encoder_hidden_states)),
                             ("decoder", 3, ref.decoder_hidden_states)):
        names = [f"{stack}.embed.out"] + [f"{stack}.blocks.{i}.resid_out"
                                          for i in range(n - 1)] + [f"{stack}.ln_f.out"]
        assert len(names) == len(states)
        for ours, theirs in zip(names, states):
            assert _diff(tr.array(ours), theirs[0]) <= 1e-4 * max(1.0, float(
                theirs.abs().max())), (name, ours)


def test_cached_decoding_is_transformers_greedy_generate(decoding_kind):
    from tfx_cli.core.analysis.decode import decode

    name, path, hf = decoding_kind
    cfg, model = _load(path)
    cached = decode(model, SOURCE, max_new_tokens=16, keep_logits=True)
    plain = decode(model, SOURCE, max_new_tokens=16, use_cache=False, keep_logits=True)
    assert cached.ids == plain.ids, name
    for a, b in zip(cached.logits, plain.logits):
        assert (a - b).abs().max() <= 1e-4, name
    with torch.inference_mode():  # no end token: 16 argmax steps past distance 12
        # (transformers' own cache sizes itself by the encoder's layers, which a
        # decoder of another depth outgrows: its uncached greedy search instead)
        out = hf.generate(torch.tensor([SOURCE]), max_new_tokens=16, do_sample=False,
                          num_beams=1, eos_token_id=None, use_cache=False)
    assert cached.ids == out[0].tolist(), name


def test_padded_source_gets_no_attention(kind):
    name, path, hf = kind
    cfg, model = _load(path)
    src, tgt = torch.tensor([SOURCE[:10]]), torch.tensor([[cfg.start_id] + TARGET[:5]])
    mask = torch.tensor([[1] * VALID + [0] * (10 - VALID)])
    with torch.inference_mode():
        ref = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt,
                 output_attentions=True)
        with model.record(["*.pattern", "logits"]) as tr:
            model(src, target=tgt, source_len=VALID)
    assert _diff(tr.array("logits"), ref.logits[0]) <= LOGITS, name
    for i in range(3):
        pattern = torch.as_tensor(tr.array(f"decoder.blocks.{i}.cross.pattern"))
        assert (pattern[..., VALID:] == 0).all()
        assert _diff(pattern, ref.cross_attentions[i][0]) <= 1e-5, name


def test_count_params_is_transformers_count(kind):
    from tfx_cli import api

    name, path, hf = kind
    counted = api.count_params(weights=str(path), verify=True)
    assert counted.verify.verified, (name, counted.verify.mismatched)
    assert counted.total == hf.num_parameters(), name


def test_t5model_and_encoder_model(tmp_path):
    """T5Model: both stacks without a head (its last hidden state is the decoder's final
    norm); T5EncoderModel: one bidirectional stack, as a BERT-like encoder."""
    src = torch.tensor([SOURCE])
    for model_name, kind_ in (("T5Model", "t5"), ("T5EncoderModel", "flan-t5"),
                              ("UMT5EncoderModel", "umt5")):
        path = tmp_path / model_name
        hf = t5_folder(path, kind_, model=model_name)
        cfg, model = _load(path)
        assert not cfg.lm_head
        with torch.inference_mode():
            if model_name == "T5Model":
                tgt = torch.tensor([[0] + TARGET])
                want = hf(input_ids=src, decoder_input_ids=tgt).last_hidden_state[0]
                got = model(src, target=tgt)[0]
            else:
                assert not cfg.is_encoder_decoder
                want = hf(input_ids=src).last_hidden_state[0]
                got = model(src)[0]
        assert _diff(got, want) <= 1e-4, model_name
        assert api_count(path) == hf.num_parameters(), model_name


def api_count(path) -> int:
    from tfx_cli import api

    return api.count_params(weights=str(path)).total


def test_older_saves_and_a_head_tied_by_transformers(kind, tmp_path):
    """An older save (pytorch_model.bin) holds the token table under every name (shared,
    both stacks, and a tied head): tfx reads one. A Flan-style config saved by
    transformers 5 from a fresh model has a head transformers tied to the table, so the
    file holds no lm_head: tfx's head is then the table."""
    import shutil

    name, path, hf = kind
    old = tmp_path / "old"
    shutil.copytree(path, old)
    (old / "model.safetensors").unlink()
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    assert {"shared.weight", "encoder.embed_tokens.weight",
            "decoder.embed_tokens.weight", "lm_head.weight"} <= set(state)
    torch.save(state, old / "pytorch_model.bin")
    _, model = _load(old)
    src, tgt = torch.tensor([SOURCE]), torch.tensor([[0] + TARGET])
    with torch.inference_mode():
        want = hf(input_ids=src, decoder_input_ids=tgt).logits[0]
        assert _diff(model(src, target=tgt)[0], want) <= 1e-4, name
        if name != "t5":
            del state["lm_head.weight"]
            torch.save(state, old / "pytorch_model.bin")
            _, headless = _load(old)
            table = hf.shared.weight
            assert torch.equal(headless.lm_head.weight, table)
            assert headless.lm_head.weight is not headless.encoder.embed.tok_emb.weight


def _cli(args):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    return CliRunner().invoke(app, args, env={"TFX_QUIET": "1"})


COMMANDS = {
    "attend-cross": ["attend", "--target", "Hi", "--cross", "--layer", "2"],
    "attend-explain": ["attend", "--layer", "1", "--explain"],
    "attend-kv": ["attend", "--layer", "1", "--kv", "Hi there"],
    "next": ["next", "--target", "Hi"],
    "generate": ["generate", "-n", "4", "--ignore-eos"],
    "trace": ["trace", "--target", "Hi", "-s", "*.position_bias"],
    "layernorm": ["layernorm", "--which", "ln3", "--target", "Hi"],
    "posenc": ["posenc", "--length", "8"],
    "lens": ["lens", "--target", "Hi"],
    "report": ["report", "--target", "Hi"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_runs_on_the_family(decoding_kind, command):
    name, path, _ = decoding_kind
    cmd, *extra = COMMANDS[command]
    text = [] if cmd == "posenc" else ["Hello there"]
    result = _cli([cmd, *text, "-w", str(path), "--json", *extra])
    assert result.exit_code == 0, (name, command, result.stderr)
    doc = json.loads(result.stdout)
    if command == "attend-explain":  # the hand arithmetic adds the bias as the model does
        explain = doc["result"]["explain"]
        assert explain["max_abs_diff_vs_pattern"] < 1e-6
        assert all(key["bias"] is not None for key in explain["keys"])
    if command == "trace":
        assert len(doc["tensors"]) == 5  # every self-attention layer's, none for cross


def test_cli_answers_are_transformers(decoding_kind):
    """`next --target` ranks transformers' logits and `generate` writes its greedy
    tokens."""
    name, path, hf = decoding_kind
    source = list("Hello there".encode())  # the byte tokenizer: id = byte
    target = [0] + list(b"Hi")
    with torch.inference_mode():
        ref = hf(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]))
        out = hf.generate(torch.tensor([source]), max_new_tokens=5, do_sample=False,
                          num_beams=1, eos_token_id=None, use_cache=False)
    nxt = json.loads(_cli(["next", "Hello there", "-w", str(path), "--target", "Hi",
                           "--json"]).stdout)["result"]
    assert_ranked([nxt["greedy"]["id"]], ref.logits[0, -1], 1e-4)
    top = nxt["candidates"][0]
    assert abs(top["logit"] - float(ref.logits[0, -1, top["id"]])) <= 1e-4
    gen = json.loads(_cli(["generate", "Hello there", "-w", str(path), "-n", "5",
                           "--ignore-eos", "--json"]).stdout)["result"]
    assert gen["ids"] == out[0].tolist(), name


def test_streamed_from_disk_is_the_same(decoding_kind):
    """Past --max-memory the weights stay on disk, read part by part: the stack's bias
    table with its embedding, a UMT5 layer's with its block; the same numbers."""
    from tfx_cli import api

    name, path, _ = decoding_kind
    whole = api.next("Hello there", target="Hi", weights=str(path))
    streamed = api.next("Hello there", target="Hi", weights=str(path), max_memory="300kB")
    assert streamed.model.streamed and not whole.model.streamed
    assert [c.logit for c in streamed.candidates] == [c.logit for c in whole.candidates]
    ids = api.generate("Hello there", max_new_tokens=5, weights=str(path),
                       max_memory="300kB").ids
    assert ids == api.generate("Hello there", max_new_tokens=5, weights=str(path)).ids
