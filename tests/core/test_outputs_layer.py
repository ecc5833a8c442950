"""The output-folder layer (core/outputs) that every writer stands on: a file or a folder
is replaced whole or not at all; a resumable folder remembers what made it in a typed
manifest, resumes the same run and refuses another; manifests written before the layer
existed still read (and write back byte for byte)."""
import json
import os
from pathlib import Path

import pytest

from tfx_cli import api
from tfx_cli.core.datasets.store import CorpusManifest, OutputDir, read_manifest
from tfx_cli.core.features.training import RunFolder, TrainState
from tfx_cli.core.outputs import atomic_file, atomic_folder
from tfx_cli.errors import InputTextError, OutputFileError

IDENTITY = {"model": {"config": "gpt2", "layers": 1}, "corpus": {"source": "docs.txt",
                                                                  "sha256": "ab" * 32},
            "options": {"ctx": 8, "batch_size": 1}}

# manifest.json as collect wrote it before the layer (indent 1, tfx/1, flat identity)
OLD_COLLECT = """{
 "schema": "tfx/1",
 "kind": "activations",
 "tfx_version": "0.9.0",
 "model": {
  "config": "gpt2",
  "layers": 1
 },
 "corpus": {
  "source": "docs.txt",
  "sha256": "abababababababababababababababababababababababababababababababab"
 },
 "options": {
  "ctx": 8,
  "batch_size": 1
 },
 "shards": [
  {
   "file": "shard-00000.safetensors",
   "first_token": 0,
   "tokens": 16,
   "sha256": "00",
   "complete": true
  }
 ],
 "sites": [],
 "complete": false
}
"""

# train-state.json as train-sae wrote it before the layer (indent 2, identity nested)
OLD_TRAIN_STATE = """{
  "schema": "tfx-train-sae/1",
  "identity": {
    "site": "blocks.0.resid_out",
    "seed": 0,
    "latents": 32
  },
  "complete": false
}
"""


class Boom(Exception):
    pass


def test_a_crash_mid_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "page.html"
    target.write_text("the old page")
    with pytest.raises(Boom):
        with atomic_file(target) as tmp:
            tmp.write_text("half of the new")
            raise Boom
    assert target.read_text() == "the old page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]
    with atomic_file(target) as tmp:
        tmp.write_text("the new page")
    assert target.read_text() == "the new page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]


