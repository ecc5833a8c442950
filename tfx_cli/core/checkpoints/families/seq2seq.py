"""Marian, BART and mBART (HF MarianMTModel, BartForConditionalGeneration, BartModel,
MBartForConditionalGeneration folders): config and tensor names.

The encoder–decoder families (translation and summarisation) are the paper's model with
its switches, as transformers 5's modeling_marian.py, modeling_bart.py and
modeling_mbart.py compute them:

  marian    post-LN; sinusoidal positions laid out as all sines, then all cosines (not a
            tensor of the checkpoint: transformers computes the table); embeddings x
            sqrt(d_model) when scale_embedding; "swish" (plain SiLU) FFN; a
            final_logits_bias on the logits; the decoder starts from the pad id
  bart      post-LN; learned positions that read row position + 2; a LayerNorm of each
            stack's embedding sum (layernorm_embedding); exact GELU; final_logits_bias;
            the decoder starts from decoder_start_token_id (2, the end token)
  mbart     bart's embedding, pre-LN blocks and a final LayerNorm on each stack
            (encoder.layer_norm, decoder.layer_norm)
"""
from __future__ import annotations

from functools import partial

from ....errors import WeightsError
from .common import ln_leaf, unprefixed
from .registry import Family, TensorMap, register


# transformers 3's one BART class switched these; transformers 5 ignores them, so a config
# that sets one against its family's arithmetic was written for another model. The value
# each family's own arithmetic has (real Marian and BART configs still carry them).
_LEGACY = {
    "marian": {"normalize_before": False, "add_final_layer_norm": False,
               "normalize_embedding": False, "static_position_embeddings": True,
               "add_bias_logits": False},
    "bart": {"normalize_before": False, "add_final_layer_norm": False,
             "normalize_embedding": True, "static_position_embeddings": False,
             "add_bias_logits": False},
    "mbart": {"normalize_before": True, "add_final_layer_norm": True,
              "normalize_embedding": True, "static_position_embeddings": False,
              "add_bias_logits": False},
}
# activation_function -> tfx activation (transformers' ACT2FN: "swish" is plain SiLU)
SEQ2SEQ_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "swish": "silu", "silu": "silu",
                       "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
# the defaults of transformers' config classes, for keys a config.json leaves out
_SEQ2SEQ_SIZES = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                  "encoder_attention_heads": 16, "decoder_attention_heads": 16,
                  "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
                  "max_position_embeddings": 1024, "activation_function": "gelu"}
_SEQ2SEQ_DEFAULTS = {"marian": {"vocab_size": 58101, "decoder_start_token_id": 58100},
                     "bart": {"vocab_size": 50265, "decoder_start_token_id": 2,
                              "bos_token_id": 0},
                     "mbart": {"vocab_size": 50265, "bos_token_id": 0}}
_FAMILY_NAMES = {"marian": "Marian", "bart": "BART", "mbart": "mBART"}


