"""BERT (HF BertModel folders): config and tensor names."""
from __future__ import annotations

from ....errors import WeightsError
from .common import activation, ln_leaf, strip_prefix


def bert_config(hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a BertModel config.json: post-LN, learned
    positions, segment embeddings, a LayerNorm of the embedding sum, no output head."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise WeightsError(f"{where}: position_embedding_type "
                           f"{hf['position_embedding_type']!r} is not supported")
    return dict(
        vocab_size=hf.get("vocab_size", 30522),
        context_length=hf.get("max_position_embeddings", 512),
        d_model=hf.get("hidden_size", 768), n_heads=hf.get("num_attention_heads", 12),
        n_layers=hf.get("num_hidden_layers", 12), d_ff=hf.get("intermediate_size", 3072),
        qkv_bias=True, proj_bias=True, norm_position="post",
        ln_eps=hf.get("layer_norm_eps", 1e-12),
        activation=activation(where, hf.get("hidden_act", "gelu")), positional="learned",
        causal=False, token_types=hf.get("type_vocab_size", 2), embed_norm=True,
        lm_head=False, pooler=True)


def map_bert(state: dict, cfg) -> tuple[dict, dict]:
    state = strip_prefix(state, ("bert.",))
    out, src = {}, {}
    names = {"attention.self.query": "attn.W_query", "attention.self.key": "attn.W_key",
             "attention.self.value": "attn.W_value", "attention.output.dense": "attn.out_proj",
             "attention.output.LayerNorm": "ln1", "intermediate.dense": "ffn.fc1",
             "output.dense": "ffn.fc2", "output.LayerNorm": "ln2"}
    embeds = {"word_embeddings": "embed.tok_emb", "position_embeddings": "embed.pos_emb",
              "token_type_embeddings": "embed.type_emb"}
    for key, t in state.items():
        parts = key.split(".")
        ours = key
        if key == "embeddings.position_ids":
            continue  # a buffer of 0..P-1, not a parameter
        if parts[0] == "embeddings" and len(parts) == 3:
            if parts[1] == "LayerNorm":
                ours = f"embed.ln.{ln_leaf(parts[2])}"
            elif parts[1] in embeds:
                ours = f"{embeds[parts[1]]}.{parts[2]}"
        elif parts[:2] == ["encoder", "layer"] and len(parts) >= 5:
            inner, leaf = ".".join(parts[3:-1]), parts[-1]
            if inner in names:
                mod = names[inner]
                leaf = ln_leaf(leaf) if mod in ("ln1", "ln2") else leaf
                ours = f"blocks.{parts[2]}.{mod}.{leaf}"
        elif parts[0] == "pooler" and cfg.pooler:
            ours = key  # counted in the config, not run: checked, then set aside
        out[ours], src[ours] = t, key
    return out, src
