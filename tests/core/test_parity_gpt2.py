"""GPT-2 parity: a random GPT2LMHeadModel saved by transformers, loaded with --weights.

Every attention pattern, hidden state and logit must match transformers' eager attention.
"""
import json

import numpy as np
import pytest
import torch
from checkpoint_makers import gpt2_folder
from parity import bound
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.checkpoints import checkpoint_config
from tfx_cli.core.load import load_weights

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
TEXT = "Hello, I am a student of transformers, and I like attention."


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2") / "random-gpt2"
    # GPT-2's real vocabulary, so its tokenizer works; small dims keep it quick
    hf = gpt2_folder(path, n_layer=3, n_embd=64, n_head=4, vocab_size=50257, n_positions=128,
                     seed=7)
    return path, hf


@pytest.fixture(scope="module")
def ids():
    from tfx_cli.core.tokenizers import get_tokenizer

    return get_tokenizer("gpt2").encode(TEXT)


def test_every_pattern_hidden_state_and_logit(gpt2, ids):
    path, hf = gpt2
    cfg = checkpoint_config(str(path))
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads) == (3, 64, 4)
    model = load_weights(str(path), cfg, use_cache=False)
    x = torch.tensor([ids])
    with torch.inference_mode():
        ref = hf(x, output_attentions=True, output_hidden_states=True)
        with model.record(["embed.out", "blocks.*.resid_out", "blocks.*.attn.pattern",
                           "ln_f.out", "logits"]) as tr:
            model(x)
    L = cfg.n_layers
    assert len(ref.attentions) == L and len(ref.hidden_states) == L + 1
    for i in range(L):
        got = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (got - ref.attentions[i][0]).abs().max().item() <= 1e-5, i
    # HF's hidden states: the embeddings, each block's output, and the last after ln_f
    ours = ["embed.out"] + [f"blocks.{i}.resid_out" for i in range(L - 1)] + ["ln_f.out"]
    for name, want in zip(ours, ref.hidden_states):
        got = torch.as_tensor(tr.array(name))
        assert (got - want[0]).abs().max().item() <= 1e-4, name
    got = torch.as_tensor(tr.array("logits"))
    assert (got - ref.logits[0]).abs().max().item() <= LOGITS


def test_fused_attention_path_gives_the_same_logits(gpt2, ids):
    path, hf = gpt2
    model = load_weights(str(path), checkpoint_config(str(path)), use_cache=False)
    with torch.inference_mode():
        want = hf(torch.tensor([ids])).logits[0]
        got = model(torch.tensor([ids]))[0]  # nothing recorded: scaled_dot_product_attention
    assert (got - want).abs().max().item() <= 1e-4


def test_cli_trace_with_weights_matches(gpt2, ids):
    path, hf = gpt2
    result = CliRunner().invoke(app, ["trace", TEXT, "--weights", str(path), "--json",
                                      "--select", "blocks.0.attn.pattern", "--select", "logits"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["input"]["ids"] == ids and doc["model"]["seed"] is None
    with torch.inference_mode():
        ref = hf(torch.tensor([ids]), output_attentions=True)
    logits = np.array(doc["tensors"]["logits"]["data"])
    assert np.abs(logits - ref.logits[0].numpy()).max() <= 1e-4
    pattern = np.array(doc["tensors"]["blocks.0.attn.pattern"]["data"], dtype=float)
    assert np.abs(pattern - ref.attentions[0][0].numpy()).max() <= 1e-5