def seq2seq_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a Marian, BART or mBART config.json. What tfx's
    one encoder–decoder cannot run (a vocabulary or token table per stack, stacks of
    different widths, another block layout) is refused by the field that asks for it."""
    # the names transformers' attribute_map reads as the encoder's
    aliases = {"encoder_layers": "num_hidden_layers", "d_model": "hidden_size",
               "encoder_attention_heads": "num_attention_heads"}
    hf = {**_SEQ2SEQ_SIZES, **_SEQ2SEQ_DEFAULTS[family],
          **{key: hf[alias] for key, alias in aliases.items() if alias in hf}, **hf}
    name = _FAMILY_NAMES[family]
    for key, want in _LEGACY[family].items():
        if key in hf and bool(hf[key]) != want:
            raise WeightsError(f"{where}: {key} {str(hf[key]).lower()} is not {name}'s "
                               f"arithmetic (transformers 5 ignores the switch); tfx reads "
                               f"{name} as {key} {str(want).lower()}")
    if not hf.get("share_encoder_decoder_embeddings", True):
        raise WeightsError(f"{where}: share_encoder_decoder_embeddings is false: the encoder "
                           "and decoder have token tables of their own, and tfx's "
                           "encoder–decoder reads one shared table")
    if not hf.get("tie_word_embeddings", True):
        raise WeightsError(f"{where}: tie_word_embeddings is false: transformers 5 then gives "
                           "the encoder, the decoder and the output head token tables of "
                           "their own, and tfx's encoder–decoder reads one shared table")
    vocab = hf["vocab_size"]
    if hf.get("decoder_vocab_size") not in (None, vocab):
        raise WeightsError(f"{where}: decoder_vocab_size {hf['decoder_vocab_size']} differs "
                           f"from vocab_size {vocab}: the decoder has a vocabulary of its own, "
                           "and tfx's encoder–decoder shares one")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[enc] != hf[dec]:
            raise WeightsError(f"{where}: {enc} {hf[enc]} and {dec} {hf[dec]} differ; tfx's "
                               "encoder and decoder blocks have one head count and one FFN "
                               "width")
    act = hf["activation_function"]
    if act not in SEQ2SEQ_ACTIVATIONS:
        raise WeightsError(f"{where}: activation_function {act!r} is not supported; tfx runs "
                           f"{', '.join(SEQ2SEQ_ACTIVATIONS)}")
    start = hf.get("decoder_start_token_id")
    if start is None:  # transformers' generate falls back to the start-of-text id
        start = hf.get("bos_token_id")
    if start is None:
        raise WeightsError(f"{where}: decoder_start_token_id (and bos_token_id) missing: "
                           "nothing says which token the decoder starts from")
    marian = family == "marian"
    return dict(
        vocab_size=vocab, context_length=hf["max_position_embeddings"], d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], n_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"],
        qkv_bias=True, proj_bias=True, norm="layernorm",
        norm_position="pre" if family == "mbart" else "post", ln_eps=1e-5,
        activation=SEQ2SEQ_ACTIVATIONS[act],
        positional="sinusoidal" if marian else "learned",
        sinusoidal_layout="halves" if marian else "interleaved", pos_offset=0 if marian else 2,
        embed_scale=bool(hf.get("scale_embedding", False)), embed_norm=not marian,
        logits_bias=True, tie_embeddings=True, causal=False, decoder_start_id=start)


# the first of these a checkpoint holds is the one token table; the others, when saved
# too (older .bin files hold them all), must be the same tensor
TOKEN_TABLES = ("model.shared.weight", "model.encoder.embed_tokens.weight",
                "model.decoder.embed_tokens.weight", "lm_head.weight")
# ... and a base model's (BartModel: no head, no "model." prefix)
TOKEN_TABLES += ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
_S2S_LINEARS = {"self_attn.q_proj": "attn.W_query", "self_attn.k_proj": "attn.W_key",
                "self_attn.v_proj": "attn.W_value", "self_attn.out_proj": "attn.out_proj",
                "encoder_attn.q_proj": "cross.W_query", "encoder_attn.k_proj": "cross.W_key",
                "encoder_attn.v_proj": "cross.W_value",
                "encoder_attn.out_proj": "cross.out_proj", "fc1": "ffn.fc1", "fc2": "ffn.fc2"}
# the norm after (post-LN) or before (pre-LN) each sublayer: encoder blocks have two,
# decoder blocks three
_S2S_NORMS = {"encoder": {"self_attn_layer_norm": "ln1", "final_layer_norm": "ln2"},
              "decoder": {"self_attn_layer_norm": "ln1", "encoder_attn_layer_norm": "ln2",
                          "final_layer_norm": "ln3"}}


def check_tables(tables: dict) -> None:
    """The token tables an encoder–decoder checkpoint saved (name -> tensor, in
    TOKEN_TABLES order) are one table: tfx's encoder–decoder reads one in both stacks and
    the head. Tensors without data (meta: shapes being planned) are compared by shape;
    the loader compares their values once it has read them."""
    import torch

    names = list(tables)
    first = names[0]
    for other in names[1:]:
        a, b = tables[first], tables[other]
        if a.shape != b.shape or not (a.is_meta or b.is_meta or torch.equal(a, b)):
            raise WeightsError(f"{other} differs from {first}: the checkpoint's token "
                               "tables are not shared, and tfx's encoder–decoder reads "
                               "one table in both stacks and the head")


def map_seq2seq(family: str, state: dict, cfg) -> tuple[dict, dict]:
    """A Marian, BART or mBART checkpoint's tensors -> (tfx name -> tensor, tfx name ->
    checkpoint name). Marian's sinusoidal tables are not parameters (transformers computes
    them; older files saved them) and are left to tfx's own; a missing final_logits_bias is
    zero, as transformers leaves it."""
    import torch

    out = TensorMap()
    tables = [k for k in TOKEN_TABLES if k in state]
    if tables:
        check_tables({k: state[k] for k in tables})
        out.put("encoder.embed.tok_emb.weight", tables[0], state[tables[0]])
    if not getattr(cfg, "logits_bias", True):  # a base model (BartModel): no head to bias
        pass
    elif "final_logits_bias" in state:
        bias = state["final_logits_bias"]
        out.put("final_logits_bias", "final_logits_bias",
                bias.reshape(-1) if bias.dim() == 2 and bias.shape[0] == 1 else bias)
    else:
        out.put("final_logits_bias", "(zeros: not saved)", torch.zeros(cfg.vocab_size))
    for key, t in state.items():
        if key in TOKEN_TABLES or key == "final_logits_bias":
            continue
        name = unprefixed(key, ("model.",))
        parts = name.split(".")
        stack = parts[0]
        if stack not in ("encoder", "decoder") or len(parts) < 3:
            out.keep(key, t)  # reported as unexpected
            continue
        module, leaf = ".".join(parts[1:-1]), parts[-1]
        if module == "embed_positions":
            if family == "marian":
                continue  # the fixed sinusoidal table: tfx computes its own
            out.put(f"{stack}.embed.pos_emb.{leaf}", key, t)
        elif module == "layernorm_embedding":
            out.put(f"{stack}.embed.ln.{ln_leaf(leaf)}", key, t)
        elif module == "layer_norm":  # mBART's final norm of each stack
            out.put(f"{stack}.ln_f.{ln_leaf(leaf)}", key, t)
        elif name.endswith(".version") and len(parts) == 2:
            continue  # fairseq's format marker, not a tensor of the model
        elif parts[1] == "layers" and len(parts) >= 5:
            block, inner = f"{stack}.blocks.{parts[2]}", ".".join(parts[3:-1])
            if inner in _S2S_NORMS[stack]:
                out.put(f"{block}.{_S2S_NORMS[stack][inner]}.{ln_leaf(leaf)}", key, t)
            elif inner in _S2S_LINEARS and not (stack == "encoder" and inner[:7] == "encoder"):
                out.put(f"{block}.{_S2S_LINEARS[inner]}.{leaf}", key, t)
            else:
                out.keep(key, t)
        else:
            out.keep(key, t)
    return out.result()


def _tables(cfg) -> tuple[str, ...]:
    return TOKEN_TABLES


MARIAN, BART, MBART = register(*(
    Family(name, archs, partial(seq2seq_config, name), partial(map_seq2seq, name),
           model_types=(name,), token_tables=_tables, headless=headless)
    for name, archs, headless in (
        ("marian", ("MarianMTModel",), ()),
        # BartModel: the base model, whose output is the decoder's last stream
        ("bart", ("BartForConditionalGeneration",), ("BartModel",)),
        ("mbart", ("MBartForConditionalGeneration",), ()))))
SEQ2SEQ = tuple(family.name for family in (MARIAN, BART, MBART))
