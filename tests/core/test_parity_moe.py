"""Parity of the mixture-of-experts families with transformers, on tiny random models.

For each family transformers builds a 3-layer model (d_model 32, 8 experts, 2 or 3 per
token) with its own config class, saves it with `save_pretrained` (the Hub's per-expert
tensor names) and, for the same model, its state_dict as it is (transformers 5's stacked
`experts.gate_up_proj` / `experts.down_proj`); tfx loads both folders and must give
transformers' eager logits (<= 1e-4) and router logits (`output_router_logits`, <= 1e-4),
the same chosen experts, and the same parameter count.
"""
import json
import shutil

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json, need
from parity import bound

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

IDS = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 64, 33]
SIZE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=300, max_position_embeddings=64)

# family -> (config class, model class, config overrides)
FAMILIES = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                {"intermediate_size": 24, "num_local_experts": 8, "num_experts_per_tok": 2}),
    # layer 1 dense (mlp_only_layers), norm_topk_prob off: the weights are raw probabilities
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  {"intermediate_size": 40, "moe_intermediate_size": 16,
                   "shared_expert_intermediate_size": 20, "num_experts": 8,
                   "num_experts_per_tok": 3, "mlp_only_layers": [1]}),
    # every second layer MoE (decoder_sparse_step 2: layer 1), the top 2 renormalised
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  {"intermediate_size": 40, "moe_intermediate_size": 16, "num_experts": 8,
                   "num_experts_per_tok": 2, "head_dim": 12, "norm_topk_prob": True,
                   "decoder_sparse_step": 2}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              {"intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2}),
}


def make_folders(root, family: str):
    """(hub-layout folder, stacked-layout folder, model)."""
    need("transformers", "pip install transformers")
    import transformers
    from safetensors.torch import save_file

    config_name, model_name, overrides = FAMILIES[family]
    config = getattr(transformers, config_name)(**SIZE, **overrides,
                                                attn_implementation="eager")
    torch.manual_seed(sum(map(ord, family)))
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # fresh norms are ones and routers zeros: jiggle everything
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    hub = root / f"tiny-{family}"
    model.save_pretrained(hub)
    byte_tokenizer_json(hub, 300)
    stacked = root / f"tiny-{family}-stacked"
    stacked.mkdir()
    shutil.copy(hub / "config.json", stacked / "config.json")
    shutil.copy(hub / "tokenizer.json", stacked / "tokenizer.json")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, stacked / "model.safetensors", metadata={"format": "pt"})
    return hub, stacked, model


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    return (request.param, *make_folders(tmp_path_factory.mktemp(request.param),
                                         request.param))


def test_the_folders_hold_both_expert_layouts(family):
    from safetensors import safe_open

    name, hub, stacked, _ = family
    keys = set(safe_open(hub / "model.safetensors", "pt").keys())
    per_expert = "block_sparse_moe.experts.0.w1" if name == "mixtral" else \
        "mlp.experts.0.gate_proj"
    assert any(per_expert in k for k in keys), name
    assert any(k.endswith("experts.gate_up_proj")
               for k in safe_open(stacked / "model.safetensors", "pt").keys()), name


@pytest.mark.parametrize("layout", ["hub", "stacked"])
def test_logits_and_router_logits_match(family, layout):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    name, hub, stacked, hf = family
    path = hub if layout == "hub" else stacked
    cfg = checkpoint_config(str(path))
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_router_logits=True, output_hidden_states=True)
        with model.record(["blocks.*.moe.router_logits", "blocks.*.moe.experts",
                           "blocks.*.resid_out", "logits"]) as tr:
            model(x)
    assert (torch.as_tensor(tr.array("logits")) - ref.logits[0]).abs().max() <= LOGITS, name
    layers = cfg.moe_layer_list
    assert len(layers) == len(ref.router_logits) >= 1, name
    for layer, want in zip(layers, ref.router_logits):
        got = torch.as_tensor(tr.array(f"blocks.{layer}.moe.router_logits"))
        assert (got - want.view(got.shape)).abs().max() <= 1e-4, (name, layer)
        # the experts chosen are the top-k of transformers' router, every token
        top = torch.softmax(want.float(), -1).topk(cfg.experts_per_token, -1).indices
        assert torch.equal(torch.as_tensor(tr.array(f"blocks.{layer}.moe.experts")), top)
    for i in range(cfg.n_layers - 1):
        got = torch.as_tensor(tr.array(f"blocks.{i}.resid_out"))
        assert (got - ref.hidden_states[i + 1][0]).abs().max() <= 1e-4, (name, i)


def test_config_reads_the_family(family):
    from tfx_cli.core.checkpoints import checkpoint_config

    name, hub, _, _ = family
    cfg = checkpoint_config(str(hub))
    want = {"mixtral": [0, 1, 2], "qwen2_moe": [0, 2], "qwen3_moe": [1], "olmoe": [0, 1, 2]}
    assert cfg.moe_layer_list == want[name]
    assert cfg.n_experts == 8 and cfg.shared_gate == (name == "qwen2_moe")
    assert cfg.router_norm == (name in ("mixtral", "qwen3_moe"))
    assert cfg.qk_norm_full == (name == "olmoe")


def test_count_params_of_the_checkpoint_is_transformers_count(family):
    from tfx_cli import api

    name, hub, _, hf = family
    counted = api.count_params(weights=str(hub), verify=True)
    assert counted.verify.verified, (name, counted.verify.mismatched)
    assert counted.total == hf.num_parameters(), name


@pytest.mark.parametrize("command", ["next", "generate", "trace", "lens", "attend"])
def test_every_command_runs_on_the_family(family, command):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    name, hub, _, _ = family
    extra = {"generate": ["-n", "3"], "trace": ["-s", "blocks.*.moe.*"]}.get(command, [])
    result = CliRunner().invoke(app, [command, "Hello there", "-w", str(hub), "--json",
                                      *extra], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, (name, command, result.stderr)
    assert json.loads(result.stdout)["model"]["n_experts"] == 8


def test_cached_decoding_matches_transformers_greedy(family):
    from tfx_cli.core.analysis.decode import decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    name, hub, _, hf = family
    model = load_weights(str(hub), checkpoint_config(str(hub)))
    cached = decode(model, IDS[:3], max_new_tokens=8)
    with torch.inference_mode():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert cached.ids == out[0].tolist(), name
