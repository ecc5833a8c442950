"""Result -> the tfx/1 JSON text. The only JSON writer: every command's --json is this.

The envelope itself is `Result.to_dict()` (core/results.py), so the Python API and the
CLI give the same document. `allow_nan=False` is a last guard: results write -inf as
null and NaN/+inf as strings, so a bare NaN can never reach stdout.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.results import Result


def dumps(result: Result) -> str:
    return json.dumps(result.to_dict(), ensure_ascii=False, allow_nan=False)
