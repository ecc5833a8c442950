"""GGUF architectures as tfx reads them: a file's `{arch}.*` keys -> the config.json
settings its HF family would have (then core/families.decoder_config, like an HF folder),
and its tensor names -> tfx's parameter names.

What llama.cpp's converter does to a checkpoint, and so what is undone here (per
gguf-py's constants and llama.cpp's conversion scripts; facts, not code, taken from them):

  llama    q and k rows reordered so each rotated pair is adjacent (undone); Mistral is
           written as llama, with no sliding_window key (so none is applied)
  qwen2    HF layout; q/k/v biases
  qwen3    HF layout; q/k norms; head_dim in attention.key_length
  gemma2   every norm weight stored as 1 + w (1 subtracted back); no rope.freq_base
           (10000), no query_pre_attn_scalar (head_dim, or d_model / heads for the 46-layer
           27B, llama.cpp's rule), even layers slide
  gemma3   as gemma2's norms, plus q/k norms; rope.freq_base is the full layers' base, the
           sliding layers' 10000 is not stored; five sliding layers to one full (27B: 62
           layers, d_model / heads for the scalar)
  phi3     fused attn_qkv ([Q; K; V]) and ffn_up ([gate; up]); longrope factors as the
           tensors rope_factors_short / rope_factors_long; sliding_window 0 means none
  gptneox  LayerNorm with biases; attn_qkv re-laid to [Q; K; V] (HF interleaves per
           head); no rope.freq_base (10000); rotary on rope.dimension_count dims
"""
from __future__ import annotations

from ...errors import WeightsError

# general.architecture -> the HF family of core/families.py
ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
         "gemma3": "gemma3", "phi3": "phi3", "gptneox": "gpt_neox"}
GEMMA = ("gemma2", "gemma3")
# tensors a file may carry that are folded into the config, not parameters
CONFIG_TENSORS = ("rope_factors_short.weight", "rope_factors_long.weight")


def hf_settings(g, where: str) -> tuple[str, dict]:
    """(family, config.json-like dict) of a GGUF file `g` (gguf_file.GGUFFile)."""
    arch = g.get("general.architecture")
    if arch not in ARCHS:
        raise WeightsError(f"{where}: GGUF architecture {arch!r} is not supported; tfx reads "
                           f"{', '.join(ARCHS)} (Mistral files are llama)")

    def get(key, default=None, *, required=False):
        value = g.get(f"{arch}.{key}", default)
        if value is None and required:
            raise WeightsError(f"{where}: GGUF metadata {arch}.{key} is missing; the file is "
                               "incomplete")
        return value

    if (get("expert_count") or 0) > 0:  # llama.cpp's Mixtral, Qwen-MoE: stacked experts
        raise WeightsError(f"{where}: a GGUF mixture of experts ({arch} with "
                           f"{get('expert_count')} experts) is not read yet; use the model's "
                           "HF folder (config.json + safetensors), which tfx reads")
    d = int(get("embedding_length", required=True))
    heads = int(get("attention.head_count", required=True))
    n_layers = int(get("block_count", required=True))
    head_dim = int(get("attention.key_length") or d // heads)
    tokens = g.get("tokenizer.ggml.tokens")
    vocab = get("vocab_size") or (len(tokens) if tokens else None)
    if vocab is None and "token_embd.weight" in g.tensors:
        vocab = g.tensors["token_embd.weight"].shape[0]
    if vocab is None:
        raise WeightsError(f"{where}: cannot tell the vocabulary size (no {arch}.vocab_size, "
                           "tokens or token_embd.weight)")
    hf: dict = {
        "vocab_size": int(vocab), "hidden_size": d, "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv") or heads),
        "num_hidden_layers": n_layers,
        "intermediate_size": int(get("feed_forward_length", required=True)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "head_dim": head_dim,
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        # a file without output.weight reuses the embedding as the head
        "tie_word_embeddings": "output.weight" not in g.tensors,
    }
    rotary = get("rope.dimension_count")
    if rotary is not None and int(rotary) != head_dim:
        hf["partial_rotary_factor"] = int(rotary) / head_dim
    hf["rope_scaling"] = _rope_scaling(g, arch, get, where)
    if arch == "qwen2":
        hf["attention_bias"] = True
    elif arch == "gemma2":
        hf.update(query_pre_attn_scalar=d // heads if n_layers == 46 else head_dim,
                  attn_logit_softcapping=get("attn_logit_softcapping"),
                  final_logit_softcapping=get("final_logit_softcapping"),
                  sliding_window=get("attention.sliding_window"),
                  hidden_activation="gelu_pytorch_tanh")
    elif arch == "gemma3":
        hf.update(query_pre_attn_scalar=d // heads if n_layers == 62 else head_dim,
                  final_logit_softcapping=get("final_logit_softcapping"),
                  sliding_window=get("attention.sliding_window"), sliding_window_pattern=6,
                  rope_local_base_freq=10000.0, hidden_activation="gelu_pytorch_tanh")
    elif arch == "phi3":
        hf["sliding_window"] = get("attention.sliding_window") or None
    elif arch == "gptneox":
        hf.update(layer_norm_eps=float(get("attention.layer_norm_epsilon", 1e-5)),
                  use_parallel_residual=bool(get("use_parallel_residual", True)),
                  hidden_act="gelu", attention_bias=True)
        hf.pop("num_key_value_heads")
    if not hf["rope_scaling"]:
        hf.pop("rope_scaling")
    return ARCHS[arch], hf


