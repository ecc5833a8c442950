"""Gemma's SentencePiece vocabulary, as a GGUF stores it."""
from __future__ import annotations

from typing import Iterable

from .base import Tokenizer, utf8_text

# Token types a GGUF gives each vocabulary entry (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _added_ends(meta: dict) -> tuple[int | None, int | None]:
    """(BOS id or None, EOS id or None): the ends encode wraps every text in."""
    n = len(meta["tokenizer.ggml.tokens"])

    def end(flag: str, key: str) -> int | None:
        i = meta.get(key)
        return i if meta.get(flag) and isinstance(i, int) and 0 <= i < n else None

    return (end("tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"),
            end("tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"))


class SentencePieceBPE(Tokenizer):
    """Gemma's SentencePiece vocabulary as a GGUF stores it (tokenizer.ggml.model "llama"),
    read the way transformers reads it from the same file.

    A space is the piece character '▁'. A text is first cut at the added tokens, matched
    whole (leftmost, then longest): the control tokens (<bos>, <start_of_turn>,
    <unusedN>), which are special, and the user-defined ones (newline and tab runs, HTML
    tags such as <table>). Every other stretch has its spaces written as '▁' and is one
    word: its characters are the first pieces (a character outside the vocabulary becomes
    its UTF-8 bytes, the byte pieces <0x00>..<0xFF>), and adjacent pieces are joined while
    their join is a vocabulary entry, best join first. The file lists no merges; a join's
    rank is the joined entry's place in the vocabulary (earlier is better: Gemma's scores
    rank its user-defined pieces below thousands of ordinary ones, its order does not),
    then the longer left piece, then the leftmost place in the text. Pieces of blanks
    that the file stores with real spaces are renamed to '▁' runs, so they join too.
    <bos> is put first when the file sets add_bos_token.
    """

    def __init__(self, tokens: list[str], types: list[int], *, bos: int | None = None,
                 eos: int | None = None, name: str = "sentencepiece"):
        self.name = name
        # Pieces of blanks are stored with real spaces ("  "), but the text is looked up
        # with '▁' ("▁▁"): rename them so they can be reached.
        self.tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
        self.types = list(types)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}  # a repeated piece: last id
        self.vocab_size = len(self.tokens)
        self.bos, self.eos = bos, eos
        self.special_ids = frozenset(i for i, kind in enumerate(self.types) if kind == CONTROL)
        # Added tokens, matched in the raw text. A user-defined one counts only under its
        # stored name: the blank pieces, renamed above, are left to the merges.
        added = [t for t, kind in zip(self.tokens, self.types) if kind == CONTROL]
        added += [t for t, kind in zip(tokens, self.types)
                  if kind == USER_DEFINED and t in self.vocab]
        self._added = {t: self.vocab[t] for t in added if t}
        lengths: dict[str, set[int]] = {}
        for t in self._added:
            lengths.setdefault(t[0], set()).add(len(t))
        self._added_lengths = {ch: sorted(ls, reverse=True) for ch, ls in lengths.items()}

    @classmethod
    def from_metadata(cls, meta: dict, name: str = "sentencepiece") -> "SentencePieceBPE":
        tokens = meta["tokenizer.ggml.tokens"]
        types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
        bos, eos = _added_ends(meta)
        return cls(tokens, types, bos=bos, eos=eos, name=name)

    def named(self, name: str) -> "SentencePieceBPE":
        from copy import copy

        other = copy(self)  # shares the tables
        other.name = name
        return other

    # -- encode ------------------------------------------------------------------------
    def _split_added(self, text: str) -> list[tuple[str, int | None]]:
        """(stretch, None) for plain text and (token, id) for each added token."""
        out: list[tuple[str, int | None]] = []
        start = i = 0
        n = len(text)
        while i < n:
            for length in self._added_lengths.get(text[i], ()):
                token = text[i:i + length]
                if token in self._added:
                    if start < i:
                        out.append((text[start:i], None))
                    out.append((token, self._added[token]))
                    i = start = i + length
                    break
            else:
                i += 1
        if start < n:
            out.append((text[start:], None))
        return out

    def _first_pieces(self, word: str) -> list[str]:
        pieces = []
        for ch in word:
            if ch in self.vocab:
                pieces.append(ch)
            else:  # byte fallback: the character's UTF-8 bytes
                pieces.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
        return pieces

    def bpe(self, word: str) -> list[str]:
        """The pieces of one stretch of text (spaces already written as '▁')."""
        import heapq

        parts: list[str | None] = self._first_pieces(word)
        n = len(parts)
        after = [*range(1, n), -1]
        before = list(range(-1, n - 1))
        vocab, heap = self.vocab, []

        def offer(i: int) -> None:  # the join of piece i and the one after it, if any
            joined = parts[i] + parts[after[i]]
            rank = vocab.get(joined)
            if rank is not None:
                heapq.heappush(heap, (rank, -len(parts[i]), i, joined))

        for i in range(n - 1):
            offer(i)
        while heap:
            _, _, i, joined = heapq.heappop(heap)
            j = after[i]
            # an offer made before a neighbour changed is stale unless it joins the same
            if parts[i] is None or j < 0 or parts[i] + parts[j] != joined:
                continue
            parts[i], parts[j] = joined, None
            after[i] = after[j]
            if after[i] >= 0:
                before[after[i]] = i
                offer(i)
            if before[i] >= 0:
                offer(before[i])
        return [p for p in parts if p is not None]

    def encode(self, text: str) -> list[int]:
        ids = [self.bos] if self.bos is not None else []
        for stretch, token_id in self._split_added(utf8_text(text)):
            if token_id is not None:
                ids.append(token_id)
            else:
                ids.extend(self.vocab[p] for p in self.bpe(stretch.replace(" ", "▁")))
        if self.eos is not None:
            ids.append(self.eos)
        return ids

    # -- decode and display ------------------------------------------------------------
    def _is_byte(self, i: int) -> bool:
        t = self.tokens[i]
        return self.types[i] == BYTE and len(t) == 6 and t.startswith("<0x") and t[-1] == ">"

    def decode(self, ids: Iterable[int]) -> str:
        ids = self.check_ids(ids)
        if self.bos is not None and ids[:1] == [self.bos]:
            ids = ids[1:]
        if self.eos is not None and ids[-1:] == [self.eos]:
            ids = ids[:-1]
        out = bytearray()
        for i in ids:
            if self._is_byte(i):
                out.append(int(self.tokens[i][3:5], 16))
            else:
                out += self.tokens[i].replace("▁", " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Each piece's text: '▁' shown as the space it stands for, byte pieces as <0xNN>."""
        return [self.tokens[i] if self._is_byte(i) else self.tokens[i].replace("▁", " ")
                for i in self.check_ids(ids)]
