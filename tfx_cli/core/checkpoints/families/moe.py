"""The mixture-of-experts decoders as tfx reads them (Mixtral, Qwen2-MoE, Qwen3-MoE,
OLMoE): a config.json -> ModelConfig switches, and the checkpoint's tensor names ->
tfx's. Each is a decoder family of decoders.py (attention, norms, positions) whose FFN is
a router and experts in its MoE layers (core/model/moe.py), as transformers 5 computes it:

  mixtral    Mistral's attention; every layer MoE: softmax over num_local_experts, the
             top num_experts_per_tok renormalised
  qwen2_moe  Qwen2's attention (q, k, v biases); MoE layers every decoder_sparse_step-th
             layer except mlp_only_layers (those dense, intermediate_size wide); experts
             moe_intermediate_size wide; a shared expert (shared_expert_intermediate_size)
             scaled by sigmoid(x W_gate); top-k renormalised only with norm_topk_prob
  qwen3_moe  Qwen3's attention (per-head q/k norms); Qwen2-MoE's layer rule, no shared
             expert
  olmoe      Llama's attention with q and k RMS-normed over all heads before the split
             (q_norm: hidden_size wide, k_norm: the key/value heads'); every layer MoE;
             the top-k not renormalised unless norm_topk_prob

Experts are read as the Hub ships them, one tensor per expert and projection
(Mixtral's `block_sparse_moe.experts.{e}.w1/w2/w3`, w1 the gate, w3 up, w2 down;
Qwen's and OLMoE's `mlp.experts.{e}.gate_proj/up_proj/down_proj`; the router is
`block_sparse_moe.gate` / `mlp.gate`), and as a transformers 5 model holds them: one
stacked tensor per layer, `mlp.experts.gate_up_proj` (E, 2F, C: gate rows, then up
rows) and `mlp.experts.down_proj` (E, C, F). (transformers 5.24's save_pretrained
writes the Hub's per-expert names back; a state_dict saved as it is keeps the stacked
ones.)
"""
from __future__ import annotations

import re
from functools import partial

from ....errors import WeightsError
from .decoders import decoder_config, map_decoder
from .registry import Family, TensorMap, register
from .values import SIZE_KEYS

# the decoder family whose attention and norms each reads as it is
BASE = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3", "olmoe": "llama"}


def moe_layers(hf: dict, n_layers: int) -> tuple[int, ...] | None:
    """Qwen's MoE layers: every decoder_sparse_step-th (layer + 1), except mlp_only_layers;
    None when that is every layer."""
    step = hf.get("decoder_sparse_step") or 1
    dense = set(hf.get("mlp_only_layers") or [])
    layers = tuple(i for i in range(n_layers) if i not in dense and (i + 1) % step == 0)
    return None if len(layers) == n_layers else layers


def moe_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of an MoE family's config.json."""
    if family != "mixtral" and hf.get("use_sliding_window"):
        raise WeightsError(f"{where}: use_sliding_window is not supported for {family}; tfx "
                           "reads its released models, which attend to every earlier token")
    base = dict(hf)
    if family != "mixtral":
        base["sliding_window"] = None
    if family == "qwen2_moe":  # Qwen2-MoE names its q, k, v bias qkv_bias
        base["attention_bias"] = bool(hf.get("qkv_bias", True))
    out = decoder_config(BASE[family], base, where)
    n_layers = out["n_layers"]
    # transformers 5 writes num_local_experts for every family (its attribute map); the
    # released Qwen and OLMoE configs say num_experts
    E = hf.get("num_local_experts") or hf.get("num_experts") or \
        {"mixtral": 8, "olmoe": 64, "qwen2_moe": 60, "qwen3_moe": 128}[family]
    if family == "mixtral":
        width = out["d_ff"]
    else:
        width = hf.get("moe_intermediate_size") if family != "olmoe" else out["d_ff"]
    out.update(n_experts=E, experts_per_token=hf.get("num_experts_per_tok", 2),
               expert_d_ff=width, router_norm=family == "mixtral" or
               bool(hf.get("norm_topk_prob", False)))
    if family in ("qwen2_moe", "qwen3_moe"):
        out["moe_layers"] = moe_layers(hf, n_layers)
    if family == "qwen2_moe":
        out.update(shared_d_ff=hf.get("shared_expert_intermediate_size", 5632),
                   shared_gate=True)
    if family == "olmoe":
        if hf.get("clip_qkv") is not None:
            raise WeightsError(f"{where}: clip_qkv {hf['clip_qkv']} is not supported; tfx "
                               "reads OLMoE without clipping q, k and v (clip_qkv null)")
        out["qk_norm_full"] = True
    return out


