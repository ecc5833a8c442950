"""The error catalogue. Every failure a user can cause is one of these classes.

The one handler in `cli.py` prints `tfx: error: <message>` on stderr and exits with the
class's code. Messages name the problem and the fix in one line.

Exit codes: 0 success, 1 runtime failure, 2 bad input or usage, 130 interrupted.
"""
from __future__ import annotations


class TfxError(Exception):
    """Base class: a runtime failure that is not the user's input (exit 1)."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = " ".join(str(message).split())  # always one line


class UsageError(TfxError):
    """Bad input or usage: options, values, text (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """An unknown preset, a malformed config file, or an impossible shape."""


class InputTextError(UsageError):
    """Empty text, text longer than the context, undecodable stdin."""


class TokenizerError(UsageError):
    """An unknown tokenizer, an unreadable tokenizer.json, out-of-vocabulary ids."""


class RangeError(UsageError):
    """A layer, head or position outside the model."""


class SelectError(UsageError):
    """A --select glob or --show name that matches nothing."""


class WeightsError(UsageError):
    """A missing, truncated, corrupted, unsafe or mismatched checkpoint."""


class MissingPackageError(UsageError):
    """An optional package is not installed; the message gives the install command."""


class OutputFileError(UsageError):
    """An output file that exists (without --force) or cannot be written."""


class ResourceError(UsageError):
    """A model that would not fit in memory (use --force to try anyway)."""


CATALOGUE = (UsageError, ConfigError, InputTextError, TokenizerError, RangeError,
             SelectError, WeightsError, MissingPackageError, OutputFileError, ResourceError)