def _rope_scaling(g, arch: str, get, where: str) -> dict:
    kind = get("rope.scaling.type")
    if arch == "phi3" and "rope_factors_long.weight" in g.tensors:
        old = int(get("rope.scaling.original_context_length", required=True))
        factors = {}
        for which in ("short", "long"):
            info = g.tensors.get(f"rope_factors_{which}.weight")
            if info is None:
                raise WeightsError(f"{where}: rope_factors_long without rope_factors_short")
            factors[f"{which}_factor"] = [float(x) for x in g.array(info).reshape(-1)]
        out = {"rope_type": "longrope", "original_max_position_embeddings": old, **factors}
        attn = get("rope.scaling.attn_factor")
        if attn is not None:
            out["attention_factor"] = float(attn)
        return out
    if kind in (None, "none"):
        if "rope_freqs.weight" in g.tensors:
            raise WeightsError(f"{where}: rope frequency factors (rope_freqs, Llama 3.1's "
                               "scaling) are not supported in GGUF files yet; use the HF "
                               "folder, whose rope_scaling tfx reads")
        return {}
    factor = get("rope.scaling.factor")
    if kind == "linear" and factor:
        return {"rope_type": "linear", "factor": float(factor)}
    if kind == "yarn" and factor:
        out = {"rope_type": "yarn", "factor": float(factor),
               "original_max_position_embeddings":
                   int(get("rope.scaling.original_context_length", required=True))}
        for ours, theirs in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if get(f"rope.scaling.{theirs}") is not None:
                out[ours] = float(get(f"rope.scaling.{theirs}"))
        return out
    raise WeightsError(f"{where}: GGUF rope scaling {kind!r} is not supported; tfx reads "
                       "linear and yarn (and Phi-3's longrope factors)")


# per-block GGUF tensor -> tfx module (norms get .scale/.shift, the rest keep their leaf)
_BLOCK = {"attn_norm": "ln1", "ffn_norm": "ln2", "post_attention_norm": "ln_post_attn",
          "post_ffw_norm": "ln_post_ffn", "attn_q": "attn.W_query", "attn_k": "attn.W_key",
          "attn_v": "attn.W_value", "attn_output": "attn.out_proj",
          "attn_q_norm": "attn.q_norm", "attn_k_norm": "attn.k_norm",
          "ffn_gate": "ffn.gate_proj", "ffn_up": "ffn.fc1", "ffn_down": "ffn.fc2"}
_TOP = {"token_embd": "embed.tok_emb", "output_norm": "ln_f", "output": "lm_head"}
_NORM_LEAF = {"weight": "scale", "bias": "shift"}


def unpermute(w, n_heads: int):
    """Undo llama.cpp's reordering of Q/K rows.

    llama.cpp rotates adjacent pairs (x0, x1), (x2, x3) ...; HF Llama and tfx rotate
    (x_i, x_{i+D/2}). To make its pairs adjacent the converter reorders each head's rows
    from [first half | second half] to interleaved; this puts them back.
    """
    rows = w.shape[0]
    head_dim = rows // n_heads
    return (w.reshape(n_heads, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def map_tensor(arch: str, name: str, arr, cfg) -> list[tuple[str, object]]:
    """One GGUF tensor (a float32 torch tensor in its PyTorch shape; a meta tensor works
    too, for shapes alone) -> [(tfx name, tensor)]: usually one, two or three for the
    fused projections; [] for tensors that live in the config. A name tfx does not know
    keeps its own (and is reported as unexpected)."""
    if name in CONFIG_TENSORS:
        return []
    parts = name.split(".")
    stem, leaf = ".".join(parts[:-1]), parts[-1]
    norm = stem.endswith("norm")
    if arch in GEMMA and norm and leaf == "weight":
        arr = arr - 1.0  # stored as 1 + w; tfx's norm_plus_one adds it back
    if stem in _TOP:
        ours = _TOP[stem]
        return [(f"{ours}.{_NORM_LEAF.get(leaf, leaf) if norm else leaf}", arr)]
    if len(parts) != 4 or parts[0] != "blk":
        if name == "rope_freqs.weight":
            raise WeightsError("rope frequency factors (rope_freqs) are not supported")
        return [(name, arr)]
    b, mod = f"blocks.{parts[1]}", parts[2]
    if mod == "attn_qkv":  # phi3 and gptneox: [Q; K; V] by rows
        q, kv = cfg.attn_dim, cfg.n_kv_heads * cfg.head_dim
        return [(f"{b}.attn.{ours}.{leaf}", part) for ours, part in
                zip(("W_query", "W_key", "W_value"), arr.split([q, kv, arr.shape[0] - q - kv]))]
    if mod == "ffn_up" and arch == "phi3":  # [gate; up]
        gate, up = arr.chunk(2)
        return [(f"{b}.ffn.gate_proj.{leaf}", gate), (f"{b}.ffn.fc1.{leaf}", up)]
    if mod not in _BLOCK:
        return [(name, arr)]
    ours = _BLOCK[mod]
    if arch == "llama" and mod in ("attn_q", "attn_k") and arr.ndim >= 1:
        heads = cfg.n_heads if mod == "attn_q" else cfg.n_kv_heads
        if arr.shape[0] % heads == 0 and (arr.shape[0] // heads) % 2 == 0:
            arr = unpermute(arr, heads).contiguous()
    if mod.endswith("norm"):
        return [(f"{b}.{ours}.{_NORM_LEAF.get(leaf, leaf)}", arr)]
    return [(f"{b}.{ours}.{leaf}", arr)]


__all__ = ["ARCHS", "hf_settings", "map_tensor", "unpermute"]
