"""What a killed `--engine ray` run leaves behind, found and removed at the next start.

A local Ray runtime lives in a temporary folder `tfx-ray-XXXXXXXX` made for the run. Its
driver (the tfx process) stops it on exit and on SIGTERM; a driver killed with SIGKILL
cannot, and Ray's dashboard and runtime-env agents (about 165 MB together) outlive it,
re-parented to init, with the folder. The next run that starts a local runtime cleans up
after it:

- A folder is stale only when its driver is provably gone. The driver holds an flock on
  `tfx-driver.lock` in its folder for as long as it runs (the kernel drops the lock when
  the process dies, however it dies); a lock that can be taken is a dead driver's. A
  folder of an older tfx without the lock file is stale when its name is exactly what
  this module makes and the pid in its Ray session folder's name (the driver's) runs no
  process. Anything else (a live driver's folder, one just being made, a test's
  `tfx-ray-test-*` folder, `ray start --head`'s) is left alone.
- A stale folder's processes are those of this user that hold a file in the folder open
  (their logs) and are Ray's (`ray` in their command line): only they get SIGTERM, then
  SIGKILL after GRACE_S. No other Ray process is touched: `ray stop` is never run (it
  would stop every Ray process of the user, a cluster's too).
- Finding processes by their open files needs /proc (Linux). Where there is none the
  folders stay; README "On a Ray cluster" says how to remove them by hand.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

PREFIX = "tfx-ray-"
LOCK = "tfx-driver.lock"
GRACE_S = 3.0  # between SIGTERM and SIGKILL
# tempfile.mkdtemp(prefix=PREFIX)'s names: 8 characters of its alphabet after the prefix
OURS = re.compile(r"^tfx-ray-[a-z0-9_]{8}$")
SESSION = re.compile(r"^session_.*_(\d+)$")  # Ray's session folder ends in the driver's pid


def make_folder() -> tuple[str, int]:
    """A new runtime folder and the descriptor whose flock marks its driver alive (held
    until release(); never inherited by the processes Ray starts)."""
    import fcntl

    folder = tempfile.mkdtemp(prefix=PREFIX)
    # locked under another name, then renamed: a lock file that exists is always held
    # while its driver runs (never seen unlocked between its creation and the flock)
    part = os.path.join(folder, f".{LOCK}.new")
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{os.getpid()}\n".encode())
    os.rename(part, os.path.join(folder, LOCK))
    return folder, fd


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)  # closing the descriptor drops the flock
        except OSError:
            pass


def _driver_gone(folder: Path) -> bool:
    """True only when the folder's driver has certainly stopped."""
    import fcntl

    lock = folder / LOCK
    if lock.exists():
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its driver runs
        finally:
            os.close(fd)
        return True
    if not OURS.match(folder.name):
        return False
    pids = [int(m.group(1)) for p in folder.glob("session_*")
            if (m := SESSION.match(p.name)) and p.is_dir() and not p.is_symlink()]
    return bool(pids) and not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive, and not ours to judge
    return True


def stale_folders(root: str | Path | None = None) -> list[Path]:
    """This user's runtime folders in `root` (the temporary folder) whose driver is gone."""
    root = Path(root or tempfile.gettempdir())
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return []
    uid = os.getuid()
    return sorted(p for p in candidates
                  if not p.is_symlink() and p.is_dir() and p.stat().st_uid == uid
                  and _driver_gone(p))


def folder_processes(folder: Path) -> list[int]:
    """This user's Ray processes holding a file under `folder` open (/proc; [] without)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    inside = str(folder.resolve()) + os.sep
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if b"ray" not in command:
                continue
            if any(os.readlink(fd).startswith(inside) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not readable: not ours to stop
            continue
    return found


def _stop(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [pid for pid in pids if _signal(pid, sig)]
        deadline = time.monotonic() + (GRACE_S if sig == signal.SIGTERM else 1.0)
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            live = [pid for pid in live if _alive(pid) and not _zombie(pid)]
        pids = live
        if not pids:
            return


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def clean_stale(root: str | Path | None = None) -> list[Path]:
    """Stop the processes of every stale runtime folder and remove the folder; returns
    the folders removed. Without /proc nothing is removed (its processes cannot be
    found, and a folder removed under them would hide them)."""
    if not Path("/proc").is_dir():
        return []
    removed = []
    for folder in stale_folders(root):
        _stop(folder_processes(folder))
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


__all__ = ["make_folder", "release", "stale_folders", "folder_processes", "clean_stale"]
