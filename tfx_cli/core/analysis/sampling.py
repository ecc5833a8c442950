"""Sampling settings and filters: pure functions of one logits row (temperature, top-k,
top-p, the choice, and a row's entropy and most likely candidates)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import RangeError, UsageError


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


__all__ = ["Sampling", "MAX_NEW_TOKENS", "check_new_tokens", "check_sampling", "top_k_mask",
           "top_p_mask", "tempered_probs", "filter_logits", "choose", "describe"]
