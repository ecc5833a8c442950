"""Where a checkpoint, the model and a tokenizer meet: a ModelSpec in, a model ready to
run out (`load(spec)` -> Loaded). The only module that imports core.checkpoints,
core.model and core.tokenizers together; none of them imports another.

Random weights are built from the spec's seed; real weights are planned by
core/checkpoints (config, tensor names, shapes checked against the architecture before a
tensor is read) and put into a model built on the meta device, or, past the memory
budget, streamed from disk part by part (core/model/streaming.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..errors import ResourceError, UsageError, WeightsError
from ..words import counted
from .checkpoints import resolve
from .checkpoints.cache import cache_dir, cache_writer
from .checkpoints.gguf import forget as forget_gguf
from .checkpoints.plan import Plan, load_state as _load_state, plan_tensors
from .checkpoints.torchfiles import forget as forget_torch
from .config import ModelConfig, part_of
from .memory import (DTYPES, FREE_SHARE, Budget, available_memory, check_precision,
                     format_size)
from .model import Transformer, build_model
from .model.streaming import IN_MEMORY_SHARE, stream
from .params import estimate_bytes
from .progress import deferred
from .results import ModelInfo
from .spec import ModelSpec, spec_config
from .tokenizers import model_tokenizer


# tfx runs inference only, yet it never turns autograd off for the whole process: a
# notebook that loads a model with tfx and then trains its own must keep its gradients.
# Built and loaded models hold no parameter that requires a gradient (requires_grad_(False)
# below; streamed parts are made so), so no forward records a graph; building and
# assigning run under no_grad, where in-place writes to fresh parameters are allowed.
# Same seed, same text, same machine and torch: the same bytes (README "Reproducibility").
# CPU kernels here are deterministic already; this makes torch refuse, rather than
# silently use, a nondeterministic one. Filling fresh tensors with NaN would cost about
# half a second of CPU per gpt124m build (measured) and tfx initialises every tensor, so
# that check stays off.
# The switch itself, without torch.use_deterministic_algorithms's import of
# torch._inductor (to set a compiler option tfx never uses): that import costs ~1.8 s.
torch._C._set_deterministic_algorithms(True)

SHOW_READING = 256 << 20  # a checkpoint this large shows progress while it is read
# Measured here (tfx patch on smollm2, 2 CPU cores): float16 took 3x float32's time.
FLOAT16_ON_CPU = ("float16 on the CPU saves memory, not time: without float16 matrix "
                  "kernels it runs slower than float32 (about 3x here)")


@dataclass
class Loaded:
    """A model ready to run: its config, module and tokenizer, and how it was obtained."""

    cfg: ModelConfig
    model: Transformer
    tokenizer: object
    spec: ModelSpec
    budget: Budget | None = None  # what a run may hold (None: nothing is checked)
    notice: Callable[[str], None] | None = None  # one-line notes for stderr
    progress: Callable | None = None  # a factory for long work's progress (render.emit's)

    @property
    def info(self) -> ModelInfo:
        """The envelope's "model" object."""
        return model_info(self.cfg, self.spec, self.model)


def model_info(cfg: ModelConfig, spec: ModelSpec, model: Transformer | None = None) -> ModelInfo:
    return ModelInfo(config=cfg.name, weights=spec.weights,
                     seed=None if spec.weights else spec.seed, cfg=cfg, dtype=spec.dtype,
                     device=spec.device,
                     streamed=model is not None and model.residency.streamed)


_CACHE: dict = {}
_BUDGET: dict = {}  # the budget the cached model was loaded under


