"""The decoding fast path: one cached token through the model, without taps or masks.

`transformer.py` (with the modules it builds from) is the forward pass as a reader should see it; this module is the same
arithmetic arranged for speed when a single new token meets a warm KV cache, the case
that dominates `tfx generate`. Nothing here is a second model: it reads the very
parameters of a `Transformer` and calls its norms, activations and rotary helpers, and
tests hold `step(...)` equal to `Transformer.forward` on one cached token bit for bit
(tests/core/test_model.py).

`decoder_step` is the same for an encoder–decoder's target: masked self-attention on the
cache, cross-attention on the encoder output's memoised keys and values, feed-forward.

Two things make a decoding step cheaper on CPU:
- `step` does forward's arithmetic on (1, C) rows with plain functional calls. A step
  spends ~200 small operations besides its matrix-vector products, and at 10-60 us each
  the module-call and tap machinery around them counts.
- `decoding_layout` stores each Linear weight with its longer axis contiguous, and fuses
  W_query, W_key and W_value into one buffer (one product per step instead of three).
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import Attention, KVCache
from .feedforward import FeedForward
from .positions import apply_rope
from .transformer import Block, Transformer


def supports(model: Transformer) -> bool:
    """Can `step` (or, for an encoder–decoder, `decoder_step`) run this model? A causal
    model or an encoder–decoder, with an output head, not recording, and none of the
    newer families' switches (those decode through forward with the cache); an
    encoder–decoder may scale its embeddings (Marian, mBART)."""
    cfg = model.cfg
    if model.recording or not cfg.lm_head or model.residency.streamed:
        return False
    if cfg.is_encoder_decoder:
        return set(cfg.features()) <= {"encoder–decoder", "embed × √d"}
    return cfg.causal and not cfg.features()


def _linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A Linear's product without nn.Module's call machinery (tfx sets no hooks)."""
    return F.linear(x, module.weight, module.bias)


# -- fused query/key/value weights ---------------------------------------------------
# Attention module -> (weight (out, in) view, bias, split sizes, checks); see fuse_qkv.
_FUSED: "weakref.WeakKeyDictionary[Attention, tuple]" = weakref.WeakKeyDictionary()


def fuse_qkv(attn: Attention) -> bool:
    """Put W_query, W_key and W_value (and their biases) side by side in one (in,
    out_q + out_k + out_v) buffer, the three parameters becoming views of it: one
    matrix-vector product per decoding step instead of three. Names, shapes and values
    stay; the views show nn.Linear's (out, in) shape. False on the meta device, and for
    an attention without the three (latent attention)."""
    lins = attn.separate_qkv()
    if not lins:
        return False
    if fused_ok(attn):
        return True
    if any(lin.weight.is_meta for lin in lins):
        return False
    outs = [lin.out_features for lin in lins]
    weight = attn.W_query.weight.new_empty(attn.W_query.in_features, sum(outs))
    bias = attn.W_query.weight.new_empty(sum(outs)) if attn.W_query.bias is not None else None
    start = 0
    for lin, n in zip(lins, outs):
        part = weight[:, start:start + n]
        part.copy_(lin.weight.data.t())
        lin.weight.data = part.t()
        if bias is not None:
            bias[start:start + n].copy_(lin.bias.data)
            lin.bias.data = bias[start:start + n]
        start += n
    # what fused_ok compares: each parameter's current tensor, looked up in its module's
    # own table (a replaced Parameter object shows there), and its address
    checks = tuple((lin._parameters, key, None if p is None else p.data_ptr())
                   for lin in lins for key, p in lin._parameters.items())
    _FUSED[attn] = (weight.t(), bias, outs, checks)  # weight.t(): (out, in), as F.linear takes
    return True


def fused_ok(attn: Attention) -> bool:
    """The three parameters are still the fused buffer's views (nobody reassigned one;
    in-place writes, as load_state_dict makes, land in the buffer)."""
    fused = _FUSED.get(attn)
    if fused is None:
        return False
    for params, key, ptr in fused[3]:
        p = params.get(key)
        if (None if p is None else p.data_ptr()) != ptr:
            return False
    return True


def fused_weight(attn: Attention) -> torch.Tensor | None:
    """The fused (out_q + out_k + out_v, in) weight while it is valid, else None."""
    return _FUSED[attn][0] if fused_ok(attn) else None


