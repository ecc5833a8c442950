"""The ray engine: the pipeline's batches on a pool of model actors with Ray Data.

    planned batches (this process) -> ray.data.from_items, one block per batch
    -> map_batches(RayWorker, compute=ActorPoolStrategy(size=workers), batch_size=1)
    -> partial results, put back in batch order here -> the pipeline's reduction

What runs where:
- Windows and batches are planned in this process (windows.py, the same plan as local);
  the batches go to Ray in segments of at most SEGMENT_TOKENS tokens per worker, so
  neither the plan nor the partial results of a whole corpus are ever held at once.
  Each segment is one Ray Data run (its actors load the model once per segment).
- Weights: each actor loads the model itself from the ModelSpec, i.e. from the same
  path or alias the command was given (a packaged model such as smollm2, a checkpoint
  path, or a seeded random config, which every process builds bit for bit alike). On a
  cluster that path must be readable on every node (a shared or copied folder, or the
  packaged alias with tfx installed there). Shipping the tensors through the object
  store instead would copy the whole model through the driver for every run; a path
  costs nothing when the nodes already have it, which is the usual case.
- Order: Ray Data keeps the outputs in input order (preserve_order), holding partials
  that finish early in its object store (spilled to disk when full) instead of in this
  process; the reorder buffer here then only ever holds what arrives, and checks that
  every batch came back exactly once. The reduction runs in batch order, so the output
  is the same bytes as --engine local, whatever the number of workers.
- Resumption is tfx's own: the output folder's manifest (store.py) records finished
  chunks and shards, exactly as for the local engine. Ray Data's job checkpointing
  (CheckpointConfig) wants a read -> write pipeline keyed by row ids; the reductions of
  scan, top and patch happen in this process and collect's shards are numbered by token
  range, which the manifest already covers, so it is not used.
- Faults: Ray Data creates its actors with max_restarts=-1 and max_task_retries=-1 (its
  defaults, which map_batches no longer takes as arguments): a killed actor is restarted
  and the batch it held runs again on it; a batch's result does not depend on which actor
  ran it, and a batch returned twice is taken once.
- Small machines: an actor asks for CPUS_PER_WORKER (half a CPU), so two workers fit on a
  2-core machine with room for Ray's own tasks (actors holding a whole CPU each can starve
  the rest of the pipeline and hang without an error). Each actor runs torch with the
  cluster's CPUs divided among the workers (at least one thread).

Nothing here draws: Ray's log lines and progress bars stay off the terminal unless
verbose; progress is the pipeline's own, fed as ordered results arrive.
"""
from __future__ import annotations

import logging
import os
import pickle
import shutil
import socket
from typing import Any, Iterable, Iterator

from ...errors import MissingPackageError, ResourceError, TfxError, UsageError
from .worker import Worker, WorkerSpec

INSTALL = "pip install 'tfx-cli[ray]' (or pip install 'ray[data]')"
CPUS_PER_WORKER = 0.5
SEGMENT_TOKENS = 1 << 22  # planned tokens handed to Ray at once, per worker
CONNECT_TIMEOUT_S = 5.0


def import_ray():
    try:
        import ray
        import ray.data  # noqa: F401  (the pipeline runs on Ray Data)
    except ImportError:
        raise MissingPackageError(f"--engine ray needs Ray, which is not installed: {INSTALL}")
    return ray


def check_reachable(address: str) -> None:
    """Refuse an address nothing listens on before Ray spends a minute finding that out.
    'auto' and 'local' are Ray's own words and pass as they are."""
    if address in ("auto", "local"):
        return
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray-address {address!r} is not HOST:PORT; give the head node's "
                         "address as `ray start --head` printed it, e.g. 10.0.0.5:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(f"--ray-address {address}: no Ray cluster answers there ({why}); start "
                         "one with `ray start --head` on that machine, or drop --ray-address "
                         "(and RAY_ADDRESS) to run on a Ray runtime started for this run"
                         ) from None


class RayWorker:
    """One model per actor: the pipeline's Worker, fed pickled batches by Ray Data."""

    def __init__(self, spec: WorkerSpec, threads: int, device: str | None):
        import torch

        torch.set_num_threads(max(1, min(threads, os.cpu_count() or 1)))
        if device is not None:
            from dataclasses import replace

            spec = WorkerSpec(replace(spec.model, device=device), spec.task)
        self.worker = Worker(spec)

    def __call__(self, rows: dict) -> dict:
        import numpy as np

        out = [pickle.dumps(_compact(self.worker(pickle.loads(bytes(b)))), protocol=5)
               for b in rows["batch"]]
        return {"i": np.asarray(rows["i"], dtype=np.int64),
                "partial": np.array(out, dtype=object)}


