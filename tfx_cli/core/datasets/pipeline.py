"""The pipeline: windows -> batches -> an engine -> partial results in batch order.

`Plan` is what fixes the batches (context, batch size, token cap, chunk size); `run`
walks the corpus, skips what a resumed run has done, hands the rest to the engine and
passes each (batch, partial) on in order, with progress (documents, tokens, tokens/s,
ETA) through the factory the caller gave, and returns the `Counts` of what it read.
`mapped` is the engine loop itself, for batches planned elsewhere (patch --pairs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ...errors import RangeError, UsageError
from ..progress import counting
from .corpus import Corpus
from .engines import Engine, WorkerSpec, get_engine
from .windows import Window, batches, chunks, windows

MAX_DEFAULT_CTX = 1024


@dataclass(frozen=True)
class Plan:
    ctx: int
    batch_size: int
    max_tokens: int | None
    chunk_tokens: int

    def options(self) -> dict:
        return {"ctx": self.ctx, "batch_size": self.batch_size, "max_tokens": self.max_tokens}


def make_plan(cfg, *, ctx: int | None, batch_size: int, max_tokens: int | None,
              chunk_tokens: int | None = None) -> Plan:
    if ctx is None:
        ctx = min(cfg.context_length, MAX_DEFAULT_CTX)
    if ctx < 1:
        raise RangeError(f"--ctx {ctx} must be at least 1 token")
    if ctx > cfg.context_length:
        raise RangeError(f"--ctx {ctx} is longer than the model's context of "
                         f"{cfg.context_length:,} tokens; pass --ctx {cfg.context_length} "
                         "or less")
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size} must be at least 1")
    if max_tokens is not None and max_tokens < 1:
        raise UsageError(f"--max-tokens {max_tokens} must be at least 1")
    full = 8 * batch_size * ctx
    return Plan(ctx, batch_size, max_tokens, max(ctx, min(full, chunk_tokens or full)))


@dataclass
class Counts:
    """What a run has read. tokens, windows and documents: the corpus read in whole
    chunks, those a resumed run skipped included (documents: up to the last window's);
    run_tokens: the tokens this run put through the engine; open_tokens: those of the
    chunk under way, done batch by batch (0 between chunks)."""

    tokens: int = 0
    windows: int = 0
    documents: int = 0
    run_tokens: int = 0
    open_tokens: int = 0

    def add_chunk(self, chunk: list[Window], n: int) -> None:
        """A whole chunk of windows, `n` tokens, done or skipped."""
        self.tokens += n
        self.windows += len(chunk)
        self.documents = chunk[-1].doc + 1


def mapped(loaded, task, batches: Iterable, engine: str | Engine = "local"
           ) -> Iterator[tuple[Any, Any]]:
    """Each batch with `task`'s partial result for it, in the order of `batches`, run by
    `engine` (its name, or an Engine the caller built) on workers of `loaded`'s model."""
    return get_engine(engine).map(WorkerSpec(loaded.spec, task), batches)


def corpus_windows(loaded, corpus: Corpus, plan: Plan) -> Iterator[Window]:
    return windows(corpus, loaded.tokenizer, vocab_size=loaded.cfg.vocab_size, ctx=plan.ctx,
                   max_tokens=plan.max_tokens)


def run(loaded, corpus: Corpus, plan: Plan, task, *, take: Callable,
        skip: Callable[[int, list], bool] = lambda c, chunk: False,
        chunk_done: Callable[[int, list], None] | None = None,
        engine: str | Engine = "local", progress=None, what: str = "") -> Counts:
    """Run `task` over the corpus; take(batch, partial) in batch order. Chunks for which
    skip(index, windows) is true are not run (a resumed run's finished work).
    Returns the Counts: tokens, windows, documents (all of the corpus, skipped included)."""
    seen = Counts()

    def planned():
        first_batch = 0
        for c, chunk in enumerate(chunks(corpus_windows(loaded, corpus, plan),
                                         batch_size=plan.batch_size,
                                         chunk_tokens=plan.chunk_tokens)):
            n = sum(len(w) for w in chunk)
            todo = batches(chunk, chunk_index=c, first_batch=first_batch,
                           batch_size=plan.batch_size)
            first_batch += len(todo)
            if skip(c, chunk):
                seen.add_chunk(chunk, n)
                update(seen.documents, seen.tokens)
                continue
            pending[c] = (chunk, n)
            yield from todo

    pending: dict[int, tuple[list[Window], int]] = {}
    with counting(progress, what or "reading the corpus", corpus.documents_n,
                  "documents") as update:
        for batch, partial in mapped(loaded, task, planned(), engine):
            take(batch, partial)
            seen.run_tokens += batch.tokens
            seen.open_tokens += batch.tokens
            update(seen.documents, seen.tokens + seen.open_tokens)
            if batch.end_of_chunk:
                seen.open_tokens = 0
                chunk, n = pending.pop(batch.chunk)
                seen.add_chunk(chunk, n)
                if chunk_done is not None:
                    chunk_done(batch.chunk, chunk)
                update(seen.documents, seen.tokens)
    return seen


__all__ = ["Plan", "make_plan", "Counts", "mapped", "run", "corpus_windows",
           "MAX_DEFAULT_CTX"]
