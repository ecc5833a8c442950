"""Parity of DeepSeek-V3 with transformers on a tiny random model: multi-head latent
attention (q and kv latents, decoupled rotary dims stored interleaved, value heads of
their own width), yarn positions with mscale, a dense first layer, sigmoid routing in
groups with the score-correction bias and routed_scaling_factor, a shared expert; read as
transformers 5 saves it and as the released checkpoint ships it (FP8 weights with block
scales, a multi-token-prediction layer left unread).
"""
import json
import shutil

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json, need
from parity import bound

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

IDS = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 64, 33]


def _model():
    need("transformers", "pip install transformers")
    import transformers

    config = transformers.DeepseekV3Config(
        hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=48,
        moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
        topk_group=2, first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=24,
        kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=6,
        routed_scaling_factor=2.5, vocab_size=300, max_position_embeddings=64,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "rope_theta": 10000.0},
        attn_implementation="eager")
    torch.manual_seed(5)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        for layer in model.model.layers[1:]:  # a correction that changes some choices
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(8) * 0.05)
    return model


def _fp8_folder(root, hf, plain):
    """Every 2-D weight of the layers as FP8 with a block scale (one 128 × 128 block
    here), as the released checkpoint stores them, plus a multi-token-prediction layer;
    the transformers model then holds the FP8 values times their scales."""
    from safetensors.torch import load_file, save_file

    folder = root / "tiny-deepseek-fp8"
    folder.mkdir()
    state = load_file(plain / "model.safetensors")
    params = dict(hf.named_parameters())
    for key in list(state):
        t = state[key]
        if ".layers." not in key or t.ndim != 2 or not key.endswith(".weight"):
            continue
        scale = t.abs().max() / 448.0
        fp8 = (t / scale).to(torch.float8_e4m3fn)
        state[key], state[key + "_scale_inv"] = fp8, scale.reshape(1, 1).float()
        with torch.no_grad():
            _held(hf, params, key).copy_(fp8.float() * scale)
    for key in [k for k in state if k.startswith("model.layers.2.")]:  # the MTP layer
        state[key.replace("layers.2.", "layers.3.")] = state[key].clone()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((plain / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                     "weight_block_size": [128, 128]}
    config["num_nextn_predict_layers"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(plain / "tokenizer.json", folder / "tokenizer.json")
    return folder


def _held(hf, params, key):
    """The transformers parameter (or the slice of its stacked experts) a saved key is."""
    import re

    if key in params:
        return params[key]
    layer, e, proj = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)\.weight",
                              key).groups()
    experts = hf.model.layers[int(layer)].mlp.experts
    F = experts.down_proj.shape[-1]
    if proj == "down_proj":
        return experts.down_proj[int(e)]
    return experts.gate_up_proj[int(e), :F] if proj == "gate_proj" else \
        experts.gate_up_proj[int(e), F:]


@pytest.fixture(scope="module", params=["saved", "fp8"])
def folder(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("deepseek")
    hf = _model()
    plain = root / "tiny-deepseek"
    hf.save_pretrained(plain)
    byte_tokenizer_json(plain, 300)
    if request.param == "saved":
        return request.param, plain, hf
    return request.param, _fp8_folder(root, hf, plain), hf


def test_logits_patterns_and_router_match(folder):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    layout, path, hf = folder
    cfg = checkpoint_config(str(path))
    assert cfg.is_mla and cfg.moe_layer_list == [1, 2] and cfg.router == "sigmoid"
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_attentions=True, output_router_logits=True,
                 output_hidden_states=True)
        with model.record(["blocks.*.attn.pattern", "blocks.*.moe.router_logits",
                           "blocks.*.moe.experts", "blocks.*.resid_out", "logits",
                           "blocks.0.attn.kv_a", "blocks.0.attn.v"]) as tr:
            model(x)
    assert (torch.as_tensor(tr.array("logits")) - ref.logits[0]).abs().max() <= LOGITS, layout
    for i in range(3):
        got = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (got - ref.attentions[i][0]).abs().max() <= 1e-5, (layout, i)
    for i in range(2):
        got = torch.as_tensor(tr.array(f"blocks.{i}.resid_out"))
        assert (got - ref.hidden_states[i + 1][0]).abs().max() <= 1e-4, (layout, i)
    # transformers records its router's logits once per MoE layer (layers 1 and 2 here)
    for layer, want in zip(cfg.moe_layer_list, ref.router_logits):
        got = torch.as_tensor(tr.array(f"blocks.{layer}.moe.router_logits"))
        assert (got - want.view(got.shape)).abs().max() <= 1e-4, (layout, layer)
    assert tr.dims("blocks.0.attn.kv_a") == ("S", "Ckv") and tr.shape("blocks.0.attn.v") == (4, 12, 6)


def test_decoding_and_counting_match_transformers(folder):
    from tfx_cli import api
    from tfx_cli.core.analysis.decode import decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    layout, path, hf = folder
    model = load_weights(str(path), checkpoint_config(str(path)))
    cached = decode(model, IDS[:3], max_new_tokens=8)
    with torch.inference_mode():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert cached.ids == out[0].tolist(), layout
    counted = api.count_params(weights=str(path), verify=True)
    assert counted.verify.verified, counted.verify.mismatched
    assert counted.total == hf.num_parameters()


@pytest.mark.parametrize("folder", ["saved"], indirect=True)  # one layout is enough
def test_long_generation_keeps_latent_attention_unfused(folder):
    """A generation long enough to take the decoding layout (which fuses W_query, W_key
    and W_value where a module has the three) runs on latent attention, which has not:
    each step's logits are transformers' on the same tokens."""
    from tfx_cli.core.analysis.decode import LONG_GENERATION, decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    _, path, hf = folder
    model = load_weights(str(path), checkpoint_config(str(path)))
    cached = decode(model, IDS[:3], max_new_tokens=LONG_GENERATION, keep_logits=True)
    assert len(cached.logits) == LONG_GENERATION
    with torch.inference_mode():  # position 2 + i predicts the token of step i
        want = hf(torch.tensor([cached.ids[:-1]])).logits[0, 2:]
    got = torch.stack(cached.logits)
    assert (got - want).abs().max() <= 1e-4 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("folder", ["saved"], indirect=True)  # one layout is enough
@pytest.mark.parametrize("command", ["route", "attend", "attribute", "patch"])
def test_commands_run_on_latent_attention(folder, command):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    layout, path, _ = folder
    extra = {"attribute": ["--answer", "a", "--per-head"],
             "patch": ["--corrupt", "Hello where", "--answer", "a", "--wrong", "b",
                       "--site", "ffn_out"],
             "attend": ["--layer", "1", "--explain"]}.get(command, [])
    result = CliRunner().invoke(app, [command, "Hello there", "-w", str(path), "--json",
                                      *extra], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, (command, result.stderr)
    doc = json.loads(result.stdout)["result"]
    if command == "attribute":
        assert abs(doc["unexplained"]) < 1e-4
    if command == "attend":
        assert doc["explain"]["max_abs_diff_vs_pattern"] < 1e-6
