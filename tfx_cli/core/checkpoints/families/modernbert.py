"""ModernBERT (HF ModernBertModel, ModernBertForMaskedLM folders): config and tensor
names, as transformers 5's modeling_modernbert.py computes it.

A pre-LN encoder: the token rows alone (no position table), LayerNormed; rotary
positions, with base global_rope_theta (160,000) on the full-attention layers and
local_rope_theta (10,000) on the local ones, which read the keys within
local_attention / 2 positions on either side (tfx's sliding_window is that + 1: the key
itself and window - 1 on each side); one full layer every global_attn_every_n_layers (the
first of each group); q, k and v fused in Wqkv; a GLU FFN whose Wi holds the activated
half first and the gate second, with the exact GELU; no biases anywhere by default, and
LayerNorms without a shift (norm_bias); block 0 has no norm before attention (the
embedding norm serves); a final norm, then the masked-LM head: dense, activation, norm,
and the token table (tied) with a bias. The classifier classes' task heads (head.*,
classifier.*) are set aside with the base model read.
"""
from __future__ import annotations


from ....errors import WeightsError
from .common import norm_rules, unprefixed
from .registry import Family, Renames, Split, TensorMap, archs_of, register
from .values import SIZE_KEYS
from .decoders import rope_settings

# the classifier classes are read as their base model, their task heads set aside
MODERNBERT = ("ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
              "ModernBertForTokenClassification", "ModernBertForQuestionAnswering",
              "ModernBertForMultipleChoice")
_MLM_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
             "relu": "relu", "silu": "silu"}


def _is_mlm(hf: dict) -> bool:
    return "ModernBertForMaskedLM" in archs_of(hf)


def _thetas(hf: dict, where: str) -> tuple[float, float]:
    """(global, local) rotary bases: transformers 5's rope_parameters per layer type, or
    4's global_rope_theta / local_rope_theta."""
    params = hf.get("rope_parameters") or {}
    if isinstance(params.get("full_attention"), dict):
        (full, scaled), (local, local_scaled) = (
            rope_settings(hf, where, kind) for kind in ("full_attention", "sliding_attention"))
        if scaled or local_scaled:
            raise WeightsError(f"{where}: rope scaling on ModernBERT is not supported; tfx "
                               "rotates its layers by their plain bases")
        return full, local
    return (float(hf.get("global_rope_theta", 160000.0)),
            float(hf.get("local_rope_theta", 10000.0)))


def modernbert_config(hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a ModernBERT config.json."""
    n_layers = hf.get("num_hidden_layers", 22)
    types = hf.get("layer_types")
    if isinstance(types, list) and len(types) == n_layers:
        local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:  # transformers 4: the first layer of every group of n is global
        every = hf.get("global_attn_every_n_layers", 3)
        local = tuple(i for i in range(n_layers) if i % every)
    act = hf.get("hidden_activation", "gelu")
    if act != "gelu":
        raise WeightsError(f"{where}: hidden_activation {act!r} is not supported; tfx runs "
                           "ModernBERT's GLU with the exact GELU (gelu)")
    bias = bool(hf.get("mlp_bias", False))
    for key in ("attention_bias", "classifier_bias"):
        if bool(hf.get(key, False)) != bias:
            raise WeightsError(f"{where}: mlp_bias, attention_bias and classifier_bias must "
                               "agree (tfx has one bias switch for the projections)")
    full_theta, local_theta = _thetas(hf, where)
    mlm = _is_mlm(hf)
    out = dict(
        vocab_size=hf.get("vocab_size", 50368),
        context_length=hf.get("max_position_embeddings", 8192),
        d_model=hf.get("hidden_size", 768), n_heads=hf.get("num_attention_heads", 12),
        n_layers=n_layers, d_ff=hf.get("intermediate_size", 1152), qkv_bias=bias,
        proj_bias=bias, norm="layernorm", norm_position="pre",
        ln_eps=hf.get("norm_eps", 1e-5), norm_bias=bool(hf.get("norm_bias", False)),
        activation="geglu_exact", positional="rope", rope_theta=full_theta,
        rope_local_theta=local_theta,
        # local_attention // 2 keys on either side, as transformers' sliding_window says
        sliding_window=hf.get("local_attention", 128) // 2 + 1, sliding_layers=local,
        causal=False, embed_norm=True, first_block_norm=False, lm_head=mlm)
    if mlm:
        act = hf.get("classifier_activation", "gelu")
        if act not in _MLM_ACTS:
            raise WeightsError(f"{where}: classifier_activation {act!r} is not supported; "
                               f"tfx runs {', '.join(_MLM_ACTS)}")
        if not hf.get("tie_word_embeddings", True):
            raise WeightsError(f"{where}: tie_word_embeddings is false; tfx reads the "
                               "decoder as the token table (tied)")
        out.update(mlm_head=True, mlm_activation=_MLM_ACTS[act], tie_embeddings=True,
                   head_bias=bool(hf.get("decoder_bias", True)))
    return out


_NAMES = Renames([
    (r"embeddings\.tok_embeddings\.weight", "embed.tok_emb.weight"),
    *norm_rules(r"embeddings\.norm", "embed.ln"), *norm_rules(r"final_norm", "ln_f"),
    (r"head\.dense\.(\w+)", r"mlm.dense.\1"), *norm_rules(r"head\.norm", "mlm.ln"),
    (r"decoder\.(\w+)", r"lm_head.\1"),
    *norm_rules(r"layers\.(\d+)\.attn_norm", r"blocks.\1.ln1"),
    *norm_rules(r"layers\.(\d+)\.mlp_norm", r"blocks.\1.ln2"),
    (r"layers\.(\d+)\.attn\.Wo\.(\w+)", r"blocks.\1.attn.out_proj.\2"),
    (r"layers\.(\d+)\.mlp\.Wo\.(\w+)", r"blocks.\1.ffn.fc2.\2"),
    # fused linears, split by rows: Wqkv (3 * C, C) q, k, v; Wi (2 * F, C) the activated
    # half (tfx's gate_proj), then the gate it multiplies (fc1, "up")
    (r"layers\.(\d+)\.attn\.Wqkv\.(\w+)",
     tuple(rf"blocks.\1.attn.{n}.\2" for n in ("W_query", "W_key", "W_value")), Split()),
    (r"layers\.(\d+)\.mlp\.Wi\.(\w+)", (r"blocks.\1.ffn.gate_proj.\2", r"blocks.\1.ffn.fc1.\2"),
     Split()),
])
SET_ASIDE = ("classifier.",)


def map_modernbert(state: dict, cfg) -> tuple[dict, dict]:
    """A ModernBERT checkpoint's tensors -> (tfx name -> tensor, tfx name -> checkpoint
    name)."""
    out = TensorMap()
    for key, t in state.items():
        if key.startswith(SET_ASIDE) or (key.startswith("head.") and not cfg.mlm_head):
            continue  # a classifier's task head: set aside
        if not _NAMES.apply(out, unprefixed(key, ("model.",)), key, t, cfg):
            out.keep(key, t)  # reported as unexpected
    return out.result()


MODERNBERT_FAMILY = register(Family("modernbert", MODERNBERT, modernbert_config,
                                    map_modernbert, model_types=("modernbert",),
                                    size_keys=SIZE_KEYS))
