"""The output folder (`-o DIR`): its manifest, checkpoints and atomic writes.

manifest.json is a tfx/1 document (`"kind"`: activations for collect, scan or top for
their checkpoints) holding what identifies the run (model, corpus with its sha256,
options) and what is done; it never holds a wall-clock time, so the same run gives the
same bytes. Every file is written to a temporary name in DIR and renamed when complete:
a reader (or a resumed run) never takes half a file for a whole one. The same DIR with
another model, corpus or options is refused, naming what differs; --force starts over.
One run writes DIR at a time: it holds the folder (core/outputs.FolderHold) from opening
it to its end, and a second run into it is refused; a killed run holds nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ... import __version__
from ...errors import DISK_FULL, OutputFileError, write_error
from ..outputs import FolderHold

MANIFEST = "manifest.json"
SCHEMA = "tfx/1"
OURS = ("manifest.json", "state.npz", "result.json", "tokens.parquet")


class OutputDir:
    """DIR, held by this run alone until close() (or the end of a `with` block, or of the
    process): a second run into it is refused while this one writes."""

    def __init__(self, path: str | Path, kind: str, identity: dict, *, force: bool = False):
        self.path = Path(path).expanduser()
        self.kind, self.identity = kind, identity
        self.manifest: dict | None = None
        self.hold: FolderHold | None = None
        try:
            self._open(force)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.hold is not None:
            self.hold.release()

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self, force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise OutputFileError(f"-o {path} is a file; give a folder (it is created)")
        parent = path.parent
        if not path.exists():
            if not parent.is_dir():
                raise OutputFileError(f"cannot write {path}: the folder {parent} does not "
                                      "exist; create it first")
            try:
                path.mkdir()
            except OSError as exc:
                if exc.errno in DISK_FULL:
                    raise write_error(path, exc) from None
                raise OutputFileError(f"cannot create {path}: {exc.strerror or exc}; choose "
                                      "another place") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputFileError(f"cannot write {path}: the folder is not writable; choose "
                                  "another place")
        self.hold = FolderHold(path)  # before the manifest is read: it is this run's now
        old = read_manifest(path)
        if old is not None and force:  # --force starts over, even on the same run
            self.clear()
            return
        if old is None:
            strangers = [p.name for p in path.iterdir() if not _ours(p.name)]
            if strangers and not force:
                raise OutputFileError(f"-o {path} holds files tfx did not write "
                                      f"({', '.join(sorted(strangers)[:3])}); give an empty or "
                                      "new folder, or pass --force to write beside them")
            self.clear()
            return
        new = {**self.identity, "kind": self.kind}
        differs = [key for key in ("kind", "model", "corpus", "options")
                   if old.get(key) != new.get(key)]
        if differs:
            detail = "; ".join(_difference(key, old.get(key), new.get(key)) for key in differs)
            raise OutputFileError(f"-o {path} holds another run ({detail}); pass --force to "
                                  "start over, or choose another folder")
        self.manifest = old

    def clear(self) -> None:
        for p in self.path.iterdir():
            if _ours(p.name):
                p.unlink() if not p.is_dir() else shutil.rmtree(p)
        self.manifest = None

    def write_manifest(self, **state) -> None:
        doc = {"schema": SCHEMA, "kind": self.kind, "tfx_version": __version__,
               **self.identity, **state}
        self.write_bytes(MANIFEST, (json.dumps(doc, indent=1) + "\n").encode())
        self.manifest = doc

    def write_bytes(self, name: str, data: bytes) -> str:
        """Write DIR/name atomically; returns its sha256."""
        with self.atomic(name) as tmp:
            tmp.write_bytes(data)
        return hashlib.sha256(data).hexdigest()

    def verify(self, files: list[dict]) -> None:
        """Each file listed ({"file", "sha256"}) is on disk with its sha256: what is
        checked before a manifest says complete."""
        for entry in files:
            path = self.path / entry["file"]
            if not path.is_file() or sha256_file(path) != entry["sha256"]:
                raise OutputFileError(
                    f"{path} is not the file this run wrote ("
                    f"{'it is gone' if not path.is_file() else 'its sha256 differs'}): "
                    "something else wrote into the folder; the manifest stays incomplete, "
                    "so the same command writes it again")

    @contextmanager
    def atomic(self, name: str) -> Iterator[Path]:
        final = self.path / name
        tmp = self.path / f".{name}.tmp"
        try:
            yield tmp
            os.replace(tmp, final)
        except OSError as exc:
            raise write_error(final, exc, "; the manifest still lists only the complete "
                                          "files, so the same command resumes") from None
        finally:
            if tmp.exists():
                tmp.unlink()


def _ours(name: str) -> bool:
    return name in OURS or name.startswith(("shard-", ".shard-", ".manifest", ".state",
                                            ".result", ".tokens"))


def read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((Path(path) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _difference(key: str, old, new) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        shown = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:3])
        return f"{key}: {shown}"
    return f"{key}: {old!r} -> {new!r}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["OutputDir", "read_manifest", "sha256_file", "MANIFEST"]
