"""--engine ray on a real Ray runtime against --engine local: collect's files byte for byte
(shards, manifest, tokens table), scan's, top's and patch --pairs' results bit for bit (the
JSON and every array's bytes), with one and two workers; an actor killed mid-run; a
cluster started with `ray start --head` joined through --ray-address (and its driver
killed mid-run, then resumed from the manifest); a cluster too small for --workers.

One Ray runtime (ray.init(num_cpus=2), a temporary folder) serves the in-process tests;
the engine uses a runtime its process already holds. The models are tiny random ones.
"""
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from needs import need_import

ray = need_import("ray", "pip install 'tfx-cli[ray]'")

from tfx_cli import api  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = dict(config="gpt124m", layers=1, d_model=16, heads=2, seed=5)
ARGS = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2", "--seed", "5"]
CORPUS = dict(source="python-docs", max_docs=20)


@pytest.fixture(scope="module")
def runtime():
    folder = tempfile.mkdtemp(prefix="tfx-ray-test-")  # short: Ray's socket paths
    ray.init(address="local", num_cpus=2, _temp_dir=folder, include_dashboard=False,
             log_to_driver=False, logging_level="error")
    try:
        yield ray.cluster_resources()
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def _files(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _same(a, b):
    """The same result bit for bit: the JSON document (but for the engine's name) and
    every array's dtype, shape and bytes (NaN included)."""
    assert json.dumps(a.to_dict()["result"] | {"engine": None}) == \
        json.dumps(b.to_dict()["result"] | {"engine": None})
    assert a.tensors.names() == b.tensors.names()
    for name in a.tensors.names():
        x, y = np.asarray(a.tensors[name]), np.asarray(b.tensors[name])
        assert (x.dtype, x.shape) == (y.dtype, y.shape), name
        assert x.tobytes() == y.tobytes(), (name, np.abs(x - y).max())


@pytest.mark.parametrize("workers", [1, 2])
def test_collect_is_the_same_bytes_as_local(runtime, tmp_path, workers):
    select = ["blocks.*.resid_out", "blocks.0.ffn.act"]
    local = api.collect(**CORPUS, select=select, output=tmp_path / "local",
                        shard_tokens=200, **MODEL)
    far = api.collect(**CORPUS, select=select, output=tmp_path / "ray", shard_tokens=200,
                      engine="ray", workers=workers, **MODEL)
    assert far.engine == "ray" and local.tokens == far.tokens > 600 and len(far.shards) > 2
    assert _files(tmp_path / "local") == _files(tmp_path / "ray")  # manifest included


@pytest.mark.parametrize("workers", [1, 2])
def test_scan_equals_local(runtime, workers):
    local = api.scan(**CORPUS, batch_size=4, **MODEL)
    far = api.scan(**CORPUS, batch_size=4, engine="ray", workers=workers, **MODEL)
    assert far.engine == "ray" and far.tokens == local.tokens
    _same(local, far)


def test_top_and_patch_pairs_equal_local(runtime):
    top = dict(site="blocks.0.ffn.act", units="0:6", k=4, around=3, batch_size=4)
    _same(api.top(**CORPUS, **top, **MODEL),
          api.top(**CORPUS, **top, engine="ray", workers=2, **MODEL))
    pairs = ROOT / "samples" / "ioi_pairs.jsonl"
    local = api.patch(pairs=pairs, site="heads", batch=4, **MODEL)
    far = api.patch(pairs=pairs, site="heads", batch=4, engine="ray", workers=1, **MODEL)
    assert far.engine == "ray" and far.n_pairs == local.n_pairs > 3
    _same(local, far)


def _map_workers() -> list[int]:
    """Pids of this process's Ray Data actors (the raylet is our child, they its)."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            procs[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, (parent, _) in procs.items() if parent in mine} - mine
        mine |= more
        grew = bool(more)
    return sorted(p for p in mine if procs.get(p, (0, b""))[1].startswith(b"ray::MapWorker"))


def test_an_actor_killed_mid_run_is_replaced_and_the_bytes_stay(runtime, tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(f"document {i}: the cat sat on the mat {i % 7} times, "
                                "then the dog sat on the cat" for i in range(40)))
    run = dict(select=["blocks.0.resid_out"], shard_tokens=64, ctx=8, batch_size=1, **MODEL)
    api.collect(str(corpus), output=tmp_path / "local", **run)
    seen = {"updates": 0, "killed": None, "after": set()}

    def progress(description, total=None, unit=None):
        @contextmanager
        def bar():
            def update(done, tokens=None):
                seen["updates"] += 1
                workers = _map_workers()
                if seen["killed"] is None and workers:
                    os.kill(workers[-1], signal.SIGKILL)
                    seen["killed"] = (workers[-1], seen["updates"])
                elif seen["killed"] is not None:
                    seen["after"] |= set(workers)
            yield update
        return bar()

    far = api.collect(str(corpus), output=tmp_path / "ray", engine="ray", workers=2,
                      progress=progress, **run)
    pid, at = seen["killed"]
    assert at < seen["updates"] - 10  # killed with most of the batches still to come
    assert seen["after"] - {pid}  # a worker ran on after it
    assert far.tokens > 500
    assert _files(tmp_path / "local") == _files(tmp_path / "ray")


def _free_ports(n: int) -> list[int]:
    """n distinct ports nobody listens on (all held open until all are chosen)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for_ports(ports: list[int], head: subprocess.Popen, seconds: float) -> None:
    """Until something accepts a connection on each port (polled, no process started),
    the head dies, or the time is up."""
    deadline = time.monotonic() + seconds
    for port in ports:
        while time.monotonic() < deadline and head.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
    assert head.poll() is None, f"`ray start --head` exited with {head.returncode}"
    assert time.monotonic() < deadline, f"the Ray head did not open {ports} in {seconds} s"


def test_a_cluster_started_with_ray_start(tmp_path):
    """`ray start --head` in its own process group (torn down by signalling that group:
    `ray stop` would stop every Ray process of the machine's user)."""
    folder = tempfile.mkdtemp(prefix="tfx-ray-head-")
    port, node_port = _free_ports(2)
    # a cluster with a token of its own (Ray's token authentication), which every
    # client is given as a user of a real cluster would be
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFX_QUIET": "1", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    beside = Path(sys.executable).with_name("ray")  # the ray script of this environment
    # on SIGTERM a head first drains its node for up to 30 s (RAY_GRACEFUL_SHUTDOWN_DRAIN_
    # TIMEOUT_S, for served traffic to move away); this one serves nothing
    head_env = {**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    head = subprocess.Popen([str(beside) if beside.exists() else "ray", "start", "--head", "--block",
                             "--temp-dir", folder, "--num-cpus", "2", "--port", str(port),
                             "--node-manager-port", str(node_port),
                             "--include-dashboard", "false", "--disable-usage-stats"],
                            env=head_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        # the head's control store and its node's raylet both listen: the node is up
        _wait_for_ports([port, node_port], head, 120)
        # more workers than the cluster's CPUs hold: exit 2, one line, before any model
        # (asked again only while the node has not yet registered its CPUs)
        small_cmd = [sys.executable, "-m", "tfx_cli", "scan", "python-docs", *ARGS,
                     "--engine", "ray", "--workers", "5", "--ray-address", address]
        deadline = time.monotonic() + 60
        while True:
            small = subprocess.run(small_cmd, env=env, capture_output=True, text=True)
            if "has 2 CPUs" in small.stderr or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert small.returncode == 2 and small.stdout == ""
        assert small.stderr.startswith("tfx: error: --workers 5 needs 2.5 CPUs"), small.stderr
        assert f"the Ray cluster at {address} has 2 CPUs" in small.stderr
        assert len(small.stderr.strip().splitlines()) == 1
        corpus = tmp_path / "docs.txt"
        corpus.write_text("\n".join(f"line {i} of the corpus, with the cat and the mat"
                                    for i in range(60)))
        cmd = [sys.executable, "-m", "tfx_cli", "collect", str(corpus), *ARGS, "-s",
               "blocks.0.resid_out", "--shard-tokens", "32", "--ctx", "8", "--batch-size",
               "1", "--json"]
        local = tmp_path / "local"
        subprocess.run([*cmd, "-o", str(local)], env=env, check=True, capture_output=True)
        far = [*cmd, "-o", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2",
               "--ray-address", address]
        # the driver killed mid-run: the same command resumes from the manifest
        with open(tmp_path / "killed.err", "w") as err:
            proc = subprocess.Popen(far, env=env, stdout=subprocess.DEVNULL, stderr=err)
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None and \
                    not (tmp_path / "ray" / "shard-00002.safetensors").exists():
                time.sleep(0.005)
            assert proc.poll() is None, (tmp_path / "killed.err").read_text()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
        assert not manifest["complete"]
        done = subprocess.run(far, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["result"]["resumed_shards"] >= 2
        assert _files(local) == _files(tmp_path / "ray")
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
