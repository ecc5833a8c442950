"""A worker: what one process (this one for the local engine, a Ray actor for the ray
engine) builds from a WorkerSpec, once, and then maps batches with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


__all__ = ["WorkerSpec", "Worker"]