# -- tensors ------------------------------------------------------------------------------
_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(block_sparse_moe|mlp)\.(.+)$")
_EXPERT = {"w1": "gate_proj", "w3": "fc1", "w2": "fc2",  # Mixtral's names
           "gate_proj": "gate_proj", "up_proj": "fc1", "down_proj": "fc2"}
_SHARED = {"gate_proj": "gate_proj", "up_proj": "fc1", "down_proj": "fc2"}


def map_moe(family: str, state: dict, cfg, map_rest=None) -> tuple[dict, dict]:
    """Checkpoint tensors -> (tfx name -> tensor, tfx name -> checkpoint name): the MoE
    layers' router, experts and shared expert here, the rest by the base family's
    mapping (`map_rest(state, cfg)`, default decoders.map_decoder of BASE[family])."""
    out, rest = TensorMap(), {}
    for key, t in state.items():
        match = _LAYER.match(key)
        if not match or not cfg.is_moe_layer(int(match.group(1))):
            rest[key] = t
            continue
        moe, what = f"blocks.{match.group(1)}.moe", match.group(3)
        parts = what.split(".")
        if what in ("gate.weight", "router.weight", "router.bias"):
            out.put(f"{moe}.router.{parts[-1]}", key, t)
        elif parts[0] == "experts" and len(parts) == 4 and parts[2] in _EXPERT:
            out.put(f"{moe}.expert.{parts[1]}.{_EXPERT[parts[2]]}.{parts[3]}", key, t)
        elif what == "experts.gate_up_proj":  # (E, 2F, C): the gate's rows, then up's
            gate, up = t.chunk(2, dim=1)
            for e in range(t.shape[0]):
                out.put(f"{moe}.expert.{e}.gate_proj.weight", key, gate[e])
                out.put(f"{moe}.expert.{e}.fc1.weight", key, up[e])
        elif what == "experts.down_proj":  # (E, C, F)
            for e in range(t.shape[0]):
                out.put(f"{moe}.expert.{e}.fc2.weight", key, t[e])
        elif parts[0] in ("shared_expert", "shared_experts") and len(parts) == 3 and \
                parts[1] in _SHARED:
            out.put(f"{moe}.shared.{_SHARED[parts[1]]}.{parts[2]}", key, t)
        elif what == "gate.e_score_correction_bias":  # DeepSeek-V3: shifts the choice
            out.put(f"{moe}.score_correction", key, t)
        elif what == "shared_expert_gate.weight":
            out.put(f"{moe}.shared_gate.weight", key, t)
        else:
            rest[key] = t  # reported as unexpected by the base mapping
    out.update((map_rest or partial(map_decoder, BASE[family]))(rest, cfg))
    return out.result()


MOE_FAMILIES = register(*(
    Family(name, (arch,), partial(moe_config, name), partial(map_moe, name),
           model_types=(name,), causal=True, size_keys=SIZE_KEYS)
    for name, arch in (("mixtral", "MixtralForCausalLM"), ("qwen2_moe", "Qwen2MoeForCausalLM"),
                       ("qwen3_moe", "Qwen3MoeForCausalLM"), ("olmoe", "OlmoeForCausalLM"))))
MOE = tuple(family.name for family in MOE_FAMILIES)


__all__ = ["MOE", "BASE", "moe_config", "map_moe", "moe_layers"]
