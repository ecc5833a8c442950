"""The presets: named configs of the seeds' models and of the real families' shapes
(`tfx configs` lists them). Pure Python, like config.py."""
from __future__ import annotations

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

DEFAULT_CONFIG = "gpt124m"


__all__ = ["PRESETS", "DEFAULT_CONFIG"]
