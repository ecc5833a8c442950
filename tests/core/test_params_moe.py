"""count-params of the released mixtures of experts, from their config.json alone: the
total equals transformers' own count of the model built on the meta device (the numbers
below, which that build gives), and the active parameters per token are the total less
the experts a token skips.

The config.json contents are the published files' (the keys that set a shape), quoted
from each model's Hub folder: mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B,
allenai/OLMoE-1B-7B-0924, openai/gpt-oss-20b, openai/gpt-oss-120b,
deepseek-ai/DeepSeek-V3 (its multi-token-prediction layer, num_nextn_predict_layers, is
not part of DeepseekV3ForCausalLM and not counted).
"""
import pytest

MIXTRAL = {  # mistralai/Mixtral-8x7B-v0.1
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1e6, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2}
QWEN3_MOE = {  # Qwen/Qwen3-30B-A3B
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645}
OLMOE = {  # allenai/OLMoE-1B-7B-0924
    "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "attention_bias": False,
    "clip_qkv": None, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
    "max_position_embeddings": 4096, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16,
    "num_key_value_heads": 16, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 50304,
    "eos_token_id": 50279, "pad_token_id": 1}

GPT_OSS_20B = {  # openai/gpt-oss-20b
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "num_local_experts": 32, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "vocab_size": 201088, "eos_token_id": 200002,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                       "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"],
                            "quant_method": "mxfp4"}}
GPT_OSS_120B = {**GPT_OSS_20B,  # openai/gpt-oss-120b: 36 layers, 128 experts
                "layer_types": ["sliding_attention", "full_attention"] * 18,
                "num_hidden_layers": 36, "num_local_experts": 128}

DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "attention_bias": False, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "v_head_dim": 128, "vocab_size": 129280, "bos_token_id": 0, "eos_token_id": 1,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]}}

# name -> (config.json, preset, transformers' num_parameters() of the meta-built model)
MODELS = {
    "mixtral-8x7b": (MIXTRAL, 46_702_792_704),
    "qwen3-30b-a3b": (QWEN3_MOE, 30_532_122_624),
    "olmoe-1b-7b": (OLMOE, 6_919_161_856),
    "gpt-oss-20b": (GPT_OSS_20B, 20_914_757_184),
    "gpt-oss-120b": (GPT_OSS_120B, 116_829_156_672),
    "deepseek-v3": (DEEPSEEK_V3, 671_026_404_352),
}
# active parameters per token as the model cards quote them, rounded: 12.9B, 3.3B, 1.3B
ACTIVE = {"mixtral-8x7b": 12_879_925_248, "qwen3-30b-a3b": 3_353_032_704,
          "olmoe-1b-7b": 1_282_017_280, "gpt-oss-20b": 4_187_440_704,
          "gpt-oss-120b": 5_711_982_912, "deepseek-v3": 37_552_282_624}
# less the token-embedding table (a token reads one row of it): openai's model card quotes
# 3.6B and 5.1B active parameters for gpt-oss-20b and -120b, counted this way
WITHOUT_EMBEDDING = {"gpt-oss-20b": 3_608_307_264, "gpt-oss-120b": 5_132_849_472}


def config_of(hf: dict, name: str):
    """The ModelConfig a config.json names, read through the families as --weights and
    count-params --config read it."""
    from tfx_cli.core.checkpoints.families import hf_config, hf_family
    from tfx_cli.core.config import ModelConfig

    return ModelConfig(**hf_config(hf_family(hf, name), hf, name), name=name)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_config_json_counts_as_transformers_does(name):
    from tfx_cli.core.params import analyse

    hf, want = MODELS[name]
    result = analyse(config_of(hf, name))
    assert result.total == want
    assert result.moe.active_params == ACTIVE[name]
    if name in WITHOUT_EMBEDDING:
        assert result.moe.active_without_embedding == WITHOUT_EMBEDDING[name]
    E, k = result.moe.n_experts, result.moe.experts_per_token
    skipped = len(result.moe.moe_layers) * (E - k) * result.moe.expert_params
    assert result.total - result.moe.active_params == skipped


@pytest.mark.parametrize("name", list(MODELS))
def test_the_preset_is_the_config_json(name):
    from tfx_cli.core.params import total_params
    from tfx_cli.core.presets import PRESETS

    hf, want = MODELS[name]
    assert total_params(PRESETS[name]) == want
    from_json = config_of(hf, name)
    for field in ("d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "n_experts",
                  "experts_per_token", "router_norm", "qk_norm", "qk_norm_full",
                  "vocab_size", "rope_theta", "moe_layers", "attn_sinks", "router",
                  "sliding_window", "sliding_layers", "rope_scaling", "swiglu_limit",
                  "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim", "attn_scalar",
                  "router_groups", "router_topk_groups", "router_scale", "shared_d_ff"):
        assert getattr(PRESETS[name], field) == getattr(from_json, field), (name, field)
    width = [c.expert_d_ff or c.d_ff for c in (PRESETS[name], from_json)]
    assert width[0] == width[1], name


@pytest.mark.parametrize("name", list(MODELS))
def test_transformers_meta_build_gives_the_same_count(name):
    """The numbers above are transformers' own: its model built on the meta device."""
    from checkpoint_makers import need

    need("transformers", "pip install transformers")
    import torch
    import transformers

    hf, want = MODELS[name]
    config = transformers.AutoConfig.for_model(**hf)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert model.num_parameters() == want


def test_a_moe_block_counts_as_the_model_builds_it():
    """--verify on a preset: the meta-built tfx model's parameters, name by name."""
    from tfx_cli import api

    result = api.count_params(config="tiny-moe", verify=True)
    assert result.verify.verified, result.verify.mismatched
    assert result.moe.active_params < result.total


def test_flops_count_the_k_experts_a_token_runs():
    from tfx_cli.core.params import count_flops
    from tfx_cli.core.presets import PRESETS

    cfg = PRESETS["mixtral-8x7b"]
    flops = count_flops(cfg, 1024)
    expert = 3 * 2 * cfg.d_model * cfg.d_ff  # gate, up and down of one expert
    router = 2 * cfg.d_model * cfg.n_experts
    moe = [r for r in flops.block if r.part in ("experts", "router")]
    assert sum(r.count for r in moe) == 2 * expert + router
