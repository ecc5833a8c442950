"""DeepSeek-V3 (`DeepseekV3ForCausalLM`) as tfx reads it: multi-head latent attention
(core/model/mla.py: q, k and v decompressed from latents q_lora_rank and kv_lora_rank
wide, the last qk_rope_head_dim of each q and k head rotated, the rotary key part shared
by the heads; value heads v_head_dim wide), the first first_k_dense_replace layers dense
(intermediate_size) and the rest mixtures of experts: a sigmoid score per routed expert,
the top num_experts_per_tok chosen from probs + e_score_correction_bias inside the
topk_group of n_group groups whose two best experts sum highest, weighed by their sigmoid
scores renormalised (norm_topk_prob) and times routed_scaling_factor, plus
n_shared_experts shared experts as one FFN n_shared_experts · moe_intermediate_size wide.
With yarn positions the scores are also multiplied by mscale², mscale = 0.1 ·
mscale_all_dim · ln(factor) + 1 (transformers' yarn_apply_mscale), and cos/sin by
get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim).

The rotary parts are stored in interleaved pairs (rope_interleave, the default): the
mapping reorders those weight rows, evens first, to the split-halves layout tfx rotates.
Experts are read per expert (`mlp.experts.{e}.gate_proj/up_proj/down_proj`, the Hub's
names) or stacked (transformers 5's `mlp.experts.gate_up_proj`, `down_proj`), as for
Qwen (moe.py). The released checkpoint's FP8 weights (float8_e4m3fn with a
`weight_scale_inv` per 128 × 128 block) are multiplied out to float32 as they are read;
its multi-token-prediction layer (layer num_hidden_layers, not part of the causal LM) is
left unread.
"""
from __future__ import annotations

import math
import re

from functools import partial

from ....errors import WeightsError
from .decoders import map_decoder, rope_settings
from .moe import map_moe
from .registry import Family, TensorMap, register
from .values import SIZE_KEYS


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def deepseek_config(hf: dict, where: str) -> dict:
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise WeightsError(f"{where}: activation {act!r} is not supported for DeepSeek-V3; "
                           "tfx runs silu")
    scoring = hf.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise WeightsError(f"{where}: scoring_func {scoring!r} is not supported; tfx reads "
                           "DeepSeek-V3's sigmoid router")
    if hf.get("rope_interleave", True) is not True:
        raise WeightsError(f"{where}: rope_interleave false is not supported; tfx reads "
                           "DeepSeek-V3's interleaved rotary weights (the default)")
    n_layers = hf.get("num_hidden_layers", 61)
    heads = hf.get("num_attention_heads", 128)
    nope, rope = hf.get("qk_nope_head_dim", 128), hf.get("qk_rope_head_dim", 64)
    theta, scaling = rope_settings(hf, where)
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    head_dim = nope + rope
    attn_scalar = None
    if scaling.get("rope_type") == "yarn":
        factor = scaling["factor"]
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        if scaling.get("attention_factor") is None and m and m_all:
            scaling["attention_factor"] = _mscale(factor, m) / _mscale(factor, m_all)
        if m_all:  # the scores times mscale²: divided by sqrt(head_dim / mscale⁴)
            attn_scalar = head_dim / _mscale(factor, m_all) ** 4
    first_dense = hf.get("first_k_dense_replace", 3)
    E = hf.get("n_routed_experts") or hf.get("num_local_experts") or 256
    shared = hf.get("n_shared_experts") or 0
    width = hf.get("moe_intermediate_size", 2048)
    bias = bool(hf.get("attention_bias", False))
    return dict(
        vocab_size=hf.get("vocab_size", 129280),
        context_length=hf.get("max_position_embeddings", 4096), d_model=hf.get("hidden_size",
                                                                              7168),
        n_heads=heads, n_kv_heads=heads, n_layers=n_layers, head_dim=head_dim,
        d_ff=hf.get("intermediate_size", 18432), qkv_bias=bias, proj_bias=bias,
        norm="rmsnorm", ln_eps=hf.get("rms_norm_eps", 1e-6), activation="swiglu",
        positional="rope", rope_theta=theta, rope_scaling=scaling, attn_scalar=attn_scalar,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        q_lora_rank=hf.get("q_lora_rank") or 0, kv_lora_rank=hf.get("kv_lora_rank", 512),
        qk_rope_dim=rope, v_head_dim=hf.get("v_head_dim", 128),
        n_experts=E, experts_per_token=hf.get("num_experts_per_tok", 8), expert_d_ff=width,
        moe_layers=tuple(range(first_dense, n_layers)) if first_dense else None,
        router="sigmoid", router_norm=bool(hf.get("norm_topk_prob", True)),
        router_groups=hf.get("n_group") or 1, router_topk_groups=hf.get("topk_group") or 1,
        router_correction=True, router_scale=float(hf.get("routed_scaling_factor", 1.0)),
        shared_d_ff=shared * width)


