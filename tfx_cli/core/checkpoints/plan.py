"""A load planned before any tensor is read: the checkpoint's tensors, as meta tensors
(shapes only), go through the family's mapping and are checked against the architecture;
the Plan then reads just the tensors asked for, in the dtype and on the device asked
for. Loading a whole model and streaming one part at a time both read through a Plan."""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Callable

from ...errors import WeightsError
from ..config import ModelConfig, tied_parameters
from .architecture import read_json
from .cache import cache_dir
from .families import check_tables, hf_family, hf_map, map_nanogpt, token_tables
from .gguf import gguf_reader, gguf_source
from .locate import Checkpoint
from .sources import SafetensorsFiles, TorchFiles
from .torchfiles import bin_state, forget as forget_torch, is_tensor, torch_checkpoint


def shape_error(ckpt: Checkpoint, ours: str, theirs: str, got, want) -> WeightsError:
    where = ours if theirs == ours else f"{theirs} (tfx {ours})"
    return WeightsError(f"{ckpt.path}: tensor {where} has shape {list(got)} but the "
                        f"architecture needs {list(want)}; the weights do not match the "
                        "config that came with them")


Shapes = Callable[[], "dict[str, tuple]"]


def check_tensors(ckpt: Checkpoint, cfg: ModelConfig, state: dict, src: dict,
                  expected: Shapes) -> dict:
    """Names and shapes of tfx-named tensors (real or meta) against the architecture's:
    `expected()` gives every parameter and buffer a checkpoint fills, name -> shape, as
    the model built on the meta device has them (core/load.py says how; it is asked only
    once the checkpoint has proved readable). Returns the state to assign, without a tied
    head or BERT's pooler (checked, set aside)."""
    expected = dict(expected())
    state = dict(state)
    for alias in tied_parameters(cfg):
        # the head (or a decoder's token table) is the embedding; a checkpoint that also
        # saved it must agree in shape
        copy = state.pop(alias, None)
        if copy is not None and tuple(copy.shape) != expected[alias]:
            raise shape_error(ckpt, alias, src.get(alias, alias), copy.shape, expected[alias])
        expected.pop(alias)  # filled from the embedding
    if cfg.pooler:  # counted in the config, not run by tfx: check the shape, set aside
        for leaf, want in (("weight", (cfg.d_model, cfg.d_model)), ("bias", (cfg.d_model,))):
            t = state.pop(f"pooler.dense.{leaf}", None)
            if t is not None and tuple(t.shape) != want:
                raise shape_error(ckpt, f"pooler.dense.{leaf}", src[f"pooler.dense.{leaf}"],
                                   t.shape, want)
    for name, want in expected.items():
        if name in state and tuple(state[name].shape) != want:
            raise shape_error(ckpt, name, src.get(name, name), state[name].shape, want)
    missing = [k for k in expected if k not in state]
    unexpected = [src.get(k, k) for k in state if k not in expected]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise WeightsError(f"{ckpt.path}: the checkpoint lacks {', '.join(missing[:3])}{more} "
                           "that the architecture needs; it is incomplete or of another model")
    if unexpected:
        more = f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else ""
        raise WeightsError(f"{ckpt.path}: unexpected tensor(s) {', '.join(unexpected[:3])}"
                           f"{more}; the checkpoint does not match its config")
    return state


