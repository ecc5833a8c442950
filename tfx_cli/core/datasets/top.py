"""`tfx top`: for each unit of a site, the K highest activations in the corpus, with
their document, position and the window's tokens around them.

Unit values are pluggable: a UnitMap turns a site's rows (N, width) into unit values
(N, U). `SliceUnits` (the default) picks columns; `SAEUnits` encodes the rows with an
SAE (`tfx top --sae`: the units are its features); another map plugs in the same way and
nothing else changes.

Per unit, a heap of K entries ordered by value (highest first), ties by document then
position (lowest first): each batch yields its own K best per unit and heaps merge by
the same order, in batch order, so the result does not depend on how batches were
spread. Each entry keeps the ids and the unit's values of `context` tokens either side
(within the window the model read; -1 and NaN outside it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .tasks import as_rows, forward, valid_positions


@dataclass(frozen=True)
class SliceUnits:
    """The default unit map: columns `units` of the site's rows."""

    units: tuple[int, ...]

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[..., list(self.units)]

    @property
    def labels(self) -> list[int]:
        return list(self.units)


@dataclass(frozen=True, eq=False)
class SAEUnits:
    """Features of an SAE as units: the site's rows encoded by the SAE, only features
    `units` computed (SAE.encode_units), a block of rows at a time so that a TopK SAE's
    full pre-activations stay small."""

    sae: object  # core.features.SAE
    units: tuple[int, ...]
    rows_at_once: int = 4096

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        flat = rows.reshape(-1, rows.shape[-1])
        parts = [self.sae.encode_units(flat[i:i + self.rows_at_once], self.units)
                 for i in range(0, len(flat), self.rows_at_once)]
        return torch.cat(parts).reshape(*rows.shape[:-1], len(self.units))

    @property
    def labels(self) -> list[int]:
        return list(self.units)


@dataclass
class Heaps:
    values: np.ndarray  # (U, K) float32, -inf where empty
    doc: np.ndarray  # (U, K) int64
    position: np.ndarray  # (U, K) int64, in the document
    ctx_ids: np.ndarray  # (U, K, 2C+1) int64, -1 outside the window
    ctx_values: np.ndarray  # (U, K, 2C+1) float32, NaN outside the window
    tokens: int = 0
    windows: int = 0

    @classmethod
    def empty(cls, U: int, K: int, C: int) -> "Heaps":
        return cls(np.full((U, K), -np.inf, np.float32), np.full((U, K), -1, np.int64),
                   np.full((U, K), -1, np.int64), np.full((U, K, 2 * C + 1), -1, np.int64),
                   np.full((U, K, 2 * C + 1), np.nan, np.float32))

    def merge(self, other: "Heaps") -> "Heaps":
        K = self.values.shape[1]
        values = np.concatenate([self.values, other.values], 1)
        doc = np.concatenate([self.doc, other.doc], 1)
        position = np.concatenate([self.position, other.position], 1)
        # empty slots (doc -1) sort after every real entry of the same value
        order = np.lexsort((position, np.where(doc < 0, np.iinfo(np.int64).max, doc),
                            -values.astype(np.float64)), axis=1)[:, :K]
        pick = lambda a: np.take_along_axis(a, order if a.ndim == 2 else order[..., None], 1)
        self.values, self.doc, self.position = pick(values), pick(doc), pick(position)
        self.ctx_ids = pick(np.concatenate([self.ctx_ids, other.ctx_ids], 1))
        self.ctx_values = pick(np.concatenate([self.ctx_values, other.ctx_values], 1))
        self.tokens += other.tokens
        self.windows += other.windows
        return self

    def arrays(self) -> dict:
        return {"values": self.values, "doc": self.doc, "position": self.position,
                "ctx_ids": self.ctx_ids, "ctx_values": self.ctx_values,
                "tokens": np.int64(self.tokens), "windows": np.int64(self.windows)}

    @classmethod
    def from_arrays(cls, a) -> "Heaps":
        return cls(*(a[k].copy() for k in ("values", "doc", "position", "ctx_ids",
                                           "ctx_values")), int(a["tokens"]), int(a["windows"]))


@dataclass(frozen=True)
class TopTask:
    site: str
    dims: tuple[str, ...]
    units: object  # a unit map: (.., width) -> (.., U)
    k: int
    context: int

    @property
    def select(self) -> tuple[str, ...]:
        return (self.site,)

    def compute(self, loaded, batch) -> Heaps:
        ids, lengths = batch.padded()
        B, T = ids.shape
        got: dict = {}
        forward(loaded, ids, lengths, self.select,
                lambda name, value: got.__setitem__(name, value))
        rows = as_rows(got[self.site], self.dims)  # (B, T, width)
        values = self.units(rows).float()  # (B, T, U)
        valid = valid_positions(lengths, T, values.device)
        values = values.masked_fill(~valid[..., None], float("-inf")).cpu()
        U = values.shape[-1]
        starts = torch.tensor([w.start for w in batch.windows])
        docs = torch.tensor([w.doc for w in batch.windows])
        # the batch's rows in corpus order (document, then position), so a stable sort
        # by value leaves ties in that order
        flat_doc = docs[:, None].expand(B, T).reshape(-1)
        flat_pos = (starts[:, None] + torch.arange(T)[None, :]).reshape(-1)
        order = torch.from_numpy(np.lexsort((flat_pos.numpy(), flat_doc.numpy())))
        flat = values.reshape(B * T, U)[order].T  # (U, N) in corpus order
        k = min(self.k, B * T)
        best = torch.sort(flat, dim=1, descending=True, stable=True).indices[:, :k]
        where = order[best]  # (U, k) flat index into (B, T)
        b, p = where // T, where % T
        heaps = Heaps.empty(U, self.k, self.context)
        heaps.values[:, :k] = np.take_along_axis(flat.numpy(), best.numpy(), 1)
        heaps.doc[:, :k] = docs[b].numpy()
        heaps.position[:, :k] = (starts[b] + p).numpy()
        offsets = torch.arange(-self.context, self.context + 1)
        around = p[..., None] + offsets  # (U, k, 2C+1)
        inside = (around >= 0) & (around < torch.from_numpy(lengths)[b][..., None])
        clipped = around.clamp(0, T - 1)
        rows_b = b[..., None].expand_as(around)
        unit = torch.arange(U)[:, None, None].expand_as(around)
        ctx_ids = torch.from_numpy(ids)[rows_b, clipped]
        ctx_values = values[rows_b, clipped, unit]
        heaps.ctx_ids[:, :k] = torch.where(inside, ctx_ids, -1).numpy()
        heaps.ctx_values[:, :k] = torch.where(inside, ctx_values, float("nan")).numpy()
        empty = ~np.isfinite(heaps.values)  # padding picked when a batch has < k tokens
        heaps.doc[empty], heaps.position[empty] = -1, -1
        heaps.tokens, heaps.windows = int(lengths.sum()), B
        return heaps


__all__ = ["SliceUnits", "SAEUnits", "Heaps", "TopTask"]
