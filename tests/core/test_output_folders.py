"""Output folders taken by hostile hands: two runs into one folder, a shard changed or
holding NaN under the manifest, a training run that diverges.

What must hold: a folder is written by one run at a time (a second is refused with one
line, exit 2, and changes nothing; a kill -9'd holder holds nothing); a manifest says
complete only once every shard it lists is on disk with its sha256; a shard is read only
when its bytes are the manifest's and its values finite; a refused train-sae leaves no
folder that reads as an SAE."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core.datasets import corpus_runs
from tfx_cli.core.outputs import FolderHold
from tfx_cli.errors import InputTextError, OutputFileError

ROOT = Path(__file__).resolve().parents[2]
MODEL = dict(config="gpt124m", layers=1, d_model=16, heads=2, seed=3)
ARGS = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2", "--seed", "3"]
SITE = "blocks.0.resid_out"
DOCS = ["When you play the game of thrones, you win or you die. There is no middle ground.",
        "the cat sat on the mat and the cat sat on the mat again",
        "Hello, I am a language model, and I am a language model too."]
HELD = "is being written by another tfx run"


def _collect_cmd(corpus, out, *extra):
    return [sys.executable, "-m", "tfx_cli", "collect", str(corpus), *ARGS, "-s", SITE,
            "-o", str(out), "--shard-tokens", "16", "--batch-size", "1", "--ctx", "8", *extra]


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), stderr
    return lines[0]


def test_two_collect_processes_into_one_folder(tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS * 80))
    out = tmp_path / "A"
    env = {**os.environ, "TFX_QUIET": "1", "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(_collect_cmd(corpus, out), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "manifest.json").exists():
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGSTOP)  # held mid-run, as long as the test needs
        manifest = json.loads((out / "manifest.json").read_text())
        assert not manifest["complete"]
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        # another corpus length, and --force, which would clear the folder
        second = subprocess.run(_collect_cmd(corpus, out, "--max-tokens", "40", "--force"),
                                env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2 and second.stdout == ""
        line = _one_line(second.stderr)
        assert f"-o {out} {HELD}" in line
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    # the killed holder holds nothing: the same command resumes and finishes the folder
    third = subprocess.run(_collect_cmd(corpus, out), env=env, capture_output=True,
                           text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["options"].get("max_tokens") is None
    for shard in manifest["shards"]:
        data = (out / shard["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert len(api.activations(out)[SITE]) == manifest["tokens"]


def test_scan_top_collect_and_train_sae_refuse_a_held_folder(tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS))
    acts = tmp_path / "acts"
    api.collect(str(corpus), select=[SITE], output=acts, **MODEL)
    calls = {
        "scan": lambda out: api.scan(str(corpus), output=out, **MODEL),
        "top": lambda out: api.top(str(corpus), site="blocks.0.ffn.act", units=[0, 1],
                                   output=out, **MODEL),
        "collect": lambda out: api.collect(str(corpus), select=[SITE], output=out, **MODEL),
        "train-sae": lambda out: api.train_sae(acts, site=SITE, output=out, latents=8, k=2,
                                               batch_size=8, steps=2),
    }
    for name, call in calls.items():
        out = tmp_path / name
        out.mkdir()
        with FolderHold(out):
            with pytest.raises(OutputFileError, match=HELD):
                call(out)
            assert list(out.iterdir()) == []  # refused before writing anything
        call(out)  # let go: the same call runs
        assert any(out.iterdir())
    # a run's folder is let go when it ends, in the same process too
    api.scan(str(corpus), output=tmp_path / "scan", **MODEL)


def test_complete_is_written_only_after_every_shard_is_checked(tmp_path, monkeypatch):
    """Another program writes into DIR while collect runs: the run fails, and the manifest
    never says complete."""
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS * 3))
    out = tmp_path / "A"
    real = corpus_runs.write_tokens_table

    def meddling(path, rows, shard_tokens):
        (out / "shard-00000.safetensors").write_bytes(b"someone else's bytes")
        return real(path, rows, shard_tokens)

    monkeypatch.setattr(corpus_runs, "write_tokens_table", meddling)
    with pytest.raises(OutputFileError, match="shard-00000.safetensors is not the file this "
                                              "run wrote"):
        api.collect(str(corpus), select=[SITE], output=out, shard_tokens=16, **MODEL)
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    monkeypatch.setattr(corpus_runs, "write_tokens_table", real)
    api.collect(str(corpus), select=[SITE], output=out, shard_tokens=16, **MODEL)
    assert json.loads((out / "manifest.json").read_text())["complete"] is True


# -- shards read back -------------------------------------------------------------------
@pytest.fixture
def collected(tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS * 4))
    out = tmp_path / "acts"
    api.collect(str(corpus), select=[SITE], output=out, shard_tokens=32, **MODEL)
    return out


def _poison(folder: Path, rehash: bool, value=float("nan")) -> Path:
    """Put `value` into shard 1's row 5; `rehash`: write its new sha256 into the manifest
    (so only the values betray it)."""
    file = folder / "shard-00001.safetensors"
    tensors = load_file(str(file))
    tensors[SITE][5, 3] = value
    save_file(tensors, str(file))
    if rehash:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["shards"][1]["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return file


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"TFX_QUIET": "1"})


@pytest.mark.parametrize("rehash, phrase", [
    (True, "holds nan in blocks.0.resid_out (token 37, unit 3; 1 value not finite)"),
    (False, "is not the file tfx collect wrote (its sha256 differs"),
], ids=["nan", "changed"])
def test_a_damaged_shard_is_refused_by_name(collected, tmp_path, rehash, phrase):
    file = _poison(collected, rehash)
    with pytest.raises(InputTextError, match="holds nan" if rehash else "sha256 differs") \
            as caught:
        api.activations(collected)[SITE]
    assert str(file) in caught.value.message
    sae = tmp_path / "sae"
    out = run("train-sae", collected, "--site", SITE, "-o", sae, "--latents", "8", "--k",
              "2", "--batch-size", "8", "--steps", "3")
    assert out.exit_code == 2, out.stderr
    line = _one_line(out.stderr)
    assert f"{file} " in line and phrase in line
    assert not sae.exists()  # no folder, let alone one that reads as an SAE


def test_a_missing_shard_is_named(collected):
    (collected / "shard-00002.safetensors").unlink()
    with pytest.raises(InputTextError, match="shard-00002.safetensors is missing, though the "
                                             "manifest lists it"):
        api.activations(collected)[SITE]


def test_a_diverging_train_sae_writes_no_sae(collected, tmp_path):
    sae = tmp_path / "sae"
    out = run("train-sae", collected, "--site", SITE, "-o", sae, "--latents", "8", "--k", "2",
              "--batch-size", "8", "--steps", "3", "--lr", "1e30")
    assert out.exit_code == 2, out.stderr
    assert "lower --lr (now 1e+30)" in _one_line(out.stderr)
    assert not sae.exists()  # the run made the folder, so a refusal takes it away
    features = run("features", "hello there", *ARGS, "--sae", sae)
    assert features.exit_code == 2, features.stderr
    # the same folder, a sane rate, --force: an SAE that reads
    ok = run("train-sae", collected, "--site", SITE, "-o", sae, "--latents", "8", "--k", "2",
             "--batch-size", "8", "--steps", "3", "--force")
    assert ok.exit_code == 0, ok.stderr
    assert run("features", "hello there", *ARGS, "--sae", sae).exit_code == 0
