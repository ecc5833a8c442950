"""A full disk is a runtime failure (exit 1, the folder named), not bad input; the same
command run again once there is room, or after it finished, does what the first run would
have done."""
import errno
import json
import os
from pathlib import Path
from unittest import mock

from collect_folders import hand_collected
from typer.testing import CliRunner

from tfx_cli.cli import app

TINY = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]
ENV = {"TFX_QUIET": "1"}


def _run(args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def _full_for(prefix: str):
    """Path.write_bytes that fails as a full disk does for names starting with `prefix`."""
    real = Path.write_bytes

    def write_bytes(self, data):
        if self.name.startswith(prefix):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)
    return write_bytes


def test_a_full_disk_during_collect_exits_1_and_the_same_command_resumes(tmp_path):
    out = tmp_path / "acts"
    args = ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", out,
            "--max-tokens", "600", "--shard-tokens", "256", "--json"]
    with mock.patch.object(Path, "write_bytes", _full_for(".shard-00001")):
        full = _run(args)
    assert full.exit_code == 1, full.stderr
    assert full.stdout == ""
    lines = full.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: cannot write "), full.stderr
    assert "disk full (ENOSPC)" in lines[0] and f"in the folder {out};" in lines[0]
    assert "internal error" not in lines[0]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no half file
    listed = json.loads((out / "manifest.json").read_text())["shards"]
    assert all((out / s["file"]).exists() for s in listed)  # what it lists is there
    again = _run(args)  # room again: the same command finishes the run
    assert again.exit_code == 0, again.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["shards"]) == 3


def test_a_full_disk_writing_a_page_exits_1(tmp_path):
    page = tmp_path / "r.html"
    real = os.replace

    def replace(src, dst):
        if Path(dst) == page:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst)
    with mock.patch("os.replace", replace):
        result = _run(["report", "hi", "-c", "toy", "-o", page])
    assert result.exit_code == 1, result.stderr
    assert "disk full (ENOSPC)" in result.stderr and str(tmp_path) in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unsaid_full_disk_is_still_named(tmp_path):
    """A writer that lets the OSError through still gets the one disk-full line."""
    def save(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x.bin"))
    with mock.patch("tfx_cli.api._model.report_html", save):
        result = _run(["report", "hi", "-c", "toy", "-o", tmp_path / "r.html"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith(f"tfx: error: cannot write {tmp_path / 'x.bin'}: disk full")


def test_train_sae_run_again_after_it_finished_is_a_no_op(tmp_path):
    """As collect and scan: the same command on a finished run exits 0 with the run's
    result and leaves the SAE as it was; another run into the folder is still refused."""
    hand_collected(tmp_path / "acts")
    sae = tmp_path / "sae"
    args = ["train-sae", tmp_path / "acts", "--site", "blocks.0.resid_out", "-o", sae,
            "--latents", "16", "--k", "4", "--batch-size", "16", "--steps", "12", "--json"]
    first = _run(args)
    assert first.exit_code == 0, first.stderr
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sae.iterdir()}
    again = _run(args)
    assert again.exit_code == 0, again.stderr
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sae.iterdir()} == files
    was, now = json.loads(first.stdout)["result"], json.loads(again.stdout)["result"]
    assert now["resumed_from"] == 12 and was["resumed_from"] == 0
    assert {k: v for k, v in now.items() if k != "resumed_from"} == \
        {k: v for k, v in was.items() if k != "resumed_from"}
    view = _run(args[:-1])  # the terminal says nothing was trained
    assert view.exit_code == 0 and "nothing trained" in view.stdout
    other = _run(args[:-1] + ["--seed", "1"])
    assert other.exit_code == 2 and "another training run" in other.stderr
