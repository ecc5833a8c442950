"""The presets: named configs of the seeds' models and of the real families' shapes
(`tfx configs` lists them). Pure Python, like config.py."""
from __future__ import annotations

import math

from .config import ModelConfig

# ---------------------------------------------------------------------------------
_GPT2 = dict(vocab_size=50257, context_length=1024, qkv_bias=True, tie_embeddings=True,
             activation="gelu_tanh", positional="learned", norm_position="pre", causal=True)

PRESETS: dict[str, ModelConfig] = {
    # seed 001: the 6-dimensional transformer worked by hand, one encoder layer on "When
    # you play game of thrones" and one decoder layer on "<start> you win or you die";
    # the word vocabulary's <start> (id 1) begins the target and <end> (id 2) ends it
    "toy": ModelConfig(vocab_size=64, context_length=64, d_model=6, n_heads=2, n_layers=1,
                       n_decoder_layers=1, d_ff=24, qkv_bias=True, norm_position="post",
                       activation="relu", positional="sinusoidal", causal=False,
                       tokenizer="word", decoder_start_id=1, eos_ids=(2,), name="toy"),
    # seed 000: "Attention Is All You Need", the base model (Table 3): 6 + 6 layers, one
    # vocabulary shared by both embeddings and the output layer, the embeddings multiplied
    # by sqrt(d_model) (section 3.4)
    "vaswani": ModelConfig(vocab_size=64, context_length=512, d_model=512, n_heads=8,
                           n_layers=6, n_decoder_layers=6, d_ff=2048, qkv_bias=True,
                           norm_position="post", activation="relu", positional="sinusoidal",
                           causal=False, tie_embeddings=True, embed_scale=True,
                           tokenizer="word", decoder_start_id=1, eos_ids=(2,),
                           name="vaswani"),
    # ... and its big model: d_model 1024, 16 heads, d_ff 4096
    "vaswani-big": ModelConfig(vocab_size=64, context_length=512, d_model=1024, n_heads=16,
                               n_layers=6, n_decoder_layers=6, d_ff=4096, qkv_bias=True,
                               norm_position="post", activation="relu",
                               positional="sinusoidal", causal=False, tie_embeddings=True,
                               embed_scale=True, tokenizer="word", decoder_start_id=1,
                               eos_ids=(2,), name="vaswani-big"),
    # seed 002: nanoGPT's GPT-2 small (fused c_attn, biases everywhere, exact GELU)
    "nanogpt": ModelConfig(**{**_GPT2, "activation": "gelu"}, d_model=768, n_heads=12,
                           n_layers=12, name="nanogpt"),
    # seed 004: LLMs-from-scratch GPT_CONFIG_124M (no qkv bias, untied head)
    "gpt124m": ModelConfig(vocab_size=50257, context_length=1024, d_model=768, n_heads=12,
                           n_layers=12, dropout=0.1, qkv_bias=False, name="gpt124m"),
    "gpt2": ModelConfig(**_GPT2, d_model=768, n_heads=12, n_layers=12, name="gpt2"),
    "gpt2-medium": ModelConfig(**_GPT2, d_model=1024, n_heads=16, n_layers=24,
                               name="gpt2-medium"),
    "gpt2-large": ModelConfig(**_GPT2, d_model=1280, n_heads=20, n_layers=36,
                              name="gpt2-large"),
    "gpt2-xl": ModelConfig(**_GPT2, d_model=1600, n_heads=25, n_layers=48, name="gpt2-xl"),
    # sentence-transformers/all-MiniLM-L6-v2 (BertModel)
    "minilm": ModelConfig(vocab_size=30522, context_length=512, d_model=384, n_heads=12,
                          n_layers=6, d_ff=1536, qkv_bias=True, norm_position="post",
                          ln_eps=1e-12, activation="gelu", positional="learned", causal=False,
                          token_types=2, embed_norm=True, lm_head=False, pooler=True,
                          tokenizer="minilm", name="minilm"),
    # HuggingFaceTB/SmolLM2-135M (LlamaForCausalLM)
    "smollm2-135m": ModelConfig(vocab_size=49152, context_length=8192, d_model=576,
                                n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536,
                                qkv_bias=False, proj_bias=False, norm="rmsnorm", ln_eps=1e-5,
                                activation="swiglu", positional="rope", rope_theta=100000.0,
                                causal=True, tie_embeddings=True, tokenizer="smollm2",
                                name="smollm2-135m"),
    # -- masked language models (count-params; random weights read with their tokenizer)
    # google-bert/bert-base-uncased as BertForMaskedLM: BERT-base with its MLM head (dense,
    # GELU, LayerNorm, then the token table and a bias); its uncased WordPiece vocabulary
    # is the one all-MiniLM-L6-v2 ships
    "bert-base": ModelConfig(vocab_size=30522, context_length=512, d_model=768, n_heads=12,
                             n_layers=12, d_ff=3072, qkv_bias=True, norm_position="post",
                             ln_eps=1e-12, activation="gelu", positional="learned",
                             causal=False, token_types=2, embed_norm=True, tie_embeddings=True,
                             mlm_head=True, head_bias=True, tokenizer="minilm",
                             name="bert-base"),
    # answerdotai/ModernBERT-base (ModernBertForMaskedLM): rotary positions with base
    # 160,000 on every third layer (global) and 10,000 on the others, which see 64 tokens
    # either side (local_attention 128); GeGLU with exact GELU, no biases, LayerNorms
    # without shift; no tokenizer of its own ships offline (GPT-2's is smaller: count only)
    "modernbert-base": ModelConfig(
        vocab_size=50368, context_length=8192, d_model=768, n_heads=12, n_layers=22,
        d_ff=1152, qkv_bias=False, proj_bias=False, norm_position="pre", ln_eps=1e-5,
        activation="geglu_exact", positional="rope", rope_theta=160000.0,
        rope_local_theta=10000.0, sliding_window=65,
        sliding_layers=tuple(i for i in range(22) if i % 3), causal=False,
        embed_norm=True, tie_embeddings=True, mlm_head=True, head_bias=True,
        norm_bias=False, first_block_norm=False, tokenizer="gpt2", name="modernbert-base"),
}

