"""A checkpoint's tensors, one at a time: their shapes without reading them, and each
tensor read when it is wanted, so a model need never be in memory all at once.

- safetensors (HF folders, their shards, tfx's cache of dequantised GGUFs): the header
  says every tensor's dtype, shape and byte range. A tensor used as stored (its dtype,
  on the CPU) is a view of a private memory map of the file: no copy, its pages read
  when first touched, and gone from the process with the last tensor that points into
  them. A tensor to be converted is read instead, with positioned reads into memory of
  its own, a few MB at a time when it goes straight into another dtype: a mapped page
  would stay resident until the map closed, beside its converted copy, so bfloat16
  weights would have held the float32 ones as well.
- torch zip files (pytorch_model.bin shards, nanoGPT ckpt.pt): torch.load with
  mmap=True and weights_only=True; release() drops the mapping (it is opened again for
  the next read), so the pages read do not stay resident. Older non-zip files cannot be
  mapped and are read whole.
- GGUF: the tensor table of gguf_file.GGUFFile; each tensor dequantised to float32 when
  read (a few threads share a group of tensors); release() closes the file's mapping.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import torch

from ...errors import WeightsError

# safetensors dtype names (the format's own list) -> torch
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                      "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                      "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                      "BOOL": torch.bool}
# DeepSeek-V3's released weights: FP8 (E4M3) with a scale per block, multiplied out by its
# family's mapping (families/deepseek.py)
SAFETENSORS_DTYPES["F8_E4M3"] = torch.float8_e4m3fn
_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}
CHUNK = 8 << 20  # bytes converted at a time when a tensor is read into another dtype


class TensorSource:
    """What every source offers. Keys are the checkpoint's own tensor names."""

    path: Path

    def shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """key -> (shape, dtype as read), without reading any tensor."""
        raise NotImplementedError

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        """The tensors, each in memory of its own (never a view of a mapping)."""
        raise NotImplementedError

    def read_into(self, key: str, out: torch.Tensor) -> None:
        """Fill `out` (the key's shape, contiguous, any float dtype) with the tensor."""
        out.copy_(self.read([key])[key])

    view = None  # or view(key): the tensor without a copy, where the format allows

    def release(self) -> None:
        """Let go of what reading left mapped, so its pages leave the process."""


