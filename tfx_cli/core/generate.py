"""Decoding: the next-token distribution, sampling filters, the generation loop, logit lens.

Read top to bottom: sampling settings and filters (pure functions of one logits row),
the per-step record, the decoding loop with its KV cache, then the three stages
(`generate`, `next_token`, `lens`) that commands call.

Greedy decoding is seed 004's `generate_text_simple`: feed the last `context_length`
tokens, take the argmax of the last position's logits, append, repeat. With the KV cache
(the default) the prompt is fed once and each later step feeds only the newest token; the
keys and values of earlier positions come from the cache, so the logits are the same (a
test holds them within 1e-5) and each step costs one position instead of the whole text.

When the text outgrows the context, seed 004 crops it to the last `context_length`
tokens. Every position then shifts by one each step, so cached keys (computed at their
old positions) are stale: from that step on each step recomputes the cropped window
without the cache, exactly as `--no-cache` does.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..errors import ConfigError, InputTextError, RangeError, UsageError
from ..words import counted
from . import decoding
from .model import KVCache, Transformer
from .results import (Candidate, GenerateResult, GenerateSettings, Greedy, LensResult,
                      NextCandidate, NextResult, NextSettings, StepInfo)
from .trace import Trace, check_globs


# -- sampling ----------------------------------------------------------------------
@dataclass(frozen=True)
class Sampling:
    """How the next token is picked from a logits row.

    temperature 0 is greedy (argmax, seed 004). Otherwise the logits are divided by the
    temperature, cut by top-k (keep the k largest logits; ties with the k-th are kept),
    then by top-p (keep the most likely tokens until their probability reaches p; ties
    with the last one kept are kept), renormalised and sampled. The order is HF's.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


MAX_NEW_TOKENS = 100_000  # a bound that catches a typo, not one a real run meets (~1 h)


def check_new_tokens(n: int) -> None:
    if n < 1:
        raise UsageError(f"--max-new-tokens {n} must be at least 1")
    if n > MAX_NEW_TOKENS:
        raise UsageError(f"--max-new-tokens {n:,} is more than tfx generates in one run "
                         f"({MAX_NEW_TOKENS:,}); ask for fewer")


def check_sampling(sampling: Sampling, vocab_size: int | None = None) -> None:
    """One-line errors for impossible settings; the vocabulary check needs the model."""
    t, k, p = sampling.temperature, sampling.top_k, sampling.top_p
    if not math.isfinite(t) or t < 0:
        raise UsageError(f"--temperature {t} must be 0 (greedy) or a positive, finite number; "
                         "try 0.7 for mild sampling")
    if k is not None and k < 1:
        raise UsageError(f"--top-k {k} must be at least 1 (1 is greedy)")
    if k is not None and vocab_size is not None and k > vocab_size:
        raise RangeError(f"--top-k {k} is larger than the vocabulary ({vocab_size} tokens); "
                         f"use at most {vocab_size}, or leave --top-k out to keep every token")
    if p is not None and not (math.isfinite(p) and 0 < p <= 1):
        raise UsageError(f"--top-p {p} must be in (0, 1]: the probability mass to keep, "
                         "e.g. 0.9")


