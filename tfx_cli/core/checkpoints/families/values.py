"""The values of a HuggingFace config.json, checked once before any family reads them: each
key tfx reads has a kind (a count, a size, a positive number, a fraction, an object, a
list), and the keys that set a model's size must be there. A family's reader can then
divide by a head count and call .get on rope_scaling without meeting a 0, a string, an
Infinity or a missing width; what it cannot run is still refused by the family itself.

A null is read as transformers reads it, as "the default", except for a required key.
"""
from __future__ import annotations

import json
import math

from ....errors import WeightsError

SIZE = "a whole number of at least 1"
COUNT = "a whole number of at least 0"
POSITIVE = "a positive, finite number"
FRACTION = "a number above 0 and at most 1"
OBJECT = 'an object, e.g. {"rope_type": "linear", "factor": 2.0}'
WHOLE_LIST = "a list of whole numbers of at least 0"
NAMES = "a list of names"

KINDS: dict[str, str] = {
    **dict.fromkeys((
        # widths, heads and layers, each family's names for them
        "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
        "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim",
        "n_embd", "n_head", "n_layer", "n_positions", "n_ctx", "n_inner",
        "d_model", "num_heads", "num_layers", "d_ff", "d_kv", "encoder_layers",
        "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
        "encoder_ffn_dim", "decoder_ffn_dim", "decoder_vocab_size",
        # mixtures of experts, latent attention
        "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "shared_expert_intermediate_size", "decoder_sparse_step", "n_routed_experts",
        "n_group", "topk_group", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim",
        # positions and windows
        "relative_attention_num_buckets", "relative_attention_max_distance",
        "sliding_window_pattern", "local_attention",
        "global_attn_every_n_layers", "original_max_position_embeddings"), SIZE),
    **dict.fromkeys(("num_decoder_layers", "n_shared_experts", "first_k_dense_replace",
                     "type_vocab_size", "max_window_layers", "sliding_window"), COUNT),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
                     "rope_theta", "rotary_emb_base", "rope_local_base_freq",
                     "local_rope_theta", "global_rope_theta", "routed_scaling_factor",
                     "query_pre_attn_scalar", "attn_logit_softcapping",
                     "final_logit_softcapping", "swiglu_limit", "swiglu_alpha"), POSITIVE),
    **dict.fromkeys(("partial_rotary_factor", "rotary_pct"), FRACTION),
    **dict.fromkeys(("rope_scaling", "rope_parameters", "text_config"), OBJECT),
    "mlp_only_layers": WHOLE_LIST,
    "layer_types": NAMES,
}
# inside rope_scaling / rope_parameters (and each layer type's entry of the latter)
ROPE_KINDS = {"factor": POSITIVE, "original_max_position_embeddings": SIZE,
              "rope_theta": POSITIVE, "low_freq_factor": POSITIVE,
              "high_freq_factor": POSITIVE, "beta_fast": POSITIVE, "beta_slow": POSITIVE,
              "partial_rotary_factor": FRACTION}

# the keys that set the model's size: a default width or head count would count (or
# build) a model the file does not describe (a family declares them required,
# registry.Family.size_keys)
SIZE_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers")


def check_values(family: str, hf: dict, where: str, required: tuple[str, ...] = ()) -> None:
    """Refuse, naming the key, a value of the wrong kind or range, and a missing `required`
    key."""
    for key, kind in KINDS.items():
        if hf.get(key) is not None:
            _check(where, key, hf[key], kind)
    for name in ("rope_scaling", "rope_parameters"):
        params = hf.get(name) or {}
        nested = [(f"{name}.{k}", v) for k, v in params.items() if isinstance(v, dict)]
        for prefix, entry in [(name, params), *nested]:
            for key, kind in ROPE_KINDS.items():
                if entry.get(key) is not None:
                    _check(where, f"{prefix}.{key}", entry[key], kind)
    for key in required:
        if hf.get(key) is None:
            raise WeightsError(f"{where}: config key {key} is missing; a {family} "
                               f"config.json gives {', '.join(required)}, each {SIZE}")


def _check(where: str, key: str, value, kind: str) -> None:
    if not _fits(value, kind):
        raise WeightsError(f"{where}: config key {key} must be {kind}, got {_shown(value)}")


def _fits(value, kind: str) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool)
    number = (whole or isinstance(value, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
    if kind == SIZE:
        return whole and value >= 1
    if kind == COUNT:
        return whole and value >= 0
    if kind == POSITIVE:
        return number and value > 0
    if kind == FRACTION:
        return number and 0 < value <= 1
    if kind == OBJECT:
        return isinstance(value, dict)
    if kind == WHOLE_LIST:
        return isinstance(value, list) and all(_fits(v, COUNT) for v in value)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)  # NAMES


def _shown(value) -> str:
    """The value as the file writes it (Infinity, NaN, "linear", 0), cut to a line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["check_values", "KINDS", "SIZE_KEYS"]
