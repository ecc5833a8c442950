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
