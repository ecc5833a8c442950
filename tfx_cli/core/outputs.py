"""Runaway output refused before the work: a file writer estimates what it would write and
asks here first.

    check_output_size(estimate, what="the page", option="--output", force=force,
                      narrow="--show-layers (e.g. --show-layers 0,11) or a shorter text",
                      detail="30 layers × 9 heads × 2,101² attention weights")

Past OUTPUT_LIMIT (200 MB) the writer is refused with one line that names the size, what
makes it so large and what to narrow, unless --force; nothing has been computed yet.
Pure Python (no torch): any writer in any layer may call it (report pages, dataset
shards, feature dumps).

The rest is the one output-folder layer every writer stands on:

    with atomic_file(path, force=force) as tmp: draw(tmp)   # a file, whole or not at all
    atomic_folder(folder, write, force=force)               # a folder, the same way
    class RunFolder(OutputFolder): MANIFEST = ...            # a resumable folder

atomic_file and atomic_folder write beside the final name and os.replace it into place:
a reader (or a resumed run) sees the old file or the whole new one, never half of one; a
failed write leaves nothing behind. An OutputFolder is a resumable folder held by one run
(FolderHold), with a typed Manifest saying what made it (kind, identity) and what of it is
done (state): the same command resumes it, another run is refused, --force starts over.
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Iterator

from ..errors import DISK_FULL, OutputFileError, write_error

OUTPUT_LIMIT = 200_000_000  # bytes: past this a file is refused without --force


def format_bytes(n: float) -> str:
    """3.2 GB, 180 MB, 12.4 kB (powers of 1000, as file managers show them)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def check_output_size(estimate: float, *, what: str, narrow: str, force: bool = False,
                      detail: str = "", limit: int = OUTPUT_LIMIT) -> None:
    """Refuse writing about `estimate` bytes past `limit` unless `force`: the message
    says the size (and `detail`, what makes it), the limit, and `narrow` (what to ask
    for less of)."""
    if force or estimate <= limit:
        return
    why = f" ({detail})" if detail else ""
    raise OutputFileError(f"{what} would be about {format_bytes(estimate)}{why}, past the "
                          f"{format_bytes(limit)} tfx writes without asking; narrow it with "
                          f"{narrow}, or pass --force to write it anyway")


class FolderHold:
    """An output folder held by this run alone while it writes (scan, top and collect's
    -o DIR, train-sae's SAE_DIR): an exclusive flock(2) on the folder itself. No lock file
    is made, and the kernel lets go when the process ends, however it ends (kill -9
    included), so a killed run never leaves the folder stuck. A second run into the same
    folder is refused at once, before it reads or writes anything there.

    `release()` (or leaving a `with` block) lets go; so does the process's end. Where the
    platform or filesystem has no flock, the folder is not held (nothing is refused)."""

    def __init__(self, path, option: str = "-o"):
        self.fd = None
        try:
            import fcntl
        except ImportError:  # not a POSIX system
            return
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return  # the writer's own checks say what is wrong with the folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputFileError(f"{option} {path} is being written by another tfx run "
                                  "right now (it holds the folder until it ends); wait for "
                                  "it, stop it, or choose another folder") from None
        except OSError:  # a filesystem without flock: not held
            os.close(fd)
            return
        self.fd = fd

    def release(self, _close=os.close) -> None:
        # os.close bound at definition: a hold let go at interpreter exit, when module
        # globals are already gone, still closes
        if self.fd is not None:
            _close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def __enter__(self) -> "FolderHold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    __del__ = release  # a run dropped without release() lets go when collected


# -- one file, one folder, whole or not at all ---------------------------------------------
def refuse_existing(path: Path, force: bool) -> None:
    """An existing file is overwritten only with --force."""
    if not force and (path.exists() or path.is_symlink()):
        raise OutputFileError(f"{path} already exists; pass --force to overwrite it, "
                              "or choose another name")