def decoding_layout(model: Transformer, modules=None) -> Transformer:
    """Store each Linear weight with its longer axis contiguous in memory; shapes, names
    and values stay nn.Linear's (out, in).

    A decoding step multiplies every weight by one vector, and on CPU that product runs
    fastest along the long axis (measured, one thread, gpt124m): the head (50257, 768)
    takes 16.3 ms per token as (out, in) and 10.2 ms stored (in, out); fc1 (3072, 768)
    11.6 vs 8.9 ms for all 12 layers; fc2 (768, 3072) is the other way round (9.0 vs
    11.5 ms), and square weights do not care. The copies cost about 0.3 s for gpt124m
    (what ~30 decoding steps save), so `generate.decode` asks for this layout only for
    longer generations. Idempotent; a head tied to the embedding keeps the embedding's
    layout. Call outside inference mode, or the weights become inference tensors that a
    later load_state_dict could not write. `modules`: only these (a streamed model's part
    as it is read), in module order; default every module of the model."""
    fused: set[nn.Module] = set()
    for module in modules if modules is not None else model.modules():
        # each Attention comes before its own Linears
        if isinstance(module, Attention) and fuse_qkv(module):
            # its (in, out_q + out_k + out_v) buffer has the long axis in order already
            fused.update(module.separate_qkv())
        if not isinstance(module, nn.Linear) or module.weight.is_meta or module in fused:
            continue
        if module is getattr(model, "lm_head", None) and model.cfg.tie_embeddings:
            continue
        w = module.weight.data
        n_out, n_in = w.shape
        if n_out > n_in and w.stride() != (1, n_out):  # want (in, out) in memory
            # a contiguous destination and a transposed source: torch's blocked copy
            module.weight.data = w.new_empty(n_in, n_out).copy_(w.t()).t()
        elif n_in > n_out and not w.is_contiguous():  # want (out, in)
            module.weight.data = w.contiguous()
    return model


# -- one token -------------------------------------------------------------------------
def _attention_step(attn: Attention, x: torch.Tensor, cache: KVCache, start: int,
                    angles: torch.Tensor | None) -> torch.Tensor:
    """Attention.forward for one new position (x: (1, C)) that may see every cached key."""
    D = attn.head_dim
    weight = fused_weight(attn)
    if weight is not None:
        q, k, v = F.linear(x, weight, _FUSED[attn][1]).split(_FUSED[attn][2], dim=-1)
    else:
        q, k, v = _linear(attn.W_query, x), _linear(attn.W_key, x), _linear(attn.W_value, x)
    queries = q.view(1, attn.n_heads, 1, D)
    keys, values = k.view(1, attn.n_kv_heads, 1, D), v.view(1, attn.n_kv_heads, 1, D)
    if angles is not None:
        queries, keys = apply_rope(queries, angles), apply_rope(keys, angles)
    keys, values = cache.append(attn.layer, keys, values, start)
    context = F.scaled_dot_product_attention(queries, attn.share_kv(keys),
                                             attn.share_kv(values))
    return _linear(attn.out_proj, context.reshape(1, -1))


def _ffn_step(ffn: FeedForward, x: torch.Tensor) -> torch.Tensor:
    if ffn.gated:
        act = ffn.activate(_linear(ffn.gate_proj, x)) * _linear(ffn.fc1, x)
    else:
        act = ffn.activate(_linear(ffn.fc1, x))
    return _linear(ffn.fc2, act)


def _block_step(block: Block, x: torch.Tensor, cache: KVCache, start: int,
                angles: torch.Tensor | None) -> torch.Tensor:
    if block.post_ln:
        x = block.ln1.fused(x + _attention_step(block.attn, x, cache, start, angles))
        return block.ln2.fused(x + _ffn_step(block.ffn, x))
    x = x + _attention_step(block.attn, block.ln1.fused(x), cache, start, angles)
    return x + _ffn_step(block.ffn, block.ln2.fused(x))


def step(model: Transformer, token: int, cache: KVCache) -> torch.Tensor:
    """Logits (V,) of one new token after the cached positions: what
    model(tensor([[token]]), cache=cache, keep=None, head="last")[0, -1] computes, with the
    same operations on (1, C) rows. Needs `supports(model)`."""
    cfg, start = model.cfg, cache.length
    if start + 1 > cfg.context_length:
        raise ValueError(f"{start + 1} positions exceed the context length "
                         f"{cfg.context_length}")
    embed = model.embed
    x = embed.tok_emb.weight[token]  # (C,)
    if cfg.positional == "learned":
        x = x + embed.pos_emb.weight[start]
    elif cfg.positional == "sinusoidal":
        x = x + embed.pe[start]
    if cfg.token_types:
        x = x + embed.type_emb.weight[0]
    x = x[None]  # (1, C)
    if embed.ln is not None:
        x = embed.ln.fused(x)
    angles = None
    if cfg.positional == "rope":
        angles = model.rope_for(torch.tensor([start]))
    for block in model.blocks:
        x = _block_step(block, x, cache, start, angles)
    cache.length = start + 1
    if model.ln_f is not None:
        x = model.ln_f.fused(x)
    return _linear(model.lm_head, x)[0]


