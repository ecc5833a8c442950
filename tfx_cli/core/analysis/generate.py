"""The decoding stages that commands call: `generate` (token by token, greedy or
sampled, with the KV cache), `next_token` (the distribution after a text and what the
sampling filters keep) and `lens` (the logit lens: every layer read through the final
norm and the head)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ...errors import ConfigError, InputTextError
from ...words import counted
from ..results import (Candidate, GenerateResult, GenerateSettings, Greedy, LensResult,
                       NextCandidate, NextResult, NextSettings, StepInfo)
from ..model import finite
from ..progress import after, blocks
from ..trace import check_globs
from .common import bos_note, check_run, encode, read_seq, run, seq_info, with_bos
from .decode import Step, TextTracker, decode
from .fillmask import fill_mask, mask_positions, need_causal, own_token_probs
from .sampling import (Sampling, check_new_tokens, check_sampling, describe, filter_logits,
                       tempered_probs)


# -- stages ------------------------------------------------------------------------
EMPTY_PROMPT = ("the prompt has no tokens; a GPT predicts each token from the ones before "
                "it, so it needs at least one to start from, e.g. \"Hello\"")


def need_head(cfg, command: str) -> None:
    """Refuse, before loading any weights, a model that cannot predict tokens."""
    if not cfg.lm_head:
        raise ConfigError(f"{cfg.name} has no output head (lm_head), so it predicts no "
                          f"tokens and `tfx {command}` cannot run it; use a GPT config, e.g. "
                          "--config gpt2, or --weights smollm2")


def check_vocab(loaded) -> None:
    """Every id the head can score must be one the tokenizer can write back as text."""
    tok, n = loaded.tokenizer, loaded.cfg.vocab_size
    if tok.vocab_size < n and loaded.cfg.mlm_head and not loaded.spec.weights:
        # a masked LM's random weights whose own tokenizer does not ship (ModernBERT):
        # name one that does and has a mask token
        raise InputTextError(f"{loaded.cfg.name}'s random weights score {n:,} tokens but "
                             f"the {tok.name} tokenizer knows only {tok.vocab_size:,}, and "
                             f"{loaded.cfg.name}'s own tokenizer does not ship with tfx; "
                             "pass --tokenizer minilm (BERT's WordPiece with [MASK]: the "
                             "random table takes its size), or --tokenizer "
                             "PATH/tokenizer.json of the model's own")
    if tok.vocab_size < n:
        raise InputTextError(f"the model scores {n:,} tokens but the {tok.name} tokenizer "
                             f"knows only {tok.vocab_size:,}, so a predicted token could not "
                             "be shown; use the tokenizer that belongs to the model (--tokenizer)")


def prompt_ids(loaded, text: str, *, truncate: bool = False, bos: bool = False) -> list[int]:
    """The prompt's ids, whole: decoding crops to the context itself (seed 004). A prompt
    longer than the context is an error unless `truncate` (--truncate) allows the crop.
    `bos`: the ids tfx graph runs (a special token first when the text starts with none),
    said on the notice line when one is put first."""
    ids = loaded.tokenizer.encode(text)
    if bos and ids:
        ids, own = with_bos(loaded, ids, truncate=truncate), ids
        bos_note(loaded, ids, own)
    if not ids:
        raise InputTextError(EMPTY_PROMPT)
    limit = loaded.cfg.context_length
    if len(ids) > limit and not truncate:
        raise InputTextError(f"the prompt is {len(ids)} tokens but the context length is "
                             f"{limit}; shorten it or pass --truncate to keep the last "
                             f"{limit} tokens")
    too_big = [i for i in ids if i >= loaded.cfg.vocab_size]
    if too_big:
        raise InputTextError(f"token id {too_big[0]} is outside the model's vocabulary of "
                             f"{loaded.cfg.vocab_size}; use the tokenizer that matches the model")
    return ids


def step_info(step: Step, piece: Callable[[int], str]) -> StepInfo:
    return StepInfo(position=step.position, id=step.id, token=piece(step.id),
                    logit=step.logit, prob=step.prob, sample_prob=step.sample_prob,
                    entropy=step.entropy, fed=step.fed, context=step.context,
                    candidates=[Candidate(id=i, token=piece(i), prob=p, logit=v)
                                for i, p, v in step.candidates])


GENERATE_FIX = ("raise --max-memory, ask for fewer tokens (--max-new-tokens), record fewer "
                "tensors (--select), or give a shorter prompt")


def _check_memory(loaded, ids: list[int], start: list[int] | None, select: Sequence[str],
                  use_cache: bool, max_new_tokens: int) -> None:
    """The run fits the memory budget: the prompt's forward, the KV cache and the
    recorded tensors of every step."""
    # the cache holds the text so far: the prompt and the new tokens, or an
    # encoder–decoder's target so far (its source is read once, as memory)
    so_far = (len(start) if start is not None else len(ids)) + max_new_tokens
    check_run(loaded, min(len(ids), loaded.cfg.context_length), select,
              kv_len=min(loaded.cfg.context_length, so_far)
              if use_cache and (loaded.cfg.causal or loaded.cfg.is_encoder_decoder)
              else 0, target=min(so_far, loaded.cfg.context_length) if start else 0,
              steps=max_new_tokens, logits_rows=1, fix=GENERATE_FIX)


def _streaming_notice(loaded) -> None:
    if loaded.model.residency.streamed and loaded.notice is not None:
        blocks = (f"the decoder's {counted(loaded.cfg.n_decoder_layers, 'block')} and the "
                  "head (the encoder runs once)") if loaded.cfg.is_encoder_decoder else \
            f"all {loaded.cfg.n_layers} blocks"
        loaded.notice(f"decoding a streamed model reads {blocks} from disk again for every "
                      "new token (only the KV cache stays in memory); the progress shows "
                      "each token's reads")


class _Continuation:
    """The text decoding writes, streamed to `on_text` as it grows: it ends at an
    end-of-sequence token (which is no text) or at a stop text."""

    def __init__(self, loaded, ids: list[int], start: list[int] | None,
                 stops: Sequence[str], eos: Sequence[int],
                 on_text: Callable[[str], None] | None) -> None:
        # the text so far (an encoder–decoder's target words, without the start token)
        before = list(start[1:]) if start else ids
        self.tracker = TextTracker(lambda new: loaded.tokenizer.continuation(before, new),
                                   len(start) if start else len(ids), stops)
        self.eos, self.on_text = eos, on_text
        self.ended: list[str] = []

    def on_step(self, step: Step, ids_now: list[int]) -> None:
        if step.id in self.eos:
            self.ended.append("eos")
            ids_now = ids_now[:-1]  # the end-of-sequence token is no text
        chunk = self.tracker.update(ids_now)
        if chunk and self.on_text is not None:
            self.on_text(chunk)

    def should_stop(self, _ids: list[int]) -> str | None:
        return "eos" if self.ended else "stop" if self.tracker.stopped else None

    def flush(self) -> None:
        rest = self.tracker.flush()
        if rest and self.on_text is not None:
            self.on_text(rest)


def _whole_text(loaded, text: str, ids: list[int], start: list[int] | None, decoded,
                tracker: TextTracker, eos: Sequence[int],
                stops: Sequence[str]) -> tuple[str, int]:
    """The whole text after decoding and where the new ids begin: the prompt and its
    completion, or an encoder–decoder's target words (cut at a stop text)."""
    if start is None:
        return text + tracker.text, len(ids)
    # the target: its words so far (no start token) and what decoding added
    whole = loaded.tokenizer.decode([i for i in decoded.ids[1:] if i not in eos])
    if tracker.stopped:  # cut at the stop text, as the completion is
        done = len(loaded.tokenizer.decode(start[1:]))
        cuts = [whole.find(stop, done) for stop in stops if whole.find(stop, done) >= 0]
        whole = whole[:min(cuts)] if cuts else whole
    return whole, len(start)


