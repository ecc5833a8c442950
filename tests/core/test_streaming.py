"""Streaming a checkpoint from disk (--max-memory) gives the in-memory run's numbers bit for
bit, holds at most one part of the model at a time, and refuses what its budget cannot hold.

Every comparison is of whole results: `to_dict()` is the JSON a command prints, every
float written out, so two runs agree only when every recorded number is the same.
"""
import json

import pytest
import torch

from tfx_cli import api
from tfx_cli.core import load as loading
from tfx_cli.core.model import streaming
from tfx_cli.core.memory import Budget, parse_size
from tfx_cli.errors import ResourceError, UsageError

from checkpoint_makers import gguf_from_llama, gpt2_folder, llama_folder, nanogpt_ckpt

TEXT = "Hi, I am a model"  # 16 byte-level tokens
SMALL = "1kB"  # far less than any model below: every one of them streams


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2's layout (tied head, fused c_attn, Conv1D weights) on 4 small blocks."""
    path = tmp_path_factory.mktemp("stream") / "gpt2"
    hf = gpt2_folder(path, n_layer=4, n_embd=128, n_head=4, vocab_size=600, n_positions=128)
    return path, hf


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream") / "llama"
    return path, llama_folder(path, layers=3, d=128, d_ff=256, vocab_size=400)


def without_streamed(result) -> dict:
    doc = result.to_dict()
    assert doc["model"]["streamed"] in (True, False)
    doc["model"].pop("streamed")
    return doc


def both(call, weights, **kw):
    """(in memory, streamed) results of one API call, from a fresh load each."""
    loading._CACHE.clear()
    whole = call(weights=str(weights), **kw)
    loading._CACHE.clear()
    streamed = call(weights=str(weights), max_memory=stream_budget(weights, kw.get("dtype")),
                    **kw)
    assert whole.to_dict()["model"]["streamed"] is False
    assert streamed.to_dict()["model"]["streamed"] is True
    loading._CACHE.clear()
    return whole, streamed


def stream_budget(weights, dtype=None) -> str:
    """The weights' own size: too little to load them whole (they may take 80% of a
    budget, the rest is the run's), enough to stream them and run on a short text."""
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import plan_checkpoint

    plan, _ = plan_checkpoint(str(weights), checkpoint_config(str(weights)), use_cache=False)
    return str(plan.nbytes(getattr(torch, dtype or "float32")))


def part_budget(weights, dtype="float32") -> str:
    """What a refusal suggests for a budget below the largest part."""
    try:
        api.load(weights=str(weights), max_memory=SMALL, dtype=dtype)
    except ResourceError as exc:
        return exc.message.split("pass --max-memory ")[1].split(" ")[0]
    raise AssertionError("a 1kB budget held a part")


RUNS = {
    "next": lambda **kw: api.next(TEXT, **kw),
    "trace-all": lambda **kw: api.trace(TEXT, select=["*"], **kw),
    "attend": lambda **kw: api.attend(TEXT, layer=2, explain=True, **kw),
    "ffn": lambda **kw: api.ffn(TEXT, layer=1, **kw),
    "layernorm": lambda **kw: api.layernorm(TEXT, layer=2, which="ln2", **kw),
    "ln_f": lambda **kw: api.layernorm(TEXT, which="ln_f", **kw),
    "lens": lambda **kw: api.lens(TEXT, **kw),
    "embed": lambda **kw: api.embed(TEXT, **kw),
    "posenc": lambda **kw: api.posenc(TEXT, **kw),
    "report": lambda **kw: api.report(TEXT, **kw),
    # 40 new tokens: past the length at which an in-memory model changes its weights'
    # layout for decoding, which a streamed one never does
    "generate": lambda **kw: api.generate(TEXT, max_new_tokens=40, ignore_eos=True, **kw),
    "generate-select": lambda **kw: api.generate(TEXT, max_new_tokens=3, ignore_eos=True,
                                                 select=["blocks.1.attn.pattern"], **kw),
    "sample": lambda **kw: api.generate(TEXT, max_new_tokens=8, temperature=0.9, top_k=50,
                                        ignore_eos=True, **kw),
    # attribution reads each part's weights again after the forward
    "attribute": lambda **kw: api.attribute(TEXT, answer="m", wrong="a", **kw),
    "attribute-heads": lambda **kw: api.attribute(TEXT, answer="m", per_head=True, **kw),
    "ablate": lambda **kw: api.next(TEXT, ablate=["blocks.1.attn.pattern:h=2"], **kw),
}