# -- safetensors ----------------------------------------------------------------------
class SafetensorsFiles(TensorSource):
    """One safetensors file or the shards of one checkpoint."""

    def __init__(self, files: list[Path]):
        self.path = files[0].parent if len(files) > 1 else files[0]
        self.table: dict[str, tuple[Path, int, tuple[int, ...], torch.dtype]] = {}
        self._scratch: torch.Tensor | None = None  # reused by every conversion
        self._maps: dict[Path, mmap.mmap] = {}  # open until release()
        for file in files:
            self._read_header(file)

    def _read_header(self, file: Path) -> None:
        from safetensors import SafetensorError, safe_open

        try:  # the library's own check of the header and of the file's coverage
            with safe_open(str(file), framework="pt"):
                pass
        except FileNotFoundError:
            raise WeightsError(f"weights file {file} is missing; the checkpoint is "
                               "incomplete") from None
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise WeightsError(f"cannot read {file}: truncated or corrupted safetensors "
                               f"({first})") from None
        with open(file, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        base = 8 + size
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            if entry["dtype"] not in SAFETENSORS_DTYPES:
                raise WeightsError(f"{file}: tensor {key} is stored as {entry['dtype']}, "
                                   f"which tfx does not read; it reads "
                                   f"{', '.join(SAFETENSORS_DTYPES)}")
            start = base + entry["data_offsets"][0]
            self.table[key] = (file, start, tuple(entry["shape"]),
                               SAFETENSORS_DTYPES[entry["dtype"]])

    def shapes(self) -> dict:
        return {key: (shape, dtype) for key, (_, _, shape, dtype) in self.table.items()}

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for key in keys:
            _, _, shape, dtype = self.table[key]
            out[key] = torch.empty(shape, dtype=dtype)
            self.read_into(key, out[key])
        return out

    def view(self, key: str) -> torch.Tensor:
        """The tensor as a view of the file's private (copy-on-write) mapping."""
        file, start, shape, dtype = self.table[key]
        count = math.prod(shape)
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        if file not in self._maps:
            with open(file, "rb") as fh:
                self._maps[file] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        return torch.frombuffer(self._maps[file], dtype=dtype, count=count,
                                offset=start).view(shape)

    def read_into(self, key: str, out: torch.Tensor) -> None:
        file, start, shape, dtype = self.table[key]
        flat = out.view(-1)
        with open(file, "rb", buffering=0) as fh:
            if out.dtype == dtype:
                _read_exactly(fh, start, flat.view(torch.uint8), file)
                return
            # one buffer of CHUNK bytes for every tensor: many temporaries of a
            # tensor's size each would leave the heap in holes as large as they were
            if self._scratch is None:
                self._scratch = torch.empty(CHUNK, dtype=torch.uint8)
            size = torch.empty((), dtype=dtype).element_size()
            step = CHUNK // size
            scratch = self._scratch.view(dtype)
            for first in range(0, flat.numel(), step):
                part = scratch[:min(step, flat.numel() - first)]
                _read_exactly(fh, start + first * size, part.view(torch.uint8), file)
                flat[first:first + part.numel()].copy_(part)

    def release(self) -> None:
        """Drop the scratch buffer and this object's hold on the mappings: each closes
        when the last tensor viewing it is gone."""
        self._scratch = None
        self._maps = {}


def _read_exactly(fh, offset: int, buffer: torch.Tensor, file: Path) -> None:
    """Fill a uint8 tensor with the file's bytes from `offset`."""
    view = memoryview(buffer.numpy())
    fh.seek(offset)
    done = 0
    while done < len(view):
        got = fh.readinto(view[done:])
        if not got:
            raise WeightsError(f"cannot read {file}: truncated or corrupted safetensors "
                               "(a tensor runs past the end of the file)")
        done += got


class SafetensorsWriter:
    """A safetensors file written one tensor at a time: the header (every name, shape
    and byte range, known in advance) first, then each tensor at its place as it comes,
    so a whole model is never in memory to be saved. load_file reads the result."""

    def __init__(self, path: Path, shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]):
        header, offset = {}, 0
        for name, (shape, dtype) in sorted(shapes.items()):
            nbytes = torch.empty((), dtype=dtype).element_size()
            for d in shape:
                nbytes *= d
            header[name] = {"dtype": _NAMES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        self.header, self.base, self.left = header, 8 + len(text), set(header)
        self.fh = open(path, "wb")
        self.fh.write(struct.pack("<Q", len(text)) + text)
        self.fh.truncate(self.base + offset)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if name not in self.left:
            return
        entry = self.header[name]
        data = tensor.detach().to("cpu", SAFETENSORS_DTYPES[entry["dtype"]]).contiguous()
        self.fh.seek(self.base + entry["data_offsets"][0])
        self.fh.write(memoryview(data.view(-1).view(torch.uint8).numpy()))
        self.left.discard(name)

    def close(self) -> bool:
        """True when every tensor was written."""
        self.fh.close()
        return not self.left


# -- torch zip files ---------------------------------------------------------------------
class TorchFiles(TensorSource):
    """pytorch_model.bin (or its shards), or the `model` dict of a nanoGPT checkpoint."""

    def __init__(self, files: list[Path], load: Callable[[Path], dict]):
        """load(path) -> that file's state dict, memory-mapped where the file allows."""
        self.path, self.load = files[0], load
        self.where: dict[str, Path] = {}
        self.meta: dict[str, tuple] = {}
        self._open: tuple[Path, dict] | None = None  # the one file mapped at a time
        for file in files:
            for key, value in self._state(file).items():
                if isinstance(value, torch.Tensor):
                    self.where[key] = file
                    self.meta[key] = (tuple(value.shape), value.dtype)
        self.release()

    def _state(self, file: Path) -> dict:
        if self._open is None or self._open[0] != file:
            self._open = (file, self.load(file))
        return self._open[1]

    def shapes(self) -> dict:
        return dict(self.meta)

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for file in dict.fromkeys(self.where[k] for k in keys):
            state = self._state(file)
            out.update({k: state[k].clone() for k in keys if self.where[k] == file})
        return out

    def release(self) -> None:
        self._open = None  # the mapping closes with the last tensor that points into it


# -- GGUF ---------------------------------------------------------------------------------
class GGUFTensors(TensorSource):
    """A GGUF's tensors, dequantised to float32 when read."""

    def __init__(self, reader, dequantise: Callable):
        """dequantise(info) -> float32 numpy array (weights.py turns errors into
        WeightsErrors naming the tensor)."""
        self.path, self.reader, self.dequantise = reader.path, reader, dequantise

    def shapes(self) -> dict:
        return {info.name: (info.shape, torch.float32) for info in self.reader.tensors.values()}

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        # the block formats dequantise in numpy, which lets go of the GIL: a few threads
        # share the work (about 2x on two cores)
        infos = [self.reader.tensors[k] for k in keys]
        workers = max(1, min(4, os.cpu_count() or 1, len(infos)))
        if workers == 1:
            arrays = [self.dequantise(info) for info in infos]
        else:
            with ThreadPoolExecutor(workers) as pool:
                arrays = list(pool.map(self.dequantise, infos))
        # a tensor stored as F32 is a read-only view of the mapping: copied, so nothing
        # the model keeps points into the file
        return {info.name: torch.from_numpy(a) if a.flags.writeable else torch.tensor(a)
                for info, a in zip(infos, arrays)}

    def release(self) -> None:
        self.reader.release()


__all__ = ["TensorSource", "SafetensorsFiles", "SafetensorsWriter", "TorchFiles",
           "GGUFTensors", "SAFETENSORS_DTYPES"]
