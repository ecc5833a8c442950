"""Decoding: the next-token distribution, sampling filters, the generation loop, logit lens.

The per-step record, the decoding loop with its KV cache, and the text shown as it
grows. (sampling.py has the filters; generate.py the stages that commands call.)

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

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..model import KVCache, Transformer, decoding, finite
from ..trace import Trace
from .sampling import Sampling, choose, describe


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
            if not finite.is_finite(logits):  # the lean path has no taps: forward names it
                cache.length -= 1
                model(torch.tensor([new]), cache=cache, keep=None, head="last")
                raise finite.refuse(model, "logits", finite.describe(logits))
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
            logits = decoding.decoder_step(model, new[0], cache, memory)
            if not finite.is_finite(logits):  # the lean path has no taps: forward names it
                cache.length -= 1
                model(source, target=torch.tensor([new]), memory=memory, cache=cache,
                      keep=None, head="last")
                raise finite.refuse(model, "logits", finite.describe(logits))
            return _on_host(logits), 1, cache.length
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


__all__ = ["Step", "Decoded", "decode", "greedy_ids", "TextTracker", "LONG_GENERATION"]
