"""Analytic parameter, weight-memory and FLOP counts, from a ModelConfig alone.

No torch here: `tfx count-params` and `tfx configs` answer in a fraction of a second, and
`tfx count-params --verify` checks these numbers against a model built by `core.model`.

Conventions, stated once and repeated in every result:
- Rows name parameters as `core.model` does (`blocks.{i}.attn.W_query.weight`), and shapes
  are as stored: a linear layer's weight is (out, in).
- Tied weights are counted once: with `tie_embeddings` the output head reuses the token
  embedding's matrix, so its row adds 0 and says so.
- FLOPs count matrix multiplications only, one multiply-add = 2 FLOPs. Attention's two
  matmuls (QKᵀ and pattern·V) are counted as computed: the full T×T square, masked or
  not, averaged per token. Norms, softmax, activations, biases, residual adds, rotary
  rotations and embedding look-ups are left out (each is O(T·C), small beside the rest).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .config import ModelConfig
from . import params_moe
from ..words import counted

FLOPS_CONVENTION = (
    "matrix multiplications only; one multiply-add = 2 FLOPs; attention's QK^T and "
    "pattern·V counted as computed, the full T×T matmul even when causal, averaged per "
    "token; norms, softmax, activations, biases, residual adds and embedding look-ups "
    "not counted")
SHAPE_CONVENTION = "shapes as stored: a linear weight is (out, in)"
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "int8": 1}


from .param_rows import Row  # noqa: E402  (one row of every table; params_moe's too)


def _linear(name: str, label: str, n_in: int, n_out: int, bias: bool, part: str) -> list[Row]:
    rows = [Row(f"{name}.weight", label, (n_out, n_in), n_out * n_in, part)]
    if bias:
        rows.append(Row(f"{name}.bias", f"{label} bias", (n_out,), n_out, part))
    return rows


def _norm(name: str, label: str, cfg: ModelConfig, part: str, size: int | None = None
          ) -> list[Row]:
    C = size or cfg.d_model
    rows = [Row(f"{name}.scale", f"{label} scale", (C,), C, part)]
    if cfg.norm == "layernorm" and cfg.norm_bias:  # RMSNorm (and ModernBERT's) has no shift
        rows.append(Row(f"{name}.shift", f"{label} shift", (C,), C, part))
    return rows


# -- parameters ----------------------------------------------------------------------
def _attention_rows(cfg: ModelConfig, where: str, what: str, part: str) -> list[Row]:
    C, A = cfg.d_model, cfg.attn_dim
    kv_dim = cfg.n_kv_heads * cfg.head_dim  # grouped-query attention shrinks K and V only
    rows = _linear(f"{where}.W_query", f"{what}query W_Q", C, A, cfg.qkv_bias, part)
    rows += _linear(f"{where}.W_key", f"{what}key W_K", C, kv_dim, cfg.qkv_bias, part)
    rows += _linear(f"{where}.W_value", f"{what}value W_V", C, kv_dim, cfg.qkv_bias, part)
    rows += _linear(f"{where}.out_proj", f"{what}output W_O", A, C, cfg.proj_bias, part)
    return rows


def block_rows(cfg: ModelConfig, *, decoder: bool = False, moe: bool = False) -> list[Row]:
    """One transformer block's parameters, in the order core.model creates them; an
    encoder–decoder's decoder block (decoder=True) adds cross-attention and a third norm;
    an MoE layer's (moe=True) has a router and experts in place of the FFN."""
    C, F = cfg.d_model, cfg.d_ff
    rows = _norm("ln1", "norm 1", cfg, "norms") if cfg.pre_norms else []
    if cfg.is_mla:  # latent attention's projections (params_moe.py)
        rows += params_moe.latent_attention_rows(cfg)
    else:
        rows += _attention_rows(cfg, "attn", "masked self-attn " if decoder else "",
                                "attention")
    rows += _relative_rows(cfg, "attn.", per_layer=True)
    rows += params_moe.attention_extra_rows(cfg)  # sinks
    if cfg.qk_norm:  # one scale per head dimension, shared by every head
        rows += _norm("attn.q_norm", "q norm", cfg, "norms", cfg.head_dim)
        rows += _norm("attn.k_norm", "k norm", cfg, "norms", cfg.head_dim)
    if cfg.qk_norm_full:  # OLMo 2: one scale per entry of the whole projections
        rows += _norm("attn.q_norm", "q norm", cfg, "norms", cfg.attn_dim)
        rows += _norm("attn.k_norm", "k norm", cfg, "norms", cfg.n_kv_heads * cfg.head_dim)
    if cfg.sandwich_norm:
        rows += _norm("ln_post_attn", "norm after attention", cfg, "norms")
    if cfg.pre_norms:
        rows += _norm("ln2", "norm 2", cfg, "norms")
    if decoder:  # queries from the decoder, keys and values from the encoder output
        rows += _attention_rows(cfg, "cross", "cross-attn ", "cross_attention")
        rows += _norm("ln3", "norm 3", cfg, "norms")
    if moe:
        rows += params_moe.moe_rows(cfg)
    elif cfg.activation in ("swiglu", "geglu", "geglu_exact"):  # act(x W_gate) * (x W_up), W_down
        rows += _linear("ffn.gate_proj", "ffn gate", C, F, cfg.proj_bias, "ffn")
        rows += _linear("ffn.fc1", "ffn up", C, F, cfg.proj_bias, "ffn")
        rows += _linear("ffn.fc2", "ffn down", F, C, cfg.proj_bias, "ffn")
    else:
        rows += _linear("ffn.fc1", "ffn in", C, F, cfg.proj_bias, "ffn")
        rows += _linear("ffn.fc2", "ffn out", F, C, cfg.proj_bias, "ffn")
    if cfg.sandwich_norm:
        rows += _norm("ln_post_ffn", "norm after ffn", cfg, "norms")
    return rows