def generate(loaded, text: str, *, max_new_tokens: int = 20, sampling: Sampling = Sampling(),
             use_cache: bool = True, n_candidates: int = 5, select: Sequence[str] = (),
             stops: Sequence[str] = (), on_text: Callable[[str], None] | None = None,
             truncate: bool = False, ignore_eos: bool = False,
             target: str | None = None, bos: bool = False) -> GenerateResult:
    """Decode `max_new_tokens` tokens after `text`; stream the continuation to on_text.

    Decoding stops early at a --stop text, or at one of the model's end-of-sequence
    tokens (cfg.eos_ids, from the checkpoint) unless `ignore_eos`; that token stays in
    the ids but is not part of the text. An encoder–decoder reads `text` as the source
    and writes the target from its start token (after `target`, when given): the text
    is then the target's. `bos`: the prompt's ids are tfx graph's (prompt_ids)."""
    check_new_tokens(max_new_tokens)
    check_sampling(sampling)
    need_head(loaded.cfg, "generate")
    need_causal(loaded.cfg, "generate")
    check_vocab(loaded)
    check_sampling(sampling, loaded.cfg.vocab_size)
    if select:
        check_globs(select, loaded.model.tap_names())
    ids = prompt_ids(loaded, text, truncate=truncate, bos=bos)
    seq = read_seq(loaded, truncate=truncate, target=target)
    if loaded.cfg.is_encoder_decoder:
        seq = read_seq(loaded, truncate=truncate, target=target or "")  # the start id at least
    start = seq.target  # the decoder's ids so far (encoder–decoder), else None
    _check_memory(loaded, ids, start, select, use_cache, max_new_tokens)
    _streaming_notice(loaded)
    seed = loaded.spec.seed
    # Sampling draws from its own generator, seeded after the weights were built, so the
    # weights never depend on whether (or how much) we sample.
    generator = torch.Generator().manual_seed(seed)
    eos = () if ignore_eos else loaded.cfg.eos_ids
    written = _Continuation(loaded, ids, start, stops, eos, on_text)
    decoded = decode(loaded.model, ids, max_new_tokens=max_new_tokens, sampling=sampling,
                     generator=generator, use_cache=use_cache, n_candidates=n_candidates,
                     select=select, should_stop=written.should_stop,
                     on_step=written.on_step, target=start)
    written.flush()

    def piece(i: int) -> str:
        return loaded.tokenizer.pieces([i])[0]

    settings = GenerateSettings(
        max_new_tokens=max_new_tokens, temperature=sampling.temperature,
        top_k=sampling.top_k, top_p=sampling.top_p,
        decoding="greedy" if sampling.greedy else "sample", seed=seed, stop=list(stops),
        eos_ids=list(loaded.cfg.eos_ids), ignore_eos=ignore_eos, cache=decoded.cache_used,
        candidates=n_candidates, context_length=loaded.cfg.context_length)
    whole, before = _whole_text(loaded, text, ids, start, decoded, written.tracker, eos,
                                stops)
    return GenerateResult(
        model=loaded.info, input=seq_info(loaded, text, ids, seq), stack=seq.stack,
        tensors=decoded.trace, text=whole, completion=written.tracker.text, ids=decoded.ids,
        prompt_ids=ids if start is None else start, new_ids=decoded.ids[before:],
        stopped=decoded.stopped, settings=settings,
        steps=[step_info(s, piece) for s in decoded.steps])


