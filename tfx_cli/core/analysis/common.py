"""What every stage does before its own work: encode the text (and an encoder–decoder's
target), check the run against the memory budget, and run the forward pass recording only
the names asked for."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from ...errors import InputTextError, RangeError, UsageError
from ...words import counted
from ..load import Loaded
from ..memory import DTYPES
from ..params import estimate_bytes
from ..results import InputInfo
from ..trace import Trace, check_globs, compile_globs


def encode(loaded: Loaded, text: str, *, truncate: bool = False,
           bos: bool = False) -> list[int]:
    """The text's ids, within the context (`truncate` keeps the last ones). `bos`: the ids
    tfx graph runs, a special token first when the text starts with none (with_bos), the
    context's room counted with it."""
    ids = loaded.tokenizer.encode(text)
    note = loaded.tokenizer.input_note(text)
    if note and loaded.notice is not None:
        loaded.notice(note)
    if not ids:
        raise InputTextError("the text has no tokens; give at least one word")
    if bos:
        ids = with_bos(loaded, ids, truncate=truncate)
    limit = loaded.cfg.context_length
    if len(ids) > limit:
        if not truncate:
            raise InputTextError(f"the text is {len(ids)} tokens but the context length is "
                                 f"{limit}; shorten it or pass --truncate to keep the last "
                                 f"{limit} tokens")
        ids = ids[-limit:]  # as seed 004's generate crops its context
    too_big = [i for i in ids if i >= loaded.cfg.vocab_size]
    if too_big:
        raise InputTextError(f"token id {too_big[0]} is outside the model's vocabulary of "
                             f"{loaded.cfg.vocab_size}; use the tokenizer that matches the model")
    return ids


def with_bos(loaded: Loaded, ids: list[int], *, truncate: bool = False) -> list[int]:
    """ids with a special token first when they start with none (circuit-tracer's
    ensure_tokenized: its first special id that is not 0): transcoder features are never
    read at position 0, so the text's first token gets its own. `tfx graph` runs these
    ids, and `next`/`generate` with --transcoders run the same, so positions agree.
    Unchanged when the tokenizer has no special token. The whole must fit the context:
    `truncate` keeps the token put first and the text's last tokens."""
    specials = getattr(loaded.tokenizer, "special_ids", ())
    special = sorted(i for i in specials if i)
    if not ids or ids[0] in specials or not special:
        return list(ids)
    limit = loaded.cfg.context_length
    if len(ids) + 1 > limit:
        if not truncate:
            piece = loaded.tokenizer.pieces([special[0]])[0]
            raise InputTextError(f"the text is {len(ids)} tokens, {len(ids) + 1} with the "
                                 f"{piece} put first, but the context length is {limit}; "
                                 f"shorten it or pass --truncate to keep the last "
                                 f"{limit - 1} tokens")
        ids = ids[len(ids) - (limit - 1):]
    return [special[0]] + list(ids)


def bos_note(loaded: Loaded, ids: list[int], own: list[int]) -> None:
    """Say that with_bos put a token first (`own`: the text's ids as encoded)."""
    if ids[:1] != own[:1] and loaded.notice is not None:
        piece = loaded.tokenizer.pieces(ids[:1])[0]
        loaded.notice(f"{piece} put first (position 0), as tfx graph runs the text; "
                      f"the text's tokens are positions 1 to {len(ids) - 1}, as the graph "
                      "numbers them")


def input_info(loaded: Loaded, text: str, ids: list[int]) -> InputInfo:
    return InputInfo(text=text, tokens=loaded.tokenizer.pieces(ids), ids=list(ids))


def check_range(noun: str, value: int | None, n: int, option: str,
                plural: str | None = None) -> None:
    """`value` must index one of the model's `n` nouns ("layer": "12 layers", "1 layer")."""
    if value is not None and not 0 <= value < n:
        raise RangeError(f"{option} {value} is out of range: this model has "
                         f"{counted(n, noun, plural)} (0 to {n - 1})")


def run(loaded: Loaded, ids: list[int], select: Iterable[str], *, keep="auto",
        stop_after: int | None = None, validate: bool = True, seq: Seq | None = None,
        **kw) -> Trace:
    """One forward pass recording the names that match `select`. `seq`: an
    encoder–decoder's target and the stack stop_after counts in."""
    select = list(select)
    if validate:
        check_globs(select, loaded.model.tap_names())
    if seq is not None and seq.stack is not None:
        kw.update(stack=seq.stack, target=None if seq.target is None
                  else torch.tensor([seq.target]))
    head = kw.get("head", "all")
    target = len(seq.target) if seq is not None and seq.target is not None else 0
    rows = target or len(ids)  # the head reads the decoder's positions when there is one
    check_run(loaded, len(ids), select, target=target,
              logits_rows=0 if stop_after is not None or head == "none" else 1
              if head == "last" else rows)
    with loaded.model.record(select) as trace, torch.inference_mode():
        loaded.model(torch.tensor([ids]), keep=keep, stop_after=stop_after, **kw)
    return trace


# -- encoder-decoder input -------------------------------------------------------------
@dataclass
class Seq:
    """Which stack a stage shows and what it reads: for an encoder–decoder, the
    decoder's target ids (its start id first) when --target is given; the model's one
    stack (prefix "") for every other model."""

    stack: str | None  # "encoder" | "decoder" | None (one stack)
    prefix: str  # trace-name prefix of that stack: "", "encoder.", "decoder."
    module: object  # holds its embed, blocks and ln_f
    target: list[int] | None = None
    target_text: str | None = None

    @property
    def n_layers(self) -> int:
        return len(self.module.blocks)


