"""The output folder (`-o DIR`): its manifest, checkpoints and atomic writes.

manifest.json is a tfx/1 document (`"kind"`: activations for collect, scan or top for
their checkpoints) holding what identifies the run (model, corpus with its sha256,
options) and what is done; it never holds a wall-clock time, so the same run gives the
same bytes. Every file is written to a temporary name in DIR and renamed when complete:
a reader (or a resumed run) never takes half a file for a whole one. The same DIR with
another model, corpus or options is refused, naming what differs; --force starts over.
One run writes DIR at a time: it holds the folder from opening it to its end, and a
second run into it is refused; a killed run holds nothing. The folder, its hold and its
atomic writes are core/outputs.OutputFolder's; this module says which files are collect's
and what its manifest holds.
"""
from __future__ import annotations

from pathlib import Path

from ... import __version__
from ...errors import OutputFileError
from ..outputs import FlatManifest, OutputFolder, sha256_file

MANIFEST = "manifest.json"
SCHEMA = "tfx/1"
OURS = ("manifest.json", "state.npz", "result.json", "tokens.parquet")


class CorpusManifest(FlatManifest):
    """manifest.json of collect, scan and top: {"schema": "tfx/1", "kind", "tfx_version",
    "model", "corpus", "options", then what is done}."""

    FILE, SCHEMA = MANIFEST, SCHEMA
    IDENTITY = ("model", "corpus", "options")


class OutputDir(OutputFolder):
    """DIR, held by this run alone until close() (or the end of a `with` block, or of the
    process): a second run into it is refused while this one writes."""

    MANIFEST = CorpusManifest
    WRITE_HINT = ("; the manifest still lists only the complete files, so the same command "
                  "resumes")

    def __init__(self, path: str | Path, kind: str, identity: dict, *, force: bool = False):
        super().__init__(path, kind, identity, force=force, version=__version__)

    def ours(self, name: str) -> bool:
        return name in OURS or name.startswith(("shard-", ".shard-", ".manifest", ".state",
                                                ".result", ".tokens"))

    def _let_go(self, failed: bool) -> None:
        # DIR stays, even empty: it is the folder the user named for this command's output
        super()._let_go(failed=False)

    @property
    def manifest(self) -> dict | None:
        """The manifest as JSON (what a resumed run reads its shards and state from)."""
        return None if self.record is None else self.record.to_json()

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


def read_manifest(path: Path) -> dict | None:
    """DIR's manifest as JSON; None when it has none, or one that is not JSON or not tfx/1."""
    record = CorpusManifest.read(path)
    return None if record is None else record.to_json()


__all__ = ["OutputDir", "read_manifest", "sha256_file", "MANIFEST"]
