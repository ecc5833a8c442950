"""What a value given for an option may be: one checker per kind, shared by the command
line and the Python API, so both accept the same things and refuse the rest with the
same `tfx_cli.errors` class and the same one-line message.

    as_text(value, "--toward")             str, or bytes decoded as UTF-8
    as_names(value, "--ablate")            one name or many: "a", "a,b", ["a", "b,c"]
    as_texts(value, "--stop")              one text or many, commas kept
    as_int(value, "--layer", minimum=0)    whole numbers (not True/False, not 1.5)
    as_units(value, "--units")             '0,5,9', '0:64' or a list of whole numbers
    as_float(value, "--scale", finite=True)
    as_flag(value, "--truncate")           True or False
    as_choice(value, "--site", PATCH_SITES)
    as_path(value, "--corpus")

A string where a list is accepted is one item (never its characters), and each item may
hold several names separated by commas, as `--ablate a,b` does on the command line. The
number messages are the ones Click prints for the same value typed after the option
("Invalid value for '--layer': 'x' is not a valid integer."), so a notebook and a shell
read the same words. None is "not given" everywhere.

Pure Python, at the bottom of the package beside errors.py: options.py (the CLI) and
api/ (which applies these to every keyword, api/_options.py) both import it.
"""
from __future__ import annotations

import math
import numbers
import os
from enum import Enum
from pathlib import Path
from typing import Any, Iterable

from .errors import InputTextError, UsageError


def _invalid(option: str, value: Any, what: str) -> UsageError:
    shown = repr(value) if isinstance(value, str) else value
    return UsageError(f"Invalid value for '{option}': {shown} is not {what}.")


def _type_name(value: Any) -> str:
    return type(value).__name__


def as_text(value: Any, option: str) -> str | None:
    """A text: str as it is, bytes decoded as UTF-8 (refused by name when they are not),
    a number as the text it would be on the command line. Anything else is refused."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Enum):
        return as_text(value.value, option)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputTextError(
                f"{option} is bytes that are not UTF-8 (byte {exc.start}: "
                f"0x{data[exc.start]:02x}); decode them to str first, e.g. "
                "data.decode('latin-1')") from None
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return str(value)
    raise UsageError(f"{option} takes text (a str), not {_type_name(value)} {value!r:.60}")


def _items(value: Any, option: str) -> list[str]:
    """The items of a one-or-many value: a text (or bytes, or a number) is one item."""
    if isinstance(value, (str, bytes, bytearray, memoryview, numbers.Number, Enum)):
        return [as_text(value, option)]
    if isinstance(value, dict) or not isinstance(value, Iterable):
        raise UsageError(f"{option} takes a text or a list of texts, not "
                         f"{_type_name(value)} {value!r:.60}")
    return [as_text(item, option) if item is not None else _none_item(option)
            for item in value]


def _none_item(option: str):
    raise UsageError(f"{option} has an empty item (None); give names, e.g. {option} a,b")


def as_names(value: Any, option: str) -> list[str] | None:
    """Names (sites, globs, stages): one or many, each item comma-separated in turn, as
    `--ablate a,b --ablate c` gives [a, b, c]. An empty name is refused: it is never
    "everything"."""
    if value is None:
        return None
    items = _items(value, option)
    parts = [part.strip() for item in items for part in item.split(",")]
    if any(not part for part in parts):
        raise UsageError(f"{option} has an empty name ({', '.join(map(repr, items))}); give "
                         f"names separated by commas, e.g. {option} a,b")
    return parts


def as_texts(value: Any, option: str) -> list[str] | None:
    """Texts given one or many times (--stop, --toward): commas are part of a text."""
    if value is None:
        return None
    return _items(value, option)


def as_int(value: Any, option: str, *, minimum: int | None = None,
           maximum: int | None = None) -> int | None:
    """A whole number (int, a numpy integer, an integral float, or its digits as text),
    within [minimum, maximum] when given."""
    if value is None:
        return None
    number: Any = value
    # Click's words: an option with bounds is an "int range"
    what = "a valid integer" if minimum is None and maximum is None else "a valid int range"
    if isinstance(value, bool) or isinstance(value, Enum):
        raise _invalid(option, value, what)
    if isinstance(value, (str, bytes)):
        text = as_text(value, option).strip()
        try:
            number = int(text)
        except ValueError:
            raise _invalid(option, as_text(value, option), what) from None
    elif isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        number = int(value)
    else:
        raise _invalid(option, value, what)
    _check_range(option, number, minimum, maximum)
    return number


def as_units(value: Any, option: str) -> str | None:
    """Unit indices: a text as the command line takes it ('0,5,9', '0:64', left for the
    command to read against its width) or a list of whole numbers, given back as that
    text. A number that is not whole (1.5) is refused, never rounded to a unit."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return as_text(value, option)
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return str(as_int(value, option))
    if isinstance(value, (dict, set, frozenset)) or not isinstance(value, Iterable):
        raise UsageError(f"{option} takes unit indices, '0,5,9' or '0:64' or a list of whole "
                         f"numbers, not {_type_name(value)} {value!r:.60}")
    units = [as_int(unit, option) for unit in value]
    if not units:
        raise UsageError(f"{option} is an empty list; give unit indices, e.g. [0, 5] or "
                         "'0:16'")
    return ",".join(map(str, units))


