"""The cache of dequantised GGUF tensors: float32 safetensors under
$XDG_CACHE_HOME/tfx/weights (default ~/.cache/tfx/weights), keyed by the file's size,
modification time and a hash of three 1 MiB samples (start, middle, end). Entries are
written to a temporary folder and renamed into place, so a crash leaves no half entry."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..config import ModelConfig
from .locate import Checkpoint

CACHE_FORMAT = 2  # bump when the cached tensors' or config's meaning changes (2: eos_ids)
SAMPLE = 1 << 20  # bytes hashed at each of three places for the cache key


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfx" / "weights"


def cache_key(path: Path) -> str:
    """size + mtime + three 1 MiB samples: fast for any file size, and a file that is
    replaced or edited gets a new key. (A full hash would cost ~0.3 s per 100 MB.)"""
    st = path.stat()
    h = hashlib.sha256(f"tfx-weights/{CACHE_FORMAT}/{st.st_size}/{st.st_mtime_ns}".encode())
    with open(path, "rb") as fh:
        for offset in (0, max(0, st.st_size // 2 - SAMPLE // 2), max(0, st.st_size - SAMPLE)):
            fh.seek(offset)
            h.update(fh.read(SAMPLE))
    return h.hexdigest()[:32]


def cache_dir(ckpt: Checkpoint) -> Path | None:
    try:
        return cache_root() / cache_key(ckpt.path)
    except OSError:
        return None


def cache_read_json(ckpt: Checkpoint, name: str) -> dict | None:
    folder = cache_dir(ckpt)
    if folder is None or not (folder / name).is_file():
        return None
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextmanager
def cache_writer(folder: Path | None, plan, cfg: ModelConfig):
    """Yields sink(name, float32 tensor) that writes the dequantised tensors into a new
    cache entry as they come (safetensors, one tensor at a time: the model is never held
    twice). The entry is written in a temporary folder and renamed into place once every
    tensor is in; a failure (a read-only or full disk) only skips the cache."""
    import torch

    if folder is None or folder.exists():
        yield None
        return
    tmp = writer = None
    try:
        from .sources import SafetensorsWriter

        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
        writer = SafetensorsWriter(tmp / "model.safetensors",
                                   {n: (shape, torch.float32) for n, shape in plan.shapes.items()
                                    if n not in plan.aliases})
    except Exception:  # noqa: BLE001 - the cache only saves time
        writer = None

    def sink(name: str, tensor) -> None:
        nonlocal writer
        if writer is not None:
            try:
                writer.write(name, tensor)
            except Exception:  # noqa: BLE001 - a full disk skips the cache, nothing more
                writer.close()
                writer = None

    try:
        yield sink
        if writer is not None and writer.close():
            (tmp / "config.json").write_text(json.dumps(replace(cfg, name="cached").to_dict()))
            os.rename(tmp, folder)  # atomic; fails if another process got there first
    except OSError:
        pass
    finally:
        if writer is not None and not writer.fh.closed:
            writer.fh.close()
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
