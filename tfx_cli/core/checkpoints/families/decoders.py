"""The decoder families as tfx reads them: a HuggingFace config.json -> ModelConfig
switches, and the checkpoint's tensor names -> tfx's parameter names.

Every family is the one Transformer of model.py with some switches on; what differs from
Llama (HF `LlamaForCausalLM`, the baseline) is listed per family, as transformers 5
computes it:

  qwen2     q, k and v projections with a bias (o_proj and the MLP without)
  qwen3     per-head RMSNorm of q and k before the rotation (q_norm, k_norm); head_dim set
  mistral   sliding-window attention on every layer (when sliding_window is set)
  gemma2    RMSNorm with (1 + w); a norm after attention and after the MLP as well as before;
            GeGLU (gelu_pytorch_tanh); embeddings x sqrt(hidden_size); scores divided by
            sqrt(query_pre_attn_scalar) and soft-capped, logits soft-capped; sliding and
            full layers alternating; tied head
  gemma3    gemma2's norms, scale and GeGLU, plus q/k norms; no soft-capping; five sliding
            layers to one full, the sliding ones rotating with their own base
  phi3      q, k, v fused in qkv_proj and gate, up fused in gate_up_proj (split on load)
  gpt_neox  LayerNorm with biases; fused query_key_value laid out head by head; parallel
            residual (x + attn(ln1 x) + mlp(ln2 x)); rotary on the first rotary_pct of each
            head; exact GELU; untied embed_out

Config files of transformers 4 (rope_theta, rope_scaling, rotary_pct,
sliding_window_pattern, rope_local_base_freq) and 5 (rope_parameters, layer_types) are
both read.
"""
from __future__ import annotations

import functools
from functools import partial

from ....errors import WeightsError
from .common import norm_rules, unprefixed
from .registry import Family, HeadByHead, Renames, Split, TensorMap, register
from .values import SIZE_KEYS

# A multimodal config.json stores only the text settings that differ from these
# (transformers' Gemma3TextConfig defaults, transformers 5.x configuration_gemma3.py)
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256,
    "sliding_window": 4096, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0,
    "sliding_window_pattern": 6, "attention_bias": False,
}
# tensors of a multimodal checkpoint that are not the text model's
NOT_TEXT = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
            "model.multi_modal_projector.")

GEMMA = ("gemma2", "gemma3")
ROPE_KEYS = ("factor", "original_max_position_embeddings", "low_freq_factor",
             "high_freq_factor", "beta_fast", "beta_slow", "attention_factor",
             "short_factor", "long_factor")
SUPPORTED_ROPE = ("default", "linear", "llama3", "yarn", "longrope")
# older names transformers still reads: Phi-3's first long-context configs said "su", and
# its config class reads "yarn" as longrope too
ROPE_ALIASES = {"su": "longrope"}