def top_k_mask(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """(V,) bool: the k largest logits, plus any tied with the k-th."""
    if k is None or k >= logits.shape[-1]:
        return torch.ones_like(logits, dtype=torch.bool)
    kth = torch.topk(logits, k).values[-1]
    return logits >= kth


def top_p_mask(probs: torch.Tensor, p: float | None) -> torch.Tensor:
    """(V,) bool: the most likely tokens whose mass first reaches p (the nucleus).

    Kept by threshold (every token at least as likely as the last one needed), so ties
    never depend on sort order. The most likely token is always kept.
    """
    if p is None or p >= 1:
        return torch.ones_like(probs, dtype=torch.bool)
    sorted_probs = torch.sort(probs, descending=True).values  # (V,)
    cumulative = torch.cumsum(sorted_probs, 0)
    before = torch.cat([cumulative.new_zeros(1), cumulative[:-1]])  # mass ahead of each
    needed = int((before < p).sum().clamp(min=1))
    threshold = sorted_probs[min(needed, int((probs > 0).sum())) - 1]
    return probs >= threshold


def _divide(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T with the largest logit moved to 0 first: the same softmax, and a tiny
    T (1e-320) sends the others to -inf instead of the largest to +inf (which made NaN)."""
    return (logits - logits.max()) / temperature


def tempered_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float64; T = 0 puts all mass on the argmax."""
    logits = logits.double()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.shape[-1]).double()
    return torch.softmax(_divide(logits, temperature), dim=-1)


def filter_logits(logits: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """One logits row (V,) -> (sampling distribution (V,) float64, kept (V,) bool).

    The distribution is zero outside `kept` and sums to 1 over it. With temperature 0
    the cuts are judged on softmax(logits) and the distribution is the argmax alone.
    """
    logits = logits.double()
    kept = top_k_mask(logits, sampling.top_k)
    judge_t = sampling.temperature or 1.0
    probs = torch.softmax(_divide(logits.masked_fill(~kept, float("-inf")), judge_t), dim=-1)
    kept &= top_p_mask(probs, sampling.top_p)
    if sampling.greedy:
        return tempered_probs(logits, 0), kept
    probs = probs.masked_fill(~kept, 0.0)
    return probs / probs.sum(), kept


def choose(logits: torch.Tensor, sampling: Sampling,
           generator: torch.Generator | None) -> tuple[int, float]:
    """Pick the next id; returns (id, its probability under the sampling distribution)."""
    if sampling.greedy:
        return int(logits.argmax()), 1.0  # the first of tied maxima, as torch.argmax
    probs, _ = filter_logits(logits, sampling)
    next_id = int(torch.multinomial(probs, 1, generator=generator))
    return next_id, float(probs[next_id])


# -- one decoding step -------------------------------------------------------------
@dataclass
class Step:
    """What one decoding step saw and chose. Probabilities are softmax(logits) (T = 1)."""

    position: int  # index of the new token in the full id list
    id: int
    logit: float
    prob: float
    sample_prob: float  # under the sampling distribution (1.0 when greedy)
    entropy: float  # nats, of softmax(logits) over the whole vocabulary
    candidates: list[tuple[int, float, float]]  # (id, prob, logit), most likely first
    fed: int  # positions the model computed this step (1 with a warm cache)
    context: int  # positions attended to (fed + cached)


def describe(logits: torch.Tensor, n_candidates: int) -> tuple[float, list, torch.Tensor]:
    """Entropy (nats), the top candidates and softmax(logits) of one row.

    In the logits' own precision: float64 over a 50k vocabulary would cost more per
    step than the model's layer norms, for digits nobody reads."""
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    entropy = float(-(probs * log_probs).sum())
    if math.isnan(entropy):  # a -inf logit: 0·log 0 counts as 0 (a pass spared otherwise)
        entropy = float(-(probs * log_probs).nan_to_num().sum())
    k = min(n_candidates, logits.shape[-1])
    top = torch.topk(logits, k) if k else None
    candidates = [] if top is None else [
        (int(i), float(probs[i]), float(v)) for v, i in zip(top.values, top.indices)]
    return entropy, candidates, probs


@dataclass
class Decoded:
    ids: list[int]  # prompt + new tokens
    steps: list[Step] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)  # "step.{i}.<name>"
    logits: list[torch.Tensor] = field(default_factory=list)  # per step, when kept
    stopped: str = "max_new_tokens"
    cache_used: bool = True


def _forward_last(model: Transformer, ids: list[int], cache: KVCache | None) -> tuple:
    """Logits (V,) of the last position, how many positions were fed, and the context.

    With a cache, feed only what it lacks; a single new token may see every cached key,
    so it needs no mask (and, when nothing is recorded, goes through decoding.step,
    forward's arithmetic without its taps and module calls). Past the context length,
    recompute the cropped window uncached.
    """
    C = model.cfg.context_length
    window_start = max(0, len(ids) - C)
    rope = model.cfg.rope
    if cache is not None and rope.get("rope_type") == "longrope" and \
            cache.length <= rope["original_max_position_embeddings"] < len(ids):
        # the text just outgrew the trained context: longrope's long factors now rotate
        # every position, so the keys cached with the short ones are computed again
        # (as transformers' Phi-3 generation does)
        cache.length = 0
    if cache is not None and window_start == 0:
        new = ids[cache.length:]  # (T,) the prompt at step 0, then one token
        if len(new) == 1 and decoding.supports(model):  # the lean path, same numbers
            logits = decoding.step(model, new[0], cache)
            return _on_host(logits), 1, cache.length
        keep = None if len(new) == 1 else "auto"
        logits = model(torch.tensor([new]), cache=cache, keep=keep, head="last")
        return _on_host(logits[0, -1]), len(new), cache.length
    window = ids[window_start:]  # seed 004: idx[:, -context_size:]
    logits = model(torch.tensor([window]), head="last")
    return _on_host(logits[0, -1]), len(window), len(window)


def _on_host(logits: torch.Tensor) -> torch.Tensor:
    """A logits row as sampling reads it: on the CPU (where the sampling generator
    lives) and in float32 at least (the same tensor for a float32 model on the CPU)."""
    return logits.to("cpu", torch.float32) if logits.dtype != torch.float64 else logits.cpu()


def _decoder_last(model: Transformer, source: torch.Tensor, memory: torch.Tensor,
                  ids: list[int], cache: KVCache | None) -> tuple:
    """An encoder–decoder's step: the decoder on the target ids so far (only those the
    cache lacks), reading the encoder output `memory` computed once before the loop. One
    new token with nothing recorded goes through decoding.decoder_step: forward's
    arithmetic without its taps and module calls, the same numbers."""
    if cache is not None:
        new = ids[cache.length:]
        if len(new) == 1 and decoding.supports(model):  # the lean path, same numbers
            return _on_host(decoding.decoder_step(model, new[0], cache, memory)), 1, \
                cache.length
        logits = model(source, target=torch.tensor([new]), memory=memory, cache=cache,
                       keep=None if len(new) == 1 else "auto", head="last")
        return _on_host(logits[0, -1]), len(new), cache.length
    logits = model(source, target=torch.tensor([ids]), memory=memory, head="last")
    return _on_host(logits[0, -1]), len(ids), len(ids)


# From this many new tokens on, decoding first stores the weights in the layout that
# one-token steps read fastest (decoding.decoding_layout). For gpt124m on one CPU
# thread the copies cost ~0.3 s and save ~9 ms per step, so a 32-token run about breaks
# even and longer ones gain; the model keeps the layout for later calls.
LONG_GENERATION = 32


def decode(model: Transformer, prompt: Sequence[int], *, max_new_tokens: int,
           sampling: Sampling = Sampling(), generator: torch.Generator | None = None,
           use_cache: bool = True, n_candidates: int = 5, select: Sequence[str] = (),
           should_stop: Callable[[list[int]], str | None] | None = None,
           on_step: Callable[[Step, list[int]], None] | None = None,
           keep_logits: bool = False, target: Sequence[int] | None = None) -> Decoded:
    """Append up to `max_new_tokens` ids to `prompt`; one Step per new token.

    select: trace names (globs) recorded at every step as "step.{i}.<name>".
    should_stop(ids): called after each token; a reason ("stop", "eos") ends decoding.

    An encoder–decoder reads `prompt` as the source: its encoder runs once, and the
    decoder extends `target` (default: the start id alone) token by token with its
    self-attention cached; Decoded.ids is then the target.
    """
    seq2seq = model.cfg.is_encoder_decoder
    ids = list(target if target is not None else [model.cfg.start_id]) if seq2seq \
        else list(prompt)
    # A bidirectional model's earlier positions would change as tokens are added, so a
    # cache cannot hold them: recompute every step.
    use_cache = use_cache and (model.cfg.causal or seq2seq)
    cache = None
    if use_cache:
        cache = KVCache(model.cfg, 1, min(model.cfg.context_length, len(ids) + max_new_tokens),
                        dtype=model.dtype, device=model.device)
    source = memory = None
    if seq2seq:  # a source longer than the context keeps its last positions (--truncate)
        source = torch.tensor([list(prompt)[-model.cfg.context_length:]])
        with torch.inference_mode():
            memory = model.encode(source)
    if use_cache and max_new_tokens >= LONG_GENERATION and not seq2seq:
        if model.residency.streamed:  # each part takes the layout as it is read
            model.residency.decoding_layout = True
        else:
            # normal tensors even when the caller is in inference mode: they become the
            # model's weights for good
            with torch.inference_mode(False), torch.no_grad():
                decoding.decoding_layout(model)
    out = Decoded(ids=ids, cache_used=use_cache)
    try:
        with torch.inference_mode():
            for i in range(max_new_tokens):
                if seq2seq and len(ids) >= model.cfg.context_length:
                    out.stopped = "context"  # the decoder's positions are all used
                    break
                step_trace = Trace()
                if model.residency.streamed:  # what the progress of its reads says
                    model.residency.label = f"token {i + 1} of {max_new_tokens}"
                with model.record(select, step_trace) if select else nullcontext():
                    if seq2seq:
                        logits, fed, context = _decoder_last(model, source, memory, ids,
                                                             cache)
                    else:
                        logits, fed, context = _forward_last(model, ids, cache)
                next_id, sample_prob = choose(logits, sampling, generator)
                entropy, candidates, probs = describe(logits, n_candidates)
                step = Step(position=len(ids), id=next_id, logit=float(logits[next_id]),
                            prob=float(probs[next_id]), sample_prob=sample_prob, entropy=entropy,
                            candidates=candidates, fed=fed, context=context)
                for name in step_trace.names():
                    # clone: recorded keys and values may be views into the cache's buffers
                    out.trace.add(f"step.{i}.{name}", step_trace.raw(name).clone(),
                                  step_trace.dims(name))
                if keep_logits:
                    out.logits.append(logits.clone())
                ids.append(next_id)
                out.steps.append(step)
                if on_step is not None:
                    on_step(step, ids)
                reason = should_stop(ids) if should_stop is not None else None
                if reason:
                    out.stopped = reason
                    break
    finally:
        if model.residency.streamed:
            model.residency.label = None
            model.residency.decoding_layout = False
    return out


def greedy_ids(model: Transformer, prompt: Sequence[int], max_new_tokens: int, *,
               use_cache: bool = True) -> list[int]:
    """Prompt + greedy continuation, nothing else recorded (benchmarks, tests)."""
    return decode(model, prompt, max_new_tokens=max_new_tokens, use_cache=use_cache,
                  n_candidates=0).ids


# -- streaming text ----------------------------------------------------------------
class TextTracker:
    """The continuation as text while ids arrive: what is safe to show, and the stop.

    Byte-level BPE can split one character over two tokens, so text ending in U+FFFD is
    held back until the next token completes it; text that could be the start of a stop
    string is held back until it is clearly not.
    """

    def __init__(self, decode_ids: Callable[[list[int]], str], n_prompt: int,
                 stops: Sequence[str] = ()):
        self.decode_ids, self.n_prompt = decode_ids, n_prompt
        self.stops = [s for s in stops if s]
        self.text = ""  # the continuation so far, cut at a stop string when one appears
        self.shown = 0  # characters of self.text already handed out
        self.stopped = False

    def update(self, ids: list[int]) -> str:
        """Take the id list after a step; return the new text safe to show."""
        text = self.decode_ids(ids[self.n_prompt:])
        hits = [text.find(s) for s in self.stops if s in text]
        if hits:
            self.text, self.stopped = text[:min(hits)], True
            return self.flush()
        self.text = text
        safe = len(text.rstrip("\ufffd"))
        for stop in self.stops:
            for k in range(min(len(stop) - 1, safe), 0, -1):
                if stop.startswith(text[safe - k:safe]):
                    safe -= k
                    break
        return self._take(safe)

    def flush(self) -> str:
        return self._take(len(self.text))

    def _take(self, upto: int) -> str:
        if upto <= self.shown:
            return ""
        chunk, self.shown = self.text[self.shown:upto], upto
        return chunk


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
    if tok.vocab_size < n:
        raise InputTextError(f"the model scores {n:,} tokens but the {tok.name} tokenizer "
                             f"knows only {tok.vocab_size:,}, so a predicted token could not "
                             "be shown; use the tokenizer that belongs to the model (--tokenizer)")


def prompt_ids(loaded, text: str, *, truncate: bool = False) -> list[int]:
    """The prompt's ids, whole: decoding crops to the context itself (seed 004). A prompt
    longer than the context is an error unless `truncate` (--truncate) allows the crop."""
    ids = loaded.tokenizer.encode(text)
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


def generate(loaded, text: str, *, max_new_tokens: int = 20, sampling: Sampling = Sampling(),
             use_cache: bool = True, n_candidates: int = 5, select: Sequence[str] = (),
             stops: Sequence[str] = (), on_text: Callable[[str], None] | None = None,
             truncate: bool = False, ignore_eos: bool = False,
             target: str | None = None) -> GenerateResult:
    """Decode `max_new_tokens` tokens after `text`; stream the continuation to on_text.

    Decoding stops early at a --stop text, or at one of the model's end-of-sequence
    tokens (cfg.eos_ids, from the checkpoint) unless `ignore_eos`; that token stays in
    the ids but is not part of the text. An encoder–decoder reads `text` as the source
    and writes the target from its start token (after `target`, when given): the text
    is then the target's."""
    from . import stages

    check_new_tokens(max_new_tokens)
    check_sampling(sampling)
    need_head(loaded.cfg, "generate")
    check_vocab(loaded)
    check_sampling(sampling, loaded.cfg.vocab_size)
    if select:
        check_globs(select, loaded.model.tap_names())
    ids = prompt_ids(loaded, text, truncate=truncate)
    seq = stages.read_seq(loaded, target=target)
    if loaded.cfg.is_encoder_decoder:
        seq = stages.read_seq(loaded, target=target or "")  # the start id at least
    start = seq.target  # the decoder's ids so far (encoder–decoder), else None
    # the cache holds the text so far: the prompt and the new tokens, or an
    # encoder–decoder's target so far (its source is read once, as memory)
    so_far = (len(start) if start is not None else len(ids)) + max_new_tokens
    stages.check_run(loaded, min(len(ids), loaded.cfg.context_length), select,
                     kv_len=min(loaded.cfg.context_length, so_far)
                     if use_cache and (loaded.cfg.causal or loaded.cfg.is_encoder_decoder)
                     else 0, target=min(so_far, loaded.cfg.context_length) if start else 0,
                     steps=max_new_tokens, logits_rows=1, fix=GENERATE_FIX)
    if loaded.model.residency.streamed and loaded.notice is not None:
        blocks = (f"the decoder's {counted(loaded.cfg.n_decoder_layers, 'block')} and the "
                  "head (the encoder runs once)") if loaded.cfg.is_encoder_decoder else \
            f"all {loaded.cfg.n_layers} blocks"
        loaded.notice(f"decoding a streamed model reads {blocks} from disk again for every "
                      "new token (only the KV cache stays in memory); the progress shows "
                      "each token's reads")
    seed = loaded.spec.seed
    # Sampling draws from its own generator, seeded after the weights were built, so the
    # weights never depend on whether (or how much) we sample.
    generator = torch.Generator().manual_seed(seed)
    # the text so far (an encoder–decoder's target words, without the start token)
    before = list(start[1:]) if start else ids
    tracker = TextTracker(lambda new: loaded.tokenizer.continuation(before, new),
                          len(start) if start else len(ids), stops)
    eos = () if ignore_eos else loaded.cfg.eos_ids
    ended: list[str] = []

    def on_step(step: Step, ids_now: list[int]) -> None:
        if step.id in eos:
            ended.append("eos")
            ids_now = ids_now[:-1]  # the end-of-sequence token is no text
        chunk = tracker.update(ids_now)
        if chunk and on_text is not None:
            on_text(chunk)

    def should_stop(_ids: list[int]) -> str | None:
        return "eos" if ended else "stop" if tracker.stopped else None

    decoded = decode(loaded.model, ids, max_new_tokens=max_new_tokens, sampling=sampling,
                     generator=generator, use_cache=use_cache, n_candidates=n_candidates,
                     select=select, should_stop=should_stop, on_step=on_step, target=start)
    rest = tracker.flush()
    if rest and on_text is not None:
        on_text(rest)

    def piece(i: int) -> str:
        return loaded.tokenizer.pieces([i])[0]

    settings = GenerateSettings(
        max_new_tokens=max_new_tokens, temperature=sampling.temperature,
        top_k=sampling.top_k, top_p=sampling.top_p,
        decoding="greedy" if sampling.greedy else "sample", seed=seed, stop=list(stops),
        eos_ids=list(loaded.cfg.eos_ids), ignore_eos=ignore_eos, cache=decoded.cache_used,
        candidates=n_candidates, context_length=loaded.cfg.context_length)
    if start is None:
        whole, before = text + tracker.text, len(ids)
    else:  # the target: its words so far (no start token) and what decoding added
        before = len(start)
        whole = loaded.tokenizer.decode([i for i in decoded.ids[1:] if i not in eos])
        if tracker.stopped:  # cut at the stop text, as the completion is
            after = len(loaded.tokenizer.decode(start[1:]))
            cuts = [whole.find(stop, after) for stop in stops if whole.find(stop, after) >= 0]
            whole = whole[:min(cuts)] if cuts else whole
    return GenerateResult(
        model=loaded.info, input=stages.seq_info(loaded, text, ids, seq), stack=seq.stack,
        tensors=decoded.trace, text=whole, completion=tracker.text, ids=decoded.ids,
        prompt_ids=ids if start is None else start, new_ids=decoded.ids[before:],
        stopped=decoded.stopped, settings=settings,
        steps=[step_info(s, piece) for s in decoded.steps])


def next_token(loaded, text: str, *, sampling: Sampling = Sampling(temperature=1.0),
               n_candidates: int = 10, truncate: bool = False,
               target: str | None = None) -> NextResult:
    """The distribution over the token after `text`, and what the sampling filters do;
    for an encoder–decoder, over the target word after `target` (none: the first)."""
    from . import stages

    check_sampling(sampling)
    need_head(loaded.cfg, "next")
    check_vocab(loaded)
    check_sampling(sampling, loaded.cfg.vocab_size)
    ids = prompt_ids(loaded, text, truncate=truncate)
    seq = stages.read_seq(loaded, target=target)
    if loaded.cfg.is_encoder_decoder:
        seq = stages.read_seq(loaded, target=target or "")
    cropped = ids[-loaded.cfg.context_length:]  # as generate's first step sees it
    stages.check_run(loaded, len(cropped), logits_rows=1)
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
        model=loaded.info, input=stages.seq_info(loaded, text, ids, seq), stack=seq.stack,
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
    from . import stages

    need_head(loaded.cfg, "lens")
    check_vocab(loaded)
    ids = stages.encode(loaded, text, truncate=truncate)
    model, cfg = loaded.model, loaded.cfg
    # an encoder–decoder's lens reads the decoder (its stream is what the head reads)
    seq = stages.read_seq(loaded, target=target if not cfg.is_encoder_decoder
                          else target or "")
    stack, p = seq.module, seq.prefix
    names = [p + "embed.out"] + [f"{p}blocks.{i}.resid_out" for i in range(seq.n_layers)]
    trace = stages.run(loaded, ids, names + ["logits"], validate=False, seq=seq)
    read = seq.target if seq.target is not None else ids  # the positions' tokens
    top_ids, top_probs, next_probs = [], [], []
    # one read of the final norm and the head for every layer (a streamed model would
    # otherwise fetch them from disk once per layer)
    with torch.inference_mode(), model.holding("head"):  # the decoder's ln_f is in it
        for name in names:
            resid = trace.raw(name)[None]  # (1, T, C)
            normed = stack.ln_f(resid) if stack.ln_f is not None else resid
            logits = model.unembed(normed)[0].to("cpu", torch.float64)
            probs = torch.softmax(logits, dim=-1)  # (T, V)
            best = probs.max(dim=-1)
            top_ids.append(best.indices.tolist())
            top_probs.append(best.values.tolist())
            # how likely this layer finds the token that actually comes next
            next_probs.append(probs[torch.arange(len(read) - 1), read[1:]].tolist())
        real = torch.softmax(trace.raw("logits").to("cpu", torch.float64), dim=-1).max(dim=-1)
    norm = (LENS_NORM_HELP[cfg.norm] if stack.ln_f is not None
            else "no final norm (post-LN: every block already ends in a LayerNorm)")
    return LensResult(
        model=loaded.info, input=stages.seq_info(loaded, text, ids, seq), stack=seq.stack,
        layers=["embed"] + [str(i) for i in range(seq.n_layers)], sources=names, norm=norm,
        top_ids=top_ids, top_tokens=[loaded.tokenizer.pieces(row) for row in top_ids],
        top_probs=top_probs, next_token_probs=next_probs,
        # the model's own logits: equal to the last row
        output_top_ids=real.indices.tolist())


__all__ = ["Sampling", "check_sampling", "top_k_mask", "top_p_mask", "filter_logits",
           "tempered_probs", "choose", "Step", "describe", "decode", "Decoded", "greedy_ids",
           "TextTracker", "generate", "next_token", "lens", "need_head", "EMPTY_PROMPT"]