class Plan:
    """Where each of a model's tensors comes from, known before any is read: the
    checkpoint's tensors as meta tensors (shapes only) go through the family's mapping
    and the architecture's checks, and what comes out names, for every tfx parameter,
    the checkpoint tensor it is cut from. `tensors(names)` then reads just those.

    A tensor used as stored (the file's dtype, on the CPU) is a view of the file's
    memory map where the format has one (safetensors). A parameter that is a checkpoint
    tensor as it is (no split, transpose or shift) but in another dtype is read straight
    into a tensor of that dtype; the others are read in the file's dtype, mapped, then
    converted. A model in memory and a streamed one go the same way, so they hold the
    same values in the same memory layout."""

    def __init__(self, ckpt: Checkpoint, cfg: ModelConfig, source, mapper: Callable,
                 expected: Shapes):
        import torch

        self.ckpt, self.cfg, self.source, self.mapper = ckpt, cfg, source, mapper
        shapes = source.shapes()
        self.file_dtype = {k: dtype for k, (_, dtype) in shapes.items()}
        meta = {k: torch.empty(shape, dtype=dtype, device="meta")
                for k, (shape, dtype) in shapes.items()}
        out, src = mapper(meta, cfg)
        out = check_tensors(ckpt, cfg, out, src, expected)
        self.shapes = {n: tuple(t.shape) for n, t in out.items()}
        # the mappings name a tensor as they saw it, some after dropping a prefix
        # ("transformer.", "bert.", "_orig_mod."): find the checkpoint's own key
        trimmed: dict[str, str | None] = {}
        for key in meta:
            parts = key.split(".")
            for i in range(1, len(parts)):
                tail = ".".join(parts[i:])
                trimmed[tail] = None if tail in trimmed else key  # None: ambiguous
        self.keys = {n: src.get(n) if src.get(n) in meta else trimmed.get(src.get(n))
                     for n in out}
        self.direct = {n for n, t in out.items() if self.keys[n] and t is meta[self.keys[n]]}
        # parameters that are another one (the tied head, a decoder's token table):
        # alias -> the parameter read for it
        self.aliases = tied_parameters(cfg)
        for alias, table in self.aliases.items():
            self.shapes[alias] = self.shapes[table]

    def nbytes(self, dtype, names=None) -> int:
        """Bytes the named parameters (default: all, a tied head once) take in dtype."""
        import torch

        size = torch.empty((), dtype=dtype).element_size()
        names = [n for n in self.shapes if n not in self.aliases] if names is None else names
        return sum(size * math.prod(self.shapes[n]) for n in names)

    def tensors(self, names, dtype, device="cpu", sink: Callable | None = None) -> dict:
        """The named parameters in dtype on device. sink(name, tensor) first sees each
        as mapped from the file (float32 for a GGUF: what the cache stores)."""
        import torch

        aliases = {n: self.aliases[n] for n in names if n in self.aliases}
        borrowed = sorted({table for table in aliases.values() if table not in names})
        want = [n for n in names if n not in aliases] + borrowed
        # a tensor the mapping makes (nanoGPT's zero shifts) needs its module's others
        # to go through the mapping too
        made = any(self.keys[n] is None for n in want)
        direct = [n for n in want if n in self.direct and sink is None and not made]
        cut = [n for n in want if n not in direct]

        def as_stored(key: str) -> bool:  # used in the file's dtype, on the CPU: a view
            return self.source.view is not None and self.file_dtype[key] == dtype and \
                torch.device(device).type == "cpu"

        out = {}
        keys = {self.keys[n] for n in cut if self.keys[n]}
        # tensors a mapping reads together with another (gpt-oss: an MXFP4 weight's
        # blocks with its scales), named by the mapping's `companions`
        companions = getattr(self.mapper, "companions", None)
        if companions is not None:
            keys |= {c for k in keys for c in companions(k) if c in self.file_dtype}
        keys = sorted(keys)
        if cut:
            read = self.source.read([k for k in keys if not as_stored(k)])
            read.update({k: self.source.view(k) for k in keys if as_stored(k)})
            mapped, _ = self.mapper(read, self.cfg)
            for n in cut:
                if sink is not None:
                    sink(n, mapped[n])
                out[n] = mapped[n].to(device=device, dtype=dtype)
            del mapped, read
        for n in direct:
            if as_stored(self.keys[n]):
                out[n] = self.source.view(self.keys[n])
                continue
            out[n] = torch.empty(self.shapes[n], dtype=dtype)
            self.source.read_into(self.keys[n], out[n])
            out[n] = out[n].to(device)
        for alias, table in aliases.items():
            out[alias] = out[table]
        for table in borrowed:  # read for an alias only
            del out[table]
        return out


