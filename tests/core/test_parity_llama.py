"""Llama parity on tiny random models: an HF folder and the same tensors as GGUF files.

RMSNorm, rotary positions (split halves), SwiGLU and grouped-query attention against
transformers' LlamaForCausalLM with eager attention.
"""
import pytest
import torch
from checkpoint_makers import gguf_from_llama, llama_folder
from parity import bound

from tfx_cli.core.checkpoints import checkpoint_config
from tfx_cli.core.load import load_weights

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
IDS = [1, 17, 250, 3, 99, 42, 7, 7, 123, 201]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "random-llama"
    return path, llama_folder(path, layers=3, d=96, heads=6, kv_heads=2, d_ff=160, seed=11)


def test_hf_folder_hidden_states_patterns_and_logits(llama):
    path, hf = llama
    cfg = checkpoint_config(str(path))
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_attentions=True, output_hidden_states=True)
        with model.record(["embed.out", "blocks.*.resid_out", "blocks.*.attn.pattern",
                           "ln_f.out", "logits"]) as tr:
            model(x)
    L = cfg.n_layers
    for i in range(L):
        got = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (got - ref.attentions[i][0]).abs().max().item() <= 1e-5, i
    ours = ["embed.out"] + [f"blocks.{i}.resid_out" for i in range(L - 1)] + ["ln_f.out"]
    for name, want in zip(ours, ref.hidden_states):
        assert (torch.as_tensor(tr.array(name)) - want[0]).abs().max().item() <= 1e-4, name
    assert (torch.as_tensor(tr.array("logits")) - ref.logits[0]).abs().max().item() <= LOGITS


@pytest.mark.parametrize("qtype", ["F32", "F16"])
def test_gguf_of_the_same_model(llama, tmp_path, qtype):
    _, hf = llama
    path = tmp_path / f"random-llama.{qtype}.gguf"
    gguf_from_llama(hf, path, qtype=qtype)
    model = load_weights(str(path), checkpoint_config(str(path)), use_cache=False)
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).logits[0]
        got = model(torch.tensor([IDS]))[0]
    # F16 rounds every weight, so its logits move by more than float32 noise
    assert (got - want).abs().max().item() <= (1e-4 if qtype == "F32" else 2e-2)