def read_seq(loaded: Loaded, *, target: str | None = None, stack: str | None = None,
             cross: bool = False, truncate: bool = False) -> Seq:
    """Check --target/--stack/--cross against the model and encode the target. A target
    longer than the context is an error, or with `truncate` (--truncate, which crops the
    source too) its start token and last tokens are kept."""
    cfg, model = loaded.cfg, loaded.model
    if not cfg.is_encoder_decoder:
        for given, option in ((target is not None, "--target"), (stack is not None, "--stack"),
                              (cross, "--cross")):
            if given:
                raise UsageError(f"{option} needs an encoder–decoder model (a decoder that "
                                 f"reads an encoder); {cfg.name} has one stack: drop "
                                 f"{option}, or use --config toy or vaswani")
        return Seq(None, "", model)
    if stack not in (None, "encoder", "decoder"):
        raise UsageError(f"--stack {stack!r} is not a stack; valid: encoder, decoder")
    if cross and target is None:
        raise UsageError("--cross shows the decoder's cross-attention, which needs the "
                         "decoder's input: give it with --target TEXT")
    which = stack or ("decoder" if target is not None else "encoder")
    if which == "decoder" and target is None:
        raise UsageError("--stack decoder needs the decoder's input: give it with "
                         "--target TEXT")
    if cross and which != "decoder":
        raise UsageError("--cross is the decoder's cross-attention: drop --stack encoder")
    module, prefix = model.stack(which)
    ids = None
    if target is not None:
        # the decoder goes on from the target: no end token after it (BART's </s>)
        ids = [cfg.start_id] + (loaded.tokenizer.encode_prefix(target) if target.strip()
                                else [])
        if len(ids) > cfg.context_length:
            if not truncate:
                raise InputTextError(
                    f"the target is {len(ids)} tokens with the start token, but the context "
                    f"length is {cfg.context_length}; shorten it or pass --truncate to keep "
                    f"the start token and the last {cfg.context_length - 1}")
            ids = ids[:1] + ids[len(ids) - cfg.context_length + 1:]
        bad = [i for i in ids if i >= cfg.vocab_size]
        if bad:
            raise InputTextError(f"target token id {bad[0]} is outside the model's "
                                 f"vocabulary of {cfg.vocab_size}")
    return Seq(which, prefix, module, ids, target)


def seq_info(loaded: Loaded, text: str, ids: list[int], seq: Seq) -> InputInfo:
    """The input object: the source text, and the decoder's target when there is one."""
    info = input_info(loaded, text, ids)
    if seq.target is not None:
        info.target = input_info(loaded, seq.target_text, seq.target)
    return info


RUN_FIX = "raise --max-memory, record fewer tensors (--select), or give a shorter text"


def check_run(loaded: Loaded, T: int, select: Iterable[str] = (), *, kv_len: int = 0,
              steps: int = 1, logits_rows: int | None = None, fix: str = RUN_FIX,
              target: int = 0) -> None:
    """Refuse, before anything is allocated, a run its budget cannot hold: the weights
    held at once (the whole model, or a streamed model's largest part), the KV cache,
    the tensors recorded (`steps` times, as float32, what the output holds) and one
    block's working space (activations, the T x S scores, the logits rows)."""
    budget = loaded.budget
    if budget is None or not budget.known or budget.force:
        return
    cfg, model = loaded.cfg, loaded.model
    size = DTYPES[loaded.spec.dtype]
    streamed = model.residency.streamed
    weights = model.residency.largest[1] if streamed else estimate_bytes(cfg) // 4 * size
    S = max(T, kv_len)
    dims = {"T": T, "S": S, "C": cfg.d_model, "H": cfg.n_heads, "D": cfg.head_dim,
            "F": cfg.d_ff, "V": cfg.vocab_size, "A": cfg.attn_dim,
            # mixtures of experts and latent attention (MoE taps, MLA's latents)
            "E": cfg.n_experts or 1, "k": cfg.experts_per_token or 1, "Dv": cfg.v_dim,
            "Ckv": cfg.kv_lora_rank or 1, "Cq": cfg.q_lora_rank or 1}
    # an encoder–decoder's decoder (and the logits) run over the `target` positions, its
    # keys over the source or the target
    decoder = {**dims, "T": target, "S": max(S, target)} if target else dims
    chosen = compile_globs(list(select))
    recorded = steps * sum(
        4 * math.prod((decoder if name.startswith(("decoder.", "logits")) else dims).get(d, 1)
                      for d in tap.dims)
        for name, tap in model.taps.items() if chosen.match(name))
    T, S = max(T, target), max(S, target)
    # the cache holds the decoder's self-attention in an encoder–decoder
    kv = 2 * (cfg.n_decoder_layers or cfg.n_layers) * cfg.n_kv_heads * cfg.head_dim * kv_len \
        * size
    rows = T if logits_rows is None else logits_rows
    work = (size * T * (6 * cfg.d_model + 3 * cfg.attn_dim + 3 * cfg.d_ff)
            + 4 * 2 * cfg.n_heads * T * S + (size + 8) * rows * cfg.vocab_size)
    need = weights + kv + recorded + work
    if not budget.fits(need):
        held = "the largest part of the weights" if streamed else "the weights"
        raise budget.refuse(f"this run ({counted(T, 'token')})", need,
                            {held: weights, "the KV cache": kv, "recorded tensors": recorded,
                             "working space": work}, fix)


__all__ = ["encode", "input_info", "check_range", "run", "Seq", "read_seq", "seq_info",
           "check_run", "RUN_FIX"]