def _compact(partial: Any) -> Any:
    """Tensors travel as CPU tensors of only the rows a batch produced (they already are;
    this makes sure nothing on a GPU is pickled)."""
    if isinstance(partial, dict):
        return {k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in partial.items()}
    return partial


class RayEngine:
    name = "ray"

    def __init__(self, *, ray_address: str | None = None, workers: int | None = None,
                 gpus_per_worker: float | None = None, verbose: bool = False):
        if workers is not None and workers < 1:
            raise UsageError(f"--workers {workers} must be at least 1")
        if gpus_per_worker is not None and gpus_per_worker < 0:
            raise UsageError(f"--gpus-per-worker {gpus_per_worker:g} must be 0 or more")
        import_ray()
        address = ray_address
        if address is not None and not str(address).strip():
            raise UsageError("--ray-address is empty; give HOST:PORT of a Ray head node, or "
                             "drop it to start a Ray runtime for this run")
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.given = "--ray-address" if address else "RAY_ADDRESS"
        self.workers = workers or 1
        self.gpus = float(gpus_per_worker or 0.0)
        self.verbose = verbose
        self.started: str | None = None  # the temp dir of a runtime this engine started
        self.lock: int | None = None  # its flock: held while this driver runs
        self.quiet: _QuietFd2 | None = None
        self.connected = False
        self.threads = 1
        self.startup_s = 0.0
        if self.address:
            check_reachable(self.address)
        else:  # a runtime of this machine's CPUs: refuse what it cannot hold before starting
            self._check({"CPU": float(os.cpu_count() or 1), "GPU": _local_gpus()},
                        "this machine")

    # -- the runtime ----------------------------------------------------------------------
    def __enter__(self):
        if self.address:
            self.connect()  # an unreachable or too small cluster fails before the model loads
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self):
        import time

        ray = import_ray()
        if self.connected:
            return ray
        t0 = time.perf_counter()
        quiet = dict(log_to_driver=self.verbose, configure_logging=True,
                     logging_level=logging.INFO if self.verbose else logging.ERROR)
        if not self.verbose:
            self.quiet = _QuietFd2().start()
        try:
            if ray.is_initialized():
                pass  # a runtime this process already holds (a notebook, a test) is used
            elif self.address:
                try:
                    ray.init(address=self.address, **quiet)
                except (ConnectionError, RuntimeError) as exc:
                    raise UsageError(f"{self.given} {self.address}: cannot join the Ray cluster "
                                     f"({str(exc).splitlines()[0][:160]}); if it uses token "
                                     "authentication (Ray's default), set RAY_AUTH_MODE=token "
                                     "and its token (RAY_AUTH_TOKEN or ~/.ray/auth_token), and "
                                     "check the address `ray start --head` printed") from None
            else:
                from .ray_leftovers import clean_stale, make_folder

                clean_stale()  # what a driver killed with SIGKILL left (its agents, folder)
                self.started, self.lock = make_folder()
                ray.init(address="local", num_cpus=os.cpu_count() or 1, _temp_dir=self.started,
                         include_dashboard=False, **quiet)
        except BaseException:
            self.close()
            raise
        self.connected = True
        self.startup_s = time.perf_counter() - t0
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.INFO if self.verbose else logging.ERROR)
        resources = ray.cluster_resources()
        where = "the Ray runtime started for this run" if self.started else \
            f"the Ray cluster at {self.address}" if self.address else "this process's Ray runtime"
        try:
            self._check(resources, where)
        except ResourceError:
            self.close()
            raise
        # every worker computes with the driver's torch thread count, as a local run
        # would: matrix products round differently with another number of threads, and
        # the output must be the same bytes as --engine local
        import torch

        self.threads = torch.get_num_threads()
        return ray

    def _check(self, resources: dict, where: str) -> None:
        cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
        fit = int(cpus // CPUS_PER_WORKER)
        if self.gpus:
            fit = min(fit, int(gpus // self.gpus + 1e-9))
        if self.workers <= fit:
            return
        need = f"{self.workers * CPUS_PER_WORKER:g} CPUs"
        if self.gpus:
            need += f" and {self.workers * self.gpus:g} GPUs"
        has = f"{cpus:g} CPUs" + (f" and {gpus:g} GPUs" if self.gpus else "")
        more = "run on a Ray cluster with more (--ray-address)" if where == "this machine" \
            else "add nodes (`ray start --address HEAD:PORT` on each)"
        fix = f"pass --workers {fit} or fewer, or {more}" if fit else \
            f"{more}, or drop --gpus-per-worker"
        raise ResourceError(f"--workers {self.workers} needs {need} ({CPUS_PER_WORKER:g} CPU"
                            f"{f' and {self.gpus:g} GPU' if self.gpus else ''} per worker), but "
                            f"{where} has {has}, so the run could not start; {fix}")

    def close(self) -> None:
        if self.started is not None:
            import ray

            from .ray_leftovers import release

            ray.shutdown()
            shutil.rmtree(self.started, ignore_errors=True)
            self.started = None
            release(self.lock)
            self.lock = None
        if self.quiet is not None:
            self.quiet.stop()
            self.quiet = None
        self.connected = False

    # -- the map --------------------------------------------------------------------------
    def map(self, spec: WorkerSpec, batches: Iterable) -> Iterator[tuple[Any, Any]]:
        stream = iter(batches)
        budget = SEGMENT_TOKENS * self.workers
        while True:
            segment, tokens = [], 0
            for batch in stream:
                segment.append(batch)
                tokens += getattr(batch, "tokens", 1)
                if tokens >= budget:
                    break
            if not segment:
                return
            yield from self._segment(spec, segment)

    def _segment(self, spec: WorkerSpec, segment: list) -> Iterator[tuple[Any, Any]]:
        ray = self.connect()
        from ray.data import ActorPoolStrategy, DataContext

        context = DataContext.get_current()
        saved = (context.enable_progress_bars, context.enable_operator_progress_bars,
                 context.execution_options.preserve_order)
        context.enable_progress_bars = context.enable_operator_progress_bars = self.verbose
        context.execution_options.preserve_order = True
        try:
            items = [{"i": i, "batch": pickle.dumps(b, protocol=5)}
                     for i, b in enumerate(segment)]
            device = "cuda" if self.gpus and spec.model.device == "cpu" else None
            data = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
                RayWorker, fn_constructor_args=(spec, self.threads, device),
                compute=ActorPoolStrategy(size=min(self.workers, len(items))), batch_size=1,
                batch_format="numpy", num_cpus=CPUS_PER_WORKER, num_gpus=self.gpus or None)
            del items
            ready: dict[int, bytes] = {}
            nxt = 0
            for rows in _rows(data):
                i, partial = rows
                if i < nxt or i in ready:
                    continue  # a batch run twice (a retried task) counts once
                ready[i] = partial
                while nxt in ready:
                    yield segment[nxt], pickle.loads(ready.pop(nxt))
                    nxt += 1
            if nxt != len(segment):
                raise TfxError(f"the Ray run returned {nxt} of {len(segment)} batches; run the "
                               "same command again (an output folder resumes)")
        finally:
            (context.enable_progress_bars, context.enable_operator_progress_bars,
             context.execution_options.preserve_order) = saved


def _rows(data) -> Iterator[tuple[int, bytes]]:
    """(batch index, pickled partial) as Ray Data hands them back; an error a worker raised
    (a TfxError: bad input found while running) comes out as itself."""
    try:
        for out in data.iter_batches(batch_size=None, batch_format="numpy",
                                     prefetch_batches=1):
            for i, partial in zip(out["i"], out["partial"]):
                yield int(i), partial
    except Exception as exc:  # Ray wraps what a worker raised
        cause = _tfx_cause(exc)
        if cause is not None:
            raise cause from None
        raise


def _tfx_cause(exc: BaseException | None) -> TfxError | None:
    """The TfxError a worker raised, under Ray's wrappers (whose `cause` is the original)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None)
        if isinstance(exc, TfxError) and not isinstance(inner, BaseException):
            return exc
        exc = inner if isinstance(inner, BaseException) else exc.__cause__ or exc.__context__
    return None


class _QuietFd2:
    """Ray's C++ core writes its own warnings straight to file descriptor 2 (e.g. one line
    per actor pool about constructor arguments in the object store), past Python's
    logging. While Ray runs, descriptor 2 goes to /dev/null (so do the processes a local
    runtime starts) and Python's sys.stderr, when it was descriptor 2, keeps the terminal
    through a copy of it: tfx's progress bar and errors still show. --verbose skips this."""

    def start(self) -> "_QuietFd2":
        import io
        import sys

        try:
            sys.stderr.flush()
            real = sys.stderr.fileno() == 2
        except (AttributeError, OSError, ValueError):
            real = False  # a captured stderr (tests, notebooks) is not descriptor 2
        self.saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        self.python = None
        if real:
            self.python = sys.stderr
            sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(self.saved), "w"),
                                          encoding=self.python.encoding,
                                          errors=self.python.errors, line_buffering=True)
        return self

    def stop(self) -> None:
        import sys

        if self.python is not None:
            try:
                sys.stderr.flush()
                sys.stderr.close()
            finally:
                sys.stderr = self.python
        os.dup2(self.saved, 2)
        os.close(self.saved)


def _local_gpus() -> float:
    try:
        import torch

        return float(torch.cuda.device_count())
    except Exception:
        return 0.0


__all__ = ["RayEngine", "RayWorker", "import_ray", "check_reachable", "INSTALL",
           "CPUS_PER_WORKER"]
