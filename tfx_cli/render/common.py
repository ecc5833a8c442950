"""What the terminal views, the plots and the HTML report share: token labels per axis
and the finite range of an array. No Rich, no matplotlib, no torch; numpy on demand.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from ..core.tokenizers import visible

if TYPE_CHECKING:
    import numpy as np

TOKEN_DIMS = ("T", "S")  # dims whose positions are input tokens (queries, keys)


def display_tokens(tokens: Sequence[str] | None) -> list[str] | None:
    """Tokens as a reader should see them: whitespace and invisible characters shown."""
    return None if tokens is None else [visible(str(t)) for t in tokens]


def token_axes(result, *, key_tokens: Sequence[str] | None = None) -> dict[str, list[str] | None]:
    """Labels per dim letter for a result: T the input's tokens, S the keys' (the --kv
    text's in cross-attention, else the input's)."""
    tokens = display_tokens(result.input.tokens) if result.input is not None else None
    kv = result.input.kv if result.input is not None else None
    keys = display_tokens(key_tokens) if key_tokens is not None else \
        display_tokens(kv.tokens) if kv is not None else tokens
    return {"T": tokens, "S": keys}


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
    finite = np.isfinite(values)
    if not finite.any():
        return None
    lo = np.min(values, where=finite, initial=np.inf)
    hi = np.max(values, where=finite, initial=-np.inf)
    return float(lo), float(hi)


def layer_of(name: str) -> int | None:
    """The block a trace name belongs to: blocks.3.attn.pattern -> 3."""
    parts = name.split(".")
    if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1])
    return None


__all__ = ["display_tokens", "token_axes", "axis_labels", "finite_range", "layer_of",
           "TOKEN_DIMS"]