def next_token(loaded, text: str, *, sampling: Sampling = Sampling(temperature=1.0),
               n_candidates: int = 10, truncate: bool = False,
               target: str | None = None, bos: bool = False) -> NextResult:
    """The distribution over the token after `text`, and what the sampling filters do;
    for an encoder–decoder, over the target word after `target` (none: the first).
    `bos`: the ids are tfx graph's (prompt_ids)."""
    check_sampling(sampling)
    need_head(loaded.cfg, "next")
    check_vocab(loaded)
    check_sampling(sampling, loaded.cfg.vocab_size)
    if loaded.cfg.is_masked_lm:  # fill-mask: the prediction at each mask token
        read_seq(loaded, target=target)  # (--target is refused: one stack)
        return fill_mask(loaded, text, sampling=sampling, n_candidates=n_candidates,
                         truncate=truncate)
    ids = prompt_ids(loaded, text, truncate=truncate, bos=bos)
    seq = read_seq(loaded, truncate=truncate, target=target)
    if loaded.cfg.is_encoder_decoder:
        seq = read_seq(loaded, truncate=truncate, target=target or "")
    cropped = ids[-loaded.cfg.context_length:]  # as generate's first step sees it
    check_run(loaded, len(cropped), logits_rows=1)
    extra = {} if seq.target is None else {"target": torch.tensor([seq.target])}
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([cropped]), head="last", **extra)[0, -1]
        logits = logits.to("cpu", torch.float64)  # (V,)
    entropy, top, probs = describe(logits, n_candidates)
    tempered = tempered_probs(logits, sampling.temperature)
    final, kept = filter_logits(logits, sampling)
    pieces = loaded.tokenizer.pieces([i for i, _, _ in top])
    rows = [NextCandidate(rank=r + 1, id=i, token=tok, logit=v, prob=p,
                          tempered_prob=float(tempered[i]), kept=bool(kept[i]),
                          final_prob=float(final[i]))
            for r, ((i, p, v), tok) in enumerate(zip(top, pieces))]
    greedy = int(logits.argmax())
    position = len(ids) if seq.target is None else len(seq.target)
    return NextResult(
        model=loaded.info, input=seq_info(loaded, text, ids, seq), stack=seq.stack,
        position=position, context=len(cropped) if seq.target is None else position,
        entropy=entropy,
        greedy=Greedy(id=greedy, token=loaded.tokenizer.pieces([greedy])[0],
                      prob=float(probs[greedy])),
        kept_tokens=int(kept.sum()), kept_mass=float(tempered[kept].sum()),
        settings=NextSettings(temperature=sampling.temperature, top_k=sampling.top_k,
                              top_p=sampling.top_p, candidates=n_candidates),
        candidates=rows)


