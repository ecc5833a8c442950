"""Corpora: the documents a dataset command reads, in the file's order.

A CORPUS is a `.txt` file (one document per non-empty line), a `.jsonl` file (one JSON
object per line, the document in `--field`), a `.parquet` file (the `--field` column,
read with pyarrow), a folder of `.txt` files (one document per file, by name: its lines
stay together), or a built-in name: `python-docs` (the language reference every Python
ships in `pydoc_data.topics`, cut into paragraphs) or `repeated-tokens` (seeded random
token sequences repeated twice: the induction probe; documents of ids, not text). A UTF-8
byte-order mark at the start of a file is not text and is dropped.

Reading never tokenizes: `survey()` reads every document once for the manifest's hash
and count (and every bad input is found there, before a model loads); `documents()`
reads them again, lazily, while the pipeline runs.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Iterator

from ...errors import InputTextError, MissingPackageError, UsageError

BUILT_IN = ("python-docs", "repeated-tokens")
REPEATS = (256, 48)  # repeated-tokens: documents, ids per half (each document is 2 x 48)
REPEAT_SEED = 0
SNIFF = 8192  # bytes read to tell a text file from a binary one


@dataclass(frozen=True)
class Document:
    index: int  # 0-based, in corpus order
    text: str | None = None
    ids: tuple[int, ...] | None = None  # a document of ids (repeated-tokens)


@dataclass
class Corpus:
    """What the user named; `survey()` fills documents and sha256."""

    source: str
    kind: str  # txt | jsonl | parquet | folder | python-docs | repeated-tokens
    field: str | None = None  # jsonl key or parquet column
    max_docs: int | None = None
    vocab: tuple[int, int, frozenset] | None = None  # repeated-tokens: (low, high, skip)
    documents_n: int = 0
    sha256: str = ""
    _path: Path | None = dc_field(default=None, repr=False)

    def describe(self) -> dict:
        """The manifest's `corpus` object (what identifies it; no file times)."""
        return {"source": self.source, "kind": self.kind, "field": self.field,
                "documents": self.documents_n, "sha256": self.sha256,
                "max_docs": self.max_docs}

    def survey(self) -> "Corpus":
        """Read every document once: count them and hash their contents (so a resumed
        run knows it reads the same corpus); refuses an empty corpus."""
        digest = hashlib.sha256()
        n = 0
        for doc in self.documents():
            data = doc.text.encode("utf-8") if doc.text is not None else \
                b",".join(str(i).encode() for i in doc.ids)
            digest.update(b"%d:" % len(data) + data)
            n += 1
        if n == 0:
            raise InputTextError(f"the corpus {self.source} holds no document "
                                 f"({EMPTY_HINT[self.kind]}); give one with text in it")
        self.documents_n, self.sha256 = n, digest.hexdigest()
        return self

    def documents(self) -> Iterator[Document]:
        reader = {"txt": _txt, "jsonl": _jsonl, "parquet": _parquet, "folder": _folder,
                  "python-docs": _python_docs, "repeated-tokens": _repeated}[self.kind]
        index = 0
        for item in reader(self):
            if self.max_docs is not None and index >= self.max_docs:
                return
            if isinstance(item, str):
                if not item.strip():
                    continue
                yield Document(index, text=item)
            else:
                yield Document(index, ids=tuple(item))
            index += 1


EMPTY_HINT = {"txt": "no non-empty line", "jsonl": "no line", "parquet": "no row",
              "folder": "no non-empty .txt file", "python-docs": "no paragraph",
              "repeated-tokens": "no sequence"}


def open_corpus(source: str | Path, *, field: str = "text",
                max_docs: int | None = None) -> Corpus:
    """CORPUS as given -> a Corpus (not read yet); a missing path or an unknown kind of
    file is refused here."""
    if max_docs is not None and max_docs < 1:
        raise UsageError(f"--max-docs {max_docs} must be at least 1")
    name = str(source)
    if name in BUILT_IN:
        return Corpus(name, name, None, max_docs)
    path = Path(name).expanduser()
    if not path.exists():
        raise InputTextError(f"the corpus {name} does not exist; give a .txt, .jsonl or "
                             f".parquet file, a folder of .txt files, or a built-in corpus "
                             f"({', '.join(BUILT_IN)})")
    if path.is_dir():
        return Corpus(name, "folder", None, max_docs, _path=path)
    kind = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}.get(path.suffix.lower())
    if kind is None:
        raise InputTextError(f"the corpus {name} is neither .txt, .jsonl nor .parquet; "
                             "rename it, or give a folder of .txt files")
    return Corpus(name, kind, field if kind in ("jsonl", "parquet") else None, max_docs,
                  _path=path)