@pytest.mark.parametrize("run", RUNS)
def test_gpt2_streamed_equals_in_memory(gpt2, run):
    whole, streamed = both(RUNS[run], gpt2[0])
    assert without_streamed(whole) == without_streamed(streamed)


@pytest.mark.parametrize("run", ["next", "trace-all", "generate", "lens"])
def test_llama_streamed_equals_in_memory(llama, run):
    whole, streamed = both(RUNS[run], llama[0])
    assert without_streamed(whole) == without_streamed(streamed)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("run", ["next", "trace-all", "generate"])
def test_half_precision_streamed_equals_half_precision_in_memory(gpt2, dtype, run):
    whole, streamed = both(RUNS[run], gpt2[0], dtype=dtype)
    assert without_streamed(whole) == without_streamed(streamed)
    assert whole.to_dict()["model"]["dtype"] == dtype


SEQ2SEQ_RUNS = {
    "next": lambda **kw: api.next(TEXT, target="Hello", **kw),
    "trace-all": lambda **kw: api.trace(TEXT, select=["*"], target="Hello", **kw),
    "cross": lambda **kw: api.attend(TEXT, layer=1, cross=True, explain=True, target="Hello",
                                     **kw),
    "encoder": lambda **kw: api.attend(TEXT, layer=1, **kw),
    "ln3": lambda **kw: api.layernorm(TEXT, layer=1, which="ln3", target="Hello", **kw),
    "lens": lambda **kw: api.lens(TEXT, target="Hello", **kw),
    "embed": lambda **kw: api.embed(TEXT, target="Hello", **kw),
    "posenc": lambda **kw: api.posenc(TEXT, **kw),
    "generate": lambda **kw: api.generate(TEXT, max_new_tokens=6, ignore_eos=True, **kw),
}


@pytest.fixture(scope="module", params=["marian", "bart", "mbart"])
def seq2seq(request, tmp_path_factory):
    """Tiny random encoder–decoders of each family (tests/core/test_parity_seq2seq.py)."""
    from test_parity_seq2seq import make_folder

    path = tmp_path_factory.mktemp("stream") / request.param
    make_folder(path, request.param)
    return path


@pytest.mark.parametrize("run", SEQ2SEQ_RUNS)
def test_encoder_decoder_streamed_equals_in_memory(seq2seq, run):
    """Both stacks stream part by part (encoder.embed, encoder.blocks.i, …,
    decoder.blocks.i, decoder.ln_f, head); the shared token table is read for each stack's
    embedding and the head, and the numbers are the in-memory run's."""
    # force: the budget that makes these tiny models stream is smaller than what
    # recording every tensor takes (the run's check is tested on its own below)
    whole, streamed = both(SEQ2SEQ_RUNS[run], seq2seq, force=True)
    assert without_streamed(whole) == without_streamed(streamed)


def test_an_encoder_decoder_budget_below_one_part_names_it_and_the_suggestion_works(seq2seq):
    loading._CACHE.clear()
    with pytest.raises(ResourceError) as caught:
        api.load(weights=str(seq2seq), max_memory=SMALL)
    message = caught.value.message
    assert "cannot hold one decoder block of" in message or "the encoder's embedding of" in message
    result = api.next(TEXT, weights=str(seq2seq), target="Hello", max_memory=part_budget(seq2seq),
                      force=True)
    assert result.to_dict()["model"]["streamed"] is True
    loading._CACHE.clear()


