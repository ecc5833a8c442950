"""What an option is, and how a value of each kind is read: the `Option` declaration
every reader takes (tfx_cli/option_table.py declares them all) and `checker`, the one
reader of a value that both the command line and the API call.

This module imports neither typer nor rich nor torch."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError
from .values import (as_choice, as_flag, as_float, as_int, as_names, as_path, as_text,
                     as_texts, as_units)

SEED_MAX = 2**64 - 1  # the largest seed torch.manual_seed accepts
MODEL_PANEL = "Model"
TRAIN_PANEL = "Training"


@dataclass(frozen=True)
class Option:
    """One option as both layers read it. `kind` says what a value is (text, int,
    float (finite), flag (a default of None: on, off or not given), path, folder (a path
    given on as text), names (repeatable, comma lists), texts (repeatable), floats (one or
    many finite numbers), units ('0,5,9', '0:64' or a list of ints), layers (a text such
    as '0,1,5' or 'all', or a list of ints), choice (one of `choices`), engine (a name, or
    an engine object in the API)); `minimum`/`maximum` bound an int or a float,
    `min_open`/`max_open` leave a float's bound itself out. `flags` empty makes it a
    positional argument shown as `metavar` (or its NAME)."""
    name: str
    flags: tuple[str, ...]
    kind: str
    default: Any = None
    help: str = ""
    panel: str | None = None
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    show_default: bool | None = None  # None: Typer's own rule
    min_open: bool = False
    max_open: bool = False

    @property
    def many(self) -> bool:
        return self.kind in ("names", "texts", "floats")

    @property
    def spelled(self) -> str:
        """How a message names it: its first long flag (--tie of --tie/--no-tie), or an
        argument's METAVAR."""
        if not self.flags:
            return self.metavar or self.name.upper()
        flag = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return flag.split("/")[0]

    @property
    def ranged(self) -> bool:
        return self.minimum is not None or self.maximum is not None

    def holds(self, number: float) -> bool:
        """Whether `number` lies in the declared range."""
        low, high = self.minimum, self.maximum
        return (low is None or (number > low if self.min_open else number >= low)) and \
            (high is None or (number < high if self.max_open else number <= high))

    @property
    def example(self) -> float:
        """A value an error may suggest: the default, else the middle of a two-sided
        range, else 1 or a closed bound; always one the range holds."""
        low, high = self.minimum, self.maximum
        middle = (low + high) / 2 if low is not None and high is not None else None
        for value in (self.default, middle, 1, None if self.min_open else low,
                      None if self.max_open else high):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    math.isfinite(value) and self.holds(value):
                return value
        raise ValueError(f"{self.name}: no example lies in its range")

    @property
    def interval(self) -> str:
        """The range in words, for a float's message ("0 or more", "in (0, 1]")."""
        low, high = self.minimum, self.maximum
        if high is None:
            if self.min_open:
                return "a positive number" if low == 0 else f"above {low:g}"
            return f"{low:g} or more"
        if low is None:
            return f"below {high:g}" if self.max_open else f"{high:g} or less"
        return (f"in {'(' if self.min_open else '['}{low:g}, {high:g}"
                f"{')' if self.max_open else ']'}")



TEXT_HELP = "Input text; '-' reads standard input."
SITE_HELP = ("a trace name such as blocks.0.attn.out, or blocks.{i}.resid_pre (block i's "
             "input), narrowed with :h=HEAD and/or :p=POSITION")


def opt(name, *flags, kind="text", **fields) -> Option:
    return Option(name, tuple(flags), kind, **fields)


def _engine(value, option):  # a name, or an engine object as documented
    return value if hasattr(value, "map") and not isinstance(value, str) else \
        as_text(value, option)


def _folder(value, option):
    """A file or folder name, given on as the text it is (an SAE folder: --sae)."""
    return None if value is None else str(as_path(value, option))


def _maybe_flag(value, option):
    """A flag whose None means "not given" (count-params --tie/--no-tie)."""
    return None if value is None else as_flag(value, option)


def _layers(value, option):
    """Layers as report reads them: its text ('0,1,5', '0-3', 'all'), or a list of ints
    the command checks against the model."""
    return value if not isinstance(value, (str, bytes)) else as_text(value, option)


_BY_KIND: dict[str, Callable[[Any, str], Any]] = {
    "text": as_text, "path": as_path, "names": as_names, "texts": as_texts,
    "folder": _folder, "engine": _engine, "units": as_units, "layers": _layers,
}


def _number(option: Option) -> Callable[[Any, str], Any]:
    """A float's reader: finite, within the range; each message's example in it."""
    example = option.example

    def read(value, name):
        number = as_float(value, name, finite=True, example=example)
        if number is not None and not option.holds(number):
            raise UsageError(f"{name} {number:g} must be {option.interval}, e.g. "
                             f"{example:g}")
        return number

    return read


def checker(option: Option) -> Callable[[Any, str], Any]:
    """How a value of `option` is read (the API's reader, and a float's on the command
    line too): its kind's reader, with its range and choices."""
    if option.kind == "int":
        low, high = option.minimum, option.maximum
        return lambda v, o: as_int(v, o, minimum=low, maximum=high)
    if option.kind in ("float", "floats"):
        number = _number(option)
        if option.kind == "float":
            return number
        return lambda v, o: [number(x, o) for x in v] if isinstance(v, (list, tuple)) \
            else number(v, o)
    if option.kind == "choice":
        return lambda v, o: as_choice(v, o, option.choices)
    if option.kind == "flag":
        return as_flag if option.default is not None else _maybe_flag
    return _BY_KIND[option.kind]
