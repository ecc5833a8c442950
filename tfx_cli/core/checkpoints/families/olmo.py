"""OLMo 2 (HF Olmo2ForCausalLM folders): config, as transformers 5's modeling_olmo2.py
computes it.

Llama's decoder with its norms moved: no norm before attention or the MLP; an RMSNorm of
each sublayer's output before the residual add (post_attention_layernorm after attention,
post_feedforward_layernorm after the MLP: tfx's ln_post_attn and ln_post_ffn, the sandwich
norms without their first half); q and k each RMS-normed over the whole projection (all
heads at once: q_norm is heads × head_dim wide, k_norm key/value heads × head_dim) before
the split into heads and the rotation. The tensor names are Llama's
(decoders.map_decoder maps them, with these two norms).
"""
from __future__ import annotations

from functools import partial

from ....errors import WeightsError
from .decoders import decoder_config, map_decoder
from .registry import Family, register
from .values import SIZE_KEYS


def olmo2_config(hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of an Olmo2ForCausalLM config.json."""
    if hf.get("attention_bias"):
        raise WeightsError(f"{where}: attention_bias is true: OLMo 2 then biases o_proj but "
                           "not its MLP, and tfx has one bias switch for both")
    return {**decoder_config("olmo2", hf, where), "pre_norms": False, "sandwich_norm": True,
            "qk_norm_full": True}


OLMO2 = register(Family("olmo2", ("Olmo2ForCausalLM",), olmo2_config,
                        partial(map_decoder, "olmo2"), model_types=("olmo2",), causal=True,
                        size_keys=SIZE_KEYS))