def test_encoder_decoder_holds_one_part_and_runs_the_encoder_once(seq2seq, monkeypatch):
    read = []
    real = streaming.Streamed._read

    def spy(self, part):
        real(self, part)
        read.append((part, len(self.held)))

    monkeypatch.setattr(streaming.Streamed, "_read", spy)
    loading._CACHE.clear()
    model = api.load(weights=str(seq2seq), max_memory=stream_budget(seq2seq))
    model.generate(TEXT, max_new_tokens=2, ignore_eos=True)
    parts = [part for part, _ in read]
    assert max(held for _, held in read) == 1
    encoder = [p for p in parts if p.startswith("encoder.")]
    assert encoder[:3] == ["encoder.embed", "encoder.blocks.0", "encoder.blocks.1"]
    assert len(encoder) == len(set(encoder))  # the encoder ran once for both tokens
    assert parts.count("decoder.blocks.1") == 2 and parts.count("head") == 2
    assert all(p.is_meta for p in model.module.parameters())
    loading._CACHE.clear()


def logits_both(weights, ids) -> tuple:
    """Logits of the whole model and of the streamed one, for ids of any tokenizer."""
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    out = []
    for budget in (None, Budget(stream_budget(weights))):
        model = load_weights(str(weights), checkpoint_config(str(weights)), budget=budget,
                             use_cache=False)
        assert model.residency.streamed is (budget is not None)
        with torch.inference_mode():
            out.append(model(torch.tensor([ids])))
    return tuple(out)


def test_gguf_streams_block_by_block(llama, tmp_path):
    """A GGUF is dequantised one part at a time (the dequantised-weights cache is
    neither read nor written while streaming)."""
    path = tmp_path / "tiny.gguf"
    gguf_from_llama(llama[1], path, qtype="Q8_0")
    whole, streamed = logits_both(path, [3, 99, 250, 7])
    assert torch.equal(whole, streamed)


@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_streams(gpt2, tmp_path, bias):
    """nanoGPT's ckpt.pt is mapped with torch.load(mmap=True); without biases its
    LayerNorms get zero shifts the mapping makes, read with their scales."""
    ckpt = nanogpt_ckpt(gpt2[1], tmp_path / "ckpt.pt", bias=bias)
    whole, streamed = logits_both(ckpt, [5, 80, 300, 7, 599])
    assert torch.equal(whole, streamed)


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_shards_stream(gpt2, tmp_path, safe):
    """A folder in shards: safetensors with their index, or pytorch_model.bin shards,
    mapped with torch.load(mmap=True)."""
    folder = tmp_path / "shards"
    if safe:
        gpt2[1].save_pretrained(folder, max_shard_size="100KB")
        index = "model.safetensors.index.json"
    else:  # transformers 5 saves safetensors only: the older layout by hand
        folder.mkdir()
        gpt2[1].config.save_pretrained(folder)
        state = gpt2[1].state_dict()
        names = sorted(state)
        weight_map = {}
        for i in range(3):
            shard = f"pytorch_model-0000{i + 1}-of-00003.bin"
            part = {k: state[k].clone() for k in names[i::3]}
            torch.save(part, folder / shard)
            weight_map.update({k: shard for k in part})
        index = "pytorch_model.bin.index.json"
        (folder / index).write_text(json.dumps({"weight_map": weight_map}))
    (folder / "tokenizer.json").write_bytes((gpt2[0] / "tokenizer.json").read_bytes())
    assert len(set(json.loads((folder / index).read_text())["weight_map"].values())) > 2
    whole, streamed = both(RUNS["trace-all"], folder)
    assert without_streamed(whole) == without_streamed(streamed)


def test_at_most_one_part_is_held(gpt2, monkeypatch):
    """While a forward runs, the streamed model holds one part (embedding, one block or
    the head); after it, none, and its parameters are back on the meta device."""
    most = []
    real = streaming.Streamed._read

    def spy(self, part):
        real(self, part)
        most.append(len(self.held))

    monkeypatch.setattr(streaming.Streamed, "_read", spy)
    loading._CACHE.clear()
    model = api.load(weights=str(gpt2[0]), max_memory=stream_budget(gpt2[0]))
    model.trace(TEXT, select=["*"])
    assert max(most) == 1 and len(most) == 6  # embed, 4 blocks, head: each read once
    module = model.module
    assert not module.residency.held
    assert all(p.is_meta for p in module.parameters())
    model.generate("Hi", max_new_tokens=3)
    assert len(most) == 6 + 3 * 6  # every token reads every part again
    loading._CACHE.clear()


