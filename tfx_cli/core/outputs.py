"""Runaway output refused before the work: a file writer estimates what it would write and
asks here first.

    check_output_size(estimate, what="the page", option="--output", force=force,
                      narrow="--show-layers (e.g. --show-layers 0,11) or a shorter text",
                      detail="30 layers × 9 heads × 2,101² attention weights")

Past OUTPUT_LIMIT (200 MB) the writer is refused with one line that names the size, what
makes it so large and what to narrow, unless --force; nothing has been computed yet.
Pure Python (no torch): any writer in any layer may call it (report pages, dataset
shards, feature dumps). FolderHold keeps a resumable output folder to one run at a time.
"""
from __future__ import annotations

import os

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


class FolderHold:
    """An output folder held by this run alone while it writes (scan, top and collect's
    -o DIR, train-sae's SAE_DIR): an exclusive flock(2) on the folder itself. No lock file
    is made, and the kernel lets go when the process ends, however it ends (kill -9
    included), so a killed run never leaves the folder stuck. A second run into the same
    folder is refused at once, before it reads or writes anything there.

    `release()` (or leaving a `with` block) lets go; so does the process's end. Where the
    platform or filesystem has no flock, the folder is not held (nothing is refused)."""

    def __init__(self, path, option: str = "-o"):
        self.fd = None
        try:
            import fcntl
        except ImportError:  # not a POSIX system
            return
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return  # the writer's own checks say what is wrong with the folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputFileError(f"{option} {path} is being written by another tfx run "
                                  "right now (it holds the folder until it ends); wait for "
                                  "it, stop it, or choose another folder") from None
        except OSError:  # a filesystem without flock: not held
            os.close(fd)
            return
        self.fd = fd

    def release(self, _close=os.close) -> None:
        # os.close bound at definition: a hold let go at interpreter exit, when module
        # globals are already gone, still closes
        if self.fd is not None:
            _close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def __enter__(self) -> "FolderHold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    __del__ = release  # a run dropped without release() lets go when collected


__all__ = ["OUTPUT_LIMIT", "check_output_size", "format_bytes", "FolderHold"]
