"""Ctrl-C that always ends in `tfx: error: interrupted`, never in an abort.

Python turns SIGINT into KeyboardInterrupt at the next bytecode, wherever that is. While
torch is being imported, that can be inside code its C++ extension runs during its own
set-up, where an exception it does not expect ends the process with `terminate called
after throwing an instance of 'pybind11::error_already_set'` (exit -6, a core dump on some
systems) instead of exit 130. The handler installed here holds a Ctrl-C that arrives while
any torch module is still initialising and delivers it the moment the import is done, so
the command stops there, through the usual KeyboardInterrupt path.
"""
from __future__ import annotations

import _thread
import signal
import sys
import threading
import time

POLL = 0.02  # seconds between looks at whether torch's import is done
_STATE = {"pending": False}


def torch_initialising() -> bool:
    """Whether torch or one of its modules is being imported right now (the import
    system marks a module's spec `_initializing` until its code has run)."""
    for name, module in list(sys.modules.items()):
        if name == "torch" or name.startswith("torch."):
            spec = getattr(module, "__spec__", None)
            if getattr(spec, "_initializing", False):
                return True
    return False


def _deliver_when_imported() -> None:
    while torch_initialising():
        time.sleep(POLL)
    _STATE["pending"] = False
    _thread.interrupt_main(signal.SIGINT)  # runs the handler again, in the main thread


def _on_sigint(signum, frame) -> None:
    if torch_initialising():
        if not _STATE["pending"]:  # a second Ctrl-C meanwhile adds nothing
            _STATE["pending"] = True
            threading.Thread(target=_deliver_when_imported, daemon=True,
                             name="tfx-deferred-interrupt").start()
        return
    raise KeyboardInterrupt


def install() -> bool:
    """Put the handler in place of Python's default one (not in place of a handler
    someone else set, and only from the main thread, where signals are handled).
    Returns whether it was installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint:
        return True
    if current is not signal.default_int_handler:
        return False
    signal.signal(signal.SIGINT, _on_sigint)
    return True


__all__ = ["install", "torch_initialising"]