def check_output_file(path: str | Path, force: bool, *, option: str,
                      example: str) -> Path:
    """A file about to be written, checked before any work: not a folder (`example`: a
    file name to suggest in it), new unless `force`, in a folder that exists and can be
    written."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputFileError(f"{option} {path} is a folder; give a file name such as "
                              f"{path / example}")
    refuse_existing(path, force)
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputFileError(f"cannot write {path}: {parent} is a file, not a folder; "
                              "choose another place")
    if not parent.is_dir():
        raise OutputFileError(f"cannot write {path}: the folder {parent} does not exist; "
                              "create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputFileError(f"cannot write {path}: the folder {parent} is not writable; "
                              "choose another place")
    return path


def check_output_files(outputs: dict[str, tuple[str | Path | None, str]],
                       force: bool) -> dict[str, Path]:
    """The files one run writes, {option: (path or None, example name)}, each checked by
    check_output_file, and no two naming one file (one would replace the other): the
    options given -> their paths."""
    given: dict[str, Path] = {}
    for option, (path, example) in outputs.items():
        if path is None:
            continue
        path = check_output_file(path, force, option=option, example=example)
        for other, there in given.items():
            if os.path.realpath(there) == os.path.realpath(path):
                raise OutputFileError(f"{other} and {option} both name {path}, so one "
                                      "would replace the other; give each its own file")
        given[option] = path
    return given


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: str | Path, *, force: bool = True, mode: int | str | None = None,
                temp: str | None = None, prefix: str | None = None, suffix: str = ".tmp",
                parents: bool = False,
                error: Callable[[Path, OSError], BaseException] | None = write_error
                ) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends without an error, move it
    onto `path` (os.replace: same folder, so atomic). The temporary file goes whatever
    happens. `temp` names it (a fixed name a later run recognises), else it is made
    unique (`prefix` + random + `suffix`). `force` False: a file that appeared at `path`
    meanwhile is not overwritten. `parents`: the folder is made when missing. `mode`: an
    int to chmod, "umask" for an ordinary file's permissions, None to leave them (a
    unique temporary file is private). An OSError becomes `error(path, exc)` (None: it
    is raised as it is)."""
    import tempfile

    path = Path(path)
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        if temp is not None:
            tmp = path.parent / temp
        else:
            fd, name = tempfile.mkstemp(dir=path.parent, suffix=suffix,
                                        prefix=f".{path.name}." if prefix is None else prefix)
            os.close(fd)
            tmp = Path(name)
    except OSError as exc:
        if error is None:
            raise
        raise error(path, exc) from None
    try:
        yield tmp
        refuse_existing(path, force)  # appeared while we were writing
        if mode is not None:
            os.chmod(tmp, 0o666 & ~umask() if mode == "umask" else mode)
        os.replace(tmp, path)
    except OSError as exc:
        if error is None:
            raise
        raise error(path, exc) from None
    finally:
        if tmp.exists():
            tmp.unlink()


def check_new_folder(folder: Path, force: bool, *,
                     exists: str = "{folder} exists; choose another folder, or pass --force "
                                   "to replace it",
                     no_parent: str = "cannot write {folder}: the folder {parent} does not "
                                      "exist; create it first",
                     error: type[Exception] = OutputFileError) -> Path:
    """A folder about to be written whole: refused when it exists (unless `force`) or its
    parent folder does not, with the writer's own words; returns the parent."""
    parent = folder.parent if str(folder.parent) else Path(".")
    if folder.exists() and not force:
        raise error(exists.format(folder=folder, parent=parent))
    if not parent.is_dir():
        raise error(no_parent.format(folder=folder, parent=parent))
    return parent


def atomic_folder(folder: str | Path, write: Callable[[Path], None], *, force: bool,
                  prefix: str | None = None, readable: bool = False) -> Path:
    """Write a whole folder: `write(tmp)` fills a temporary folder beside `folder`, which
    then replaces it (an existing one only with `force`). `readable`: the folder and its
    files get the umask's permissions (mkdtemp makes the folder private)."""
    import shutil
    import tempfile

    folder = Path(folder)
    parent = check_new_folder(folder, force)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix or f".{folder.name}."))
    try:
        write(tmp)
        if readable:
            mask = umask()
            tmp.chmod(0o777 & ~mask)
            for path in tmp.iterdir():
                path.chmod(0o666 & ~mask)
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        elif folder.exists() or folder.is_symlink():
            folder.unlink()
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


