"""count-params for mixtures of experts, attention sinks and latent attention: the rows
params.py adds for them, and what a token uses of an MoE model (its active parameters and
FLOPs). Pure Python, like params.py.

An MoE layer's experts are one row per projection, named `moe.expert.{e}.gate_proj.weight`
with one expert's shape and every expert's count (noted "× E experts"). A token runs k of
them, so its active parameters are the total less the (E − k) experts it skips in every
MoE layer; its active FLOPs count the router, k experts and the shared expert. Both count
the embedding and the head, as the models' own "active parameters" do.
"""
from __future__ import annotations

from .config import ModelConfig
from .param_rows import Row


def _row(name, label, shape, count, part, note=""):
    return Row(name, label, shape, count, part, note)


def _linear(name: str, label: str, n_in: int, n_out: int, bias: bool, part: str,
            times: int = 1, note: str = "") -> list:
    rows = [_row(f"{name}.weight", label, (n_out, n_in), times * n_out * n_in, part, note)]
    if bias:
        rows.append(_row(f"{name}.bias", f"{label} bias", (n_out,), times * n_out, part, note))
    return rows


def _rms(name: str, label: str, size: int, part: str) -> list:
    return [_row(f"{name}.scale", f"{label} scale", (size,), size, part)]


# -- parameters ----------------------------------------------------------------------
def latent_attention_rows(cfg: ModelConfig) -> list:
    """DeepSeek-V3's attention projections (mla.py), in the order the model builds them."""
    C, H, D, Dv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.v_dim
    L, R, Q = cfg.kv_lora_rank, cfg.qk_rope_dim, cfg.q_lora_rank
    rows = []
    if Q:
        rows += _linear("attn.W_q_a", "query latent W_qa", C, Q, cfg.qkv_bias, "attention")
        rows += _rms("attn.q_a_norm", "query latent norm", Q, "norms")
        rows += _linear("attn.W_q_b", "query up W_qb", Q, H * D, False, "attention")
    else:
        rows += _linear("attn.W_query", "query W_Q", C, H * D, False, "attention")
    rows += _linear("attn.W_kv_a", "key/value latent + rotary key W_kva", C, L + R,
                    cfg.qkv_bias, "attention")
    rows += _rms("attn.kv_a_norm", "key/value latent norm", L, "norms")
    rows += _linear("attn.W_kv_b", "key and value up W_kvb", L, H * (D - R + Dv), False,
                    "attention")
    rows += _linear("attn.out_proj", "output W_O", H * Dv, C, cfg.proj_bias, "attention")
    return rows


def attention_extra_rows(cfg: ModelConfig) -> list:
    """Rows a standard attention adds for gpt-oss's sink logits (the all-head q/k norms of
    OLMoE and OLMo 2 are params.block_rows')."""
    rows = []
    if cfg.attn_sinks:
        rows.append(_row("attn.sinks", "sink logits", (cfg.n_heads,), cfg.n_heads,
                         "attention", "one per head"))
    return rows


def moe_rows(cfg: ModelConfig) -> list:
    """An MoE layer's FFN: router, experts (one row per projection, every expert counted),
    the shared expert and its gate."""
    C, E = cfg.d_model, cfg.n_experts
    F = cfg.expert_d_ff or cfg.d_ff
    each = f"× {E} experts"
    rows = _linear("moe.router", "router W_r", C, E, cfg.router_bias, "router")
    if cfg.router_correction:
        rows.append(_row("moe.score_correction", "score-correction bias", (E,), 0, "router",
                         "a buffer: shifts the choice, not counted"))
    for name, label, n_in, n_out in (("gate_proj", "expert gate", C, F),
                                     ("fc1", "expert up", C, F), ("fc2", "expert down", F, C)):
        rows += _linear(f"moe.expert.{{e}}.{name}", label, n_in, n_out, cfg.expert_bias,
                        "experts", times=E, note=each)
    if cfg.shared_d_ff:
        S = cfg.shared_d_ff
        rows += _linear("moe.shared.gate_proj", "shared expert gate", C, S, cfg.proj_bias,
                        "shared_expert")
        rows += _linear("moe.shared.fc1", "shared expert up", C, S, cfg.proj_bias,
                        "shared_expert")
        rows += _linear("moe.shared.fc2", "shared expert down", S, C, cfg.proj_bias,
                        "shared_expert")
        if cfg.shared_gate:
            rows += _linear("moe.shared_gate", "shared expert's gate", C, 1, False,
                            "shared_expert")
    return rows


