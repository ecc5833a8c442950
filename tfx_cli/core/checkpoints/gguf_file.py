"""A GGUF file read directly: the key/value header, the tensor table, and one tensor's
bytes dequantised on demand.

GGUF (llama.cpp's format, versions 2 and 3) is: magic "GGUF", version, tensor count,
key count; the keys (name, type, value; arrays of scalars or strings); the tensor table
(name, dims innermost first, ggml type, offset); padding to `general.alignment` (32 by
default); then the tensor data. Reading the header and table here takes a fraction of a
second even for a 262k-token vocabulary, where the `gguf` package's reader builds numpy
views of every field and tensor up front (seconds). The `gguf` package is still what
dequantises the quantised block formats (gguf.quants), imported only when tensors are read.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
# ggml type id -> (name, values per block, bytes per block) of the types tfx reads
# (ggml.h's numbering and block layouts, as gguf-py's GGML_QUANT_SIZES lists them)
F32, F16, BF16 = 0, 1, 30
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 2: ("Q4_0", 32, 18),
         3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
         10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
         13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210)}


class GGUFFormatError(ValueError):
    """The file is not GGUF, is cut short, or holds something this reader cannot parse."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # outermost first (PyTorch order: GGUF's dims reversed)
    qtype: int  # ggml type id
    offset: int  # from the start of the file


class _Cursor:
    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise GGUFFormatError(f"{self.path} is truncated (its header runs past the end)")
        out = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return out

    def string(self) -> str:
        (n,) = self.take("Q")
        if self.pos + n > len(self.buf):
            raise GGUFFormatError(f"{self.path} is truncated or corrupted (a string of {n} "
                                  "bytes runs past the end)")
        out = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return out

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.take("IQ")
            if item in _SCALARS:
                return list(self.take(_SCALARS[item] * count))
            if count > len(self.buf):
                raise GGUFFormatError(f"{self.path} is truncated or corrupted (an array of "
                                      f"{count} items)")
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise GGUFFormatError(f"{self.path} is corrupted (unknown value type {kind})")
        return self.take(_SCALARS[kind])[0]


@dataclass
class GGUFFile:
    path: Path
    version: int
    meta: dict
    tensors: dict  # name -> TensorInfo, in file order
    size: int  # bytes
    _map: object = None

    def get(self, key: str, default=None):
        return self.meta.get(key, default)

    def raw(self, info: TensorInfo):
        """The tensor's stored bytes (a read-only view of the mapped file)."""
        import numpy as np

        nbytes = tensor_nbytes(info)
        if info.offset + nbytes > self.size:
            raise GGUFFormatError(f"tensor {info.name} runs past the end of {self.path}; the "
                                  "file is truncated")
        if self._map is None:  # one read-only mapping, shared by the tensors' views
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(self._map, dtype=np.uint8, count=nbytes, offset=info.offset)

    def release(self) -> None:
        """Close the file's mapping, so the pages read leave the process (it opens again
        at the next read). While an array still points into it, the pages are dropped
        from the process instead (madvise), where the platform allows."""
        if self._map is None:
            return
        try:
            self._map.close()
            self._map = None
        except BufferError:
            if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                self._map.madvise(mmap.MADV_DONTNEED)

    def array(self, info: TensorInfo):
        """The tensor as float32, in its PyTorch shape (dequantised when stored in blocks)."""
        import numpy as np

        raw = self.raw(info)
        if info.qtype == F32:
            return raw.view(np.float32).reshape(info.shape)
        if info.qtype == F16:
            return raw.view(np.float16).astype(np.float32).reshape(info.shape)
        if info.qtype == BF16:
            wide = raw.view(np.uint16).astype(np.uint32) << 16
            return wide.view(np.float32).reshape(info.shape)
        from gguf import quants

        rows = raw.reshape(-1, tensor_nbytes(info) // _rows(info))
        return np.asarray(quants.dequantize(rows, info.qtype),
                          dtype=np.float32).reshape(info.shape)


def _rows(info: TensorInfo) -> int:
    out = 1
    for d in info.shape[:-1]:
        out *= d
    return max(out, 1)


def block_sizes(qtype: int) -> tuple[int, int]:
    """(values per block, bytes per block) of a ggml type tfx reads; GGUFFormatError for
    any other."""
    if qtype not in TYPES:
        raise GGUFFormatError(f"ggml type {type_name(qtype)} is not one tfx reads")
    return TYPES[qtype][1:]


def tensor_nbytes(info: TensorInfo) -> int:
    block, size = block_sizes(info.qtype)
    n = 1
    for d in info.shape:
        n *= d
    return n // block * size


def type_name(qtype: int) -> str:
    if qtype in TYPES:
        return TYPES[qtype][0]
    try:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(qtype).name
    except (ImportError, ValueError):
        return f"type {qtype}"


def read_gguf(path: Path, *, tensors: bool = True, prefix: str | tuple[str, ...] = "") -> GGUFFile:
    """The header (keys starting with `prefix`) and, unless tensors=False, the tensor
    table. Raises GGUFFormatError (not GGUF, truncated, unknown version), OSError."""
    path = Path(path)
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size < 24:
            fh.seek(0)
            if fh.read(4) != b"GGUF":
                raise GGUFFormatError(f"{path} is not a GGUF file (bad magic bytes)")
            raise GGUFFormatError(f"{path} is truncated (its header runs past the end)")
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        cur = _Cursor(buf, path)
        if bytes(buf[:4]) != b"GGUF":
            raise GGUFFormatError(f"{path} is not a GGUF file (bad magic bytes)")
        cur.pos = 4
        version, n_tensors, n_kv = cur.take("IQQ")
        if version not in (2, 3):
            raise GGUFFormatError(f"GGUF version {version} of {path} is not supported (2 and "
                                  "3 are)")
        if n_kv > size or n_tensors > size:
            raise GGUFFormatError(f"{path} is truncated or corrupted (it claims {n_kv} keys "
                                  f"and {n_tensors} tensors)")
        meta: dict = {}
        alignment = 32
        for _ in range(n_kv):
            key = cur.string()
            (kind,) = cur.take("I")
            value = cur.value(kind)
            if key == "general.alignment" and isinstance(value, int) and value > 0:
                alignment = value
            if key.startswith(prefix):
                meta[key] = value
        table: dict = {}
        if tensors:
            infos = []
            for _ in range(n_tensors):
                name = cur.string()
                (n_dims,) = cur.take("I")
                if n_dims > 8:
                    raise GGUFFormatError(f"{path} is corrupted (tensor {name} has {n_dims} "
                                          "dimensions)")
                dims = cur.take("Q" * n_dims)
                qtype, offset = cur.take("IQ")
                infos.append((name, tuple(int(d) for d in reversed(dims)), qtype, offset))
            start = -(-cur.pos // alignment) * alignment  # the data begins aligned
            for name, shape, qtype, offset in infos:
                info = table[name] = TensorInfo(name, shape, qtype, start + offset)
                if qtype in TYPES and info.offset + tensor_nbytes(info) > size:
                    raise GGUFFormatError(f"{path} is truncated (tensor {name} runs past "
                                          "its end)")
        return GGUFFile(path, version, meta, table, size)
    finally:
        buf.close()


__all__ = ["GGUFFile", "GGUFFormatError", "TensorInfo", "read_gguf", "type_name",
           "block_sizes", "tensor_nbytes"]