def test_streaming_is_chosen_by_the_budget(gpt2):
    """In memory when the weights fit the budget with room to run, streamed when not."""
    loading._CACHE.clear()
    size = int(stream_budget(gpt2[0]))  # the weights' bytes
    fits = api.load(weights=str(gpt2[0]), max_memory=str(size * 5 // 4))
    assert not fits.module.residency.streamed
    assert all(not p.is_meta for p in fits.module.parameters())
    loading._CACHE.clear()
    tight = api.load(weights=str(gpt2[0]), max_memory=str(size * 5 // 4 - 10))
    assert tight.module.residency.streamed
    loading._CACHE.clear()


def test_a_budget_below_one_part_is_refused_and_the_suggestion_works(gpt2):
    loading._CACHE.clear()
    with pytest.raises(ResourceError) as caught:
        api.next(TEXT, weights=str(gpt2[0]), max_memory="50kB")
    message = caught.value.message
    # the largest part of this model is a block: 12 x 128 x 128 weights and 13 x 128
    # biases and norm weights, 198,272 floats
    assert message.startswith("--max-memory 50kB cannot hold one block of gpt2: each block "
                              "needs 793 kB in float32; pass --max-memory 992kB or more, "
                              "or --dtype bfloat16 to halve it"), message
    suggested = message.split("pass --max-memory ")[1].split(" ")[0]
    loading._CACHE.clear()
    assert api.next(TEXT, weights=str(gpt2[0]), max_memory=suggested).candidates
    loading._CACHE.clear()


def test_a_run_that_cannot_fit_is_refused_before_it_runs(gpt2, monkeypatch):
    """The KV cache and the recorded tensors count: a long generation recording patterns
    is refused with its parts named, before any part is read; --force runs it anyway."""
    loading._CACHE.clear()
    budget = stream_budget(gpt2[0])
    reads = []
    monkeypatch.setattr(streaming.Streamed, "_read",
                        lambda self, part: reads.append(part))
    with pytest.raises(ResourceError) as caught:
        api.generate(TEXT, weights=str(gpt2[0]), max_memory=budget, max_new_tokens=90,
                     select=["*"])
    message = caught.value.message
    assert "the KV cache" in message and "recorded tensors" in message
    assert f"but --max-memory is {budget}" in message and "--max-new-tokens" in message
    assert reads == []
    loading._CACHE.clear()


def test_budget_parsing():
    assert parse_size("300MB") == 300_000_000
    assert parse_size("1.5GiB") == 3 * 2**29
    assert parse_size("4096") == 4096 and parse_size("2 gb") == 2 * 10**9
    for bad in ("lots", "-1GB", "0", "2XB", "", "inf"):
        with pytest.raises(UsageError, match="is not a size"):
            parse_size(bad)
    assert Budget("2GB").bytes == 2 * 10**9
    assert Budget(free=10**9).bytes == 9 * 10**8  # the free memory, less a margin


def test_streamed_model_is_on_the_meta_device_between_runs(gpt2):
    """The streamed Transformer keeps no storage: its module tree is the meta one."""
    loading._CACHE.clear()
    model = api.load(weights=str(gpt2[0]), max_memory=stream_budget(gpt2[0]))
    assert sum(p.numel() for p in model.module.parameters() if not p.is_meta) == 0
    with model.module.holding("blocks.2"):
        block = model.module.blocks[2]
        assert not block.attn.W_query.weight.is_meta
        assert block.attn.W_query.weight.dtype == torch.float32
    assert model.module.blocks[2].attn.W_query.weight.is_meta
    loading._CACHE.clear()


@pytest.mark.parametrize("call", [
    lambda w: api.attend(TEXT, layer=4, weights=w),
    lambda w: api.ffn(TEXT, layer=-1, weights=w),
    lambda w: api.layernorm(TEXT, layer=9, which="ln2", weights=w)])
def test_a_layer_past_the_model_is_refused_before_reading_weights(gpt2, monkeypatch, call):
    """The range comes from the checkpoint's header: a model larger than memory answers
    --layer 40 at once."""
    from tfx_cli.errors import RangeError

    def no_reading(*args, **kwargs):
        raise AssertionError("weights were read")

    monkeypatch.setattr(loading, "load_weights", no_reading)
    loading._CACHE.clear()
    with pytest.raises(RangeError, match="this model has 4 layers"):
        call(str(gpt2[0]))
