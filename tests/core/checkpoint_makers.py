"""Tiny checkpoints in real formats, made offline for the weights tests.

transformers builds random GPT-2, Llama and BERT models and saves them as HF folders;
the same tensors are rewritten as a nanoGPT ckpt.pt or, with llama.cpp's row order for
Q and K, as a GGUF file through the gguf package's writer.
"""
import hashlib
import math
import os
import sys
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

TESTS = str(Path(__file__).resolve().parents[1])  # needs.py; bench/ imports this file too
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from needs import need  # noqa: E402,F401  the one skip rule; the tests import it from here


_READERS: OrderedDict = OrderedDict()  # (size, sha256) -> gguf.GGUFReader, newest last
_METADATA: OrderedDict = OrderedDict()  # (size, sha256) -> load_gguf_checkpoint's metadata
READERS_KEPT = 2


def _content_key(path) -> tuple:
    with open(path, "rb") as f:
        return os.fstat(f.fileno()).st_size, hashlib.file_digest(f, "sha256").hexdigest()


def _kept(memo: OrderedDict, key, make):
    if key not in memo:
        memo[key] = make()
        while len(memo) > READERS_KEPT:
            memo.popitem(last=False)
    memo.move_to_end(key)
    return memo[key]


@contextmanager
def gguf_parsed_once():
    """While open, transformers' GGUF loading (the reference the real-model tests compare
    with) parses each file once per session. It builds a new gguf.GGUFReader for the
    config, for the tokenizer and for the tensors, and turns every metadata field into
    Python values for each; for a large vocabulary each of those costs 5-20 s (every
    token string is a numpy view). A reader is read-only (a memory map opened "r"), so
    one per file content (size and SHA-256: the tests join the same published files into
    different folders) serves them all, and the metadata alone (config and tokenizer,
    no tensors) is read once and handed out as a deep copy; the READERS_KEPT most recent
    files are kept."""
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    made, load = gguf.GGUFReader, hf_gguf.load_gguf_checkpoint

    def reader(path, mode="r"):
        if mode != "r":
            return made(path, mode)
        return _kept(_READERS, _content_key(path), lambda: made(path, mode))

    def metadata(path, return_tensors=False, *args, **kwargs):
        if return_tensors or args or kwargs:
            return load(path, return_tensors, *args, **kwargs)
        return copy.deepcopy(_kept(_METADATA, _content_key(path), lambda: load(path)))

    gguf.GGUFReader, hf_gguf.load_gguf_checkpoint = reader, metadata
    try:
        yield
    finally:
        gguf.GGUFReader, hf_gguf.load_gguf_checkpoint = made, load


def byte_tokenizer_json(folder, vocab_size: int) -> None:
    """A byte-level BPE tokenizer.json of exactly `vocab_size` ids, made with `tokenizers`:
    the 256 byte tokens (no merges; id = byte value), then unused entries, so a tiny random checkpoint
    brings a tokenizer of its own size as real checkpoints do."""
    need("tokenizers", "pip install tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    assert vocab_size >= 256, "a byte-level vocabulary needs the 256 byte tokens"
    from tfx_cli.core.tokenizers.hf import _BYTE_OF  # stand-in character -> byte value

    vocab = dict(_BYTE_OF)  # id = the byte's value, as the byte tokenizer numbers them
    for i in range(len(vocab), vocab_size):
        vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))


def gpt2_folder(path, *, n_layer=2, n_embd=32, n_head=4, vocab_size=1000, n_positions=64,
                activation="gelu_new", seed=0):
    """A random GPT2LMHeadModel saved in `path`; a vocabulary other than GPT-2's own
    50257 gets a byte-level tokenizer.json of its size beside it."""
    need("transformers", "pip install transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab_size,
                     n_positions=n_positions, activation_function=activation,
                     attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).eval()
    _jiggle(model)
    model.save_pretrained(path)
    if vocab_size != 50257:
        byte_tokenizer_json(path, vocab_size)
    return model


ROPE_THETA = 50000.0  # not the default, so a config reader that drops it fails the tests


