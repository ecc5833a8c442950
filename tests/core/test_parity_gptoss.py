"""Parity of gpt-oss with transformers on a tiny random model: attention sinks (pattern
rows summing to less than 1, the sink taking the rest), alternating sliding-window and
full layers, yarn positions without truncation, the top-k-then-softmax router and the
clamped SwiGLU experts with biases; read as transformers 5 saves it (stacked experts,
gate and up interleaved) and as the released checkpoints ship it (MXFP4 experts).
"""
import json
import shutil

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json, need
from parity import bound

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

IDS = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 64, 33]
WINDOW = 4


def _model():
    need("transformers", "pip install transformers")
    import transformers

    config = transformers.GptOssConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=32, vocab_size=300, max_position_embeddings=64,
        num_local_experts=8, num_experts_per_tok=2, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 16,
                         "rope_theta": 150000.0, "truncate": False},
        attn_implementation="eager")
    torch.manual_seed(7)
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if "sinks" in name else 0.1))
    return model


def _mxfp4_folder(root, hf, plain):
    """The same architecture with MXFP4 experts: random blocks and scales, which the
    transformers model then holds as transformers itself dequantises them."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    folder = root / "tiny-gpt-oss-mxfp4"
    folder.mkdir()
    state = load_file(plain / "model.safetensors")
    g = torch.Generator().manual_seed(11)
    E = hf.config.num_local_experts
    for i in range(hf.config.num_hidden_layers):
        experts = hf.model.layers[i].mlp.experts
        for what, rows, cols in (("gate_up_proj", 2 * 32, 64), ("down_proj", 64, 32)):
            blocks = torch.randint(0, 256, (E, rows, cols // 32, 16), generator=g,
                                   dtype=torch.uint8)
            scales = torch.randint(120, 124, (E, rows, cols // 32), generator=g,
                                   dtype=torch.uint8)
            key = f"model.layers.{i}.mlp.experts.{what}"
            del state[key]
            state[key + "_blocks"], state[key + "_scales"] = blocks, scales
            with torch.no_grad():  # (E, cols, rows): the layout the model multiplies by
                getattr(experts, what).copy_(convert_moe_packed_tensors(
                    blocks, scales, dtype=torch.float32))
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((plain / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                "model.layers.*.mlp.router",
                                                                "model.embed_tokens",
                                                                "lm_head"]}
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(plain / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module", params=["saved", "mxfp4"])
def folder(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("gptoss")
    hf = _model()
    plain = root / "tiny-gpt-oss"
    hf.save_pretrained(plain)
    byte_tokenizer_json(plain, 300)
    if request.param == "saved":
        return request.param, plain, hf
    return request.param, _mxfp4_folder(root, hf, plain), hf


def test_logits_patterns_sinks_and_router_match(folder):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    layout, path, hf = folder
    cfg = checkpoint_config(str(path))
    assert cfg.attn_sinks and cfg.sliding_layers == (0,) and cfg.router == "softmax_topk"
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_attentions=True, output_router_logits=True)
        with model.record(["blocks.*.attn.pattern", "blocks.*.attn.sink", "logits",
                           "blocks.*.moe.router_logits"]) as tr:
            model(x)
    assert (torch.as_tensor(tr.array("logits")) - ref.logits[0]).abs().max() <= LOGITS, layout
    for i in range(2):
        pattern = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (pattern - ref.attentions[i][0]).abs().max() <= 1e-5, (layout, i)
        sink = torch.as_tensor(tr.array(f"blocks.{i}.attn.sink"))  # (H, T)
        assert (pattern.sum(-1) + sink - 1).abs().max() <= 1e-6
        assert (sink > 0).all() and (pattern.sum(-1) < 1).all()
        router = torch.as_tensor(tr.array(f"blocks.{i}.moe.router_logits"))
        assert (router - ref.router_logits[i].view(router.shape)).abs().max() <= 1e-4
    # the sliding layer hides keys more than WINDOW - 1 back; the full layer does not
    assert float(tr.array("blocks.0.attn.pattern")[:, -1, :-WINDOW].max()) == 0.0
    assert float(tr.array("blocks.1.attn.pattern")[:, -1, :-WINDOW].min()) > 0.0


def test_attend_shows_the_sinks_share_and_explains_it(folder):
    from tfx_cli import api

    layout, path, _ = folder
    r = api.attend("Hello there, general", weights=str(path), layer=1, explain=True)
    assert r.shown == ["pattern", "sink"] and "blocks.1.attn.sink" in r.tensors
    assert r.explain.max_abs_diff_vs_pattern < 1e-6
    assert 0 < r.explain.sink_weight < 1
    assert abs(sum(k.weight for k in r.explain.keys) + r.explain.sink_weight - 1) < 1e-9


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
    assert counted.verify.verified and counted.total == hf.num_parameters()


def test_mxfp4_dequantises_as_transformers_does():
    need("transformers", "pip install transformers")
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from tfx_cli.core.checkpoints.families.gptoss import mxfp4

    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 10, 4, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(100, 140, (3, 10, 4), generator=g, dtype=torch.uint8)
    want = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # (3, 128, 10)
    assert torch.equal(mxfp4(blocks, scales), want.transpose(1, 2))