def _halves(rows):
    """Interleaved rotary rows (x0, x1), (x2, x3), ... -> evens then odds (dim -2)."""
    import torch

    return torch.cat([rows[..., 0::2, :], rows[..., 1::2, :]], dim=-2)


def fp8_weight(weight, scale_inv, block: int = 128):
    """An FP8 weight (out, in) times its per-block scale (out / 128, in / 128), float32."""
    import torch

    if weight.is_meta:
        return torch.empty(weight.shape, device="meta")
    out, inn = weight.shape
    scale = scale_inv.float().repeat_interleave(block, 0)[:out].repeat_interleave(block, 1)
    return weight.float() * scale[:, :inn]


_ATTN = {"q_a_proj": "W_q_a", "q_b_proj": "W_q_b", "q_proj": "W_query",
         "kv_a_proj_with_mqa": "W_kv_a", "kv_b_proj": "W_kv_b"}
_LATENT_NORMS = {"q_a_layernorm": "q_a_norm", "kv_a_layernorm": "kv_a_norm"}
_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")


def map_deepseek(state: dict, cfg) -> tuple[dict, dict]:
    """Checkpoint tensors -> (tfx name -> tensor, tfx name -> checkpoint name)."""
    out, rest = TensorMap(), {}
    N, R, H = cfg.head_dim - cfg.qk_rope_dim, cfg.qk_rope_dim, cfg.n_heads
    interleaved = True  # deepseek_config refuses rope_interleave false

    for key, t in state.items():
        if key.endswith("_scale_inv"):
            continue  # read with its weight
        scale = state.get(key + "_scale_inv")
        if scale is not None:
            t = fp8_weight(t, scale)
        match = _LAYER.match(key)
        if match is None:
            rest[key] = t
            continue
        layer, what = int(match.group(1)), match.group(2)
        if layer >= cfg.n_layers:
            continue  # the multi-token-prediction layer: not part of the causal LM
        attn = f"blocks.{layer}.attn"
        parts = what.split(".")
        if parts[0] == "self_attn" and len(parts) == 3 and parts[1] in _ATTN:
            if interleaved and parts[1] in ("q_b_proj", "q_proj") and parts[2] == "weight":
                per_head = t.view(H, N + R, -1)
                t = torch_cat(per_head[:, :N], _halves(per_head[:, N:])).reshape(t.shape)
            elif interleaved and parts[1] == "kv_a_proj_with_mqa":
                if parts[2] == "weight":
                    t = torch_cat(t[:-R], _halves(t[-R:]), dim=0)
                else:  # a bias: the same rows
                    t = torch_cat(t[:-R], _halves(t[-R:, None])[:, 0], dim=0)
            out.put(f"{attn}.{_ATTN[parts[1]]}.{parts[2]}", key, t)
        elif parts[0] == "self_attn" and len(parts) == 3 and parts[1] in _LATENT_NORMS:
            out.put(f"{attn}.{_LATENT_NORMS[parts[1]]}.scale", key, t)
        elif what == "mlp.gate.e_score_correction_bias" and cfg.is_moe_layer(layer):
            out.put(f"blocks.{layer}.moe.score_correction", key, t)
        else:
            rest[key] = t
    out.update(map_moe("deepseek_v3", rest, cfg, partial(map_decoder, "llama")))
    return out.result()


def torch_cat(a, b, dim: int = 1):
    import torch

    return torch.cat([a, b], dim=dim)


def _companions(key: str) -> list[str]:
    """An FP8 weight's block scales, read with it."""
    return [key + "_scale_inv"] if key.endswith(".weight") else []


map_deepseek.companions = _companions  # checkpoints.plan reads them together
DEEPSEEK_V3 = register(Family("deepseek_v3", ("DeepseekV3ForCausalLM",), deepseek_config,
                              map_deepseek, model_types=("deepseek_v3",), causal=True,
                              size_keys=SIZE_KEYS))


__all__ = ["deepseek_config", "map_deepseek", "fp8_weight"]
