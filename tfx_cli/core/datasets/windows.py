"""Documents -> windows -> chunks -> batches: a pure function of the corpus and options,
so every engine (and a resumed run) forms the very same batches.

Each document is tokenized exactly as `tfx trace DOCUMENT` tokenizes it (the
tokenizer's own BOS and end tokens included) and cut into windows of at most `ctx`
tokens; windows never cross documents. Consecutive windows form a chunk (at most
CHUNK_BATCHES batches' worth, and at most `chunk_tokens` tokens); inside a chunk the
windows are sorted by length (longest first, ties in corpus order) and cut into batches
of `batch_size`, so a batch pads little (right padding: a causal model's real positions
never see it). A chunk is also what a resumed scan or top skips whole.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from ...errors import InputTextError
from .corpus import Corpus

CHUNK_BATCHES = 8


@dataclass
class Window:
    doc: int  # the document's 0-based index in corpus order
    start: int  # position in the document of the window's first token
    first: int  # the corpus-wide index of its first token
    ids: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Batch:
    """Windows that run as one forward pass: rows padded on the right to the longest."""

    index: int  # corpus-wide batch number
    chunk: int
    windows: list[Window]
    end_of_chunk: bool = False

    @property
    def tokens(self) -> int:
        return sum(len(w) for w in self.windows)

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """ids (B, T) with 0 after each row's end, and lengths (B,)."""
        lengths = np.array([len(w) for w in self.windows], dtype=np.int64)
        ids = np.zeros((len(self.windows), int(lengths.max())), dtype=np.int64)
        for row, window in enumerate(self.windows):
            ids[row, :len(window)] = window.ids
        return ids, lengths


def document_ids(tokenizer, doc, vocab_size: int) -> list[int]:
    """A document's ids as `tfx trace` reads its text; a document of ids (repeated-tokens)
    gets the special tokens the tokenizer puts around any text (a BOS, an end token)."""
    if doc.text is not None:
        ids = tokenizer.encode(doc.text)
    else:
        lead, tail = ends(tokenizer)
        ids = [*lead, *doc.ids, *tail]
    bad = next((i for i in ids if i >= vocab_size), None)
    if bad is not None:
        raise InputTextError(f"document {doc.index}: token id {bad} is outside the model's "
                             f"vocabulary of {vocab_size}; use the tokenizer that matches the "
                             "model")
    return ids


def ends(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a text."""
    specials = getattr(tokenizer, "special_ids", frozenset())
    ids = tokenizer.encode("a")
    lead = []
    for i in ids:
        if i not in specials:
            break
        lead.append(i)
    tail = []
    for i in reversed(ids[len(lead):]):
        if i not in specials:
            break
        tail.insert(0, i)
    return lead, tail


def windows(corpus: Corpus, tokenizer, *, vocab_size: int, ctx: int,
            max_tokens: int | None = None) -> Iterator[Window]:
    """Every window in corpus order; at most `max_tokens` tokens in all (the last
    document cut there)."""
    total = 0
    for doc in corpus.documents():
        ids = document_ids(tokenizer, doc, vocab_size)
        if max_tokens is not None:
            ids = ids[:max_tokens - total]
        for start in range(0, len(ids), ctx):
            piece = np.asarray(ids[start:start + ctx], dtype=np.int64)
            yield Window(doc.index, start, total + start, piece)
        total += len(ids)
        if max_tokens is not None and total >= max_tokens:
            return


def chunks(stream: Iterable[Window], *, batch_size: int,
           chunk_tokens: int) -> Iterator[list[Window]]:
    """Consecutive windows, CHUNK_BATCHES * batch_size at most and chunk_tokens tokens
    at most (one window always fits)."""
    chunk: list[Window] = []
    tokens = 0
    for window in stream:
        if chunk and (len(chunk) >= CHUNK_BATCHES * batch_size
                      or tokens + len(window) > chunk_tokens):
            yield chunk
            chunk, tokens = [], 0
        chunk.append(window)
        tokens += len(window)
    if chunk:
        yield chunk


def batches(chunk: list[Window], *, chunk_index: int, first_batch: int,
            batch_size: int) -> list[Batch]:
    """A chunk's windows, longest first (ties in corpus order), batch_size at a time."""
    order = sorted(range(len(chunk)), key=lambda i: (-len(chunk[i]), i))
    out = [Batch(first_batch + n, chunk_index, [chunk[i] for i in order[lo:lo + batch_size]])
           for n, lo in enumerate(range(0, len(order), batch_size))]
    out[-1].end_of_chunk = True
    return out


__all__ = ["Window", "Batch", "windows", "chunks", "batches", "document_ids", "ends"]