def _embedding_rows(cfg: ModelConfig, p: str = "", shared: str | None = None) -> list[Row]:
    """The embedding's rows (prefix p: an encoder–decoder's stack); `shared` names the
    token table this stack reuses (the decoder's is the encoder's)."""
    C = cfg.d_model
    if shared:
        rows = [Row(f"{p}embed.tok_emb.weight", "token embedding (shared)",
                    (cfg.vocab_size, C), 0, "token_embedding",
                    f"shares {shared}")]
    else:
        rows = [Row(f"{p}embed.tok_emb.weight", "token embedding", (cfg.vocab_size, C),
                    cfg.vocab_size * C, "token_embedding")]
    P = cfg.context_length + cfg.pos_offset
    if cfg.positional == "learned":
        rows.append(Row(f"{p}embed.pos_emb.weight", "position embedding (learned)",
                        (P, C), P * C, "position_embedding"))
    elif cfg.positional == "sinusoidal":
        rows.append(Row(f"{p}embed.pe", "position encoding (sinusoidal)", (cfg.context_length, C),
                        0, "position_embedding", "a fixed table, not a parameter"))
    elif cfg.positional == "rope":
        rows.append(Row("rope", "rotary positions", None, 0, "position_embedding",
                        "q and k rotated by computed angles"))
    rows += _relative_rows(cfg, f"{p}embed.", per_layer=False)
    if cfg.token_types:
        rows.append(Row(f"{p}embed.type_emb.weight", "token-type embedding",
                        (cfg.token_types, C), cfg.token_types * C, "token_type_embedding"))
    if cfg.embed_norm:  # BERT normalises the sum of the three embeddings
        rows += _norm(f"{p}embed.ln", "embedding norm", cfg, "embedding_norm")
    return rows