def expert_params(cfg: ModelConfig) -> int:
    """One expert's parameters."""
    C, F = cfg.d_model, cfg.expert_d_ff or cfg.d_ff
    return 3 * C * F + (2 * F + C if cfg.expert_bias else 0)


def expand(name: str, count: int, n_experts: int) -> dict[str, int]:
    """A row's parameter names: one per expert for `moe.expert.{e}.*` rows."""
    if "{e}" not in name:
        return {name: count}
    return {name.replace("{e}", str(e)): count // n_experts for e in range(n_experts)}


# -- FLOPs per token -------------------------------------------------------------------
def _mm(name: str, label: str, n_in: int, n_out: int, part: str, times: int = 1):
    what = f"(1, {n_in})·({n_in}, {n_out})" + (f" × {times}" if times > 1 else "")
    return _row(name, label, None, 2 * n_in * n_out * times, part, what)


def latent_projection_flops(cfg: ModelConfig) -> list:
    C, H, D, Dv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.v_dim
    L, R, Q = cfg.kv_lora_rank, cfg.qk_rope_dim, cfg.q_lora_rank
    rows = [_mm("attn.W_q_a", "x·W_qa", C, Q, "projections"),
            _mm("attn.W_q_b", "q_a·W_qb", Q, H * D, "projections")] if Q else \
        [_mm("attn.W_query", "x·W_Q", C, H * D, "projections")]
    return rows + [_mm("attn.W_kv_a", "x·W_kva", C, L + R, "projections"),
                   _mm("attn.W_kv_b", "kv_a·W_kvb", L, H * (D - R + Dv), "projections")]


def moe_flop_rows(cfg: ModelConfig) -> list:
    """One MoE layer's matmuls for one token: the router, its k experts, the shared one."""
    C, E, k = cfg.d_model, cfg.n_experts, cfg.experts_per_token
    F = cfg.expert_d_ff or cfg.d_ff
    rows = [_mm("moe.router", "x·W_r (router logits)", C, E, "router"),
            _mm("moe.expert.gate_proj", f"x·W_gate, {k} experts", C, F, "experts", k),
            _mm("moe.expert.fc1", f"x·W_up, {k} experts", C, F, "experts", k),
            _mm("moe.expert.fc2", f"h·W_down, {k} experts", F, C, "experts", k)]
    if cfg.shared_d_ff:
        S = cfg.shared_d_ff
        rows += [_mm("moe.shared.gate_proj", "x·W_gate (shared)", C, S, "shared_expert"),
                 _mm("moe.shared.fc1", "x·W_up (shared)", C, S, "shared_expert"),
                 _mm("moe.shared.fc2", "h·W_down (shared)", S, C, "shared_expert")]
        if cfg.shared_gate:
            rows.append(_mm("moe.shared_gate", "x·W_gate (shared scale)", C, 1,
                            "shared_expert"))
    return rows


def attention_matmul_flops(cfg: ModelConfig, T: int) -> int:
    """QKᵀ and pattern·V of one layer, per token, over T keys: H·D and H·Dv wide."""
    return 2 * T * cfg.n_heads * (cfg.head_dim + cfg.v_dim)


__all__ = ["latent_attention_rows", "attention_extra_rows", "moe_rows", "expert_params",
           "expand", "latent_projection_flops", "moe_flop_rows", "attention_matmul_flops",
           "moe_count"]


# -- what a token uses -------------------------------------------------------------------
def moe_count(cfg: ModelConfig, params, flops):
    """count-params' `moe` object: total against active parameters and FLOPs per token."""
    from .results import BlockCount
    from .results.moe import MoeCount

    E, k = cfg.n_experts, cfg.experts_per_token
    layers = cfg.moe_layer_list
    one = expert_params(cfg)
    active = params.total - len(layers) * (E - k) * one
    every = flops.per_token + len(layers) * (E - k) * 6 * cfg.d_model * \
        (cfg.expert_d_ff or cfg.d_ff)
    dense = None
    if params.n_dense_layers:
        dense = BlockCount(rows=params.dense_block, total=params.dense_per_block,
                           parts=params.dense_block_parts, n_layers=params.n_dense_layers,
                           all_blocks=params.dense_per_block * params.n_dense_layers)
    return MoeCount(n_experts=E, experts_per_token=k, moe_layers=layers,
                    dense_layers=[i for i in range(cfg.n_layers) if i not in layers],
                    expert_params=one, active_params=active,
                    active_share=active / params.total, dense_per_block=dense,
                    active_without_embedding=active - (0 if cfg.tie_embeddings else
                                                       params.parts.get("token_embedding", 0)),
                    active_flops_per_token=flops.per_token,
                    every_expert_flops_per_token=every)
