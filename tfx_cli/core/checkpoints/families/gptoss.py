"""gpt-oss (`GptOssForCausalLM`) as tfx reads it: Llama's attention with biases on q, k,
v and the output, a learned sink logit per head joining every softmax (attention sinks),
sliding-window and full layers alternating (`layer_types`), yarn rotary positions
(`truncate` false: the ramp's ends are not rounded), and in every layer a mixture of
experts: the router (with a bias) keeps the top num_experts_per_tok logits and weighs
them by a softmax over those alone; each expert a clamped SwiGLU with biases,
(clamp(up, ±limit) + 1) · g · sigmoid(alpha · g), g = min(gate, limit).

Experts are stored stacked per layer, as transformers 5 holds and saves them:
`mlp.experts.gate_up_proj` (E, C, 2F, used as x @ W) with the gate and up columns
interleaved (gate at even columns, up at odd), its bias (E, 2F) alike;
`mlp.experts.down_proj` (E, F, C) and its bias (E, C). The released checkpoints ship
those two weights in MXFP4 (`*_blocks` (E, rows, cols/32, 16) bytes, two 4-bit values
each, low nibble first, and `*_scales` (E, rows, cols/32), a power-of-two exponent + 127
per block of 32), rows being the output dims (2F for gate_up, C for down); they are
dequantised to float32 as they are read (as transformers' convert_moe_packed_tensors
does: values from the FP4 (E2M1) table times 2^(scale - 127)).
"""
from __future__ import annotations

import re

from .decoders import decoder_config, map_decoder
from .registry import Family, TensorMap, register
from .values import SIZE_KEYS

# FP4 E2M1: the sixteen values a nibble stands for (sign bit high)
FP4 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def gptoss_config(hf: dict, where: str) -> dict:
    bias = bool(hf.get("attention_bias", True))
    # decoders.py's one bias switch covers o_proj (and would the MLP's; gpt-oss has none)
    out = decoder_config("llama", {**hf, "attention_bias": bias, "mlp_bias": bias}, where)
    scaling = dict(out["rope_scaling"])
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if scaling.get("rope_type") == "yarn" and params.get("truncate") is False:
        scaling["truncate"] = 0  # a number: rope_scaling holds numbers and names
    out.update(rope_scaling=scaling, attn_sinks=True,
               n_experts=hf.get("num_local_experts", 32),
               experts_per_token=hf.get("num_experts_per_tok", 4), expert_d_ff=out["d_ff"],
               router="softmax_topk", router_bias=True, expert_bias=True,
               swiglu_limit=float(hf.get("swiglu_limit", 7.0)),
               swiglu_alpha=float(hf.get("swiglu_alpha", 1.702)))
    return out


def mxfp4(blocks, scales):
    """MXFP4 -> float32: blocks (..., G, 16) bytes, scales (..., G) -> (..., G * 32)."""
    import torch

    if blocks.is_meta:
        return torch.empty(*blocks.shape[:-2], blocks.shape[-2] * 32, device="meta")
    table = torch.tensor(FP4, dtype=torch.float32)
    b = blocks.to(torch.uint8)
    values = torch.stack([table[(b & 0x0F).long()], table[(b >> 4).long()]], dim=-1)
    values = values.flatten(-2)  # (..., G, 32): each byte's low value, then its high one
    exponent = scales.to(torch.int32)[..., None] - 127
    return torch.ldexp(values, exponent).flatten(-2)


_EXPERTS = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.experts\.(\w+)$")


def map_gptoss(state: dict, cfg) -> tuple[dict, dict]:
    """Checkpoint tensors -> (tfx name -> tensor, tfx name -> checkpoint name)."""
    out, rest = TensorMap(), {}
    for key, t in state.items():
        match = _EXPERTS.match(key)
        if match is None:
            m = re.match(r"^(?:model\.)?layers\.(\d+)\.(self_attn\.sinks|mlp\.router\.(\w+))$",
                         key)
            if m and m.group(2) == "self_attn.sinks":
                out.put(f"blocks.{m.group(1)}.attn.sinks", key, t)
            elif m:
                out.put(f"blocks.{m.group(1)}.moe.router.{m.group(3)}", key, t)
            else:
                rest[key] = t
            continue
        moe, what = f"blocks.{match.group(1)}.moe.expert", match.group(2)
        E = t.shape[0]
        if what == "gate_up_proj":  # (E, C, 2F): x @ W, gate and up columns interleaved
            for e in range(E):
                out.put(f"{moe}.{e}.gate_proj.weight", key, t[e, :, 0::2].T)
                out.put(f"{moe}.{e}.fc1.weight", key, t[e, :, 1::2].T)
        elif what == "gate_up_proj_bias":
            for e in range(E):
                out.put(f"{moe}.{e}.gate_proj.bias", key, t[e, 0::2])
                out.put(f"{moe}.{e}.fc1.bias", key, t[e, 1::2])
        elif what == "down_proj":  # (E, F, C)
            for e in range(E):
                out.put(f"{moe}.{e}.fc2.weight", key, t[e].T)
        elif what == "down_proj_bias":
            for e in range(E):
                out.put(f"{moe}.{e}.fc2.bias", key, t[e])
        elif what in ("gate_up_proj_blocks", "down_proj_blocks"):
            scales_key = key[:-len("blocks")] + "scales"
            if scales_key not in state:
                rest[key] = t  # reported as unexpected
                continue
            weight = mxfp4(t, state[scales_key])  # (E, rows, cols): rows the outputs
            for e in range(E):
                if what == "down_proj_blocks":
                    out.put(f"{moe}.{e}.fc2.weight", key, weight[e])
                else:
                    out.put(f"{moe}.{e}.gate_proj.weight", key, weight[e, 0::2])
                    out.put(f"{moe}.{e}.fc1.weight", key, weight[e, 1::2])
        elif what.endswith("_scales") and key[:-len("scales")] + "blocks" in state:
            continue  # read with its blocks
        else:
            rest[key] = t
    out.update(map_decoder("llama", rest, cfg))
    return out.result()


def _companions(key: str) -> list[str]:
    """The tensors read with `key`: an MXFP4 weight's scales with its blocks."""
    return [key[:-len("blocks")] + "scales"] if key.endswith("_proj_blocks") else []


map_gptoss.companions = _companions  # checkpoints.plan reads them together
GPT_OSS = register(Family("gpt_oss", ("GptOssForCausalLM",), gptoss_config, map_gptoss,
                          model_types=("gpt_oss",), causal=True, size_keys=SIZE_KEYS))


__all__ = ["gptoss_config", "map_gptoss", "mxfp4", "FP4"]