def _identity(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
    return dict(state), {k: k for k in state}


def weight_files(ckpt: Checkpoint) -> list[Path]:
    """The tensor files of an HF folder: model.safetensors; the shards its index lists
    (model.safetensors.index.json); or, for older saves, pytorch_model.bin and its
    shards. A shard the index names but the folder lacks is an error naming it."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (ckpt.path / single).is_file():
            return [ckpt.path / single]
        if (ckpt.path / index).is_file():
            weight_map = read_json(ckpt.path / index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise WeightsError(f"{ckpt.path / index} has no weight_map; the checkpoint "
                                   "index is damaged")
            files = [ckpt.path / name for name in sorted(set(map(str, weight_map.values())))]
            missing = [f for f in files if not f.is_file()]
            if missing:
                raise WeightsError(f"{ckpt.path / index} names the shard {missing[0].name}, "
                                   f"which {ckpt.path} lacks; copy every shard into the "
                                   "folder")
            return files
    raise WeightsError(f"folder {ckpt.path} has no model.safetensors or pytorch_model.bin; "
                       "save the model with save_pretrained")


def plan_tensors(ckpt: Checkpoint, cfg: ModelConfig, expected: Shapes, *,
                 use_cache: bool = True,
                 update: Callable = lambda fraction=None, text=None: None) -> tuple[Plan, bool]:
    """(Plan, from_cache): where the checkpoint's tensors are, checked against the
    architecture's shapes (`expected()`, see check_tensors), none read yet. A GGUF's come
    from the dequantised-weights cache when it has an entry."""
    if ckpt.kind == "tfx":  # tfx's own names already
        return Plan(ckpt, cfg, SafetensorsFiles([ckpt.path / "model.safetensors"]),
                    _identity, expected), False
    if ckpt.kind == "hf":
        family = hf_family(read_json(ckpt.path / "config.json"), str(ckpt.path / "config.json"))
        files = weight_files(ckpt)
        if files[0].suffix == ".bin":
            source = TorchFiles(files, bin_state)
        else:
            source = SafetensorsFiles(files)
        try:
            # an encoder–decoder's token tables, saved under several names, are one
            tables = [k for k in token_tables(family, cfg) if k in source.shapes()]
            if len(tables) > 1:
                read = source.read(tables)
                check_tables({k: read[k] for k in tables})
                del read
            plan = Plan(ckpt, cfg, source, hf_map(family), expected)
        except WeightsError as exc:  # a mapping's own check (families.map_seq2seq)
            if exc.message.startswith(str(ckpt.path)):
                raise
            raise WeightsError(f"{ckpt.path}: {exc.message}") from None
        return plan, False
    if ckpt.kind == "torch":
        obj = torch_checkpoint(ckpt.path)
        odd = [k for k, v in obj["model"].items() if not is_tensor(v)]
        if odd:
            raise WeightsError(f"{ckpt.path}: model entry {odd[0]!r} is not a tensor; the "
                               "checkpoint is not a nanoGPT state dict")
        source = TorchFiles([ckpt.path], lambda path: torch_checkpoint(path)["model"])
        forget_torch()  # the source maps the file when it reads (and lets it go)
        return Plan(ckpt, cfg, source, map_nanogpt, expected), False
    folder = cache_dir(ckpt) if use_cache else None
    if folder is not None and (folder / "model.safetensors").is_file():
        update(None, "reading cached dequantised weights")
        try:
            return Plan(ckpt, cfg, SafetensorsFiles([folder / "model.safetensors"]),
                        _identity, expected), True
        except WeightsError:  # a damaged entry is dropped and rebuilt from the source
            shutil.rmtree(folder, ignore_errors=True)
    source, mapper = gguf_source(ckpt, gguf_reader(ckpt.path))
    return Plan(ckpt, cfg, source, mapper, expected), False


def load_state(ckpt: Checkpoint, cfg: ModelConfig, expected: Shapes, *,
               use_cache: bool = True,
               update: Callable = lambda fraction=None, text=None: None):
    """(state, src, from_cache): every tensor in tfx names (float32 for a GGUF), their
    checkpoint names, and whether they came from the dequantised-weights cache."""
    plan, from_cache = plan_tensors(ckpt, cfg, expected, use_cache=use_cache, update=update)
    keys = set(filter(None, plan.keys.values()))
    companions = getattr(plan.mapper, "companions", None)  # gpt-oss: MXFP4 scales
    if companions is not None:
        keys |= {c for k in keys for c in companions(k) if c in plan.file_dtype}
    state, src = plan.mapper(plan.source.read(sorted(keys)), cfg)
    plan.source.release()
    return state, src, from_cache
