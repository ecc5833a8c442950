"""The mixture-of-experts, attention-sink and latent-attention switches of ModelConfig:
their checks and their words in `features()`. Pure Python, like config.py (which calls
these two functions; it holds the fields themselves)."""
from __future__ import annotations

from ..errors import ConfigError

ROUTERS = ("softmax", "softmax_topk", "sigmoid")
# softmax: probabilities over every expert, the k largest chosen (Mixtral, Qwen, OLMoE);
# softmax_topk: the k largest logits chosen, softmax over those k only (gpt-oss);
# sigmoid: an independent sigmoid per expert, chosen in groups (DeepSeek-V3)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_moe(cfg) -> None:
    for name in ("n_experts", "experts_per_token", "shared_d_ff", "q_lora_rank",
                 "kv_lora_rank", "qk_rope_dim"):
        value = getattr(cfg, name)
        if not _whole(value) or value < 0:
            raise ConfigError(f"config field {name} must be a whole number >= 0, got {value!r}")
    for name in ("expert_d_ff", "v_head_dim"):
        value = getattr(cfg, name)
        if value is not None and (not _whole(value) or value <= 0):
            raise ConfigError(f"config field {name} must be a positive whole number or null, "
                              f"got {value!r}")
    for name in ("router_groups", "router_topk_groups"):
        value = getattr(cfg, name)
        if not _whole(value) or value < 1:
            raise ConfigError(f"config field {name} must be a whole number >= 1, got {value!r}")
    for name in ("router_scale", "swiglu_alpha"):
        value = getattr(cfg, name)
        if not _number(value) or not 0 < value < float("inf"):
            raise ConfigError(f"config field {name} must be a positive, finite number, got "
                              f"{value!r}")
    limit = cfg.swiglu_limit
    if limit is not None and (not _number(limit) or not 0 < limit < float("inf")):
        raise ConfigError(f"config field swiglu_limit must be a positive, finite number or "
                          f"null, got {limit!r}")
    if cfg.router not in ROUTERS:
        raise ConfigError(f"config field router={cfg.router!r} is not one of "
                          f"{', '.join(ROUTERS)}")
    E, k = cfg.n_experts, cfg.experts_per_token
    if E:
        if not 1 <= k <= E:
            raise ConfigError(f"experts_per_token={k} must be from 1 to n_experts={E} (the "
                              "experts each token is routed to)")
        if E % cfg.router_groups or cfg.router_topk_groups > cfg.router_groups:
            raise ConfigError(f"router_groups={cfg.router_groups} must divide n_experts={E}, "
                              f"and router_topk_groups={cfg.router_topk_groups} be at most it")
        if cfg.router_groups > 1 and cfg.router != "sigmoid":
            raise ConfigError("grouped routing (router_groups > 1) is DeepSeek-V3's sigmoid "
                              "router: set router to sigmoid")
        if k > E // cfg.router_groups * cfg.router_topk_groups:
            raise ConfigError(f"experts_per_token={k} is more than the experts in "
                              f"router_topk_groups={cfg.router_topk_groups} groups")
        if cfg.is_encoder_decoder:
            raise ConfigError("experts are not supported in encoder–decoder models")
    elif k or cfg.shared_d_ff or cfg.moe_layers is not None:
        raise ConfigError("experts_per_token, shared_d_ff and moe_layers need n_experts > 0 "
                          "(the routed experts)")
    layers = cfg.moe_layers
    if layers is not None and (not isinstance(layers, tuple) or not all(
            _whole(i) and 0 <= i < cfg.n_layers for i in layers)):
        raise ConfigError(f"config field moe_layers must list layers 0 to {cfg.n_layers - 1}, "
                          f"got {list(layers) if isinstance(layers, tuple) else layers!r}")
    if cfg.shared_gate and not cfg.shared_d_ff:
        raise ConfigError("shared_gate scales the shared expert: set shared_d_ff to its width")
    if cfg.swiglu_limit is not None and cfg.activation != "swiglu":
        raise ConfigError("swiglu_limit clamps a SwiGLU: set activation to swiglu")
    _validate_mla(cfg)


def _validate_mla(cfg) -> None:
    if not cfg.kv_lora_rank:
        if cfg.q_lora_rank or cfg.qk_rope_dim or cfg.v_head_dim is not None:
            raise ConfigError("q_lora_rank, qk_rope_dim and v_head_dim belong to latent "
                              "attention: set kv_lora_rank (the key/value latent's width)")
        return
    rope = cfg.qk_rope_dim
    if cfg.positional != "rope" or not rope or rope % 2 or rope >= cfg.head_dim:
        raise ConfigError(f"latent attention rotates qk_rope_dim dims at the end of each "
                          f"head: it needs rotary positions and an even qk_rope_dim below "
                          f"head_dim={cfg.head_dim}, got {rope}")
    if cfg.n_kv_heads != cfg.n_heads or cfg.qk_norm or cfg.qk_norm_full or cfg.is_encoder_decoder \
            or cfg.rotary_dim is not None:
        raise ConfigError("latent attention decompresses a key and value head per query head: "
                          "set n_kv_heads to n_heads, without q/k norms or rotary_dim")


def moe_features(cfg) -> list[str]:
    """The switches above that are on, in a few words each."""
    out = []
    if cfg.n_experts:
        dense = cfg.n_layers - len(cfg.moe_layer_list)
        out.append(f"MoE {cfg.experts_per_token} of {cfg.n_experts} experts"
                   + (f", {dense} dense layer{'s' if dense != 1 else ''}" if dense else ""))
        if cfg.router != "softmax":
            out.append(f"{cfg.router} router")
        if cfg.router_groups > 1:
            out.append(f"{cfg.router_topk_groups} of {cfg.router_groups} expert groups")
        if cfg.shared_d_ff:
            out.append("shared expert" + (" (gated)" if cfg.shared_gate else ""))
    if cfg.swiglu_limit is not None:
        out.append(f"SwiGLU clamped at {cfg.swiglu_limit:g}")
    if cfg.attn_sinks:
        out.append("attention sinks")
    if cfg.kv_lora_rank:
        out.append(f"latent attention (kv {cfg.kv_lora_rank}"
                   + (f", q {cfg.q_lora_rank}" if cfg.q_lora_rank else "") + ")")
    return out


def ffn_out_name(cfg, layer: int) -> str:
    """The trace name of block `layer`'s FFN output: its mixture of experts' in an MoE
    layer (what patch --site ffn_out and attribute read there)."""
    return f"blocks.{layer}.moe.out" if cfg.is_moe_layer(layer) else f"blocks.{layer}.ffn.out"


def ffn_out_label(cfg) -> str:
    """The FFN outputs of every layer, in words: `blocks.{i}.ffn.out`, or for a mixture of
    experts `blocks.{i}.moe.out` (with the dense layers' ffn.out where there are any)."""
    if not cfg.n_experts:
        return "blocks.{i}.ffn.out"
    dense = cfg.n_layers - len(cfg.moe_layer_list)
    return "blocks.{i}.moe.out" + (" (blocks.{i}.ffn.out in the dense layers)" if dense else "")


__all__ = ["ROUTERS", "validate_moe", "moe_features", "ffn_out_name", "ffn_out_label"]