def test_a_file_that_appears_meanwhile_is_kept_without_force(tmp_path):
    target = tmp_path / "plot.png"
    with pytest.raises(OutputFileError, match="already exists; pass --force"):
        with atomic_file(target, force=False) as tmp:
            tmp.write_bytes(b"ours")
            target.write_bytes(b"the user's")  # another program, while we drew
    assert target.read_bytes() == b"the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_a_full_disk_is_named_with_what_stays_safe(tmp_path):
    import errno

    from tfx_cli.errors import DiskFullError

    with pytest.raises(DiskFullError, match=r"cannot write .*x\.bin: disk full"):
        with atomic_file(tmp_path / "x.bin"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    folder = tmp_path / "sae"
    folder.mkdir()
    (folder / "cfg.json").write_text("old")

    def half(tmp: Path) -> None:
        (tmp / "cfg.json").write_text("new")
        raise Boom

    with pytest.raises(OutputFileError, match="exists; choose another folder, or pass --force"):
        atomic_folder(folder, half, force=False)
    with pytest.raises(Boom):
        atomic_folder(folder, half, force=True)
    assert (folder / "cfg.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sae"]
    atomic_folder(folder, lambda tmp: (tmp / "w.bin").write_bytes(b"1"), force=True,
                  readable=True)
    assert sorted(p.name for p in folder.iterdir()) == ["w.bin"]
    mask = os.umask(0)
    os.umask(mask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~mask


def test_the_manifest_round_trips(tmp_path):
    record = CorpusManifest(kind="scan", identity=IDENTITY, version="1.2.3",
                            state={"complete": True, "chunks": 3, "files": ["result.json"]})
    (tmp_path / "manifest.json").write_bytes(record.encode())
    back = CorpusManifest.read(tmp_path)
    assert back == record
    assert back.encode() == record.encode()
    state = TrainState(kind="train-sae", identity={"site": "s", "seed": 1},
                       state={"complete": True, "heldout": {"fvu": 0.25}, "result": {}})
    (tmp_path / "train-state.json").write_bytes(state.encode())
    assert TrainState.read(tmp_path) == state


def test_a_manifest_written_before_the_layer_reads_and_writes_back_the_same(tmp_path):
    (tmp_path / "manifest.json").write_text(OLD_COLLECT)
    record = CorpusManifest.read(tmp_path)
    assert record.kind == "activations" and record.version == "0.9.0"
    assert record.identity == IDENTITY
    assert record.state["shards"][0]["file"] == "shard-00000.safetensors"
    assert record.encode().decode() == OLD_COLLECT
    (tmp_path / "train-state.json").write_text(OLD_TRAIN_STATE)
    state = TrainState.read(tmp_path)
    assert state.identity["latents"] == 32 and state.state == {"complete": False}
    assert state.encode().decode() == OLD_TRAIN_STATE


def test_an_old_folder_resumes_and_another_run_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(OLD_COLLECT)
    with OutputDir(out, "activations", IDENTITY) as folder:
        assert folder.manifest["shards"][0]["tokens"] == 16  # resumed, not started over
    other = {**IDENTITY, "options": {**IDENTITY["options"], "ctx": 16}}
    with pytest.raises(OutputFileError) as refused:
        OutputDir(out, "activations", other)
    assert str(refused.value) == (f"-o {out} holds another run (options: ctx 8 -> 16); pass "
                                  "--force to start over, or choose another folder")
    with pytest.raises(OutputFileError, match=r"holds another run \(kind: 'activations' "
                                              r"-> 'scan'\)"):
        OutputDir(out, "scan", IDENTITY)
    assert (out / "manifest.json").read_text() == OLD_COLLECT  # refusals change nothing
    with OutputDir(out, "activations", other, force=True) as folder:
        assert folder.manifest is None and list(out.iterdir()) == []


def test_a_train_state_of_another_run_is_refused_and_the_same_run_resumes(tmp_path):
    sae = tmp_path / "sae"
    sae.mkdir()
    (sae / "train-state.json").write_text(OLD_TRAIN_STATE)
    same = json.loads(OLD_TRAIN_STATE)["identity"]
    with RunFolder(sae, same, force=False) as folder:
        assert folder.record is not None and folder.finished is None
    with pytest.raises(OutputFileError) as refused:
        RunFolder(sae, {**same, "latents": 64}, force=False)
    assert str(refused.value) == (f"-o {sae} holds another training run (latents 32, now "
                                  "64); pass --force to start over, or choose another folder")
    assert (sae / "train-state.json").read_text() == OLD_TRAIN_STATE


def test_a_refused_run_leaves_no_folder_it_made(tmp_path, monkeypatch):
    def refuse(self, force):
        raise OutputFileError("refused")

    monkeypatch.setattr(RunFolder, "_open", refuse)
    with pytest.raises(OutputFileError):
        RunFolder(tmp_path / "new", {"site": "s"}, force=False)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("text", ["[1, 2]", "\"tfx/1\"", "{\"schema\": \"tfx/9\", "
                                  "\"kind\": \"activations\", \"complete\": true}", "{"])
def test_a_manifest_that_is_not_a_tfx_1_object_is_not_a_collect_folder(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    assert read_manifest(tmp_path) is None
    with pytest.raises(InputTextError, match="is not a tfx collect folder"):
        api.activations(tmp_path)


@pytest.mark.parametrize("text", ["{\"schema\": \"tfx/1\", \"kind\": \"activ", "[]",
                                  "{\"schema\": \"other/3\", \"kind\": \"activations\"}"])
def test_a_manifest_that_does_not_read_is_not_cleared_without_force(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(text)
    (out / "shard-00000.safetensors").write_bytes(b"rows")
    with pytest.raises(OutputFileError) as refused:
        OutputDir(out, "activations", IDENTITY)
    assert str(refused.value) == (f"-o {out} holds files tfx did not write (manifest.json); "
                                  "give an empty or new folder, or pass --force to write "
                                  "beside them")
    assert (out / "manifest.json").read_text() == text
    assert (out / "shard-00000.safetensors").read_bytes() == b"rows"
    with OutputDir(out, "activations", IDENTITY, force=True) as folder:
        assert folder.manifest is None and list(out.iterdir()) == []
