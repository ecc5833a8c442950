"""The one transformer, built from ModelConfig switches, with a Tap at every intermediate.

Read top to bottom: Tap, norms, positions, attention, feed-forward, block, model.

Every intermediate passes through a `Tap`, an identity module; its public name is its
path in `named_modules()` (`blocks.0.attn.pattern`), so names cannot drift from the
module tree. A Tap records only when `Transformer.record(globs)` switched it on, so a run
that asks for one layer keeps one layer in memory.

Parameter creation order follows LLMs-from-scratch's GPTModel (token embedding, position
embedding, then per block W_query, W_key, W_value, out_proj, the two feed-forward
linears, then the output head), and every module keeps PyTorch's default init, so
`torch.manual_seed(123)` followed by building `gpt124m` gives that book's exact weights.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterable

import torch
import torch.nn as nn

from ..config import ModelConfig, tied_parameters
from ..trace import Trace, compile_globs
from . import finite
from .attention import Attention, KVCache
from .feedforward import FeedForward, activate
from .mla import LatentAttention
from .moe import MoE
from .norms import NoNorm, Norm
from .positions import Embed, rope_tables, sinusoidal_table
from .taps import Tap, Taps


class InMemory:
    """Where a model's weights are: all in memory, so holding a part costs nothing.
    (core/streaming.Streamed keeps them on disk and reads each part while it runs.)

    Parts: "embed" (the embedding tables and their norm), "blocks.{i}", and "head" (the
    final norm and the output head)."""

    streamed = False

    def holding(self, *parts: str):
        return nullcontext()

    def reading(self):
        return nullcontext()  # a streamed model shows its reads as progress here


def attention_class(cfg: ModelConfig) -> type[Attention]:
    """The self-attention a block builds: latent attention (mla.py) where the config has
    a key/value latent (DeepSeek-V3), else the one Attention. Cross-attention is always
    the latter."""
    return LatentAttention if cfg.is_mla else Attention


class Block(nn.Module):
    """One transformer block: attention then feed-forward, each with its residual add.

    pre-LN (GPT, Llama):  x + attn(ln1(x)), then + ffn(ln2(x))
    post-LN (seed 000, BERT):  ln1(x + attn(x)), then ln2(x + ffn(x))
    sandwich (Gemma 2/3):  x + ln_post_attn(attn(ln1(x))), then + ln_post_ffn(ffn(ln2(x)))
    parallel (GPT-NeoX):  x + attn(ln1(x)) + ffn(ln2(x)), both reading the block's input

    A decoder block of an encoder–decoder (cross=True) has three sublayers: masked
    self-attention (ln1), cross-attention on the encoder output (`cross`, ln2) and the
    feed-forward (ln3), each with its add & norm, post-LN as in the paper or pre-LN.
    """

    def __init__(self, cfg: ModelConfig, layer: int, *, cross: bool = False):
        super().__init__()
        self.post_ln = cfg.norm_position == "post"
        self.parallel, self.sandwich = cfg.parallel_residual, cfg.sandwich_norm
        self.has_cross = cross
        # OLMo 2 has no norm before its sublayers, ModernBERT none before block 0's
        # attention: the stream passes through unchanged there
        self.ln1 = Norm(cfg) if cfg.pre_norms and (layer or cfg.first_block_norm) \
            else NoNorm()
        # a decoder block's self-attention (and a causal model's) sees no later key
        self.attn = attention_class(cfg)(cfg, layer, bidirectional=not (cross or cfg.causal))
        if self.sandwich:
            self.ln_post_attn = Norm(cfg)
        if not self.parallel:  # a parallel block has no stream between its sublayers
            self.resid_mid = Tap("T", "C")
        self.ln2 = Norm(cfg) if cfg.pre_norms else NoNorm()
        if cross:
            self.cross = Attention(cfg, layer, cross=True)
            self.resid_cross = Tap("T", "C")
            self.ln3 = Norm(cfg)
        self.is_moe = cfg.is_moe_layer(layer) and not cross
        if self.is_moe:  # a router and experts in place of the FFN (core/model/moe.py)
            self.moe = MoE(cfg, layer)
        else:
            self.ffn = FeedForward(cfg)
        if self.sandwich:
            self.ln_post_ffn = Norm(cfg)
        self.resid_out = Tap("T", "C")

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, *,
                memory: torch.Tensor | None = None, memory_keep: torch.Tensor | None = None,
                **attn_kw) -> torch.Tensor:
        """memory, memory_keep: the encoder output (B, S, C) and which of its positions
        the cross-attention may read (decoder blocks only)."""
        if self.has_cross:
            return self._decoder_block(x, keep, memory, memory_keep, attn_kw)
        if self.post_ln:  # LayerNorm(x + Sublayer(x)), the original encoder (seed 000)
            x = self.resid_mid(self.ln1(x + self.attn(x, keep, **attn_kw)))
            return self.resid_out(self.ln2(x + self.feed_forward(x)))
        if self.parallel:
            attended = self.attn(self.ln1(x), keep, **attn_kw)
            return self.resid_out(x + attended + self.feed_forward(self.ln2(x)))
        attended = self.attn(self.ln1(x), keep, **attn_kw)
        if self.sandwich:
            attended = self.ln_post_attn(attended)
        x = self.resid_mid(x + attended)
        fed = self.feed_forward(self.ln2(x))
        if self.sandwich:
            fed = self.ln_post_ffn(fed)
        return self.resid_out(x + fed)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's FFN: the dense one, or the mixture of experts of an MoE layer."""
        return self.moe(x) if self.is_moe else self.ffn(x)

    def _decoder_block(self, x, keep, memory, memory_keep, attn_kw) -> torch.Tensor:
        cache = attn_kw.get("cache")
        if self.post_ln:
            x = self.resid_mid(self.ln1(x + self.attn(x, keep, **attn_kw)))
            x = self.resid_cross(self.ln2(x + self.cross(x, memory_keep, kv_x=memory,
                                                         cache=cache)))
            return self.resid_out(self.ln3(x + self.ffn(x)))
        x = self.resid_mid(x + self.attn(self.ln1(x), keep, **attn_kw))
        x = self.resid_cross(x + self.cross(self.ln2(x), memory_keep, kv_x=memory,
                                            cache=cache))
        return self.resid_out(x + self.ffn(self.ln3(x)))


