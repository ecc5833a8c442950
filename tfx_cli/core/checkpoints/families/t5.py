"""T5, mT5 and UMT5 (HF T5ForConditionalGeneration, T5Model, T5EncoderModel and their mT5
and UMT5 kin): config and tensor names.

T5 is the paper's encoder–decoder with these switches, as transformers 5's
modeling_t5.py and modeling_umt5.py compute them:

  positions   none added to the embedding: a learned bias per head and bucket of
              query-key distance on every self-attention score (positional "relative";
              the first layer's table is read by every layer of its stack; UMT5 gives
              each layer its own); cross-attention has none
  scores      not divided by sqrt(d_kv) (the scale was folded into the weights' init)
  norms       pre-LN RMSNorm without mean or shift (T5LayerNorm), and a final norm on
              each stack
  FFN         ReLU (the original T5), or gated GELU-tanh (T5 v1.1, Flan-T5, mT5, UMT5:
              "gated-gelu"); no biases anywhere
  head        tied to the token table and reading the stream times d_model^-0.5 (T5), or
              a head of its own, unscaled (v1.1, Flan-T5, mT5, UMT5)
  decoder     starts from decoder_start_token_id (the pad id, 0)

transformers 5 reads `tie_word_embeddings: false` as "do not rescale" (saving it as
`scale_decoder_outputs`) and unties the head only when a checkpoint holds one of its own;
tfx reads the old key and the new one alike: an unscaled T5 (and every mT5, which
transformers 5 never rescales) has a head of its own, filled from the token table when
the checkpoint has none (what transformers then ties). From a config alone transformers 5
builds the head tied, so its count of an unscaled model's config is vocab × d_model less
than its checkpoints hold (Flan-T5-XL: 2,783,959,040 against 2,849,757,184).
"""
from __future__ import annotations

from functools import partial

from ....errors import WeightsError
from .registry import Family, TensorMap, register

# what a config.json's architecture builds: both stacks and the head, both stacks, the
# encoder alone (model_type alone: the first)
WITH_HEAD = ("T5ForConditionalGeneration", "MT5ForConditionalGeneration",
             "UMT5ForConditionalGeneration")
NO_HEAD = ("T5Model", "MT5Model", "UMT5Model")
ENCODER_ONLY = ("T5EncoderModel", "MT5EncoderModel", "UMT5EncoderModel")
T5_ARCHITECTURES = {a: "umt5" if a.startswith("UMT5") else "t5"
                    for a in WITH_HEAD + NO_HEAD + ENCODER_ONLY}

# the defaults of transformers' T5Config for keys a config.json leaves out, and the
# names its attribute_map reads as them
_DEFAULTS = {"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048,
             "num_layers": 6, "num_heads": 8, "relative_attention_num_buckets": 32,
             "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6,
             "feed_forward_proj": "relu", "pad_token_id": 0}
_ALIASES = {"d_model": "hidden_size", "num_heads": "num_attention_heads",
            "num_layers": "num_hidden_layers", "d_kv": "head_dim"}
# T5 has no position table, so no trained length; its tokenizers cut texts at 512 tokens
# (n_positions in the original configs), and tfx takes that as the context
CONTEXT = 512
# feed_forward_proj "[gated-]ACT" -> tfx activation (transformers' ACT2FN names; its
# T5Config turns "gated-gelu" into gated gelu_new, GELU's tanh form)
_PLAIN = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
          "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu", "swish": "silu"}
_GATED = {"gelu": "geglu", "gelu_new": "geglu", "gelu_pytorch_tanh": "geglu",
          "silu": "swiglu", "swish": "swiglu"}