# -- readers: each yields a document's text (or ids) in order, empty ones included ------
def _text_of(path: Path, what: str) -> str:
    data = path.read_bytes()
    _refuse_binary(data[:SNIFF], path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputTextError(f"{what} {path} is not UTF-8 text (byte {exc.start}); convert "
                             "it, e.g. iconv -f latin1 -t utf-8") from None


def _refuse_binary(head: bytes, path: Path, what: str) -> None:
    nul = head.find(b"\0")
    if nul >= 0:
        raise InputTextError(f"{what} {path} is a binary file (a NUL byte at {nul}), not "
                             "text; give a .txt, .jsonl or .parquet corpus")


BOM = "\ufeff"  # UTF-8's byte-order mark, which some editors put first: not text


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as handle:
        _refuse_binary(handle.read(SNIFF), path, "the corpus")
        handle.seek(0)
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputTextError(f"line {number} of {path} is not UTF-8 (byte "
                                     f"{exc.start}); convert the file to UTF-8") from None
            if number == 1:
                line = line.removeprefix(BOM)
            yield number, line.rstrip("\r\n")


def json_kind(value) -> str:
    """What a JSON value is, in JSON's words: an object, an array, a number, ..."""
    if isinstance(value, bool):
        return f"{str(value).lower()}, a boolean"
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string"}.get(
        type(value), f"a number ({value!r})" if isinstance(value, (int, float)) else
        type(value).__name__)


def _txt(corpus: Corpus) -> Iterator[str]:
    for _, line in _lines(corpus._path):
        yield line


def _jsonl(corpus: Corpus) -> Iterator[str]:
    key = corpus.field
    for number, line in _lines(corpus._path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputTextError(f"line {number} of {corpus.source} is not JSON ({exc.msg}, "
                                 f"column {exc.colno}); each line must be one object such "
                                 f"as {{\"{key}\": \"...\"}}") from None
        if not isinstance(row, dict):
            raise InputTextError(f"line {number} of {corpus.source} is {json_kind(row)}, not "
                                 f"an object; each line must be one object such as "
                                 f"{{\"{key}\": \"...\"}}")
        if key not in row:
            raise InputTextError(f"line {number} of {corpus.source} has no field {key!r} "
                                 f"(it has: {', '.join(map(str, row)) or 'nothing'}); name "
                                 "the field with --field")
        if not isinstance(row[key], str):
            raise InputTextError(f"line {number} of {corpus.source}: field {key!r} is "
                                 f"{json_kind(row[key])}, not text; put the text in quotes")
        yield row[key]


def _parquet(corpus: Corpus) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingPackageError("reading .parquet needs pyarrow; install it with pip "
                                  "install 'tfx-cli[datasets]'") from None
    try:
        handle = pq.ParquetFile(corpus._path)
    except Exception as exc:  # pyarrow's ArrowInvalid and friends
        raise InputTextError(f"the corpus {corpus.source} is not a readable Parquet file "
                             f"({str(exc).splitlines()[0]})") from None
    columns = handle.schema_arrow.names
    if corpus.field not in columns:
        raise InputTextError(f"the corpus {corpus.source} has no column {corpus.field!r} "
                             f"(it has: {', '.join(columns)}); name it with --field")
    for batch in handle.iter_batches(columns=[corpus.field], batch_size=1024):
        for value in batch.column(0).to_pylist():
            if value is not None and not isinstance(value, str):
                raise InputTextError(f"column {corpus.field!r} of {corpus.source} holds "
                                     f"{type(value).__name__}, not text; name a text column "
                                     "with --field")
            yield value or ""


def _folder(corpus: Corpus) -> Iterator[str]:
    files = sorted(p for p in corpus._path.iterdir() if p.suffix.lower() == ".txt"
                   and p.is_file())
    if not files:
        raise InputTextError(f"the folder {corpus.source} has no .txt file; put one "
                             "document per .txt file in it")
    for path in files:
        yield _text_of(path, "the corpus file").removeprefix(BOM).rstrip("\r\n")


def _python_docs(corpus: Corpus) -> Iterator[str]:
    """Paragraphs of the Python language reference (pydoc_data.topics, shipped with every
    CPython), topic by topic in key order, whitespace joined; paragraphs under four
    words (headings, rules) are left out. Its size depends on the Python version."""
    from pydoc_data.topics import topics

    for key in sorted(topics):
        for paragraph in topics[key].split("\n\n"):
            words = paragraph.split()
            if len(words) >= 4 and set(paragraph.strip()) - set("*=-~^ \n"):
                yield " ".join(words)


def _repeated(corpus: Corpus) -> Iterator[tuple[int, ...]]:
    """REPEATS[0] documents, each REPEATS[1] random ids (numpy seed REPEAT_SEED, drawn
    from the tokenizer's ordinary ids) and the same ids again."""
    import numpy as np

    if corpus.vocab is None:
        raise RuntimeError("repeated-tokens needs the model's vocabulary first")
    low, high, skip = corpus.vocab
    rng = np.random.default_rng(REPEAT_SEED)
    for _ in range(REPEATS[0]):
        ids = []
        while len(ids) < REPEATS[1]:
            i = int(rng.integers(low, high))
            if i not in skip:
                ids.append(i)
        yield tuple(ids + ids)


def repeated_vocab(tokenizer, vocab_size: int) -> tuple[int, int, frozenset]:
    """Where repeated-tokens draws from: ids past the first 1,000 (specials and bytes
    sit low in most vocabularies) up to 20,000 on large vocabularies, the whole range on
    small ones; the tokenizer's special ids never."""
    n = min(vocab_size, getattr(tokenizer, "vocab_size", vocab_size) or vocab_size)
    low, high = (1000, min(n, 20000)) if n > 4000 else (0, n)
    return low, high, frozenset(getattr(tokenizer, "special_ids", ()) or ())


__all__ = ["Corpus", "Document", "open_corpus", "repeated_vocab", "BUILT_IN"]
