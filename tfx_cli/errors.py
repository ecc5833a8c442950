"""The error catalogue. Every failure a user can cause is one of these classes.

The one handler in `cli.py` prints `tfx: error: <message>` on stderr and exits with the
class's code. Messages name the problem and the fix in one line: what was given, why it
cannot work, and what to type instead (README "Errors" lists every class with a real
message; README "What tfx does with bad input" lists the inputs tried).

Exit codes (EXIT_CODES): 0 success, 1 runtime failure, 2 bad input or usage,
130 interrupted. Nothing is written to stdout when a command fails, and output files
are written to a temporary name and renamed, so a failure leaves no half file.
"""
from __future__ import annotations

import errno
from pathlib import Path

EXIT_CODES = {
    0: "success",
    1: "runtime failure: not the input's fault (a full disk, a failed self-check, an "
       "internal error)",
    2: "bad input or usage: an option, a value, the text, a file given on the command line",
    130: "interrupted (Ctrl-C): stopped without output and without partial files",
}


class TfxError(Exception):
    """Base class: a runtime failure that is not the user's input (exit 1)."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = " ".join(str(message).split())  # always one line


class UsageError(TfxError):
    """Bad input or usage: options, values, text (exit 2).

    Also what Click/Typer's own parsing errors become (an unknown option, a value that is
    not a number, a number below an option's minimum): the same one line, exit 2.
    """

    exit_code = 2


class ConfigError(UsageError):
    """An unknown preset, a malformed config file, or an impossible shape (exit 2).

    Config files: a JSON syntax error gives line and column; unknown keys are listed with
    the valid ones; wrong types, non-positive sizes, heads that do not divide d_model and
    sizes beyond tfx's limits are refused before anything is built.
    """


class InputTextError(UsageError):
    """Empty text, text longer than the context, undecodable stdin (exit 2).

    Longer than the context: the message gives both lengths; --truncate keeps the last
    context-length tokens. Undecodable stdin: the message gives the byte offset and
    suggests --encoding.
    """


class TokenizerError(UsageError):
    """An unknown tokenizer, an unreadable tokenizer.json or corpus, out-of-vocabulary
    ids (exit 2)."""


class RangeError(UsageError):
    """A layer, head, position, length or other index outside the model (exit 2); the
    message gives the valid range."""


class SelectError(UsageError):
    """A --select glob or --show name that matches nothing (exit 2); the message lists
    the valid names."""


class WeightsError(UsageError):
    """A missing, truncated, corrupted, unsafe or mismatched checkpoint (exit 2).

    Pickled Python code is never run: torch files are read with weights_only=True and a
    file that needs more than tensors is refused.
    """


class MissingPackageError(UsageError):
    """An optional package is not installed; the message gives the install command
    (exit 2)."""


class OutputFileError(UsageError):
    """An output file that exists (without --force) or cannot be written (exit 2)."""


class ResourceError(UsageError):
    """A model that would not fit in memory (exit 2); --force tries anyway."""


class NonFiniteError(UsageError):
    """A value became NaN or infinite while the model ran (exit 2).

    Caught where it arises (core/model/finite.py checks the residual stream after the
    embedding, every block and the head), before anything is printed: the message names
    the first trace name that went bad and the likely fix (float16 overflow: --dtype
    bfloat16; steering: a smaller --scale; training: a lower --lr). No exit-0 answer
    holds a NaN.
    """


class TranscoderError(UsageError):
    """A transcoder folder tfx cannot use for an attribution graph (exit 2): no
    config.yaml, a hook tfx does not map, a layer file missing, another model's width or
    layer count, NaN weights; the message names the folder and the fix."""


class DiskFullError(TfxError):
    """The disk (or the user's quota) filled up while tfx wrote an output (exit 1).

    Not the input's fault, so not exit 2: the same command succeeds once there is room.
    The message names the folder; the temporary file is removed, and a resumable run
    (collect, scan, top, train-sae) keeps what it had finished.
    """


DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def write_error(path, exc: OSError, after: str = "") -> TfxError:
    """The error for `exc`, met while writing `path`: DiskFullError when the disk is full
    (ENOSPC, or a quota's EDQUOT), else OutputFileError. `after` is appended to either
    message (what stays safe, how to resume)."""
    path = Path(path)
    if getattr(exc, "errno", None) in DISK_FULL:
        return DiskFullError(f"cannot write {path}: disk full (ENOSPC) in the folder "
                             f"{path.parent}; free some space there or choose another "
                             f"folder{after}")
    return OutputFileError(f"cannot write {path}: {exc.strerror or exc}{after}")


class Interrupted(TfxError):
    """Ctrl-C (SIGINT) while a command runs (exit 130).

    cli.py turns KeyboardInterrupt into `tfx: error: interrupted`; stdout gets nothing
    (JSON is written whole or not at all) and an output file being written is removed.
    """

    exit_code = 130

    def __init__(self, message: str = "interrupted"):
        super().__init__(message)


CATALOGUE = (UsageError, ConfigError, InputTextError, TokenizerError, RangeError,
             SelectError, WeightsError, MissingPackageError, OutputFileError, ResourceError,
             NonFiniteError)

# Every class a user can meet, with the base classes and the interrupt: README "Errors"
# has one row per entry (a test holds the two equal).
ALL_ERRORS = (TfxError,) + CATALOGUE + (DiskFullError, Interrupted)