def as_float(value: Any, option: str, *, minimum: float | None = None,
             maximum: float | None = None, finite: bool = False,
             example: float | None = None) -> float | None:
    """A real number (int, float, numpy scalar or its text); `finite` refuses inf and
    NaN, suggesting `example` (a value the option takes) when given."""
    if value is None:
        return None
    if isinstance(value, (bool, Enum)):
        raise _invalid(option, value, "a valid float")
    if isinstance(value, (str, bytes)):
        text = as_text(value, option)
        try:
            number = float(text.strip())
        except ValueError:
            raise _invalid(option, text, "a valid float") from None
    elif isinstance(value, numbers.Real):
        number = float(value)
    else:
        raise _invalid(option, value, "a valid float")
    if finite and not math.isfinite(number):
        hint = "" if example is None else f", e.g. {example:g}"
        raise UsageError(f"{option} {value} must be a finite number{hint}")
    _check_range(option, number, minimum, maximum)
    return number


def _check_range(option: str, number, minimum, maximum) -> None:
    if minimum is not None and maximum is not None and not minimum <= number <= maximum:
        raise _invalid(option, number, f"in the range {minimum}<=x<={maximum}")
    if minimum is not None and number < minimum:
        raise _invalid(option, number, f"in the range x>={minimum}")
    if maximum is not None and number > maximum:
        raise _invalid(option, number, f"in the range x<={maximum}")


def as_flag(value: Any, option: str) -> bool:
    """A flag: True or False (None is False; 0 and 1 are read as False and True)."""
    if value is None:
        return False
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        # numpy's bool, found without importing numpy
        return bool(value)
    raise UsageError(f"{option} is a flag: pass True or False, not {_type_name(value)} "
                     f"{value!r:.60}")


def as_choice(value: Any, option: str, choices: Iterable[str]) -> str | None:
    """One of `choices` (an Enum member counts as its value)."""
    if value is None:
        return None
    choices = list(choices)
    text = as_text(value.value if isinstance(value, Enum) else value, option)
    if text not in choices:
        raise _invalid(option, text, "one of " + ", ".join(repr(c) for c in choices))
    return text


def as_path(value: Any, option: str) -> Path | None:
    """A file or folder name: str, bytes (UTF-8) or any os.PathLike."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        return Path(value)
    text = as_text(value, option) if isinstance(value, (str, bytes)) else None
    if text is None:
        raise UsageError(f"{option} takes a path (str or pathlib.Path), not "
                         f"{_type_name(value)} {value!r:.60}")
    if not text.strip():  # Path("") would quietly be ".", the current folder
        raise UsageError(f"{option} is empty; give a file or folder name")
    return Path(text)


__all__ = ["as_text", "as_names", "as_texts", "as_int", "as_units", "as_float", "as_flag",
           "as_choice", "as_path"]