def rope_settings(hf: dict, where: str, layer_type: str | None = None) -> tuple[float, dict]:
    """(theta, scaling) of a config: transformers 5's rope_parameters (per layer type for
    Gemma 3) or 4's rope_theta / rope_scaling. An unknown scaling type is an error."""
    params = hf.get("rope_parameters") or {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    legacy = hf.get("rope_scaling") or {}
    scaling = params if params.get("rope_type", "default") != "default" else legacy
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    kind = ROPE_ALIASES.get(kind, kind)
    if kind == "yarn" and "long_factor" in scaling:
        kind = "longrope"
    if kind not in SUPPORTED_ROPE:
        raise WeightsError(f"{where}: rope scaling type {kind!r} is not supported; tfx "
                           f"computes {', '.join(SUPPORTED_ROPE)}")
    theta = params.get("rope_theta") or hf.get("rope_theta") or \
        hf.get("rotary_emb_base") or 10000.0
    out = {} if kind == "default" else {"rope_type": kind}
    out.update({k: scaling[k] for k in ROPE_KEYS if scaling.get(k) is not None})
    if kind == "longrope":
        # Phi-3 keeps the trained context beside max_position_embeddings, and a missing
        # factor is their ratio (what transformers' longrope computes)
        old = hf.get("original_max_position_embeddings") or \
            out.get("original_max_position_embeddings") or hf.get("max_position_embeddings")
        out["original_max_position_embeddings"] = old
        out.setdefault("factor", hf.get("max_position_embeddings", old) / old)
    return float(theta), out


def _partial_rotary(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    for value in (params.get("partial_rotary_factor"), hf.get("partial_rotary_factor"),
                  hf.get("rotary_pct")):
        if value is not None:
            return float(value)
    return 1.0


def _sliding_layers(family: str, hf: dict, n_layers: int) -> tuple[int, ...] | None:
    """Which layers slide: layer_types (transformers 5), else the family's own rule."""
    types = hf.get("layer_types")
    if isinstance(types, list) and len(types) == n_layers:
        return tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if family == "gemma2":  # even layers slide
        return tuple(i for i in range(n_layers) if i % 2 == 0)
    if family == "gemma3":  # every pattern-th layer is full
        pattern = hf.get("sliding_window_pattern", 6)
        return tuple(i for i in range(n_layers) if (i + 1) % pattern)
    if family == "qwen2":
        if not hf.get("use_sliding_window"):
            return ()
        first = hf.get("max_window_layers", n_layers)
        return tuple(range(first, n_layers))
    return None  # mistral: every layer


def text_config(hf: dict) -> dict:
    """The text model's settings: a multimodal config's text_config over the text
    defaults (with the outer file's tying and end-of-text ids), else the file itself."""
    inner = hf.get("text_config")
    if not isinstance(inner, dict):
        return hf
    outer = {k: hf[k] for k in ("tie_word_embeddings", "eos_token_id") if k in hf}
    return {**GEMMA3_TEXT_DEFAULTS, **outer, **inner}


def decoder_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a decoder family's config.json."""
    hf = text_config(hf)
    if hf.get("use_bidirectional_attention"):
        raise WeightsError(f"{where}: use_bidirectional_attention (an embedding model) is "
                           "not supported; tfx runs the causal Gemma 3")
    d = hf.get("hidden_size", 4096)
    heads = hf.get("num_attention_heads", 32)
    n_layers = hf.get("num_hidden_layers", 32)
    head_dim = hf.get("head_dim") or d // heads
    gemma = family in GEMMA
    if family == "gpt_neox":
        act = hf.get("hidden_act", "gelu")
        if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
            raise WeightsError(f"{where}: activation {act!r} is not supported for GPT-NeoX")
        theta, scaling = rope_settings(hf, where)
        rotary = int(head_dim * _partial_rotary(hf))
        return dict(
            vocab_size=hf.get("vocab_size", 50432),
            context_length=hf.get("max_position_embeddings", 2048), d_model=d, n_heads=heads,
            n_layers=n_layers, d_ff=hf.get("intermediate_size", 4 * d),
            qkv_bias=bool(hf.get("attention_bias", True)), proj_bias=True, norm="layernorm",
            ln_eps=hf.get("layer_norm_eps", 1e-5),
            activation="gelu" if act == "gelu" else "gelu_tanh", positional="rope",
            rope_theta=theta, rope_scaling=scaling,
            rotary_dim=None if rotary == head_dim else rotary,
            parallel_residual=bool(hf.get("use_parallel_residual", True)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "silu"
    wants = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu") if gemma else ("silu",)
    if act not in wants:
        raise WeightsError(f"{where}: activation {act!r} is not supported for {family}; "
                           f"tfx runs {' or '.join(wants)}")
    bias = bool(hf.get("attention_bias", family == "qwen2"))
    # Qwen2 biases q, k and v only; Llama's attention_bias covers o_proj too, and tfx's one
    # switch for the output and MLP projections needs mlp_bias to agree with it
    proj_bias = bias if family in ("llama", "mistral") else False
    if bool(hf.get("mlp_bias", False)) != proj_bias:
        raise WeightsError(f"{where}: attention_bias and mlp_bias must agree (tfx has one "
                           "bias switch for the output and MLP projections)")
    window = hf.get("sliding_window") if family != "qwen2" or hf.get("use_sliding_window") \
        else None
    sliding = _sliding_layers(family, hf, n_layers) if window else None
    theta, scaling = rope_settings(hf, where, "full_attention" if family == "gemma3" else None)
    local_theta = None
    if family == "gemma3":
        local_theta, _ = rope_settings(hf, where, "sliding_attention")
        if "rope_parameters" not in hf:  # transformers 4 kept it apart
            local_theta = float(hf.get("rope_local_base_freq", 10000.0))
    rotary = int(head_dim * _partial_rotary(hf))
    out = dict(
        vocab_size=hf.get("vocab_size", 32000),
        context_length=hf.get("max_position_embeddings", 2048), d_model=d, n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads, n_layers=n_layers,
        d_ff=hf.get("intermediate_size", 11008), head_dim=head_dim,
        qkv_bias=bias, proj_bias=proj_bias,
        norm="rmsnorm", ln_eps=hf.get("rms_norm_eps", 1e-6),
        activation="geglu" if gemma else "swiglu", positional="rope", rope_theta=theta,
        rope_scaling=scaling, rotary_dim=None if rotary == head_dim else rotary,
        tie_embeddings=bool(hf.get("tie_word_embeddings", gemma)),
        qk_norm=family in ("qwen3", "gemma3"),
        sliding_window=window, sliding_layers=sliding, rope_local_theta=local_theta)
    if gemma:
        out.update(norm_plus_one=True, sandwich_norm=True, embed_scale=True,
                   attn_scalar=float(hf.get("query_pre_attn_scalar") or head_dim),
                   # Gemma 3 caps no scores, whatever its config says
                   attn_softcap=hf.get("attn_logit_softcapping") if family == "gemma2" else None,
                   final_softcap=hf.get("final_logit_softcapping"))
    return out


# -- tensors ------------------------------------------------------------------------------
_ATTN = {"q_proj": "attn.W_query", "k_proj": "attn.W_key", "v_proj": "attn.W_value",
         "o_proj": "attn.out_proj"}
_MLP = {"gate_proj": "ffn.gate_proj", "up_proj": "ffn.fc1", "down_proj": "ffn.fc2"}


def _norms(family: str) -> dict:
    """HF norm module -> tfx norm. Llama's post_attention_layernorm is the norm before
    the MLP (tfx ln2); Gemma's is a norm after attention, and pre_feedforward_layernorm
    the one before the MLP."""
    if family in GEMMA:
        return {"input_layernorm": "ln1", "post_attention_layernorm": "ln_post_attn",
                "pre_feedforward_layernorm": "ln2", "post_feedforward_layernorm": "ln_post_ffn"}
    if family == "olmo2":  # OLMo 2: only the norms after the sublayers (families/olmo.py)
        return {"post_attention_layernorm": "ln_post_attn",
                "post_feedforward_layernorm": "ln_post_ffn"}
    return {"input_layernorm": "ln1", "post_attention_layernorm": "ln2"}


def _kv_split(cfg) -> list[int]:
    """Phi-3's qkv_proj rows: q's heads, then k's and v's (fewer with grouped queries)."""
    kv = cfg.n_kv_heads * cfg.head_dim
    return [cfg.attn_dim, kv, kv]


@functools.lru_cache(maxsize=None)
def _decoder_names(family: str) -> Renames:
    """A decoder family's names, once the text model's prefix is gone."""
    layer = r"layers\.(\d+)"
    return Renames([
        (r"embed_tokens\.weight", "embed.tok_emb.weight"), (r"norm\.weight", "ln_f.scale"),
        (r"lm_head\.weight", "lm_head.weight"),
        (r".*rotary_emb\.inv_freq", None),  # recomputed from the rope settings
        *((rf"{layer}\.{module}\.\w+", rf"blocks.\1.{ours}.scale")
          for module, ours in _norms(family).items()),
        (rf"{layer}\.self_attn\.([qk])_norm\.\w+", r"blocks.\1.attn.\2_norm.scale"),
        *((rf"{layer}\.self_attn\.{theirs}\.(\w+)", rf"blocks.\1.{ours}.\2")
          for theirs, ours in _ATTN.items()),
        *((rf"{layer}\.mlp\.{theirs}\.(\w+)", rf"blocks.\1.{ours}.\2")
          for theirs, ours in _MLP.items()),
        # Phi-3: q, k, v stacked by rows; gate, then up
        (rf"{layer}\.self_attn\.qkv_proj\.(\w+)",
         tuple(rf"blocks.\1.attn.{n}.\2" for n in ("W_query", "W_key", "W_value")),
         Split(sizes=_kv_split)),
        (rf"{layer}\.mlp\.gate_up_proj\.(\w+)",
         (r"blocks.\1.ffn.gate_proj.\2", r"blocks.\1.ffn.fc1.\2"),
         Split(sizes=lambda cfg: [cfg.d_ff, cfg.d_ff])),
    ])


TEXT_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.", "model.")


def map_decoder(family: str, state: dict, cfg) -> tuple[dict, dict]:
    """Checkpoint tensors -> (tfx name -> tensor, tfx name -> checkpoint name)."""
    out, names = TensorMap(), _decoder_names(family)
    for key, t in state.items():
        if key.startswith(NOT_TEXT):
            continue  # a multimodal checkpoint's image half
        if not names.apply(out, unprefixed(key, TEXT_PREFIXES), key, t, cfg):
            out.keep(key, t)  # reported as unexpected
    return out.result()


_NEOX = Renames([
    (r"embed_in\.weight", "embed.tok_emb.weight"), (r"embed_out\.weight", "lm_head.weight"),
    *norm_rules(r"final_layer_norm", "ln_f"),
    *norm_rules(r"layers\.(\d+)\.input_layernorm", r"blocks.\1.ln1"),
    *norm_rules(r"layers\.(\d+)\.post_attention_layernorm", r"blocks.\1.ln2"),
    (r"layers\.(\d+)\.attention\.query_key_value\.(\w+)",
     tuple(rf"blocks.\1.attn.{n}.\2" for n in ("W_query", "W_key", "W_value")), HeadByHead()),
    (r"layers\.(\d+)\.attention\.dense\.(\w+)", r"blocks.\1.attn.out_proj.\2"),
    (r"layers\.(\d+)\.mlp\.dense_h_to_4h\.(\w+)", r"blocks.\1.ffn.fc1.\2"),
    (r"layers\.(\d+)\.mlp\.dense_4h_to_h\.(\w+)", r"blocks.\1.ffn.fc2.\2"),
    # causal-mask buffers and rotary tables: not parameters
    (r"layers\.\d+\.attention\.(?:rotary_emb\.)?\w+", None),
    (r"layers\.\d+\.[\w.]+\.masked_bias", None),
])


def map_neox(state: dict, cfg) -> tuple[dict, dict]:
    """GPT-NeoX: query_key_value rows are per head [q_h, k_h, v_h], head after head."""
    out = TensorMap()
    for key, t in state.items():
        if not _NEOX.apply(out, unprefixed(key, ("gpt_neox.",)), key, t, cfg):
            out.keep(key, t)  # reported as unexpected
    return out.result()


DECODER_FAMILIES = register(*(
    Family(name, archs, partial(decoder_config, name), partial(map_decoder, name),
           model_types=(model_type,), causal=True, size_keys=SIZE_KEYS)
    for name, archs, model_type in (
        ("llama", ("LlamaForCausalLM",), "llama"),
        ("mistral", ("MistralForCausalLM",), "mistral"),
        ("qwen2", ("Qwen2ForCausalLM",), "qwen2"),
        ("qwen3", ("Qwen3ForCausalLM",), "qwen3"),
        ("gemma2", ("Gemma2ForCausalLM",), "gemma2"),
        # Gemma 3 4B and up: images and text; tfx runs the text model and leaves the
        # vision tower and its projector unread
        ("gemma3", ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"), "gemma3_text"),
        ("phi3", ("Phi3ForCausalLM",), "phi3"))),
    Family("gpt_neox", ("GPTNeoXForCausalLM",), partial(decoder_config, "gpt_neox"), map_neox,
           model_types=("gpt_neox",), causal=True, size_keys=SIZE_KEYS))
DECODERS = tuple(family.name for family in DECODER_FAMILIES)
