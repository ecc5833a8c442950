"""Runaway output refused before the work: a file writer estimates what it would write and
asks here first.

    check_output_size(estimate, what="the page", option="--output", force=force,
                      narrow="--show-layers (e.g. --show-layers 0,11) or a shorter text",
                      detail="30 layers × 9 heads × 2,101² attention weights")

Past OUTPUT_LIMIT (200 MB) the writer is refused with one line that names the size, what
makes it so large and what to narrow, unless --force; nothing has been computed yet.
Pure Python (no torch): any writer in any layer may call it (report pages, dataset
shards, feature dumps).
"""
from __future__ import annotations

from ..errors import OutputFileError

OUTPUT_LIMIT = 200_000_000  # bytes: past this a file is refused without --force


def format_bytes(n: float) -> str:
    """3.2 GB, 180 MB, 12.4 kB (powers of 1000, as file managers show them)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def check_output_size(estimate: float, *, what: str, narrow: str, force: bool = False,
                      detail: str = "", limit: int = OUTPUT_LIMIT) -> None:
    """Refuse writing about `estimate` bytes past `limit` unless `force`: the message
    says the size (and `detail`, what makes it), the limit, and `narrow` (what to ask
    for less of)."""
    if force or estimate <= limit:
        return
    why = f" ({detail})" if detail else ""
    raise OutputFileError(f"{what} would be about {format_bytes(estimate)}{why}, past the "
                          f"{format_bytes(limit)} tfx writes without asking; narrow it with "
                          f"{narrow}, or pass --force to write it anyway")


__all__ = ["OUTPUT_LIMIT", "check_output_size", "format_bytes"]
