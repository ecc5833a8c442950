"""Engines: where batches run. The pipeline hands an engine a WorkerSpec and the batches
in order; the engine builds one worker per process from the spec (the model loaded once)
and yields each batch with its partial result, in the order it was given. Nothing else
is an engine's business: batches are planned before (windows.py) and partial results
reduced after (pipeline.py), in batch order, so every engine gives the same bytes.

An engine is any object with `name` and `map(spec, batches)`, used as a context manager
around a run (the ray engine starts or joins a Ray runtime and lets it go after); `local`
runs the worker in this process; `ray` (ray_engine.py, imported only when asked for) maps
the same WorkerSpec over Ray Data actors (one Worker per actor, `__call__` per batch) and
restores the batch order before yielding.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol

from ...errors import UsageError
from .worker import Worker, WorkerSpec


class Engine(Protocol):
    name: str

    def map(self, spec: WorkerSpec, batches: Iterable) -> Iterator[tuple[Any, Any]]:
        """(batch, partial) for every batch, in the order of `batches`."""


class LocalEngine:
    """In this process, one batch after another (the default)."""

    name = "local"

    def __init__(self, verbose: bool = False, **options):
        given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
        if given:
            raise UsageError(f"{given[0]} is an option of --engine ray; the local engine runs "
                             f"in this process: drop {given[0]}, or add --engine ray")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def map(self, spec: WorkerSpec, batches: Iterable) -> Iterator[tuple[Any, Any]]:
        worker = None
        for batch in batches:
            worker = worker or Worker(spec)  # nothing is loaded for an empty run
            yield batch, worker(batch)


def _ray_engine():
    from .ray_engine import RayEngine  # Ray is imported only when it is asked for

    return RayEngine


ENGINES = {"local": lambda: LocalEngine, "ray": _ray_engine}


def get_engine(name: "str | Engine" = "local", **options) -> Engine:
    """The engine called `name`, built with its options (ray_address=, workers=,
    gpus_per_worker= for ray; verbose= for both); an engine object as it is."""
    if not isinstance(name, str):
        return name
    if name not in ENGINES:
        raise UsageError(f"--engine {name!r} is not an engine; valid: {', '.join(ENGINES)}")
    return ENGINES[name]()(**options)


def engine_name(engine: "str | Engine") -> str:
    return engine if isinstance(engine, str) else engine.name


__all__ = ["WorkerSpec", "Worker", "Engine", "LocalEngine", "get_engine", "engine_name",
           "ENGINES"]