def t5_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a T5, mT5 or UMT5 config.json."""
    hf = {**_DEFAULTS, **{key: hf[alias] for key, alias in _ALIASES.items() if alias in hf},
          **hf}
    archs = hf.get("architectures") or []
    arch = next((a for a in archs if a in T5_ARCHITECTURES), "T5ForConditionalGeneration")
    proj = str(hf["feed_forward_proj"])
    gated, _, act = proj.rpartition("-")
    table = _GATED if gated == "gated" else _PLAIN if not gated else {}
    if act not in table:
        raise WeightsError(f"{where}: feed_forward_proj {proj!r} is not supported; tfx runs "
                           f"{', '.join(_PLAIN)} and gated-{', gated-'.join(_GATED)}")
    decoder_layers = hf.get("num_decoder_layers")
    decoder_layers = hf["num_layers"] if decoder_layers is None else decoder_layers
    head = arch in WITH_HEAD
    if arch.startswith("MT5") or hf.get("model_type") == "mt5":
        # mT5 was trained as T5 v1.1 is, its head apart from the table: transformers 5's
        # MT5 never rescales (and ties only a head no checkpoint gives it)
        scaled = False
    elif "scale_decoder_outputs" in hf:  # transformers 5's save: tie_word_embeddings is moot
        scaled = bool(hf["scale_decoder_outputs"])
    else:
        scaled = hf.get("tie_word_embeddings", True) is not False
    start = hf.get("decoder_start_token_id")
    start = hf["pad_token_id"] if start is None else start
    out = dict(
        vocab_size=hf["vocab_size"], context_length=hf.get("n_positions") or CONTEXT,
        d_model=hf["d_model"], n_heads=hf["num_heads"], head_dim=hf["d_kv"],
        n_layers=hf["num_layers"], d_ff=hf["d_ff"], qkv_bias=False, proj_bias=False,
        norm="rmsnorm", norm_position="pre", ln_eps=hf["layer_norm_epsilon"],
        activation=table[act], positional="relative", attn_scalar=1.0,
        relative_buckets=hf["relative_attention_num_buckets"],
        relative_max_distance=hf["relative_attention_max_distance"],
        relative_per_layer=family == "umt5", causal=False, lm_head=head,
        tie_embeddings=head and scaled, unembed_scale=head and scaled)
    if arch in ENCODER_ONLY:
        return out
    if not decoder_layers:
        raise WeightsError(f"{where}: num_decoder_layers is 0: a {arch} needs a decoder")
    return {**out, "n_decoder_layers": decoder_layers, "decoder_start_id": start}


# the token table under every name a T5 checkpoint has saved it (the first one held is
# read; the others must be the same tensor)
T5_TOKEN_TABLES = ("shared.weight", "encoder.embed_tokens.weight",
                   "decoder.embed_tokens.weight")
_ATTENTION = {"q": "W_query", "k": "W_key", "v": "W_value", "o": "out_proj"}
_FFN = {"wi": "fc1", "wi_0": "gate_proj", "wi_1": "fc1", "wo": "fc2"}
# transformers' T5 models never read it (_keys_to_ignore_on_load_unexpected): some old
# saves hold a relative bias for the first cross-attention
_IGNORED = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"


def map_t5(state: dict, cfg) -> tuple[dict, dict]:
    """A T5, mT5 or UMT5 checkpoint's tensors -> (tfx name -> tensor, tfx name ->
    checkpoint name). Blocks are `{stack}.block.{i}.layer.{j}`: j = 0 self-attention,
    then (decoder) 1 cross-attention, then the FFN, each with the RMSNorm before it."""
    from .seq2seq import check_tables

    out = TensorMap()
    seq2seq = cfg.is_encoder_decoder
    enc = "encoder." if seq2seq else ""
    tables = [k for k in T5_TOKEN_TABLES if k in state]
    if cfg.tie_embeddings and "lm_head.weight" in state:
        tables.append("lm_head.weight")  # a tied head saved too must be the table
    if tables:
        check_tables({k: state[k] for k in tables})
        out.put(f"{enc}embed.tok_emb.weight", tables[0], state[tables[0]])
    if cfg.lm_head and not cfg.tie_embeddings:
        if "lm_head.weight" in state:
            out.put("lm_head.weight", "lm_head.weight", state["lm_head.weight"])
        elif tables:  # transformers 5 tied it to the table: the head is a copy of it
            out.put("lm_head.weight", tables[0], state[tables[0]])
    for key in state:
        if key in T5_TOKEN_TABLES or key in ("lm_head.weight", _IGNORED):
            continue
        parts = key.split(".")
        stack = parts[0]
        if stack == "decoder" and not seq2seq:
            continue  # an encoder read alone (transformers' T5EncoderModel skips them too)
        ours = None
        if stack in ("encoder", "decoder"):
            prefix = f"{stack}." if seq2seq else ""
            if parts[1:] == ["final_layer_norm", "weight"]:
                ours = f"{prefix}ln_f.scale"
            elif len(parts) >= 7 and parts[1] == "block" and parts[3] == "layer":
                ours = _block_name(stack, prefix, int(parts[2]), int(parts[4]), parts[5:], cfg)
        if ours is None:
            out.keep(key, state[key])  # reported as unexpected
        else:
            out.put(ours, key, state[key])
    return out.result()


def _block_name(stack: str, prefix: str, i: int, j: int, rest: list[str], cfg) -> str | None:
    """tfx's name of `{stack}.block.{i}.layer.{j}.<rest>`, None when it is no T5 tensor."""
    block = f"{prefix}blocks.{i}"
    sublayers = ("attn", "cross", "ffn") if stack == "decoder" else ("attn", "ffn")
    norms = ("ln1", "ln2", "ln3") if stack == "decoder" else ("ln1", "ln2")
    if j >= len(sublayers):
        return None
    if rest == ["layer_norm", "weight"]:
        return f"{block}.{norms[j]}.scale"
    sub = sublayers[j]
    module = {"attn": "SelfAttention", "cross": "EncDecAttention",
              "ffn": "DenseReluDense"}[sub]
    if len(rest) != 3 or rest[0] != module or rest[2] != "weight":
        return None
    name = rest[1]
    if sub == "ffn":
        return f"{block}.ffn.{_FFN[name]}.weight" if name in _FFN else None
    if name == "relative_attention_bias" and sub == "attn":
        if cfg.relative_per_layer:
            return f"{block}.attn.rel_bias.weight"
        return f"{prefix}embed.rel_bias.weight" if i == 0 else None
    return f"{block}.{sub}.{_ATTENTION[name]}.weight" if name in _ATTENTION else None


def t5_tables(cfg) -> tuple[str, ...]:
    """Where a T5 checkpoint may hold its token table: a tied head is one of the copies."""
    return T5_TOKEN_TABLES + (("lm_head.weight",) if cfg.tie_embeddings else ())


T5, UMT5 = register(*(
    Family(name, tuple(a for a, family in T5_ARCHITECTURES.items() if family == name),
           partial(t5_config, name), map_t5, model_types=types, token_tables=t5_tables)
    for name, types in (("t5", ("t5", "mt5")), ("umt5", ("umt5",)))))
T5_FAMILIES = (T5.name, UMT5.name)