def _relative_rows(cfg: ModelConfig, where: str, *, per_layer: bool) -> list[Row]:
    """T5's relative position bias: one (buckets, heads) table per stack, held by its
    embedding (per_layer=False), or one per layer's self-attention (UMT5)."""
    if cfg.positional != "relative" or cfg.relative_per_layer != per_layer:
        return []
    n = cfg.relative_buckets * cfg.n_heads
    return [Row(f"{where}rel_bias.weight", "relative position bias",
                (cfg.relative_buckets, cfg.n_heads), n, "position_bias")]


def _top_rows_after_blocks(cfg: ModelConfig, p: str = "", head: bool = True) -> list[Row]:
    C, V = cfg.d_model, cfg.vocab_size
    rows: list[Row] = []
    if cfg.has_final_norm:  # pre-LN stacks end un-normalised; post-LN blocks do not
        rows += _norm(f"{p}ln_f", "final norm", cfg, "final_norm")
    if cfg.pooler:  # BERT: tanh(W h_[CLS] + b), once per sequence
        rows += _linear("pooler.dense", "pooler", C, C, True, "pooler")
    if cfg.lm_head and head:
        table = "encoder.embed.tok_emb.weight" if cfg.is_encoder_decoder else \
            "embed.tok_emb.weight"
        if cfg.tie_embeddings:
            rows.append(Row("lm_head.weight", "output head (tied)", (V, C), 0, "head",
                            f"shares {table}: {V * C:,} parameters counted once"))
        else:
            rows.append(Row("lm_head.weight", "output head", (V, C), V * C, "head"))
        if cfg.logits_bias:
            rows.append(Row("final_logits_bias", "logits bias", (V,), 0, "head",
                            "a fixed buffer, not a parameter"))
    return rows


def _block0_rows(cfg: ModelConfig) -> list[Row]:
    """ModernBERT's block 0 has no ln1: counted against the blocks, right after them."""
    if cfg.first_block_norm or not cfg.pre_norms:
        return []
    return [Row(f"blocks.0.{r.name}", "block 0 has no norm 1 (the embedding norm serves)",
                r.shape, -r.count, "blocks")
            for r in _norm("ln1", "norm 1", cfg, "norms")]


def _mlm_rows(cfg: ModelConfig) -> list[Row]:
    """A masked LM's head transform, before the output head (and after the final norm)."""
    C = cfg.d_model
    rows = []
    if cfg.mlm_head:  # dense -> activation -> norm, then the head
        rows += _linear("mlm.dense", "MLM head dense", C, C, cfg.proj_bias, "mlm_head")
        rows += _norm("mlm.ln", "MLM head norm", cfg, "mlm_head")
    return rows


def _head_bias_rows(cfg: ModelConfig) -> list[Row]:
    if not (cfg.lm_head and cfg.head_bias):
        return []
    return [Row("lm_head.bias", "output head bias", (cfg.vocab_size,), cfg.vocab_size, "head")]


