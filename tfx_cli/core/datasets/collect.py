"""`tfx collect`: an activation dataset on disk.

DIR/shard-00000.safetensors ... hold one 2-D tensor per site (named by the site), one
row per token in corpus order; shard i holds tokens [i * shard_tokens, (i + 1) *
shard_tokens). DIR/tokens.parquet says which token each row is (doc, position, token,
text, shard, row), DIR/manifest.json what the folder holds (store.py). The per-batch
function returns each window's rows; the writer puts them at their corpus index and
writes a shard once all its rows are in, so memory holds the shards a chunk spans.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .tasks import as_rows, forward

SHARD_BYTES = 64 << 20  # default shard size: about this many bytes of rows
CHUNK_BYTES = 256 << 20  # rows a chunk may hold before it is cut (memory stays flat)


@dataclass(frozen=True)
class CollectTask:
    sites: tuple[str, ...]
    dims: tuple[tuple[str, ...], ...]

    @property
    def select(self) -> tuple[str, ...]:
        return self.sites

    def compute(self, loaded, batch) -> dict:
        """{site: (n, width) rows of the batch's real tokens, window after window} and
        "index": each row's corpus-wide token index."""
        ids, lengths = batch.padded()
        got: dict = {}
        forward(loaded, ids, lengths, self.sites,
                lambda name, value: got.__setitem__(name, value))
        out = {}
        for site, dims in zip(self.sites, self.dims):
            rows = as_rows(got.pop(site), dims)
            out[site] = torch.cat([rows[b, :n] for b, n in enumerate(lengths)]).cpu()
        out["index"] = np.concatenate([np.arange(w.first, w.first + len(w))
                                       for w in batch.windows])
        return out


class ShardWriter:
    """Rows in, complete shards out (through `write(index, tensors)`)."""

    def __init__(self, sites: dict[str, int], dtype: torch.dtype, shard_tokens: int,
                 first_shard: int, write):
        self.sites, self.dtype, self.size = sites, dtype, shard_tokens
        self.skip_below = first_shard * shard_tokens  # rows of complete shards
        self.open: dict[int, tuple[dict, np.ndarray]] = {}
        self.write = write

    def put(self, rows: dict) -> None:
        index = rows["index"]
        keep = index >= self.skip_below
        for shard in np.unique(index[keep] // self.size):
            here = keep & (index // self.size == shard)
            tensors, filled = self._buffer(int(shard))
            local = torch.from_numpy(index[here] - shard * self.size)
            for site in self.sites:
                tensors[site][local] = rows[site][torch.from_numpy(here)].to(self.dtype)
            filled[local.numpy()] = True
            if filled.all():
                self._flush(int(shard))

    def _buffer(self, shard: int):
        if shard not in self.open:
            self.open[shard] = ({site: torch.zeros(self.size, width, dtype=self.dtype)
                                 for site, width in self.sites.items()},
                                np.zeros(self.size, bool))
        return self.open[shard]

    def _flush(self, shard: int, rows: int | None = None) -> None:
        tensors, _ = self.open.pop(shard)
        if rows is not None:
            tensors = {site: t[:rows].clone() for site, t in tensors.items()}
        self.write(shard, tensors)

    def finish(self, total_tokens: int) -> None:
        """Write the last, shorter shard (every row of it is in by now)."""
        for shard in sorted(self.open):
            rows = min(self.size, total_tokens - shard * self.size)
            self._flush(shard, rows)


def shard_name(i: int) -> str:
    return f"shard-{i:05d}.safetensors"


def default_shard_tokens(row_bytes: int) -> int:
    """Tokens per shard when --shard-tokens is not given: about SHARD_BYTES of rows,
    a multiple of 1024 (at least 1024)."""
    return max(1024, SHARD_BYTES // max(row_bytes, 1) // 1024 * 1024)


def write_tokens_table(path, rows, shard_tokens: int) -> None:
    """tokens.parquet from (doc, position, token id, piece) tuples in corpus order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("doc", pa.int64()), ("position", pa.int64()), ("token", pa.int64()),
                        ("text", pa.string()), ("shard", pa.int64()), ("row", pa.int64())])
    writer = pq.ParquetWriter(str(path), schema)
    try:
        n, cols = 0, ([], [], [], [])
        def flush():
            k = len(cols[0])
            index = np.arange(n - k, n)
            writer.write_table(pa.table([*(pa.array(c) for c in cols[:3]),
                                         pa.array(cols[3], pa.string()),
                                         pa.array(index // shard_tokens),
                                         pa.array(index % shard_tokens)], schema=schema))
            for c in cols:
                c.clear()
        for row in rows:
            for c, v in zip(cols, row):
                c.append(v)
            n += 1
            if len(cols[0]) >= 65536:
                flush()
        if cols[0] or n == 0:
            flush()
    finally:
        writer.close()


__all__ = ["CollectTask", "ShardWriter", "shard_name", "default_shard_tokens",
           "write_tokens_table", "CHUNK_BYTES"]