# ---------------------------------------------------------------------------------
# T5 (encoder–decoder with relative position buckets; core/checkpoints/families/t5.py).
# Read with random weights, they take the byte tokenizer (no T5 vocabulary ships offline):
# its 256 ids are rows of the 32,128-row table, so the stage commands run; next and
# generate need the real tokenizer of a checkpoint folder.
_T5 = dict(vocab_size=32128, context_length=512, qkv_bias=False, proj_bias=False,
           norm="rmsnorm", ln_eps=1e-6, positional="relative", attn_scalar=1.0,
           relative_buckets=32, relative_max_distance=128, causal=False, decoder_start_id=0,
           eos_ids=(1,), tokenizer="byte")
PRESETS.update({
    # google-t5/t5-base (T5ForConditionalGeneration): ReLU, the head tied to the token
    # table and reading the stream × d_model^-0.5; 222,903,552 parameters
    "t5-base": ModelConfig(**_T5, d_model=768, n_heads=12, head_dim=64, n_layers=12,
                           n_decoder_layers=12, d_ff=3072, activation="relu",
                           tie_embeddings=True, unembed_scale=True, name="t5-base"),
    # google/flan-t5-xl (T5 v1.1 XL: gated GELU, a head of its own); 2,849,757,184
    "flan-t5-xl": ModelConfig(**_T5, d_model=2048, n_heads=32, head_dim=64, n_layers=24,
                              n_decoder_layers=24, d_ff=5120, activation="geglu",
                              name="flan-t5-xl"),
})

# -- mixtures of experts: the released models' shapes (count-params), from their
# config.json files, and a tiny one to run (random weights, bytes as tokens). Counted as
# transformers counts them: tests/core/test_params_moe.py.
_MOE = dict(norm="rmsnorm", activation="swiglu", positional="rope", qkv_bias=False,
            proj_bias=False, causal=True, tie_embeddings=False, tokenizer="byte")
