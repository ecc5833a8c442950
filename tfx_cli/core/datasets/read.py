"""Reading a collect folder back: `api.activations(DIR)`.

Any safetensors reader opens a shard (numpy for F32/F16; BF16 needs torch), any Parquet
reader tokens.parquet; this class only joins the shards of a site in order.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...errors import InputTextError
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
        parts = [self._read(shard["file"], site) for shard in self.manifest["shards"]]
        return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        return {site: self[site] for site in self.sites}

    def _read(self, name: str, site: str) -> np.ndarray:
        if self.manifest["options"]["dtype"] == "bfloat16":
            from safetensors.torch import load_file

            return load_file(str(self.path / name))[site].float().numpy()
        from safetensors.numpy import load_file

        return load_file(str(self.path / name))[site]

    def tokens(self):
        import pyarrow.parquet as pq

        return pq.read_table(self.path / "tokens.parquet")


__all__ = ["Activations"]