@dataclass
class ParamCount:
    config: str
    rows: list[Row]  # top level in forward order; one "blocks" row stands for every block
    block: list[Row]  # one block's rows, names relative to blocks.{i}
    per_block: int
    n_layers: int
    total: int  # unique parameters: tied tensors once
    shared: int  # parameters the head reuses from the token embedding (0 if untied)
    parts: dict[str, int] = field(default_factory=dict)
    block_parts: dict[str, int] = field(default_factory=dict)
    # an encoder–decoder: `block` is an encoder block, and these its decoder blocks
    decoder_block: list[Row] = field(default_factory=list)
    decoder_per_block: int = 0
    n_decoder_layers: int = 0
    decoder_block_parts: dict[str, int] = field(default_factory=dict)
    # a mixture of experts: `block` is an MoE layer's, and these its dense layers'
    n_experts: int = 0
    dense_block: list[Row] = field(default_factory=list)
    dense_per_block: int = 0
    n_dense_layers: int = 0
    dense_block_parts: dict[str, int] = field(default_factory=dict)
    layer_kinds: list[bool] = field(default_factory=list)  # per layer: is it MoE?

    @property
    def all_blocks(self) -> int:
        return self.per_block * self.n_layers + self.dense_per_block * self.n_dense_layers

    @property
    def non_embedding(self) -> int:
        # Kaplan et al.'s N: what scales with depth and width, not with vocabulary.
        emb = ("token_embedding", "position_embedding", "token_type_embedding")
        return self.total - sum(self.parts.get(p, 0) for p in emb)

    def named_counts(self) -> dict[str, int]:
        """Full parameter name -> numel for every stored tensor (tied ones once)."""
        out = {r.name: r.count for r in self.rows if r.count > 0 and
               not r.name.endswith("blocks")}
        enc = "encoder." if self.n_decoder_layers else ""
        if self.n_experts:  # MoE layers and dense ones, in the config's order
            for i, moe in enumerate(self.layer_kinds):
                for r in self.block if moe else self.dense_block:
                    if not r.count:
                        continue  # a buffer (the score correction), not a parameter
                    for name, n in params_moe.expand(r.name, r.count, self.n_experts).items():
                        out[f"blocks.{i}.{name}"] = n
            return out
        for i in range(self.n_layers):
            out.update({f"{enc}blocks.{i}.{r.name}": r.count for r in self.block})
        for r in self.rows:  # a block without a tensor the others have (ModernBERT's 0)
            if r.count < 0:
                out.pop(r.name, None)
        for i in range(self.n_decoder_layers):
            out.update({f"decoder.blocks.{i}.{r.name}": r.count for r in self.decoder_block})
        return out


def _blocks_label(n_layers: int, per_block: int) -> str:
    return f"{counted(n_layers, 'block')} × {per_block:,}"


def _sum_parts(rows: list[Row]) -> dict[str, int]:
    parts: dict[str, int] = {}
    for row in rows:
        parts[row.part] = parts.get(row.part, 0) + row.count
    return parts


def count_params(cfg: ModelConfig) -> ParamCount:
    if cfg.n_experts:
        return _count_moe(cfg)
    block = block_rows(cfg)
    per_block = sum(r.count for r in block)
    shared = cfg.vocab_size * cfg.d_model if cfg.lm_head and cfg.tie_embeddings else 0
    if not cfg.is_encoder_decoder:
        blocks = Row("blocks", _blocks_label(cfg.n_layers, per_block), None,
                     per_block * cfg.n_layers, "blocks")
        rows = _embedding_rows(cfg) + [blocks] + _top_rows_after_blocks(cfg)
        if cfg.mlm_head or cfg.head_bias or not (cfg.first_block_norm and cfg.pre_norms):
            at = rows.index(blocks) + 1
            rows = rows[:at] + _block0_rows(cfg) + rows[at:]
            at = next((i for i, r in enumerate(rows) if r.name == "lm_head.weight"),
                      len(rows))  # the MLM transform before the head, the bias after it
            rows = rows[:at] + _mlm_rows(cfg) + rows[at:at + 1] + _head_bias_rows(cfg) + \
                rows[at + 1:]
        return ParamCount(config=cfg.name, rows=rows, block=block, per_block=per_block,
                          n_layers=cfg.n_layers, total=sum(r.count for r in rows),
                          shared=shared, parts=_sum_parts(rows),
                          block_parts=_sum_parts(block))
    # encoder–decoder: the encoder's rows, then the decoder's, then one head
    dec = block_rows(cfg, decoder=True)
    per_dec = sum(r.count for r in dec)
    L, Ld = cfg.n_layers, cfg.n_decoder_layers
    rows = _embedding_rows(cfg, "encoder.")
    rows.append(Row("encoder.blocks", "encoder: " + _blocks_label(L, per_block), None,
                    per_block * L, "encoder_blocks"))
    rows += _top_rows_after_blocks(cfg, "encoder.", head=False)
    rows += _embedding_rows(cfg, "decoder.", shared="encoder.embed.tok_emb.weight")
    rows.append(Row("decoder.blocks", "decoder: " + _blocks_label(Ld, per_dec), None,
                    per_dec * Ld, "decoder_blocks"))
    rows += _top_rows_after_blocks(cfg, "decoder.")
    return ParamCount(config=cfg.name, rows=rows, block=block, per_block=per_block,
                      n_layers=L, total=sum(r.count for r in rows), shared=shared,
                      parts=_sum_parts(rows), block_parts=_sum_parts(block),
                      decoder_block=dec, decoder_per_block=per_dec, n_decoder_layers=Ld,
                      decoder_block_parts=_sum_parts(dec))