@torch.no_grad()
def load(spec: ModelSpec, *, blocks: int | None = None, progress=None,
         notice: Callable[[str], None] | None = None) -> Loaded:
    """Tokenizer + model for a spec. Random weights come from spec.seed.

    `blocks`: a stage that stops early (attend, ffn, layernorm at layer L: L + 1 blocks;
    embed and posenc: 0) gets random weights for those leading blocks only; the rest of
    the model is built on the meta device. PyTorch's RNG is serial, so the values that are
    built equal the whole model's bit for bit, and the seed-exact init of gpt124m's other
    blocks and head (~1 s on 2 cores) is skipped. None builds everything.
    `progress`: a context-manager factory like render.emit.progress, shown while real
    weights load (and while a streamed model reads its parts); None shows nothing.
    `notice(text)`: one-line notes for the user (a checkpoint streamed from disk).

    spec.dtype, spec.device and spec.max_memory: the precision and device of the run, and
    the memory budget (core/memory.Budget) that decides whether a checkpoint is loaded
    whole or streamed from disk (core/streaming.py), and that runs are checked against.
    """
    cfg = spec_config(spec, progress=progress)
    check_precision(cfg, spec.dtype, force=spec.force)
    tokenizer = model_tokenizer(spec, cfg)
    if not spec.weights and (spec.tokenizer or spec.corpus is not None):
        # a tokenizer the user chose for random weights sizes their embedding table
        cfg = replace(cfg, vocab_size=tokenizer.vocab_size)
    key = (cfg, spec.weights, None if spec.weights else spec.seed, spec.no_cache_weights,
           spec.dtype, spec.device, spec.max_memory, spec.force)
    want = None if spec.weights or blocks is None else min(blocks, cfg.n_layers)
    cached = _CACHE.get(key)
    if cached is None or not _covers(cached[1], want):
        _CACHE.clear()  # one model per process is plenty
        device = torch_device(spec.device)
        budget = Budget(spec.max_memory, free=device_free(device), force=spec.force)
        dtype = getattr(torch, spec.dtype)
        if spec.weights:
            model = load_weights(spec.weights, cfg, use_cache=not spec.no_cache_weights,
                                 progress=progress, dtype=spec.dtype, device=spec.device,
                                 budget=budget)
            if model.residency.streamed and notice is not None:
                notice(streaming_note(cfg, model, budget))
        else:
            check_memory(cfg, force=spec.force, dtype=spec.dtype, budget=budget)
            model = build_model(cfg, spec.seed, blocks=want, dtype=dtype,
                                device=spec.device).requires_grad_(False)
        if spec.dtype == "float16" and device.type == "cpu" and notice is not None:
            notice(FLOAT16_ON_CPU)
        _CACHE[key] = (model, want)
        _BUDGET.clear()
        _BUDGET[key] = budget
    model, budget = _CACHE[key][0], _BUDGET.get(key)
    if model.residency.streamed:
        model.residency.progress = progress
    return Loaded(cfg, model, tokenizer, spec, budget, notice, progress)


def torch_device(name: str) -> torch.device:
    """--device as torch has it; a one-line error where this torch has no such device."""
    kind, _, index = name.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = ("this build of torch has no CUDA support" if torch.version.cuda is None
                   else "torch finds no CUDA GPU on this machine")
            raise UsageError(f"--device {name}: {why}; run on the CPU (--device cpu, the "
                             "default), or install a CUDA build of torch on a machine with "
                             "an NVIDIA GPU")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise UsageError(f"--device {name}: this machine has {counted(count, 'CUDA device')} "
                             f"(cuda:0 to cuda:{count - 1})")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: torch finds no Apple GPU (MPS) here; run on the "
                         "CPU (--device cpu, the default)")
    return torch.device(name)


def device_free(device: torch.device) -> int | None:
    """Free memory where the weights will live: the GPU's for CUDA, else the machine's."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def streaming_note(cfg: ModelConfig, model: Transformer, budget: Budget) -> str:
    streamed = model.residency
    part, size = streamed.largest
    where = f"--max-memory {budget.text}" if budget.given else "the free memory"
    return (f"{cfg.name}'s weights ({format_size(streamed.total_bytes)} in "
            f"{str(model.dtype).removeprefix('torch.')}) do not fit in {where}: each of its "
            f"{len(streamed.parts)} parts is read from disk when it runs, then let go "
            f"(at most {format_size(size)} at a time)")


def _covers(built: int | None, want: int | None) -> bool:
    """Does a model with `built` leading blocks materialised (None: all) serve `want`?"""
    return built is None or (want is not None and want <= built)


def check_memory(cfg: ModelConfig, *, force: bool = False, dtype: str = "float32",
                 budget: Budget | None = None) -> None:
    """Refuse, before allocating, random weights that would not fit in the budget (they
    are made in memory: only a checkpoint can stay on disk)."""
    need = estimate_bytes(cfg) // 4 * DTYPES[dtype]
    budget = budget or Budget()
    if force or budget.fits(need):
        return
    if budget.given:
        raise ResourceError(f"this model needs about {format_size(need)} for its weights but "
                            f"--max-memory is {budget.text}; random weights are made in "
                            "memory, so raise --max-memory or choose a smaller config")
    free = budget.bytes / FREE_SHARE
    raise ResourceError(f"this model needs about {need / 2**30:.1f} GiB for its weights "
                        f"but only {free / 2**30:.1f} GiB of memory is free; choose a "
                        "smaller config, or pass --force to try anyway")


# -- real weights ------------------------------------------------------------------------
def expected_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    """Every tensor a checkpoint of this architecture fills (parameters and persistent
    buffers, a tied head included), name -> shape: the model built on the meta device."""
    return {k: tuple(v.shape) for k, v in build_model(cfg, device="meta").state_dict().items()}


def plan_checkpoint(weights: str, cfg: ModelConfig, **kw) -> tuple[Plan, bool]:
    """checkpoints.plan.plan_tensors for a --weights value, against cfg's architecture."""
    return plan_tensors(resolve(weights), cfg, lambda: expected_shapes(cfg), **kw)


