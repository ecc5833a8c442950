"""The cache of dequantised GGUF tensors: float32 safetensors under
$XDG_CACHE_HOME/tfx/weights (default ~/.cache/tfx/weights), one entry per file content.

An entry's name comes from the file's size and the SHA-256 of eight 256 KiB samples spread
over it, never from its path or modification time: the same model installed again (a new
virtual environment, a copy elsewhere) finds its entry instead of adding gigabytes beside
it. Each entry records (`source.json`) its source's size, modification time and full
SHA-256, and its own files' (model.safetensors, config.json) size, modification and change
times and full SHA-256. An entry is read only while both hold what they held when it was
written: a file whose times changed is hashed whole once and kept only if its content is
the recorded one (an edit between the samples, or one inside the entry, rebuilds it).
Entries are written to a temporary folder and renamed into place, so a crash leaves no
half entry; writing one also removes entries an older cache format left behind, which
nothing reads any more."""
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
from ..outputs import sha256_file
from .locate import Checkpoint

CACHE_FORMAT = 3  # bump when the cached tensors' or config's meaning changes
# (2: eos_ids; 3: keyed by content, with source.json)
SAMPLE = 1 << 18  # bytes hashed at each sampled place for the cache key
SAMPLES = 8
SOURCE = "source.json"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfx" / "weights"


def cache_key(path: Path) -> str:
    """size + eight 256 KiB samples (start and end included): fast for any file size, the
    same for the same content wherever it lies; a file that is replaced or edited mostly
    gets a new key, and source.json's full hash catches the rest."""
    size = path.stat().st_size
    h = hashlib.sha256(f"tfx-weights/{CACHE_FORMAT}/{size}".encode())
    last = max(0, size - SAMPLE)
    with open(path, "rb") as fh:
        for i in range(SAMPLES):
            fh.seek(last * i // (SAMPLES - 1))
            h.update(fh.read(SAMPLE))
    return h.hexdigest()[:32]


ENTRY_FILES = ("model.safetensors", "config.json")  # what an entry holds, stamped
_HASHED: dict[tuple, str] = {}  # (path, size, mtime, ctime, inode) -> SHA-256, this process


def _sha256(path: Path, st: os.stat_result) -> str:
    """The file's SHA-256, read whole once per process for one state of the file (a cache
    that cannot record a new time would otherwise hash it at every look)."""
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _HASHED:
        _HASHED[key] = sha256_file(path)
    return _HASHED[key]


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(path, st)}


def _entry_stamp(path: Path) -> dict:
    """An entry's own file: its change time too, which no tool that restores a
    modification time can set back (an edit in place always moves it)."""
    return {**_stamp(path), "ctime_ns": path.stat().st_ctime_ns}


def _write_json(path: Path, data: dict) -> None:
    """Whole or not at all: a temporary file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _holds(path: Path, stamp: dict, times: tuple[str, ...]) -> bool | None:
    """Whether `path` holds what `stamp` records: True when its size and `times` are the
    recorded ones (nothing read); None when they moved but the whole file hashes to the
    recorded SHA-256 (the stamp then takes the new times); False otherwise."""
    st = path.stat()
    now = {"size": st.st_size, **{t: getattr(st, "st_" + t) for t in times}}
    if all(stamp[k] == v for k, v in now.items()):
        return True
    if stamp["size"] != st.st_size or stamp["sha256"] != _sha256(path, st):
        return False
    stamp.update(now)
    return None


def _current(folder: Path, source: Path) -> bool:
    """Whether the entry is whole and holds this file's content: the source and each of the
    entry's own files as recorded (see _holds). New times of the same content are
    recorded where the cache can be written; a read-only one hashes them again in the
    next process. An entry without its own files' stamps (written before they were
    recorded) is not known to be whole, and is rebuilt."""
    try:
        rec = json.loads((folder / SOURCE).read_text(encoding="utf-8"))
        seen = [_holds(source, rec, ("mtime_ns",))]
        for name in ENTRY_FILES:
            seen.append(_holds(folder / name, rec["entry"][name], ("mtime_ns", "ctime_ns")))
            if seen[-1] is False:
                break
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    if False in seen:
        return False
    if None in seen:
        try:
            _write_json(folder / SOURCE, rec)
        except OSError:
            pass
    return True


def cache_dir(ckpt: Checkpoint) -> Path | None:
    """The entry's folder for this file: an entry there is current (one whose content
    differs is removed, to be rebuilt); None where the file cannot be read, or where a
    stale entry cannot be removed (it is never read)."""
    try:
        folder = cache_root() / cache_key(ckpt.path)
    except OSError:
        return None
    if folder.exists() and not _current(folder, ckpt.path):
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            return None
    return folder


def prune_old_formats(root: Path) -> list[Path]:
    """Remove entries without source.json (written by an older format, keyed so that
    nothing finds them again); folders being written (dot names) are left alone."""
    gone = []
    for entry in (root.iterdir() if root.is_dir() else ()):
        if entry.is_dir() and not entry.name.startswith(".") \
                and not (entry / SOURCE).exists():
            shutil.rmtree(entry, ignore_errors=True)
            gone.append(entry)
    return gone


def cache_read_json(ckpt: Checkpoint, name: str) -> dict | None:
    folder = cache_dir(ckpt)
    if folder is None or not (folder / name).is_file():
        return None
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextmanager
def cache_writer(folder: Path | None, plan, cfg: ModelConfig, source: Path):
    """Yields sink(name, float32 tensor) that writes the dequantised tensors into a new
    cache entry as they come (safetensors, one tensor at a time: the model is never held
    twice). The entry is written in a temporary folder and renamed into place once every
    tensor is in; a failure (a read-only or full disk) only skips the cache. `source` is
    the file the tensors come from, recorded in source.json."""
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
            entry = {name: _entry_stamp(tmp / name) for name in ENTRY_FILES}
            _write_json(tmp / SOURCE, {**_stamp(source), "entry": entry})
            prune_old_formats(folder.parent)
            os.rename(tmp, folder)  # atomic; fails if another process got there first
    except OSError:
        pass
    finally:
        if writer is not None and not writer.fh.closed:
            writer.fh.close()
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
