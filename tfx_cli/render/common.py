"""What the terminal views, the plots and the HTML report share: token labels per axis
and the finite range of an array. No Rich, no matplotlib, no torch; numpy on demand.
"""
from __future__ import annotations

import re

from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

TOKEN_DIMS = ("T", "S")  # dims whose positions are input tokens (queries, keys)


# Characters that would drive the terminal rather than show: C0 and C1 controls (newline
# and tab excepted), DEL, and the bidirectional marks and overrides that reorder what
# follows ("Trojan Source", CVE-2021-42574).
_DRIVES = frozenset([*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u061c",
                     "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)),
                     *map(chr, range(0x2066, 0x206A))]) - {"\n", "\t"}


def terminal_text(text: str) -> str:
    """User or model text as a terminal may print it: every character that would move the
    cursor, recolour or reorder the screen is written out (<0x1B>, <U+202E>); newlines and
    tabs stay, and so do emoji joiners and every other visible character."""
    if not any(ch in _DRIVES for ch in text):
        return text
    return "".join((f"<0x{ord(ch):02X}>" if ord(ch) < 0x100 else f"<U+{ord(ch):04X}>")
                   if ch in _DRIVES else ch for ch in text)


_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|r)")


def quoted(text: str) -> str:
    """A text in quotes, as a header shows it: Python's repr (newlines and tabs written
    \\n, \\t), except that a character that would drive the terminal is written as the
    token tables write it (<0x1B>, <U+202E>), so one text reads the same everywhere."""
    def written(match: re.Match) -> str:
        code = match.group(2)
        ch = "\r" if code == "r" else chr(int(code[1:], 16))
        return match.group(1) + (terminal_text(ch) if ch in _DRIVES else match.group(0)[
            len(match.group(1)):])

    return _ESCAPE.sub(written, repr(text))


def display_tokens(tokens: Sequence[str] | None) -> list[str] | None:
    """Tokens as a reader should see them: whitespace and invisible characters shown."""
    from ..core.tokenizers.base import visible

    return None if tokens is None else [visible(str(t)) for t in tokens]


def axis_labels(dim: str, size: int,
                axes: Mapping[str, Sequence[str] | None] | None) -> list[str] | None:
    """The labels of one axis of `size` positions (None: label by position)."""
    labels = (axes or {}).get(dim)
    if labels is None or len(labels) != size:
        return None
    return list(labels)


def finite_range(values: np.ndarray) -> tuple[float, float] | None:
    """(min, max) over the finite entries, without copying them (logits can be big)."""
    import numpy as np

    values = np.asarray(values)
    if values.size == 0 or values.dtype.kind not in "fiu":
        return None
    if values.dtype.kind in "iu":  # whole numbers are all finite (and inf is no int)
        return float(values.min()), float(values.max())
    finite = np.isfinite(values)
    if not finite.any():
        return None
    lo = np.min(values, where=finite, initial=np.inf)
    hi = np.max(values, where=finite, initial=-np.inf)
    return float(lo), float(hi)


def head_tail(n: int, keep: int) -> tuple[list[int], int | None]:
    """Indices kept when `n` items must fit in `keep`: the first half and the last half.
    Returns the indices and where the cut goes (None when nothing is cut)."""
    if n <= keep:
        return list(range(n)), None
    keep = max(keep, 1)
    head, tail = (keep + 1) // 2, keep // 2
    return list(range(head)) + list(range(n - tail, n)), head


def intervention_text(change) -> str:
    """One intervention as a reader should see it: 'blocks.0.attn.out ablated (zero)',
    "blocks.6.resid_pre steered 4 × (' love' − ' hate')"."""
    if change.kind == "set":  # a transcoder feature (--set-feature)
        was = "" if change.activation is None else f", was {change.activation:.4g}"
        return (f"feature {change.feature} of layer {change.layer} at position "
                f"{change.position} set to {change.value:g}{was} (transcoders "
                f"{change.transcoders})")
    if getattr(change, "feature", None) is not None:  # a feature of an SAE at its site
        where = f"{change.site} (SAE {change.sae}, at {change.name})"
        if change.kind == "ablate":
            return f"{where} ablated ({change.mode})"
        return f"{where} steered +{change.scale:g} × its decoder row"
    if change.kind == "ablate":
        return f"{change.site} ablated ({change.mode})"
    return (f"{change.site} steered {change.scale:g} × ({change.toward!r} − "
            f"{change.away!r})")


def largest_parts(values: Sequence[float], keep: int) -> list[int]:
    """Indices of the `keep` values largest in magnitude, the last one (attribute's
    remainder) always among them, in their original order; all when they fit."""
    n = len(values)
    if n <= keep:
        return list(range(n))
    by_size = sorted(range(n - 1), key=lambda i: -abs(values[i]))
    return sorted(by_size[:keep - 1]) + [n - 1]


def layer_of(name: str) -> int | None:
    """The block a trace name belongs to: blocks.3.attn.pattern -> 3 (and so for an
    encoder–decoder's encoder.blocks.3... and decoder.blocks.3...)."""
    parts = name.split(".")
    if parts and parts[0] in ("encoder", "decoder"):
        parts = parts[1:]
    if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1])
    return None


def token_axes(result, *, name: str | None = None,
               key_tokens: Sequence[str] | None = None) -> dict[str, list[str] | None]:
    """Labels per dim letter for a result: T the queries' tokens, S the keys' (the --kv
    text's in cross-attention, else the input's). An encoder–decoder's decoder tensors
    (by `name`, or the result's stack) have the target's tokens on T, and on S too but
    in cross-attention, whose keys are the source's tokens."""
    inp = result.input
    if inp is None:
        return {"T": None, "S": None}
    source = display_tokens(inp.tokens)
    target = display_tokens(inp.target.tokens) if inp.target is not None else None
    decoder = target is not None and (name.startswith("decoder.") if name is not None
                                      else getattr(result, "stack", None) == "decoder")
    if decoder:
        cross = ".cross." in name if name is not None else \
            bool(getattr(result, "cross_attention", False))
        return {"T": target, "S": source if cross else target}
    keys = display_tokens(key_tokens) if key_tokens is not None else \
        display_tokens(inp.kv.tokens) if inp.kv is not None else source
    return {"T": source, "S": keys}


__all__ = ["terminal_text", "quoted", "head_tail", "display_tokens", "token_axes", "axis_labels", "finite_range", "layer_of",
           "intervention_text", "largest_parts", "TOKEN_DIMS"]