PRESETS.update({
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral-8x7b": ModelConfig(**_MOE, vocab_size=32000, context_length=32768, d_model=4096,
                                n_heads=32, n_kv_heads=8, n_layers=32, d_ff=14336,
                                ln_eps=1e-5, rope_theta=1e6, n_experts=8,
                                experts_per_token=2, name="mixtral-8x7b"),
    # Qwen/Qwen3-30B-A3B
    "qwen3-30b-a3b": ModelConfig(**_MOE, vocab_size=151936, context_length=40960,
                                 d_model=2048, n_heads=32, n_kv_heads=4, head_dim=128,
                                 n_layers=48, d_ff=6144, ln_eps=1e-6, rope_theta=1e6,
                                 qk_norm=True, n_experts=128, experts_per_token=8,
                                 expert_d_ff=768, name="qwen3-30b-a3b"),
    # allenai/OLMoE-1B-7B-0924
    "olmoe-1b-7b": ModelConfig(**_MOE, vocab_size=50304, context_length=4096, d_model=2048,
                               n_heads=16, n_layers=16, d_ff=1024, ln_eps=1e-5,
                               qk_norm_full=True, n_experts=64, experts_per_token=8,
                               router_norm=False, name="olmoe-1b-7b"),
    # openai/gpt-oss-20b and openai/gpt-oss-120b (the expert weights ship in MXFP4;
    # counted as parameters, as transformers counts them)
    **{name: ModelConfig(**{**_MOE, "qkv_bias": True, "proj_bias": True},
                         vocab_size=201088, context_length=131072, d_model=2880,
                         n_heads=64, n_kv_heads=8, head_dim=64, n_layers=layers, d_ff=2880,
                         ln_eps=1e-5, rope_theta=150000.0,
                         rope_scaling={"rope_type": "yarn", "factor": 32.0,
                                       "beta_fast": 32.0, "beta_slow": 1.0,
                                       "original_max_position_embeddings": 4096,
                                       "truncate": 0},
                         sliding_window=128, sliding_layers=tuple(range(0, layers, 2)),
                         attn_sinks=True, n_experts=experts, experts_per_token=4,
                         router="softmax_topk", router_bias=True, expert_bias=True,
                         swiglu_limit=7.0, name=name)
       for name, layers, experts in (("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128))},
    # deepseek-ai/DeepSeek-V3 without its multi-token-prediction layer: latent attention,
    # three dense layers, 256 routed experts in 8 groups and one shared expert
    "deepseek-v3": ModelConfig(**_MOE, vocab_size=129280, context_length=163840,
                               d_model=7168, n_heads=128, n_layers=61, head_dim=192,
                               d_ff=18432, ln_eps=1e-6,
                               rope_scaling={"rope_type": "yarn", "factor": 40.0,
                                             "beta_fast": 32, "beta_slow": 1,
                                             "original_max_position_embeddings": 4096,
                                             "attention_factor": 1.0},
                               attn_scalar=192 / (0.1 * math.log(40.0) + 1) ** 4,
                               q_lora_rank=1536, kv_lora_rank=512, qk_rope_dim=64,
                               v_head_dim=128, n_experts=256, experts_per_token=8,
                               expert_d_ff=2048, moe_layers=tuple(range(3, 61)),
                               router="sigmoid", router_groups=8, router_topk_groups=4,
                               router_correction=True, router_scale=2.5, shared_d_ff=2048,
                               name="deepseek-v3"),
    # a Mixtral-shaped model small enough to run anywhere: 4 layers, 8 experts, 2 per token
    "tiny-moe": ModelConfig(**_MOE, vocab_size=256, context_length=256, d_model=64,
                            n_heads=4, n_kv_heads=2, n_layers=4, d_ff=96, ln_eps=1e-5,
                            n_experts=8, experts_per_token=2, name="tiny-moe"),
})

DEFAULT_CONFIG = "gpt124m"


__all__ = ["PRESETS", "DEFAULT_CONFIG"]
