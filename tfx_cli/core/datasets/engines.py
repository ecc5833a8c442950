"""Engines: where batches run. The pipeline hands an engine a WorkerSpec and the batches
in order; the engine builds one worker per process from the spec (the model loaded once)
and yields each batch with its partial result, in the order it was given. Nothing else
is an engine's business: batches are planned before (windows.py) and partial results
reduced after (pipeline.py), in batch order, so every engine gives the same bytes.

An engine is any object with `name` and `map(spec, batches)`; `local` runs the worker in
this process. A Ray engine maps the same WorkerSpec over Ray Data actors (one Worker per
actor, `__call__` per batch) and restores the batch order before yielding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

from ...errors import UsageError


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, picklable: the model options and the task (a frozen
    dataclass with `select` and `compute(loaded, batch) -> partial`)."""

    model: Any  # core.spec.ModelSpec
    task: Any


class Worker:
    """One per process: loads the model once, then maps batches to partial results."""

    def __init__(self, spec: WorkerSpec):
        from ..load import load

        self.loaded = load(spec.model)  # the process's cached model when it has one
        self.task = spec.task

    def __call__(self, batch) -> Any:
        return self.task.compute(self.loaded, batch)


class Engine(Protocol):
    name: str

    def map(self, spec: WorkerSpec, batches: Iterable) -> Iterator[tuple[Any, Any]]:
        """(batch, partial) for every batch, in the order of `batches`."""


class LocalEngine:
    name = "local"

    def map(self, spec: WorkerSpec, batches: Iterable) -> Iterator[tuple[Any, Any]]:
        worker = None
        for batch in batches:
            worker = worker or Worker(spec)  # nothing is loaded for an empty run
            yield batch, worker(batch)


ENGINES = {"local": LocalEngine}


def get_engine(name: str = "local") -> Engine:
    if name not in ENGINES:
        raise UsageError(f"--engine {name!r} is not an engine; valid: {', '.join(ENGINES)}")
    return ENGINES[name]()


__all__ = ["WorkerSpec", "Worker", "Engine", "LocalEngine", "get_engine", "ENGINES"]
