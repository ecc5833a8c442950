"""Progress for long work, opened only once the work proves to be under way. Pure Python:
the core never draws; a caller hands in a factory (render.emit.progress) or None."""
from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator

# Work that has run this long shows a bar (patch sweeps, lens and report on long texts);
# quicker work shows nothing at all.
LONG_WORK = 2.0  # seconds


@contextmanager
def deferred(progress, description: str) -> Iterator[Callable]:
    """`progress` is a context-manager factory like render.emit.progress: called with a
    description, it yields update(fraction, text). It is opened at the first update, once
    the checkpoint has proved readable, so a bad file fails with its one-line error and
    no progress line before it. None shows nothing."""
    if progress is None:
        yield lambda fraction=None, text=None: None
        return
    with ExitStack() as stack:
        opened: list = []

        def update(fraction=None, text=None):
            if not opened:
                opened.append(stack.enter_context(progress(description)))
            opened[0](fraction, text)

        yield update



@contextmanager
def after(progress, description: str, seconds: float | None = None) -> Iterator[Callable]:
    """Like `deferred`, for work that may be quick or long: nothing is shown until
    `seconds` (default LONG_WORK) have passed, then the bar opens at the next
    update(fraction, text). A sweep that ends in a second prints nothing."""
    seconds = LONG_WORK if seconds is None else seconds
    if progress is None:
        yield lambda fraction=None, text=None: None
        return
    start = time.monotonic()
    with deferred(progress, description) as shown:
        opened = []

        def update(fraction=None, text=None):
            if not opened and time.monotonic() - start < seconds:
                return
            opened.append(True)
            shown(fraction, text)

        yield update


@contextmanager
def blocks(model, update: Callable, label: str, share: tuple[float, float] = (0.0, 1.0)):
    """update() after every block a forward pass of `model` runs (fractions from
    share[0] to share[1]): a long forward pass shows where it is."""
    lo, hi = share

    def on_block(prefix: str, i: int, n: int) -> None:
        update(lo + (hi - lo) * (i + 1) / n, f"{label}: {prefix}block {i + 1} of {n}")

    before = getattr(model, "on_block", None)
    model.on_block = on_block
    try:
        yield
    finally:
        model.on_block = before



@contextmanager
def counting(progress, description: str, total: int, unit: str) -> Iterator[Callable]:
    """A counted bar (documents of a corpus): yields update(done, tokens). The factory is
    called with total= and unit= (render.emit.progress draws done/total, tokens, tokens/s
    and the time left); one that takes only a description gets update(fraction)."""
    if progress is None:
        yield lambda done, tokens=None: None
        return
    try:
        manager = progress(description, total=total, unit=unit)
    except TypeError:
        manager = None
    if manager is None:
        with progress(description) as plain:
            yield lambda done, tokens=None: plain(done / max(total, 1), None)
        return
    with manager as update:
        yield update


__all__ = ["deferred", "after", "blocks", "counting", "LONG_WORK"]
