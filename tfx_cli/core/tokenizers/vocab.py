"""Vocabularies tfx builds itself: the word tokenizer of seed 001 (the unique words of a
corpus), the char tokenizer, and the vocab.json a trained folder keeps them in."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from ...errors import TokenizerError
from .base import Tokenizer, utf8_text

UNK, START, END, PAD = "<unk>", "<start>", "<end>", "<pad>"
# The word and char vocabularies' corpus when none is given: the seeds' sentences. A
# model's vocabulary must not depend on the text it reads, so it is never the input.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "data" / "corpus.txt"


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