# -- one target token of an encoder–decoder ------------------------------------------------
def _self_attention_step(attn: Attention, x: torch.Tensor, cache: KVCache,
                         start: int) -> torch.Tensor:
    """A decoder block's masked self-attention for one new position: Attention.forward's
    operations on a (1, C) row, its scale passed as forward passes it."""
    D = attn.head_dim
    q, k, v = _linear(attn.W_query, x), _linear(attn.W_key, x), _linear(attn.W_value, x)
    keys, values = cache.append(attn.layer, k.view(1, attn.n_kv_heads, 1, D),
                                v.view(1, attn.n_kv_heads, 1, D), start)
    context = F.scaled_dot_product_attention(
        q.view(1, attn.n_heads, 1, D), attn.share_kv(keys), attn.share_kv(values),
        scale=1.0 / attn.scale)
    return _linear(attn.out_proj, context.reshape(1, -1))


def _cross_step(attn: Attention, x: torch.Tensor, memory: torch.Tensor,
                cache: KVCache) -> torch.Tensor:
    """Cross-attention for one new position on the encoder output: the memory's keys
    and values from the cache's memo (made here, as Attention._cross makes them, at the
    first step)."""
    memo = cache.memory_kv
    if attn.layer not in memo:
        memo[attn.layer] = (attn.share_kv(attn._heads(attn.W_key(memory), attn.n_kv_heads)),
                            attn.share_kv(attn._heads(attn.W_value(memory), attn.n_kv_heads)))
    keys, values = memo[attn.layer]
    queries = _linear(attn.W_query, x).view(1, attn.n_heads, 1, attn.head_dim)
    context = F.scaled_dot_product_attention(queries, keys, values, scale=1.0 / attn.scale)
    return _linear(attn.out_proj, context.reshape(1, -1))


def _decoder_block_step(block: Block, x: torch.Tensor, memory: torch.Tensor,
                        cache: KVCache, start: int) -> torch.Tensor:
    if block.post_ln:
        x = block.ln1.fused(x + _self_attention_step(block.attn, x, cache, start))
        x = block.ln2.fused(x + _cross_step(block.cross, x, memory, cache))
        return block.ln3.fused(x + _ffn_step(block.ffn, x))
    x = x + _self_attention_step(block.attn, block.ln1.fused(x), cache, start)
    x = x + _cross_step(block.cross, block.ln2.fused(x), memory, cache)
    return x + _ffn_step(block.ffn, block.ln3.fused(x))


def decoder_step(model: Transformer, token: int, cache: KVCache,
                 memory: torch.Tensor) -> torch.Tensor:
    """Logits (V,) of an encoder–decoder's next target token after the cached ones,
    reading the encoder output `memory` (1, S, C) with no source padding: what
    model(source, target=tensor([[token]]), memory=memory, cache=cache, keep=None,
    head="last")[0, -1] computes, with the same operations on (1, C) rows. Needs
    `supports(model)`."""
    cfg, start = model.cfg, cache.length
    if start + 1 > cfg.context_length:
        raise ValueError(f"{start + 1} target positions exceed the context length "
                         f"{cfg.context_length}")
    embed = model.decoder.embed
    x = embed.tok_emb.weight[token]  # (C,)
    if cfg.embed_scale:
        x = x * math.sqrt(cfg.d_model)
    if cfg.positional == "learned":
        x = x + embed.pos_emb.weight[start + cfg.pos_offset]
    elif cfg.positional == "sinusoidal":
        x = x + embed.pe[start]
    x = x[None]  # (1, C)
    if embed.ln is not None:
        x = embed.ln.fused(x)
    for block in model.decoder.blocks:
        x = _decoder_block_step(block, x, memory, cache, start)
    cache.length = start + 1
    if model.decoder.ln_f is not None:
        x = model.decoder.ln_f.fused(x)
    logits = _linear(model.lm_head, x)
    if cfg.logits_bias:
        logits = logits + model.final_logits_bias
    return logits[0]


__all__ = ["supports", "step", "decoder_step", "decoding_layout", "fuse_qkv", "fused_ok",
           "fused_weight"]