def _count_moe(cfg: ModelConfig) -> ParamCount:
    """A mixture of experts: its MoE layers' blocks and its dense layers' (DeepSeek-V3's
    first three, Qwen's mlp_only_layers), each counted for its own layers."""
    moe, dense = block_rows(cfg, moe=True), block_rows(cfg)
    kinds = [cfg.is_moe_layer(i) for i in range(cfg.n_layers)]
    n_moe, n_dense = sum(kinds), len(kinds) - sum(kinds)
    per_moe, per_dense = sum(r.count for r in moe), sum(r.count for r in dense)
    label = _blocks_label(n_moe, per_moe).replace("block", "MoE block")
    if n_dense:
        label = _blocks_label(n_dense, per_dense).replace("block", "dense block") + \
            " + " + label
    shared = cfg.vocab_size * cfg.d_model if cfg.lm_head and cfg.tie_embeddings else 0
    blocks = Row("blocks", label, None, per_moe * n_moe + per_dense * n_dense, "blocks")
    rows = _embedding_rows(cfg) + [blocks] + _top_rows_after_blocks(cfg)
    count = ParamCount(config=cfg.name, rows=rows, block=moe, per_block=per_moe,
                       n_layers=n_moe, total=sum(r.count for r in rows), shared=shared,
                       parts=_sum_parts(rows), block_parts=_sum_parts(moe),
                       n_experts=cfg.n_experts, dense_block=dense if n_dense else [],
                       dense_per_block=per_dense if n_dense else 0, n_dense_layers=n_dense,
                       dense_block_parts=_sum_parts(dense) if n_dense else {},
                       layer_kinds=kinds)
    return count


def total_params(cfg: ModelConfig) -> int:
    return count_params(cfg).total


# -- memory --------------------------------------------------------------------------
def weight_bytes(n_params: int) -> dict[str, int]:
    """Bytes to hold the weights at each precision (int8 without quantisation scales)."""
    return {name: n_params * size for name, size in BYTES_PER_PARAM.items()}


def buffer_elements(cfg: ModelConfig) -> int:
    # The sinusoidal table is a buffer: no parameter, but memory all the same.
    return cfg.context_length * cfg.d_model if cfg.positional == "sinusoidal" else 0


def estimate_bytes(cfg: ModelConfig) -> int:
    """fp32 bytes of the weights a built model holds (parameters plus fixed tables)."""
    return 4 * (total_params(cfg) + buffer_elements(cfg))