def llama_folder(path, *, layers=2, d=64, heads=4, kv_heads=2, d_ff=96, vocab_size=300,
                 tie=False, seed=0):
    need("transformers", "pip install transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=d, intermediate_size=d_ff, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads,
                      vocab_size=vocab_size, max_position_embeddings=128, rms_norm_eps=1e-5,
                      rope_theta=ROPE_THETA, tie_word_embeddings=tie,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    _jiggle(model)
    model.save_pretrained(path)
    byte_tokenizer_json(path, vocab_size)
    return model


def _jiggle(model) -> None:
    # Fresh norms are all ones and biases all zeros, which would hide a swapped or
    # dropped tensor; give every parameter a little noise.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)


def nanogpt_ckpt(hf_model, path, *, bias=True):
    """An HF GPT-2 model's tensors in nanoGPT's layout: nn.Linear (out, in), 'transformer.'
    prefix, lm_head saved beside the tied wte. Exact GELU is the caller's concern."""
    c = hf_model.config
    state = {}
    for key, t in hf_model.state_dict().items():
        if key.endswith(("attn.bias", "attn.masked_bias")) and t.dtype != torch.float32:
            continue
        if not bias and key.endswith(".bias"):
            continue
        if any(key.endswith(f"{m}.weight") for m in ("c_attn", "c_proj", "c_fc")):
            t = t.t().contiguous()  # Conv1D (in, out) -> Linear (out, in)
        state[key] = t.clone()
    state["lm_head.weight"] = state["transformer.wte.weight"]
    ckpt = {"model": state, "iter_num": 0, "best_val_loss": torch.tensor(3.0),
            "config": {"dataset": "tiny", "learning_rate": 6e-4},
            "model_args": {"n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd,
                           "block_size": c.n_positions, "bias": bias,
                           "vocab_size": c.vocab_size, "dropout": 0.0}}
    torch.save(ckpt, path)
    return path


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's rows [first half | second half] -> interleaved."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def gguf_from_llama(hf_model, path, *, qtype="F32", tokens=None, arch="llama", skip=(),
                    override=None):
    """Write an HF Llama model as a llama-architecture GGUF file.

    qtype: F32, F16, Q8_0 or Q4_1 for the 2-D weights (norms stay F32, as llama.cpp keeps
    them). Returns {gguf tensor name: float32 array as a reader dequantises it}, in HF's
    row order, so a test can build the exact reference.
    """
    need("gguf", "pip install gguf")
    import gguf
    from gguf import GGMLQuantizationType as Q

    c = hf_model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_vocab_size(c.vocab_size)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    seen = {}
    for key, t in hf_model.state_dict().items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.detach().float().numpy()
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        elif key == "lm_head.weight":
            name = "output.weight"
        else:
            parts = key.split(".")
            name = f"blk.{parts[2]}.{names['.'.join(parts[3:-1])]}.{parts[-1]}"
        if name in skip:
            continue
        stored = a
        if ".attn_q." in name:
            stored = llama_cpp_permute(a, c.num_attention_heads)
        elif ".attn_k." in name:
            stored = llama_cpp_permute(a, c.num_key_value_heads)
        kind = (override or {}).get(name, qtype if a.ndim == 2 else "F32")
        if kind == "F32":
            w.add_tensor(name, np.ascontiguousarray(stored, dtype=np.float32))
            seen[name] = a
        elif kind == "F16":
            w.add_tensor(name, stored.astype(np.float16))
            seen[name] = a.astype(np.float16).astype(np.float32)
        elif kind == "I8":  # a type no dequantiser handles
            w.add_tensor(name, np.zeros(stored.shape, dtype=np.int8))
        else:
            qt = getattr(Q, kind)
            w.add_tensor(name, gguf.quants.quantize(stored, qt), raw_dtype=qt)
            # quantisation works along rows, so quantise-then-dequantise commutes with the
            # row permutation: the reference is the round trip in HF's order
            seen[name] = gguf.quants.dequantize(gguf.quants.quantize(a, qt), qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return seen


def llama_with(hf_model, tensors: dict):
    """A copy of an HF Llama model whose weights are replaced by GGUF-round-tripped ones."""
    import copy

    model = copy.deepcopy(hf_model)
    back = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
            "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    state = model.state_dict()
    for name, a in tensors.items():
        if name == "token_embd.weight":
            key = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            key = "model.norm.weight"
        elif name == "output.weight":
            key = "lm_head.weight"
        else:
            _, i, mod, leaf = name.split(".")
            key = f"model.layers.{i}.{back[mod]}.{leaf}"
        state[key] = torch.from_numpy(np.array(a, dtype=np.float32))
    model.load_state_dict(state)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


# HF module -> llama.cpp tensor name, per family (gguf-py's tensor names)
_GGUF_BLOCK = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
    "post_attention_layernorm": "ffn_norm",
}
_GGUF_GEMMA = {"post_attention_layernorm": "post_attention_norm",
               "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}
_GGUF_NEOX = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "attention.query_key_value": "attn_qkv", "attention.dense": "attn_output",
              "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"}


