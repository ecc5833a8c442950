"""Reading a collect folder back: `api.activations(DIR)`.

Any safetensors reader opens a shard (numpy for F32/F16; BF16 needs torch), any Parquet
reader tokens.parquet; this class only joins the shards of a site in order.
"""
from __future__ import annotations

from collections.abc import Mapping
import hashlib
from pathlib import Path

import numpy as np

from ...errors import InputTextError
from ...words import counted
from .store import read_manifest


class Activations(Mapping):
    """A collect folder as a read-only mapping of site -> array: `acts["blocks.3.resid_out"]`
    is (tokens, width), rows in corpus order; `list(acts)` the sites, `site in acts`,
    `dict(acts)` every site's rows; `acts.n_tokens` the rows of each; `acts.tokens()` the
    tokens table (pyarrow). A site's rows are read from the shards when asked for."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        manifest = read_manifest(self.path)
        if manifest is None or manifest.get("kind") != "activations":
            raise InputTextError(f"{self.path} is not a tfx collect folder (no manifest.json "
                                 "of kind activations); make one with tfx collect")
        if not manifest.get("complete"):
            raise InputTextError(f"{self.path} is not complete yet; run the same tfx collect "
                                 "command again to finish it")
        self.manifest = manifest
        self.sites = [s["name"] for s in manifest["sites"]]

    def __repr__(self) -> str:
        return (f"<tfx Activations {self.path}: {self.manifest['tokens']:,} tokens, "
                f"{len(self.sites)} sites>")

    def __len__(self) -> int:  # the sites, as for any mapping
        return len(self.sites)

    def __iter__(self):
        return iter(self.sites)

    def __contains__(self, site) -> bool:  # without reading a shard
        return site in self.sites

    # Mapping would compare every array; a folder's reader equals itself alone
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def n_tokens(self) -> int:
        return int(self.manifest["tokens"])

    def __getitem__(self, site: str) -> np.ndarray:
        if site not in self.sites:
            raise KeyError(f"{site!r}; this folder holds {', '.join(self.sites)}")
        parts = [self._read(shard, site) for shard in self.manifest["shards"]]
        return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        return {site: self[site] for site in self.sites}

    def _read(self, shard: dict, site: str) -> np.ndarray:
        """One shard's rows of `site`, from bytes whose sha256 is the manifest's, every
        value finite: a shard changed since collect wrote it, or holding NaN, is refused
        by name (read_shard)."""
        return read_shard(self.path, shard, site, self.manifest["options"]["dtype"])

    def tokens(self):
        """The tokens table (doc, position, token per row), read once its sha256 is the
        manifest's: a file changed or damaged since collect wrote it is refused by name."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        file = self.path / "tokens.parquet"
        again = "run the same tfx collect command into a new folder to write it again"
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise InputTextError(f"cannot read {file}: {exc.strerror or exc}; {again}") \
                from None
        want = self.manifest.get("tokens_sha256")
        if want and hashlib.sha256(data).hexdigest() != want:
            raise InputTextError(f"{file} is not the file tfx collect wrote (its sha256 "
                                 f"differs from the manifest's): it changed since; {again}")
        try:
            table = pq.read_table(pa.BufferReader(data))
            table.select(["doc", "position", "token"])
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
            raise InputTextError(f"{file} is not a tokens table tfx collect wrote "
                                 f"({' '.join(str(exc).split())[:120]}); {again}") from None
        return table


def read_shard(folder: Path, shard: dict, site: str, dtype: str) -> np.ndarray:
    name = str(shard.get("file"))
    file = Path(folder) / name
    again = "run the same tfx collect command again to write it again"
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise InputTextError(f"{folder}: {name} is missing, though the manifest lists it; "
                             f"{again}") from None
    except OSError as exc:
        raise InputTextError(f"cannot read {file}: {exc.strerror or exc}") from None
    if not shard.get("sha256"):
        raise InputTextError(f"{folder}: the manifest lists {name} without its sha256, so "
                             "it cannot be checked; it was not written by tfx collect: "
                             "collect the corpus again into a new folder")
    if hashlib.sha256(data).hexdigest() != shard["sha256"]:
        raise InputTextError(f"{file} is not the file tfx collect wrote (its sha256 differs "
                             f"from the manifest's): it changed since; {again}")
    rows = _site_rows(file, data, site, dtype)
    bad = ~np.isfinite(rows)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        token = int(shard.get("first_token", 0)) + row
        raise InputTextError(f"{file} holds {rows[row, column]} in {site} (token {token:,}, "
                             f"unit {column}; {counted(int(bad.sum()), 'value')} not finite); "
                             "the folder is damaged: collect it again with --force")
    return rows


def _site_rows(file: Path, data: bytes, site: str, dtype: str) -> np.ndarray:
    from safetensors import SafetensorError

    bf16 = dtype == "bfloat16"  # numpy has no bfloat16: torch reads it, as float32
    try:
        if bf16:
            from safetensors.torch import load
        else:
            from safetensors.numpy import load
        tensors = load(data)
    except (SafetensorError, ValueError) as exc:
        raise InputTextError(f"cannot read {file}: not a safetensors file ({exc}); collect "
                             "the folder again with --force") from None
    if site not in tensors:
        raise InputTextError(f"{file} holds no {site} ({', '.join(sorted(tensors))}), though "
                             "the manifest lists it; collect the folder again with --force")
    return tensors[site].float().numpy() if bf16 else tensors[site]


__all__ = ["Activations", "read_shard"]
