"""Progress for long work, opened only once the work proves to be under way. Pure Python:
the core never draws; a caller hands in a factory (render.emit.progress) or None."""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator


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



__all__ = ["deferred"]


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


__all__ += ["counting"]