def gguf_from_hf(hf_model, path, arch: str) -> None:
    """Write an HF decoder as llama.cpp's converter lays out architecture `arch` (F32):
    the keys it stores and leaves out, Gemma's norms as 1 + w, Llama's Q/K row order,
    GPT-NeoX's fused qkv re-laid to [Q; K; V], Phi-3's longrope factors as tensors."""
    need("gguf", "pip install gguf")
    import gguf

    c = hf_model.config
    w = gguf.GGUFWriter(str(path), arch)
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(heads)
    rope = dict(getattr(c, "rope_parameters", None) or {})
    if arch == "gptneox":
        w.add_layer_norm_eps(c.layer_norm_eps)
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.25)))
        w.add_bool(f"{arch}.use_parallel_residual", c.use_parallel_residual)
    else:
        w.add_head_count_kv(c.num_key_value_heads)
        w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if arch in ("qwen3", "gemma2", "gemma3") or (arch == "llama" and
                                                  head_dim != c.hidden_size // heads):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch not in ("gemma2", "gptneox"):  # those two store no base (10000 is assumed)
        theta = rope.get("rope_theta") or (rope.get("full_attention") or {}).get("rope_theta")
        w.add_rope_freq_base(float(theta))
    if arch == "gemma2":
        w.add_float32(f"{arch}.attn_logit_softcapping", c.attn_logit_softcapping)
        w.add_float32(f"{arch}.final_logit_softcapping", c.final_logit_softcapping)
    if arch in ("gemma2", "gemma3"):
        w.add_sliding_window(c.sliding_window)
    if arch == "phi3":
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 1.0)))
        w.add_uint32(f"{arch}.rope.scaling.original_context_length",
                     c.original_max_position_embeddings)
        w.add_sliding_window(c.sliding_window or 0)
        if rope.get("rope_type") == "longrope":
            factor = c.max_position_embeddings / c.original_max_position_embeddings
            w.add_float32(f"{arch}.rope.scaling.attn_factor",
                          math.sqrt(1 + math.log(factor) / math.log(
                              c.original_max_position_embeddings)))
            for which in ("short", "long"):
                w.add_tensor(f"rope_factors_{which}.weight",
                             np.array(rope[f"{which}_factor"], dtype=np.float32))
    blocks = _GGUF_NEOX if arch == "gptneox" else \
        {**_GGUF_BLOCK, **(_GGUF_GEMMA if arch.startswith("gemma") else {})}
    for key, t in hf_model.state_dict().items():
        a = t.detach().float().numpy()
        name = key.removeprefix("model.").removeprefix("gpt_neox.")
        if name in ("embed_tokens.weight", "embed_in.weight"):
            out = "token_embd.weight"
        elif name in ("norm.weight", "final_layer_norm.weight", "final_layer_norm.bias"):
            out = "output_norm." + name.split(".")[-1]
        elif name in ("lm_head.weight", "embed_out.weight"):
            if getattr(c, "tie_word_embeddings", False):
                continue
            out = "output.weight"
        elif name.endswith(("rotary_emb.inv_freq", "attention.bias", "masked_bias")):
            continue
        else:
            parts = name.split(".")
            out = f"blk.{parts[1]}.{blocks['.'.join(parts[2:-1])]}.{parts[-1]}"
        if arch.startswith("gemma") and out.endswith("norm.weight"):
            a = a + 1.0
        if arch == "llama" and (".attn_q." in out or ".attn_k." in out):
            a = llama_cpp_permute(a, heads if ".attn_q." in out else c.num_key_value_heads)
        if arch == "gptneox" and ".attn_qkv." in out:
            a = a.reshape(heads, 3, head_dim, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)
        w.add_tensor(out, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- T5, Flan-T5, UMT5 -------------------------------------------------------------------
T5_SIZE = dict(vocab_size=300, d_model=64, d_kv=8, d_ff=96, num_layers=2,
               num_decoder_layers=3, num_heads=4, relative_attention_num_buckets=8,
               relative_attention_max_distance=12, decoder_start_token_id=0,
               pad_token_id=0, eos_token_id=1)
# kind -> (config class, model class, feed_forward_proj, tied head): the original T5
# (ReLU, a head tied to the token table and reading the stream × d_model^-0.5), Flan-T5
# (T5 v1.1: gated GELU, a head of its own), mT5 (the same, whose head transformers 5 never
# rescales), UMT5 (v1.1 with a bias table per layer)
T5_KINDS = {"t5": ("T5Config", "T5ForConditionalGeneration", "relu", True),
            "flan-t5": ("T5Config", "T5ForConditionalGeneration", "gated-gelu", False),
            "mt5": ("MT5Config", "MT5ForConditionalGeneration", "gated-gelu", False),
            "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", "gated-gelu", False)}


def t5_folder(path, kind: str = "t5", *, model: str | None = None, **size):
    """A tiny random T5-family model (2 encoder + 3 decoder layers, heads 8 wide in a
    64-wide model, 8 buckets up to distance 12) saved as an HF folder with a byte-level
    tokenizer.json; every parameter jiggled. An untied head is a tensor of its own
    (transformers 5 builds one tied to the table from such a config, and unties it only
    when loading a checkpoint whose head differs, as Flan-T5's do). `model`: another
    class of the family (T5Model, T5EncoderModel). Returns the transformers model."""
    need("transformers", "pip install transformers")
    import transformers

    config_name, model_name, proj, tied = T5_KINDS[kind]
    config = getattr(transformers, config_name)(
        **{**T5_SIZE, **size}, feed_forward_proj=proj, tie_word_embeddings=tied)
    config._attn_implementation = "eager"
    torch.manual_seed(sum(map(ord, kind)))
    hf = getattr(transformers, model or model_name)(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        if not tied and hasattr(hf, "lm_head"):
            hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.shared.weight))
    hf.save_pretrained(path)
    byte_tokenizer_json(path, config.vocab_size)
    return hf