# -- FLOPs ---------------------------------------------------------------------------
def block_flop_rows(cfg: ModelConfig, seq_len: int, *, decoder: bool = False,
                    moe: bool = False) -> list[Row]:
    """FLOPs per token of one block's matmuls at sequence length T = seq_len. A decoder
    block's cross-attention is counted with a source as long as the target (its keys and
    values are projections of the source's tokens, one each)."""
    C, F, T, A = cfg.d_model, cfg.d_ff, seq_len, cfg.attn_dim
    kv_dim = cfg.n_kv_heads * cfg.head_dim

    def mm(name: str, label: str, n_in: int, n_out: int, part: str) -> Row:
        return Row(name, label, None, 2 * n_in * n_out, part, f"(1, {n_in})·({n_in}, {n_out})")

    def attention(where: str, what: str) -> list[Row]:
        if cfg.is_mla:  # latent attention: q, k, v through their latents; V heads Dv wide
            Dv = cfg.v_dim
            return params_moe.latent_projection_flops(cfg) + [
                Row(f"{where}.scores", "QKᵀ", None, 2 * T * A, "attention_matmuls",
                    f"{cfg.n_heads} × (1, {cfg.head_dim})·({cfg.head_dim}, {T})"),
                Row(f"{where}.context", "pattern·V", None, 2 * T * cfg.n_heads * Dv,
                    "attention_matmuls", f"{cfg.n_heads} × (1, {T})·({T}, {Dv})"),
                mm(f"{where}.out_proj", "concat·W_O", cfg.n_heads * Dv, C, "projections")]
        return [mm(f"{where}.W_query", f"{what}x·W_Q", C, A, "projections"),
                mm(f"{where}.W_key", f"{what}x·W_K", C, kv_dim, "projections"),
                mm(f"{where}.W_value", f"{what}x·W_V", C, kv_dim, "projections"),
                # Each query meets T keys in each of H heads of size D: H*D*T
                # multiply-adds (C*T unless head_dim is set apart). Shared (grouped) K/V
                # heads still serve every query head. A sliding window is counted whole,
                # as the mask is.
                Row(f"{where}.scores", f"{what}QKᵀ", None, 2 * T * A, "attention_matmuls",
                    f"{cfg.n_heads} × (1, {cfg.head_dim})·({cfg.head_dim}, {T})"),
                Row(f"{where}.context", f"{what}pattern·V", None, 2 * T * A,
                    "attention_matmuls", f"{cfg.n_heads} × (1, {T})·({T}, {cfg.head_dim})"),
                mm(f"{where}.out_proj", f"{what}concat·W_O", A, C, "projections")]

    rows = attention("attn", "")
    if decoder:
        rows += attention("cross", "cross ")
    if moe:  # the router, the k experts a token is routed to, the shared expert
        rows += params_moe.moe_flop_rows(cfg)
    elif cfg.activation in ("swiglu", "geglu", "geglu_exact"):
        rows.append(mm("ffn.gate_proj", "x·W_gate", C, F, "ffn"))
        rows.append(mm("ffn.fc1", "x·W_up", C, F, "ffn"))
        rows.append(mm("ffn.fc2", "h·W_down", F, C, "ffn"))
    else:
        rows.append(mm("ffn.fc1", "x·W_1", C, F, "ffn"))
        rows.append(mm("ffn.fc2", "h·W_2", F, C, "ffn"))
    return rows


@dataclass
class FlopCount:
    seq_len: int
    rows: list[Row]  # per token, top level; one "blocks" row for every block
    block: list[Row]  # one block, per token
    per_block: int
    per_token: int
    without_attention: int  # per token, the linear layers only (what torchinfo counts)
    per_sequence: int  # seq_len tokens, plus the pooler once
    causal_skip: int | None  # per token if masked-out scores were skipped (causal only)
    convention: str = FLOPS_CONVENTION