class MLMHead(nn.Module):
    """A masked LM's transform between the last stream and the output head (BERT's
    cls.predictions.transform, RoBERTa's and ModernBERT's head): dense, activation, norm;
    the head (the token table, tied) and its bias follow."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.activation = cfg.mlm_activation
        self.dense = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.proj_bias)
        self.hidden, self.act = Tap("T", "C"), Tap("T", "C")
        self.ln = Norm(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden(self.dense(x))  # (B, T, C)
        return self.ln(self.act(activate(self.activation, hidden)))


class Stack(nn.Module):
    """One stack of an encoder–decoder: its input ids, embedding (the token table is the
    one both stacks share), blocks and, pre-LN, final norm. Trace names get the stack's
    name in front: encoder.blocks.0.attn.pattern, decoder.blocks.0.cross.pattern."""

    def __init__(self, cfg: ModelConfig, n_blocks: int, *, cross: bool,
                 tok_emb: nn.Embedding | None = None):
        super().__init__()
        self.tokens = Taps(ids=Tap("T"))
        self.embed = Embed(cfg, tok_emb, bidirectional=not cross)
        self.blocks = nn.ModuleList(Block(cfg, i, cross=cross) for i in range(n_blocks))
        self.ln_f = Norm(cfg) if cfg.has_final_norm else None


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, blocks: int | None = None):
        """blocks=n materialises the embedding and blocks 0..n-1 only; later blocks, the
        final norm and an untied head are built on the meta device (no storage, no init).
        Modules are built in forward order and meta init draws nothing from the RNG, so
        what is built equals the whole model's values for the same seed bit for bit.

        An encoder–decoder config builds an `encoder` and a `decoder` Stack (whole) and
        one head after the decoder; every other model is one stack at the top level."""
        super().__init__()
        self.cfg = cfg
        self.encoder_runs = 0  # how often the encoder ran (decoding runs it once)
        if cfg.is_encoder_decoder:
            self.built_blocks = cfg.n_layers
            self.encoder = Stack(cfg, cfg.n_layers, cross=False)
            self.decoder = Stack(cfg, cfg.n_decoder_layers, cross=True,
                                 tok_emb=self.encoder.embed.tok_emb)
            if cfg.lm_head:  # BartModel, T5Model: none, the decoder's last stream is the output
                self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            token_table = self.encoder.embed.tok_emb
        else:
            self.built_blocks = cfg.n_layers if blocks is None else \
                max(0, min(blocks, cfg.n_layers))
            self.tokens = Taps(ids=Tap("T"))
            self.embed = Embed(cfg, bidirectional=not cfg.causal)
            self.blocks = nn.ModuleList(Block(cfg, i) for i in range(self.built_blocks))
            rest = self.built_blocks < cfg.n_layers
            with torch.device("meta") if rest else nullcontext():
                self.blocks.extend(Block(cfg, i) for i in range(self.built_blocks, cfg.n_layers))
                self.ln_f = Norm(cfg) if cfg.has_final_norm else None
                if cfg.mlm_head:
                    self.mlm = MLMHead(cfg)
                if cfg.lm_head:
                    self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head_bias)
            token_table = self.embed.tok_emb
        if cfg.lm_head and cfg.tie_embeddings:
            self.lm_head.weight = token_table.weight
        if cfg.logits_bias:  # Marian, BART: a fixed bias on every logit (not trained)
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        if cfg.final_softcap is not None:  # Gemma 2: the head's logits before the cap
            self.logits_uncapped = Tap("T", "V")
        self.logits = Tap("T", "V")
        self.taps: dict[str, Tap] = {}
        for name, module in self.named_modules():
            if isinstance(module, Tap):
                module.name = name
                self.taps[name] = module

    def stack(self, which: str | None = None) -> tuple[nn.Module, str]:
        """(module holding embed, blocks and ln_f, its trace-name prefix): the model
        itself for a single stack; the encoder or decoder of an encoder–decoder."""
        if not self.cfg.is_encoder_decoder:
            return self, ""
        which = which or "encoder"
        return getattr(self, which), which + "."

    def tied(self) -> dict[str, str]:
        """Parameters that are another one (name -> the name they share)."""
        return tied_parameters(self.cfg)

    def fill_sinusoids(self, dtype: torch.dtype | None = None, device=None) -> None:
        """Compute the sinusoidal position tables again (a non-persistent buffer: no
        checkpoint holds it, so a model built on the meta device has none)."""
        if self.cfg.positional != "sinusoidal":
            return
        cfg = self.cfg
        table = sinusoidal_table(cfg.context_length, cfg.d_model, cfg.sinusoidal_layout)
        for stack in (self.encoder, self.decoder) if cfg.is_encoder_decoder else (self,):
            stack.embed.pe = table.to(device or "cpu", dtype or torch.float32)

    def retie(self) -> None:
        """Share the tied parameters again (after load_state_dict(assign=True) replaced
        the token table)."""
        if self.cfg.is_encoder_decoder:
            self.decoder.embed.tok_emb = self.encoder.embed.tok_emb
            table = self.encoder.embed.tok_emb
        else:
            table = self.embed.tok_emb
        if self.cfg.lm_head and self.cfg.tie_embeddings:
            self.lm_head.weight = table.weight
    # -- precision, device and where the weights are -------------------------------------
    dtype = torch.float32  # of the weights and activations (norms, softmax: float32)
    device = torch.device("cpu")
    residency = InMemory()  # or core/streaming.Streamed: the weights stay on disk

    def place(self, dtype: torch.dtype | None = None, device: str | None = None) -> "Transformer":
        """Cast and move the weights; every tensor forward makes follows them (ids,
        positions, masks, rotary tables, the KV cache)."""
        self.dtype = dtype or self.dtype
        self.device = torch.device(device) if device else self.device
        if not self.residency.streamed:
            def move(t: torch.Tensor) -> torch.Tensor:  # blocks left on meta stay there
                dtype = self.dtype if t.is_floating_point() else t.dtype
                return t if t.is_meta else t.to(device=self.device, dtype=dtype)

            self._apply(move)
        return self

    def holding(self, *parts: str):
        """A context in which the named parts' weights are in memory ("embed",
        "blocks.{i}", "head"): free for a model in memory; a streamed model reads them
        from disk for the duration, unless they are held already."""
        return self.residency.holding(*parts)

    def rope_for(self, positions: torch.Tensor, *, local: bool = False) -> tuple:
        """rope_tables in the model's dtype and on its device (computed on the CPU in
        float64, as always, then rounded: half-precision models rotate by the same
        angles as float32 ones, as transformers does)."""
        cos, sin = rope_tables(positions, self.cfg, local=local)
        return cos.to(self.device, self.dtype), sin.to(self.device, self.dtype)

    # -- recording --------------------------------------------------------------------
    recording = 0  # open record() blocks; decoding.step records nothing, so it needs 0

    def tap_names(self) -> list[str]:
        return list(self.taps)

    def taps_under(self, prefix: str) -> list[Tap]:
        """The taps of one part (`blocks.3.`, `decoder.embed.`), in forward order."""
        return [tap for name, tap in self.taps.items() if name.startswith(prefix)]

    # What a NaN or infinity in this model's run should suggest, besides its dtype's
    # advice (finite.hinting adds to it: steering, training).
    finite_hints: tuple[str, ...] = ()
    # Called after each block as on_block(prefix, i, n): a long forward's progress
    # (core/progress.blocks sets it); None costs nothing.
    on_block = None

    def check_finite(self, x: torch.Tensor, where: str, part: str, rerun) -> None:
        """Stop the run if x, what the part whose taps start with `part` just computed,
        holds NaN or inf: the part runs again (rerun()) watching its taps, to name the
        first that went bad (core/model/finite.py). Values finite but too large for a
        norm are named by the variance of the norm that reads them next."""
        finite.check(self, x, where, lambda: self.taps_under(part), rerun,
                     reader=self._norm_after(where))

    def _norm_after(self, where: str) -> str | None:
        """The variance tap of the norm that reads the stream `where` (embed.out,
        blocks.{i}.resid_out, with their stack's prefix) next: block i + 1's ln1, or the
        final norm; None where that norm keeps no statistics (NoNorm)."""
        prefix, _, rest = where.rpartition("embed.out") if where.endswith("embed.out") \
            else where.partition("blocks.")
        i = -1 if where.endswith("embed.out") else int(rest.split(".")[0])
        n = len(self.blocks) if not prefix else len(getattr(self, prefix[:-1]).blocks)
        name = f"{prefix}blocks.{i + 1}.ln1.var" if i + 1 < n else f"{prefix}ln_f.var"
        return name if name in self.taps else None

    @contextmanager
    def record(self, globs: Iterable[str], trace: Trace | None = None):
        """Switch on the taps whose names match `globs`; yields the Trace they fill."""
        trace = trace if trace is not None else Trace()
        rx = compile_globs(list(globs))
        chosen = [tap for name, tap in self.taps.items() if rx.match(name)]
        for tap in chosen:
            tap.trace = trace
        self.recording += 1
        try:
            yield trace
        finally:
            self.recording -= 1
            for tap in chosen:
                tap.trace = None

    # -- forward ----------------------------------------------------------------------
    def mask(self, T: int, S: int, start: int = 0, *, causal: bool | None = None,
             valid_len: int | None = None) -> torch.Tensor | None:
        """(T, S) keep-mask: query i sits at position start + i; key j at position j."""
        causal = self.cfg.causal if causal is None else causal
        if not causal and valid_len is None:
            return None
        keep = torch.ones(T, S, dtype=torch.bool, device=self.device)
        if causal:
            q_pos = torch.arange(start, start + T, device=self.device)[:, None]
            keep &= torch.arange(S, device=self.device)[None, :] <= q_pos
        if valid_len is not None:
            keep[:, valid_len:] = False
        return keep

    def forward(self, ids: torch.Tensor, *, token_type_ids: torch.Tensor | None = None,
                cache: KVCache | None = None, keep: torch.Tensor | None | str = "auto",
                stop_after: int | None = None, head: str = "all",
                target: torch.Tensor | None = None, stack: str | None = None,
                memory: torch.Tensor | None = None,
                source_len: int | None = None) -> torch.Tensor | None:
        """ids: (B, T). Returns logits (B, T, V), or (B, 1, V) with head="last", or the
        final hidden state for models without a head; None when stopped early.

        stop_after=L runs blocks 0..L only (a command that shows layer L needs no more).

        Encoder–decoder models: ids is the source; `target` (B, T) the decoder's input
        (None: run the encoder only and return its output). `stack` says which stack
        stop_after counts in ("encoder" or "decoder", the default). `memory` is an encoder
        output already computed (decoding reuses it); `source_len` marks the source
        positions from there on as padding, hidden from the encoder's attention and the
        cross-attention. `keep` is the encoder's mask without a target, else the
        decoder's self-attention mask ("auto": causal).
        """
        if self.cfg.is_encoder_decoder:
            with self.residency.reading():
                return self._seq2seq(ids, target, cache=cache, keep=keep,
                                     stop_after=stop_after, head=head, stack=stack or "decoder",
                                     memory=memory, source_len=source_len)
        with self.residency.reading():
            return self._forward(ids, token_type_ids, cache, keep, stop_after, head)

    def _forward(self, ids, token_type_ids, cache, keep, stop_after, head):
        B, T = ids.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context_length:
            raise ValueError(f"{start + T} positions exceed the context length "
                             f"{self.cfg.context_length}")
        ids = ids.to(self.device)
        self.tokens.ids(ids)
        with self.holding("embed"):
            positions = torch.arange(start, start + T, device=self.device)
            x = self.embed(ids, positions, token_type_ids)  # (B, T, C)
            self.check_finite(x, "embed.out", "embed.",
                              lambda: self.embed(ids, positions, token_type_ids))
        if stop_after is not None and stop_after < 0:
            return None  # the embedding was all that was asked for
        context = self.attention_context(T, start=start, cache=cache, keep=keep)
        return self.run_blocks(x, context, stop_after=stop_after, head=head)

    def _seq2seq(self, ids, target, *, cache, keep, stop_after, head, stack, memory,
                 source_len) -> torch.Tensor | None:
        S = ids.shape[1]
        if memory is None:
            enc_keep = keep if target is None else "auto"
            if isinstance(enc_keep, str):
                enc_keep = self.mask(S, S, causal=False, valid_len=source_len)
            memory = self.encode(ids, keep=enc_keep,
                                 stop_after=stop_after if stack == "encoder" else None)
            if memory is None or target is None:
                return memory
        elif target is None:
            return memory
        B, T = target.shape
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.context_length:
            raise ValueError(f"{start + T} target positions exceed the context length "
                             f"{self.cfg.context_length}")
        dec = self.decoder
        target = target.to(self.device)
        dec.tokens.ids(target)
        with self.holding("decoder.embed"):
            positions = torch.arange(start, start + T, device=self.device)
            x = dec.embed(target, positions, None)
            self.check_finite(x, "decoder.embed.out", "decoder.embed.",
                              lambda: dec.embed(target, positions, None))
        if stop_after is not None and stop_after < 0:
            return None
        context = self.attention_context(T, start=start, cache=cache, keep=keep, causal=True,
                                         stack=dec)
        context["memory"] = memory
        context["memory_keep"] = None if source_len is None else \
            self.mask(T, memory.shape[1], causal=False, valid_len=source_len)
        return self.run_blocks(x, context, stop_after=stop_after if stack == "decoder" else None,
                               head=head, stack=dec)

    def encode(self, ids: torch.Tensor, *, keep: torch.Tensor | None = None,
               stop_after: int | None = None) -> torch.Tensor | None:
        """An encoder–decoder's encoder on the source ids (B, S): its output (B, S, C), the
        `memory` every decoder block's cross-attention reads; None when stopped early."""
        self.encoder_runs += 1
        S = ids.shape[1]
        if S > self.cfg.context_length:
            raise ValueError(f"{S} source positions exceed the context length "
                             f"{self.cfg.context_length}")
        enc = self.encoder
        ids = ids.to(self.device)
        enc.tokens.ids(ids)
        with self.residency.reading():
            with self.holding("encoder.embed"):
                positions = torch.arange(S, device=self.device)
                x = enc.embed(ids, positions, None)
                self.check_finite(x, "encoder.embed.out", "encoder.embed.",
                                  lambda: enc.embed(ids, positions, None))
            if stop_after is not None and stop_after < 0:
                return None
            context = self.encoder_context(S, keep)
            return self.run_blocks(x, context, stop_after=stop_after, stack=enc)

    def encoder_context(self, S: int, keep: torch.Tensor | None = None) -> dict:
        """What every encoder block's attention needs besides x: the source's keep-mask
        (None: every position) and, for T5, the stack's relative position bias."""
        context = {"keep": keep, "cache": None, "start": 0}
        self._add_position_bias(context, self.encoder, S, S, 0)
        return context

    def _add_position_bias(self, context: dict, stack: nn.Module, T: int, S: int,
                           start: int) -> None:
        """T5: the stack's relative position bias (1, H, T, S), computed once for all its
        layers (UMT5's layers compute their own)."""
        cfg = self.cfg
        if cfg.positional != "relative" or cfg.relative_per_layer:
            return
        prefix = "decoder." if stack is getattr(self, "decoder", None) else \
            "encoder." if stack is getattr(self, "encoder", None) else ""
        with self.holding(prefix + "embed"):
            context["position_bias"] = stack.embed.position_bias(T, S, start)

    def attention_context(self, T: int, *, start: int = 0, cache: KVCache | None = None,
                          keep: torch.Tensor | None | str = "auto",
                          causal: bool | None = None, stack: nn.Module | None = None) -> dict:
        """What every block's attention needs besides x: the keep-mask (the config's own
        for "auto", or causal when `causal`; sliding layers narrow it to their window
        themselves), the cache and where the new positions start, the rotary tables of
        the new positions, and T5's relative position bias. `stack`: the decoder of an
        encoder–decoder (default: the model's one stack)."""
        causal = self.cfg.causal if causal is None else causal
        attn_kw: dict = {"keep": keep, "cache": cache, "start": start}
        if isinstance(keep, str):
            attn_kw["keep"] = self.mask(T, start + T, start, causal=causal)
            attn_kw["is_causal"] = causal and start == 0  # square: query i, keys <= i
        if self.cfg.positional == "rope":
            positions = torch.arange(start, start + T)
            attn_kw["rot"] = self.rope_for(positions)
            if self.cfg.rope_local_theta is not None:
                attn_kw["rot_local"] = self.rope_for(positions, local=True)
        self._add_position_bias(attn_kw, stack if stack is not None else self, T, start + T,
                                start)
        return attn_kw

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """The head on a (normalised) residual stream: logits, soft-capped where the
        model caps them (Gemma 2); a masked LM's head transform first. Recorded as
        `logits`."""
        if self.cfg.unembed_scale:  # T5's tied head reads the stream × d_model^-0.5
            x = x * self.cfg.d_model ** -0.5
        if self.cfg.mlm_head:
            x = self.mlm(x)
        logits = self.lm_head(x)
        if self.cfg.logits_bias:
            logits = logits + self.final_logits_bias
        cap = self.cfg.final_softcap
        if cap is not None:
            logits = self.logits_uncapped(logits)
            logits = torch.tanh(logits / cap) * cap
        return logits

    def run_blocks(self, x: torch.Tensor, context: dict, *, first: int = 0,
                   stop_after: int | None = None, head: str = "all",
                   stack: nn.Module | None = None) -> torch.Tensor | None:
        """Blocks first..last on the residual stream x (B, T, C) entering block `first`,
        then the final norm and head: the rest of forward, so a run can resume from any
        block's input (activation patching starts each patched run there). `stack`: an
        encoder–decoder's encoder (which ends at its output, no head) or decoder."""
        module = self if stack is None else stack
        # the parts a streamed model reads (core/streaming.py): "blocks.{i}" and "head",
        # an encoder–decoder's prefixed with its stack
        prefix = "" if stack is None else \
            "encoder." if stack is getattr(self, "encoder", None) else "decoder."
        n = len(module.blocks)
        last = n if stop_after is None else min(stop_after, n - 1)
        if stack is None and last >= self.built_blocks and self.built_blocks < n:
            raise RuntimeError(f"this model was built with {self.built_blocks} of "
                               f"{n} blocks; build it whole to run further")
        attn_kw = dict(context)
        keep = attn_kw.pop("keep")
        for i in range(first, n):
            with self.holding(f"{prefix}blocks.{i}"):
                x_in, x = x, module.blocks[i](x, keep, **attn_kw)
                self.check_finite(x, f"{prefix}blocks.{i}.resid_out", f"{prefix}blocks.{i}.",
                                  lambda: module.blocks[i](x_in, keep, **attn_kw))
            if self.on_block is not None:
                self.on_block(prefix, i, n)
            if stop_after is not None and i >= stop_after:
                return None
        cache = context["cache"]
        if cache is not None:
            cache.length = context["start"] + x.shape[1]
        # a streamed model reads its last part only for what runs: a final norm, or the head
        ends = module.ln_f is not None or (prefix != "encoder." and self.cfg.lm_head
                                           and head != "none")
        with self.holding("encoder.ln_f" if prefix == "encoder." else "head") if ends \
                else nullcontext():
            out = self._head(x, module, stack, head)
            if out is not x:  # the final norm and/or the head ran: check what they made
                encoder = stack is not None and stack is getattr(self, "encoder", None)
                logits = self.cfg.lm_head and head != "none" and not encoder
                finite.check(self, out, "logits" if logits else f"{prefix}ln_f.out",
                             lambda: self.taps_under(f"{prefix}ln_f.") + (
                                 self.taps_under("logits") if logits else []),
                             lambda: self._head(x, module, stack, head))
            return out

    def _head(self, x: torch.Tensor, module: nn.Module, stack: nn.Module | None,
              head: str) -> torch.Tensor:
        """The end of run_blocks: the final norm (if any), then the head's logits (unless
        this is the encoder, or no head runs)."""
        if module.ln_f is not None:
            x = module.ln_f(x)
        if stack is not None and stack is getattr(self, "encoder", None):
            return x  # the memory the decoder reads
        if not self.cfg.lm_head or head == "none":
            return x
        if head == "last":
            x = x[:, -1:]
            if x.dtype == torch.bfloat16:
                # a fresh row: handed a row whose batch stride is the whole text's
                # (T * C), torch's bfloat16 matmul copies the head's whole weight
                # first (Qwen2.5-0.5B: +272 MB and 1.2 s instead of 0.04 s)
                x = x.new_empty(x.shape).copy_(x)
        return self.logits(self.unembed(x))


@torch.no_grad()
def build_model(cfg: ModelConfig, seed: int | None = 123, *, device: str | None = None,
                blocks: int | None = None, dtype: torch.dtype | None = None) -> Transformer:
    """Random weights from `seed` (PyTorch's default init); device="meta" builds no storage.
    blocks=n builds only what a forward stopping after block n-1 touches (see Transformer).
    dtype: the float32 values of the seed, rounded to it (the same init in every dtype)."""
    if device == "meta":
        with torch.device("meta"):
            return Transformer(cfg).eval()
    if seed is not None:
        torch.manual_seed(seed)
    model = Transformer(cfg, blocks).eval()
    return model.place(dtype, device) if dtype or device else model


def tap_names(cfg: ModelConfig) -> list[str]:
    """Every trace name this config produces, in forward order (no weights allocated)."""
    return build_model(cfg, device="meta").tap_names()
