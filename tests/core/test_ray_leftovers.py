"""A driver of `--engine ray` killed with SIGKILL leaves Ray's agents and its tfx-ray-*
folder behind; the next run that starts a local runtime stops those agents and removes the
folder, and touches nothing of a driver that still runs.

Each test works in a temporary root of its own (TMPDIR for the processes it starts), so
it never sees another run's folders."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from needs import need

from tfx_cli.core.datasets import ray_leftovers as lo

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]


@pytest.fixture
def root():
    folder = tempfile.mkdtemp(prefix="tfxk-", dir="/tmp")  # short: Ray's socket paths
    try:
        yield Path(folder)
    finally:
        for stale in Path(folder).glob("tfx-ray-*"):  # nothing of a failed test stays
            lo._stop(lo.folder_processes(stale))
        shutil.rmtree(folder, ignore_errors=True)


def _holder(folder: Path) -> subprocess.Popen:
    """A process holding a log file in `folder` open, named like Ray's agents."""
    return subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], "
                             "'w'); print('ready', flush=True); time.sleep(120)",
                             str(folder / "agent.log"), "ray::DashboardAgent"],
                            stdout=subprocess.PIPE, text=True)


def test_a_live_drivers_folder_is_left_alone_and_a_dead_ones_is_cleaned(root, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    folder, fd = lo.make_folder()
    folder = Path(folder)
    agent = _holder(folder)
    try:
        assert agent.stdout.readline().strip() == "ready"
        assert lo.folder_processes(folder) == [agent.pid]
        assert lo.stale_folders(root) == []  # its driver (this process) holds the lock
        assert lo.clean_stale(root) == []
        assert agent.poll() is None and folder.is_dir()
        lo.release(fd)  # the driver is gone
        assert lo.stale_folders(root) == [folder]
        assert lo.clean_stale(root) == [folder]
        assert agent.wait(10) == -signal.SIGTERM and not folder.exists()
    finally:
        agent.kill()
        agent.wait()


def test_folders_tfx_did_not_make_or_whose_driver_runs_are_never_stale(root):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    for name, pid in (("tfx-ray-test-abcdefgh", dead),  # a test's runtime: not ours
                      ("tfx-ray-abcdefgh", str(os.getpid())),  # an older tfx, driver alive
                      ("tfx-ray-abcdefg", dead),  # not a name mkdtemp gave us
                      ("tfx-ray-zyxwvuts", None)):  # being made: no session yet
        (root / name).mkdir()
        if pid:
            (root / name / f"session_2026-01-01_00-00-00_000000_{pid}").mkdir()
    assert lo.stale_folders(root) == []
    (root / "tfx-ray-older123").mkdir()  # an older tfx's folder whose driver is gone
    (root / "tfx-ray-older123" / f"session_2026-01-01_00-00-00_000000_{dead}").mkdir()
    assert lo.stale_folders(root) == [root / "tfx-ray-older123"]


def _agents(folder: Path) -> list[int]:
    return [pid for pid in lo.folder_processes(folder)
            if b"Agent" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def test_a_killed_drivers_ray_agents_and_folder_go_at_the_next_start(root):
    """A real Ray run killed with SIGKILL: its dashboard and runtime-env agents outlive
    it; the next --engine ray run stops them and removes the folder."""
    need("ray", "pip install 'tfx-cli[ray]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFX_QUIET": "1", "TMPDIR": str(root)}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "tfx_cli", "scan", "python-docs", *ARGS, "--engine", "ray"]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    agents, deadline = [], time.time() + 180
    while time.time() < deadline and driver.poll() is None and len(agents) < 2:
        time.sleep(0.5)
        folders = list(root.glob("tfx-ray-*"))
        agents = _agents(folders[0]) if folders else []
    assert driver.poll() is None and len(agents) == 2, "the run ended before its agents ran"
    killed = folders[0]
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    time.sleep(1)
    left = lo.folder_processes(killed)
    assert set(agents) <= set(left)  # what the issue saw: the agents outlive their driver
    again = subprocess.run([*cmd, "--max-docs", "2"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert not killed.exists()
    assert not [pid for pid in left if lo._alive(pid) and not lo._zombie(pid)]
    assert list(root.glob("tfx-ray-*")) == []  # the second run removed its own folder too