def load_state(weights: str, cfg: ModelConfig, **kw):
    """(state, src, from_cache): every tensor of a checkpoint in tfx names (float32 for a
    GGUF), their checkpoint names, and whether they came from the dequantised cache."""
    return _load_state(resolve(weights), cfg, lambda: expected_shapes(cfg), **kw)


@torch.no_grad()
def assign(cfg: ModelConfig, state: dict):
    """A meta-built Transformer holding `state` (every parameter, checked by Plan)."""
    model = build_model(cfg, device="meta")
    tied = model.tied()
    state = {**state, **{alias: state[table] for alias, table in tied.items()}}
    model.load_state_dict(state, strict=True, assign=True)
    model.retie()  # assign replaced the embedding: tie the head (and decoder) to it anew
    model.fill_sinusoids()  # a non-persistent buffer, not in any checkpoint
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise WeightsError(f"no weights for {', '.join(left[:3])}")
    return model.requires_grad_(False).eval()


@torch.no_grad()
def load_weights(weights: str, cfg: ModelConfig, *, use_cache: bool = True, progress=None,
                 dtype: str = "float32", device: str = "cpu", budget=None):
    """A Transformer holding a checkpoint's weights. `cfg` is checkpoint_config(weights).

    In memory when they fit in `budget` (core/memory.Budget; None: always); otherwise
    the model is built on the meta device and streamed from disk one part at a time
    (core/model/streaming.Streamed). GGUF tensors are cached after their first (slow)
    dequantisation unless use_cache is False; `progress` is an optional context-manager
    factory (see core/progress.deferred)."""
    ckpt = resolve(weights, progress=progress)
    run_dtype = getattr(torch, dtype)
    with deferred(progress, f"loading {ckpt.name}") as update:
        plan, from_cache = plan_tensors(ckpt, cfg, lambda: expected_shapes(cfg),
                                        use_cache=use_cache, update=update)
        if budget is not None and not budget.fits(plan.nbytes(run_dtype) / IN_MEMORY_SHARE):
            forget_gguf()
            return stream(plan, run_dtype, device, budget, progress)
        folder = cache_dir(ckpt) if ckpt.kind == "gguf" and use_cache and not from_cache \
            else None
        verb = "dequantising" if ckpt.kind == "gguf" and not from_cache else "reading"
        # reading is shown where it takes a while: dequantising, or a large file
        shown = verb == "dequantising" or plan.nbytes(run_dtype) > SHOW_READING
        parts: dict[str, list[str]] = {}
        for name in plan.shapes:
            parts.setdefault(part_of(name), []).append(name)
        state: dict = {}
        with cache_writer(folder, plan, cfg, ckpt.path) as sink:
            for done, (part, names) in enumerate(parts.items()):
                names = [n for n in names if n not in plan.aliases]
                state.update(plan.tensors(names, run_dtype, device, sink=sink))
                if shown:
                    update((done + 1) / len(parts), f"{verb} {part}")
        plan.source.release()
        try:
            model = assign(cfg, state)
        except WeightsError as exc:
            raise WeightsError(f"{ckpt.path}: {exc.message}") from None
    forget_gguf()  # the model holds its own tensors now: let the file go
    forget_torch()
    return model.place(run_dtype, device)


__all__ = ["Loaded", "load", "load_weights", "load_state", "plan_checkpoint", "assign",
           "expected_shapes", "model_info", "check_memory", "torch_device"]