def count_flops(cfg: ModelConfig, seq_len: int | None = None) -> FlopCount:
    T = seq_len or cfg.context_length
    C = cfg.d_model
    block = block_flop_rows(cfg, T, moe=cfg.n_experts > 0)
    per_block = sum(r.count for r in block)
    rows = [Row("blocks", _blocks_label(cfg.n_layers, per_block), None,
                per_block * cfg.n_layers, "blocks")]
    if cfg.n_experts:  # MoE layers and dense ones: a token's active FLOPs
        n_moe = len(cfg.moe_layer_list)
        n_dense = cfg.n_layers - n_moe
        dense = sum(r.count for r in block_flop_rows(cfg, T))
        label = _blocks_label(n_moe, per_block).replace("block", "MoE block")
        if n_dense:
            label = _blocks_label(n_dense, dense).replace("block", "dense block") + \
                " + " + label
        rows = [Row("blocks", label, None, per_block * n_moe + dense * n_dense, "blocks")]
    # QKᵀ and pattern·V: 2 * T * H * (D + Dv) per layer, 4 * T * A unless V heads differ
    attention = params_moe.attention_matmul_flops(cfg, T) * cfg.n_layers
    if cfg.is_encoder_decoder:  # per token of the source and of the target alike
        dec = block_flop_rows(cfg, T, decoder=True)
        per_dec = sum(r.count for r in dec)
        rows = [Row("encoder.blocks", "encoder: " + _blocks_label(cfg.n_layers, per_block),
                    None, per_block * cfg.n_layers, "encoder_blocks"),
                Row("decoder.blocks", "decoder: " + _blocks_label(cfg.n_decoder_layers,
                                                                  per_dec),
                    None, per_dec * cfg.n_decoder_layers, "decoder_blocks")]
        attention += 8 * T * cfg.attn_dim * cfg.n_decoder_layers
    if cfg.mlm_head:  # a masked LM's transform before the head
        rows.append(Row("mlm.dense", "h·W_dense (MLM head)", None, 2 * C * C, "head",
                        f"(1, {C})·({C}, {C})"))
    if cfg.lm_head:  # tied or not, the head multiplies by a (V, C) matrix
        rows.append(Row("lm_head", "h·W_headᵀ (logits)", None, 2 * C * cfg.vocab_size, "head",
                        f"(1, {C})·({C}, {cfg.vocab_size})"))
    per_token = sum(r.count for r in rows)
    pooler = 2 * C * C if cfg.pooler else 0  # [CLS] only: once per sequence
    causal_skip = None
    if cfg.causal:
        # Query t sees t+1 keys; averaged over t = 0..T-1 that is (T+1)/2 keys, so the
        # two matmuls cost 2 * 2 * C * (T+1)/2 = 2C(T+1) per token per block.
        causal_skip = per_token - attention + \
            params_moe.attention_matmul_flops(cfg, T + 1) // 2 * cfg.n_layers
    return FlopCount(seq_len=T, rows=rows, block=block, per_block=per_block,
                     per_token=per_token, without_attention=per_token - attention,
                     per_sequence=per_token * T + pooler, causal_skip=causal_skip)


# -- everything, as one result -------------------------------------------------------
def analyse(cfg: ModelConfig, seq_len: int | None = None, *, model=None):
    """The result of `tfx count-params`: the breakdown, memory and FLOPs of a config."""
    from .results import BlockCount, CountParamsResult, FlopSummary

    params = count_params(cfg)
    flops = count_flops(cfg, seq_len)
    result = CountParamsResult(
        model=model, total=params.total, non_embedding=params.non_embedding,
        tied=bool(cfg.lm_head and cfg.tie_embeddings), shared=params.shared,
        parts=params.parts, breakdown=params.rows,
        per_block=BlockCount(rows=params.block, total=params.per_block,
                             parts=params.block_parts, n_layers=params.n_layers,
                             all_blocks=params.per_block * params.n_layers),
        decoder_per_block=BlockCount(
            rows=params.decoder_block, total=params.decoder_per_block,
            parts=params.decoder_block_parts, n_layers=params.n_decoder_layers,
            all_blocks=params.decoder_per_block * params.n_decoder_layers)
        if params.n_decoder_layers else None,
        shape_convention=SHAPE_CONVENTION, memory_bytes=weight_bytes(params.total),
        seq_len=flops.seq_len, flops_per_token=flops.per_token,
        flops_convention=flops.convention,
        flops=FlopSummary(seq_len=flops.seq_len, per_token=flops.per_token,
                          per_block=flops.per_block, without_attention=flops.without_attention,
                          per_sequence=flops.per_sequence,
                          causal_skip_per_token=flops.causal_skip, rows=flops.rows,
                          block=flops.block))
    if cfg.n_experts:
        result.moe = params_moe.moe_count(cfg, params, flops)
    return result


__all__ = ["Row", "ParamCount", "FlopCount", "count_params", "count_flops", "total_params",
           "weight_bytes", "estimate_bytes", "analyse", "FLOPS_CONVENTION"]