LENS_NORM_HELP = {
    "layernorm": "ln_f, the final LayerNorm with its learned scale and shift",
    "rmsnorm": "ln_f, the final RMSNorm with its learned scale",
}


def lens(loaded, text: str, *, truncate: bool = False,
         target: str | None = None) -> LensResult:
    """Logit lens: read every layer's residual stream through the model's own output.

    Row "embed" is embed.out; row i is blocks.{i}.resid_out. Each goes through ln_f (with
    its learned weights) and lm_head, exactly as the last layer does, so the last row is
    the model's real output. Post-LN models have no ln_f: their blocks already end in a
    LayerNorm, so the head reads each row directly.
    """
    need_head(loaded.cfg, "lens")
    check_vocab(loaded)
    ids = encode(loaded, text, truncate=truncate)
    model, cfg = loaded.model, loaded.cfg
    # an encoder–decoder's lens reads the decoder (its stream is what the head reads)
    seq = read_seq(loaded, truncate=truncate, target=target if not cfg.is_encoder_decoder
                          else target or "")
    stack, p = seq.module, seq.prefix
    names = [p + "embed.out"] + [f"{p}blocks.{i}.resid_out" for i in range(seq.n_layers)]
    masked = cfg.is_masked_lm  # each row through the MLM head; its masks, if any
    masks = mask_positions(loaded, ids, required=False) if masked else None
    with after(loaded.progress, "logit lens") as update:
        with blocks(model, update, "logit lens", (0.0, 0.5)):
            trace = run(loaded, ids, names + ["logits"], validate=False, seq=seq)
        rows = _lens_rows(loaded, trace, names, seq, ids, update, masks)
    top_ids, top_probs, next_probs, real = rows
    norm = (LENS_NORM_HELP[cfg.norm] if stack.ln_f is not None
            else "no final norm (post-LN: every block already ends in a LayerNorm)")
    if masked:
        norm += (f", then the MLM head (dense, {cfg.mlm_activation.upper()}, "
                 f"{'LayerNorm' if cfg.norm == 'layernorm' else 'RMSNorm'})")
    return LensResult(
        model=loaded.info, input=seq_info(loaded, text, ids, seq), stack=seq.stack,
        layers=["embed"] + [str(i) for i in range(seq.n_layers)], sources=names, norm=norm,
        top_ids=top_ids, top_tokens=[loaded.tokenizer.pieces(row) for row in top_ids],
        top_probs=top_probs, next_token_probs=None if masked else next_probs,
        # the model's own logits: equal to the last row
        output_top_ids=real.indices.tolist(), token_probs=next_probs if masked else None,
        mask_positions=masks)


def _lens_rows(loaded, trace, names: list[str], seq, ids: list[int], update,
               masks: list[int] | None = None) -> tuple:
    """Every lens row: each stream through the final norm and the head; the most likely
    token and its probability per position, and how likely the real next token is (a
    masked LM's: how likely each position's own token is, `masks` its mask positions)."""
    model, stack = loaded.model, seq.module
    read = seq.target if seq.target is not None else ids  # the positions' tokens
    top_ids, top_probs, next_probs = [], [], []
    # one read of the final norm and the head for every layer (a streamed model would
    # otherwise fetch them from disk once per layer)
    with torch.inference_mode(), model.holding("head"):  # the decoder's ln_f is in it
        for name in names:
            resid = trace.raw(name)[None]  # (1, T, C)
            normed = stack.ln_f(resid) if stack.ln_f is not None else resid
            logits = model.unembed(normed)[0]
            finite.require(model, logits, f"the lens row of {name} (through the final norm "
                           "and the head)")
            logits = logits.to("cpu", torch.float64)
            probs = torch.softmax(logits, dim=-1)  # (T, V)
            best = probs.max(dim=-1)
            top_ids.append(best.indices.tolist())
            top_probs.append(best.values.tolist())
            if loaded.cfg.is_masked_lm:  # how likely this layer finds each position's token
                next_probs.append(own_token_probs(probs, ids, masks))
            else:  # how likely this layer finds the token that actually comes next
                next_probs.append(probs[torch.arange(len(read) - 1), read[1:]].tolist())
            update(0.5 + 0.5 * len(top_ids) / len(names),
                   f"logit lens: row {len(top_ids)} of {len(names)}")
        real = torch.softmax(trace.raw("logits").to("cpu", torch.float64), dim=-1).max(dim=-1)
    return top_ids, top_probs, next_probs, real


__all__ = ["generate", "next_token", "lens", "need_head", "check_vocab", "prompt_ids"]
