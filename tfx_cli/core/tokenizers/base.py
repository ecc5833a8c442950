"""The one Tokenizer interface, the byte tokenizer, and the helpers that make a piece
visible: spaces, line breaks and bytes that are not whole characters written out."""
from __future__ import annotations

import codecs
import unicodedata
from typing import Iterable

from ...errors import InputTextError, TokenizerError


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
    # the token a masked language model predicts behind ([MASK] for BERT, <mask> for
    # RoBERTa), and its id; None where the tokenizer has none
    mask_token: str | None = None
    mask_id: int | None = None

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def input_note(self, text: str) -> str | None:
        """A one-line note on how encode reads `text` when it reads it otherwise than
        written (AntiBERTy upper-cases residues); None when it reads it as written."""
        return None

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