# -- a resumable folder: its manifest ----------------------------------------------------
@dataclass
class Manifest:
    """What made an output folder and what of it is done, as its manifest file holds it:
    `kind` (the command), `identity` (what makes it that run: model, corpus, options...),
    `state` (what is done: its keys are the writer's own). A subclass fixes the file's
    name, its schema string and its layout; `read` gives None for a file that is missing,
    not JSON, not an object, or of another schema."""

    FILE: ClassVar[str] = "manifest.json"
    SCHEMA: ClassVar[str]
    INDENT: ClassVar[int] = 1
    ALLOW_NAN: ClassVar[bool] = True
    kind: str
    identity: dict
    state: dict = field(default_factory=dict)
    version: str | None = None  # the tfx that wrote it, where the layout records one

    def to_json(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_json(cls, doc: dict) -> "Manifest":
        raise NotImplementedError

    def encode(self) -> bytes:
        text = json.dumps(self.to_json(), indent=self.INDENT, allow_nan=self.ALLOW_NAN)
        return (text + "\n").encode("utf-8")

    @classmethod
    def read(cls, folder: str | Path) -> "Manifest | None":
        try:
            doc = json.loads((Path(folder) / cls.FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("schema") != cls.SCHEMA:
            return None
        return cls.from_json(doc)

    def difference(self, other: "Manifest") -> str | None:
        """What differs between this run and `other` (None: the same run), as the refusal
        names it."""
        raise NotImplementedError


class FlatManifest(Manifest):
    """The identity's keys (IDENTITY) beside schema, kind and tfx_version at the top level,
    the state after them: {"schema", "kind", "tfx_version", "model", ..., "complete", ...}."""

    IDENTITY: ClassVar[tuple[str, ...]]

    def to_json(self) -> dict:
        return {"schema": self.SCHEMA, "kind": self.kind, "tfx_version": self.version,
                **self.identity, **self.state}

    @classmethod
    def from_json(cls, doc: dict) -> "FlatManifest":
        known = {"schema", "kind", "tfx_version", *cls.IDENTITY}
        return cls(kind=doc.get("kind"), version=doc.get("tfx_version"),
                   identity={key: doc[key] for key in cls.IDENTITY if key in doc},
                   state={key: value for key, value in doc.items() if key not in known})

    def difference(self, other: "Manifest") -> str | None:
        old = {**self.identity, "kind": self.kind}
        new = {**other.identity, "kind": other.kind}
        differs = [key for key in ("kind", *self.IDENTITY) if old.get(key) != new.get(key)]
        return "; ".join(_difference(key, old.get(key), new.get(key)) for key in differs) \
            or None


def _difference(key: str, old, new) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        shown = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:3])
        return f"{key}: {shown}"
    return f"{key}: {old!r} -> {new!r}"


class NestedManifest(Manifest):
    """The identity as one object under "identity", the state beside it (the kind is the
    class's KIND, not written): {"schema", "identity": {...}, "complete", ...}."""

    KIND: ClassVar[str]
    INDENT = 2
    ALLOW_NAN = False

    def to_json(self) -> dict:
        return {"schema": self.SCHEMA, "identity": self.identity, **self.state}

    @classmethod
    def from_json(cls, doc: dict) -> "NestedManifest":
        identity = doc.get("identity")
        return cls(kind=cls.KIND, identity=identity if isinstance(identity, dict) else {},
                   state={k: v for k, v in doc.items() if k not in ("schema", "identity")})

    def difference(self, other: "Manifest") -> str | None:
        old, new = self.identity, other.identity
        if old == new:
            return None
        for key in new:
            if old.get(key) != new.get(key):
                return f"{key} {old.get(key)!r}, now {new.get(key)!r}"
        return "another tfx version's state"


# -- a resumable folder: held, checked, resumed --------------------------------------------
def make_folder(path: Path, is_file: str = "-o {path} is a file; give a folder (it is "
                                          "created)") -> bool:
    """An output folder made when missing (its parent must exist) and checked writable;
    True when this call made it. `is_file`: the refusal when `path` is a file."""
    if path.exists() and not path.is_dir():
        raise OutputFileError(is_file.format(path=path))
    made = False
    if not path.exists():
        if not path.parent.is_dir():
            raise OutputFileError(f"cannot write {path}: the folder {path.parent} does "
                                  "not exist; create it first")
        try:
            path.mkdir()
        except OSError as exc:
            if exc.errno in DISK_FULL:
                raise write_error(path, exc) from None
            raise OutputFileError(f"cannot create {path}: {exc.strerror or exc}; choose "
                                  "another place") from None
        made = True
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputFileError(f"cannot write {path}: the folder is not writable; choose "
                              "another place")
    return made


class OutputFolder:
    """A resumable output folder (`-o DIR`), held by this run alone (FolderHold) from its
    opening to close() (or the end of a `with` block, or of the process).

    Opening it makes the folder when it is new (its parent must exist), then reads its
    manifest (MANIFEST.read): none, and the folder holds only files `ours` says this
    writer makes (or nothing) -> a fresh start (a manifest file that does not read counts
    as the user's: tfx never leaves half of one); a manifest of another run (its
    `difference` from this one's) -> refused, naming what differs; the same run ->
    resumed (`self.record` is the manifest read). --force starts over in any case
    (`start_over`: the writer's own files go, the user's stay). A run that fails before it
    ends leaves no empty folder it made. Every file goes in by atomic_file under a fixed
    temporary name, ".NAME.tmp"; an OSError names the file and WRITE_HINT (what stays
    safe)."""

    MANIFEST: ClassVar[type[Manifest]]
    IS_FILE = "-o {path} is a file; give a folder (it is created)"
    STRANGERS = ("-o {path} holds files tfx did not write ({names}); give an empty or new "
                 "folder, or pass --force to write beside them")
    OTHER_RUN = ("-o {path} holds another run ({detail}); pass --force to start over, or "
                 "choose another folder")
    WRITE_HINT = ""
    MAKE_FOLDER = False  # a write remakes the folder, should it have gone meanwhile

    def __init__(self, path: str | Path, kind: str, identity: dict, *, force: bool = False,
                 version: str | None = None):
        self.path = Path(path).expanduser()
        self.this = self.MANIFEST(kind=kind, identity=identity, version=version)
        self.record: Manifest | None = None
        self.created, self.hold = False, None
        try:
            self.created = self._make()
            self.hold = FolderHold(self.path)  # before the manifest is read: this run's now
            self._open(force)
        except BaseException:
            self._let_go(failed=True)
            raise

    def ours(self, name: str) -> bool:
        """Whether `name` in the folder is a file this writer makes."""
        return False

    def resume(self, record: Manifest) -> None:
        """The same run found in the folder (`record`): pick up what it did."""

    def start_over(self) -> None:
        """A fresh start (no manifest, or --force): the writer's files go."""
        self.clear()

    def _make(self) -> bool:
        return make_folder(self.path, self.IS_FILE)

    def _open(self, force: bool) -> None:
        old = None if self.created else self.MANIFEST.read(self.path)
        if old is None:  # a manifest that does not read (not JSON, another schema) is
            # no manifest of this writer's: tfx writes its manifests whole
            strangers = sorted(p.name for p in self.path.iterdir()
                               if not self.ours(p.name) or p.name == self.MANIFEST.FILE)
            if strangers and not force:
                raise OutputFileError(self.STRANGERS.format(
                    path=self.path, names=", ".join(strangers[:3])))
        if old is None or force:
            self.start_over()
            return
        detail = old.difference(self.this)
        if detail is not None:
            raise OutputFileError(self.OTHER_RUN.format(path=self.path, detail=detail))
        self.record = old
        self.resume(old)

    def clear(self) -> None:
        """Remove the files this writer makes (the user's stay)."""
        import shutil

        for p in self.path.iterdir():
            if self.ours(p.name):
                p.unlink() if not p.is_dir() else shutil.rmtree(p)
        self.record = None

    def _let_go(self, failed: bool) -> None:
        if failed and self.created and self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()
        if self.hold is not None:
            self.hold.release()

    def close(self) -> None:
        self._let_go(failed=False)

    def __enter__(self):
        return self

    def __exit__(self, kind, *_) -> None:
        self._let_go(failed=kind is not None)

    # -- writing ------------------------------------------------------------------------
    def write_manifest(self, **state) -> None:
        """The manifest: this run's identity and `state` (what is done)."""
        self.this.state = state
        self.write_bytes(self.MANIFEST.FILE, self.this.encode())
        self.record = self.this

    def write_bytes(self, name: str, data: bytes) -> str:
        """Write DIR/name atomically; returns its sha256."""
        import hashlib

        with self.atomic(name) as tmp:
            tmp.write_bytes(data)
        return hashlib.sha256(data).hexdigest()

    def write_json(self, name: str, data: dict, indent: int = 2) -> None:
        self.write_bytes(name, (json.dumps(data, indent=indent, allow_nan=False) + "\n"
                                ).encode("utf-8"))

    def atomic(self, name: str):
        """A context manager yielding the temporary path that becomes DIR/name."""
        return atomic_file(self.path / name, temp=f".{name}.tmp", parents=self.MAKE_FOLDER,
                           mode="umask",  # a file any writer makes (safetensors: 0600)
                           error=lambda path, exc: write_error(path, exc, self.WRITE_HINT))


def sha256_file(path: Path) -> str:
    """The SHA-256 of a whole file, read in 1 MiB blocks."""
    return sha256_files([path])


def sha256_files(paths) -> str:
    """The SHA-256 of files read one after the other as one stream (of one file: its
    own), in 1 MiB blocks: what records the content of something held in several files
    (an SAE's config and weights, a transcoder set)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


__all__ = ["OUTPUT_LIMIT", "check_output_size", "format_bytes", "FolderHold", "atomic_file",
           "atomic_folder", "check_new_folder", "refuse_existing", "Manifest", "FlatManifest",
           "NestedManifest", "OutputFolder", "sha256_file", "sha256_files"]
