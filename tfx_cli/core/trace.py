"""Trace: the ordered record of named intermediates, and glob selection over their names.

Torch-free on purpose (render reads Traces and must not import torch): recorded values
are torch tensors or numpy arrays, and `array()` turns either into numpy without naming
torch. The Tap module that fills a Trace lives in `model.py`, next to the modules it taps.

Names are the public contract of DESIGN.md (`blocks.0.attn.pattern`); dims are letters:
B batch, T query positions, S key positions, C d_model, H heads, D head dim, F ffn width,
V vocab, P positions of a positional table, R rotary frequencies.
"""
from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import SelectError

if TYPE_CHECKING:
    import numpy as np


def is_ndarray(value: Any) -> bool:
    """isinstance(value, numpy.ndarray), without importing numpy for callers that never
    made an array (count-params, tokenize, configs start faster without it)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def is_numpy_scalar(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.generic)


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of `array` that cannot be written through (the array itself, and whoever
    else holds it, keep their own flags)."""
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass
class Entry:
    value: Any  # torch.Tensor, np.ndarray or Lazy, batch dimension already removed
    dims: tuple[str, ...]


_HALF = ("torch.bfloat16", "torch.float16")


class Lazy:
    """A recorded value computed when first read, for intermediates that are one cheap
    step from another recorded value (attention's scaled = scores / sqrt(D)): a full
    trace then keeps one (T, S) matrix per step that needs it, not one per step."""

    def __init__(self, compute, shape: tuple[int, ...]):
        self.compute, self.shape = compute, tuple(shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Trace(Mapping):
    """Ordered name -> (value, dims). Insertion order is forward-pass order.

    To a reader it is a read-only mapping of trace name -> numpy array: `r.tensors[name]`,
    `list(r.tensors)`, `dict(r.tensors)`, `for name in r.tensors`, `.keys()`, `.values()`,
    `.items()` (name, array). `entries()` also gives each tensor's dims. Only the model's
    taps (and the analysis that builds a result) add to it."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def add(self, name: str, value: Any, dims: Iterable[str]) -> None:
        dims = tuple(dims)
        if len(dims) != value.ndim:
            raise ValueError(f"{name}: dims {dims} do not match shape {tuple(value.shape)}")
        self._entries[name] = Entry(value, dims)

    def take(self, name: str, batch: Any, dims: Iterable[str]) -> None:
        """What a Tap hands over: the whole batch (B, *dims). A Trace keeps row 0 (tfx
        runs one text); core/datasets' traces take every row of a batch of windows."""
        self.add(name, batch[0].detach(), dims)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(list(self._entries))  # a snapshot: reading may replace entries' values

    # Mapping would compare every array (numpy's == is elementwise, and ambiguous in an
    # if) and make a Trace unhashable; a Trace stays equal to itself alone, as before
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def names(self) -> list[str]:
        return list(self._entries)

    def dims(self, name: str) -> tuple[str, ...]:
        return self._entries[name].dims

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name].value.shape)

    def raw(self, name: str) -> Any:
        entry = self._entries[name]
        if isinstance(entry.value, Lazy):
            entry.value = entry.value.compute()
        return entry.value

    def array(self, name: str) -> np.ndarray:
        """The tensor as a read-only numpy array: a result's numbers are what was
        computed, and a reader who changes one by mistake gets an error, not a quietly
        different view, JSON or plot (np.array(r.tensors[name]) is a writable copy)."""
        value = self.raw(name)
        if is_ndarray(value):
            if value.flags.writeable:
                value = read_only(value)
                self._entries[name].value = value
            return value
        value = value.detach()  # a torch tensor, handled without importing torch
        if str(value.dtype) in _HALF:
            # numpy has no bfloat16: half-precision values are written as the float32
            # numbers they are (exactly), so views and JSON read one dtype
            value = value.float()
        array = read_only(value.cpu().numpy())
        self._entries[name].value = array
        return array

    def __getitem__(self, name: str) -> np.ndarray:
        return self.array(name)

    def entries(self):
        """(name, array, dims) for every tensor, in forward order."""
        for name in list(self._entries):
            yield name, self.array(name), self._entries[name].dims

    def __repr__(self) -> str:
        shown = ", ".join(f"{name} {tuple(self.shape(name))}" for name in self._entries)
        return f"Trace({shown})"

    def subset(self, names: Iterable[str]) -> "Trace":
        out = Trace()
        for name in names:
            out._entries[name] = self._entries[name]
        return out


def compile_globs(globs: Iterable[str]) -> re.Pattern:
    """One regex for a list of shell-style globs (`*` crosses dots, as in gh --json)."""
    parts = [fnmatch.translate(g) for g in globs]
    return re.compile("|".join(parts) if parts else r"(?!)")


def check_globs(globs: Iterable[str], valid: list[str]) -> None:
    """Every glob must match at least one valid name; the error lists the valid ones."""
    for glob in globs:
        rx = compile_globs([glob])
        if not any(rx.match(name) for name in valid):
            raise SelectError(f"--select {glob!r} matches no trace name; valid names: "
                              f"{summarise_names(valid)}")


def summarise_names(names: list[str]) -> str:
    """Collapse per-layer names (`blocks.{i}.x`) so the list fits in one line."""
    seen: list[str] = []
    for name in names:
        generic = re.sub(r"^blocks\.\d+\.", "blocks.{i}.", name)
        if generic not in seen:
            seen.append(generic)
    return ", ".join(seen)
