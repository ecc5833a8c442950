"""Precision, device and memory budget: what a run may hold, before anything is allocated.

Pure Python (no torch): the options are checked, and a budget is worked out, before a
model command pays for importing torch.

The budget (`--max-memory`, default: the memory the machine has free less a margin)
covers what tfx allocates for a run: the weights it holds at once, the KV cache, the
recorded intermediates and one block's working space. The interpreter and torch's own
libraries (about 220 MB here) come on top. A checkpoint whose weights do not fit is
streamed from disk one part at a time (core/streaming.py); what still cannot fit is
refused with a one-line error before it is allocated.
"""
from __future__ import annotations

import math
import re

from ..errors import ResourceError, UsageError

# --dtype: the name the user types -> bytes per value. Norms and softmax accumulate in
# float32 whatever the dtype (model.py), as transformers does for half precision.
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
DEVICES = ("cpu", "cuda", "mps")

# the share of free memory a run may plan on when --max-memory is not given: the rest is
# left to the interpreter, torch's libraries and the other programs on the machine
FREE_SHARE = 0.9

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise UsageError(f"--dtype {name} is not one tfx runs in; choose float32 (the "
                         "default), bfloat16 or float16")
    return name


def check_device(name: str) -> str:
    """cpu, cuda, cuda:N or mps (whether torch has it is checked once torch is loaded)."""
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and (kind != "cuda" or not index.isdigit())):
        raise UsageError(f"--device {name} is not a device tfx knows; choose cpu (the "
                         "default), cuda (or cuda:N) or mps")
    return name


def parse_size(text: str, option: str = "--max-memory") -> int:
    """'300MB', '2GB', '1.5GiB', '4096' (bytes) -> bytes. KB, MB, GB, TB are powers of
    1000; KiB, MiB, GiB, TiB powers of 1024."""
    found = _SIZE.match(str(text))
    unit = found.group(2).lower() if found else ""
    if not found or unit not in _UNITS and unit != "":
        raise UsageError(f"{option} {text!r} is not a size; write it like 300MB, 2GB or "
                         "1.5GiB")
    size = float(found.group(1)) * _UNITS.get(unit, 1)
    if not math.isfinite(size) or size < 1:
        raise UsageError(f"{option} {text!r} is not a size; write it like 300MB, 2GB or "
                         "1.5GiB")
    return int(size)


def format_size(n: float) -> str:
    """Bytes as the user writes them back: 1.42 GB, 300 MB, 812 kB."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


def option_size(n: float) -> str:
    """A size to type back after --max-memory, rounded up: 61MB, 1.5GB."""
    for unit, size in (("GB", 10**9), ("MB", 10**6)):
        if n >= size:
            value = n / size
            return (f"{math.ceil(value * 10) / 10:g}{unit}" if value < 10 else
                    f"{math.ceil(value)}{unit}")
    return f"{math.ceil(n / 10**3)}kB"


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class Budget:
    """How many bytes a run may hold: --max-memory when given, else the free memory less
    a margin (None where the machine does not say: nothing is refused then)."""

    def __init__(self, max_memory: str | None = None, *, free: int | None = None,
                 force: bool = False):
        self.given, self.force = max_memory is not None, force
        if self.given:
            self.bytes = parse_size(max_memory)
        else:
            free = available_memory() if free is None else free
            self.bytes = None if free is None else int(FREE_SHARE * free)
        self.text = max_memory

    @property
    def known(self) -> bool:
        return self.bytes is not None

    def fits(self, need: int) -> bool:
        return self.bytes is None or need <= self.bytes

    def describe(self) -> str:
        """What fits, as a message says it: '--max-memory is 300MB', or the free memory."""
        if self.given:
            return f"--max-memory is {self.text}"
        return f"only {format_size(self.bytes)} of memory is free to plan on"

    def refuse_part(self, name: str, part: str, need: int, parts: dict[str, int],
                    dtype: str) -> ResourceError:
        """A streamed model's largest part does not fit: what it needs, what to pass."""
        where = f"--max-memory {self.text}" if self.given else \
            f"the free memory ({format_size(self.bytes)} to plan on)"
        from .config import split_stack

        stack, kind = split_stack(part)  # "encoder.blocks.0", "decoder.embed"
        if kind.startswith("blocks."):
            what = (f"one {stack + ' ' if stack else ''}block of {name}: each "
                    f"{stack + ' ' if stack else ''}block needs {format_size(need)} in {dtype}")
        else:
            block = max((v for k, v in parts.items() if "blocks" in k.split(".")), default=0)
            noun = {"embed": "embedding", "head": "output head", "ln_f": "final norm"}[kind]
            whose = f"the {stack}'s {noun}" if stack else f"the {noun}"
            what = (f"{whose} of {name}, read as one part: it needs {format_size(need)} in "
                    f"{dtype}" + (f" (a block {format_size(block)})" if block else ""))
        halve = ", or --dtype bfloat16 to halve it" if dtype == "float32" else ""
        return ResourceError(f"{where} cannot hold {what}; pass --max-memory "
                             f"{option_size(need * 1.25)} or more{halve}")

    def refuse(self, what: str, need: int, parts: dict[str, int], fix: str) -> ResourceError:
        """The one-line refusal: what was asked and what it needs, part by part, what
        fits, and what to do instead."""
        spelled = ", ".join(f"{name} {format_size(size)}" for name, size in parts.items()
                            if size)
        return ResourceError(f"{what} needs about {format_size(need)} ({spelled}) but "
                             f"{self.describe()}; {fix}")




def overflows_float16(cfg) -> bool:
    """Is this a family whose activations are known to pass float16's range? Gemma
    (norms scaling by 1 + w and embeddings times sqrt(d_model) are its marks): measured,
    gemma3-270m's residual stream reaches 54,688 after block 6 and inf in block 7 on a
    five-word prompt (float16's largest value is 65,504)."""
    return cfg.norm_plus_one and cfg.embed_scale


def check_precision(cfg, dtype: str, *, force: bool = False) -> None:
    """Refuse, before any weights are read, a precision the model is known to overflow
    (--force tries anyway; the run then stops at the first value that overflows)."""
    if dtype == "float16" and overflows_float16(cfg) and not force:
        raise UsageError(f"{cfg.name} is a Gemma model, whose activations grow past "
                         "float16's largest value (65,504), so its logits would be NaN; run "
                         "it in --dtype bfloat16 (float32's range, half the memory) or "
                         "float32 (--force tries float16 anyway)")

__all__ = ["DTYPES", "DEVICES", "check_dtype", "check_device", "parse_size", "format_size",
           "check_precision", "overflows_float16",
           "option_size", "available_memory", "Budget"]
