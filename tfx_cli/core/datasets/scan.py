"""`tfx scan`: per (layer, head) attention statistics over a corpus, and per layer the
residual stream's norm and how often each FFN neuron is active.

With A a head's pattern (queries x keys) and t a window's ids, every metric is a mean
over the window's qualifying queries, token-weighted over the corpus:
  entropy          all queries: -sum_k A[q,k] ln A[q,k]
  sink             q >= 1: A[q,0]
  prev_token       q >= 1: A[q,q-1]
  duplicate_token  q with some k < q, t[k] = t[q]: sum over those k of A[q,k]
  induction        q with some k < q-1, t[k] = t[q]: sum over those k of A[q,k+1]
A batch's partial result holds float64 sums and integer counts; partials add up in
batch order (associative, so any engine that keeps the order gives the same bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .tasks import forward, valid_positions

METRICS = ("entropy", "sink", "prev_token", "duplicate_token", "induction")
SELECT = ("blocks.*.attn.pattern", "blocks.*.resid_out", "blocks.*.ffn.act")


@dataclass
class ScanPartial:
    sums: np.ndarray  # (5, L, H) float64
    counts: np.ndarray  # (5,) int64: qualifying queries per metric
    resid_sum: np.ndarray  # (L,) float64: sum of per-token L2 norms of resid_out
    resid_max: np.ndarray  # (L,) float64
    active: np.ndarray  # (L, F) int64: tokens on which each neuron's act > 0
    tokens: int = 0
    windows: int = 0

    @classmethod
    def empty(cls, L: int, H: int, F: int) -> "ScanPartial":
        return cls(np.zeros((5, L, H)), np.zeros(5, np.int64), np.zeros(L),
                   np.full(L, -np.inf), np.zeros((L, F), np.int64))

    def merge(self, other: "ScanPartial") -> "ScanPartial":
        self.sums += other.sums
        self.counts += other.counts
        self.resid_sum += other.resid_sum
        np.maximum(self.resid_max, other.resid_max, out=self.resid_max)
        self.active += other.active
        self.tokens += other.tokens
        self.windows += other.windows
        return self

    def arrays(self) -> dict:
        return {"sums": self.sums, "counts": self.counts, "resid_sum": self.resid_sum,
                "resid_max": self.resid_max, "active": self.active,
                "tokens": np.int64(self.tokens), "windows": np.int64(self.windows)}

    @classmethod
    def from_arrays(cls, a) -> "ScanPartial":
        return cls(a["sums"].copy(), a["counts"].copy(), a["resid_sum"].copy(),
                   a["resid_max"].copy(), a["active"].copy(), int(a["tokens"]),
                   int(a["windows"]))


@dataclass(frozen=True)
class ScanTask:
    select: tuple[str, ...] = SELECT

    def compute(self, loaded, batch) -> ScanPartial:
        cfg = loaded.cfg
        ids, lengths = batch.padded()
        B, T = ids.shape
        device = loaded.model.device
        t = torch.from_numpy(ids).to(device)
        valid = valid_positions(lengths, T, device)  # (B, T)
        pos = torch.arange(T, device=device)
        after0 = valid & (pos >= 1)[None, :]
        earlier = pos[None, :] < pos[:, None]  # (T, T): k < q
        same = ((t[:, :, None] == t[:, None, :]) & earlier & valid[:, None, :]
                & valid[:, :, None])  # (B, T, T): real queries and keys
        dup_q = same.any(-1) & valid
        before_prev = pos[None, :] < (pos[:, None] - 1)  # k < q - 1
        ind_src = same & before_prev
        ind_q = ind_src.any(-1) & valid
        # the matches are few: keep their (window, query, key) indices and read those
        # entries of each pattern, instead of multiplying every pattern by a T x T mask
        dup_at = same.nonzero(as_tuple=True)  # (b, q, k) with k < q, t[k] = t[q]
        ib, iq, ik = ind_src.nonzero(as_tuple=True)
        ind_at = (ib, iq, ik + 1)  # weight on k + 1 for each earlier match k < q - 1
        del same, ind_src
        part = ScanPartial.empty(cfg.n_layers, cfg.n_heads, cfg.d_ff)
        masks = (valid, after0, after0, dup_q, ind_q)
        part.counts[:] = [int(m.sum()) for m in masks]
        part.tokens, part.windows = int(lengths.sum()), B
        q_valid, q_after0 = valid.double(), after0.double()
        flat_valid = valid.reshape(-1)

        def query_sum(values: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
            # values (B, H, T) per query; summed over the qualifying queries in float64
            return torch.einsum("bhq,bq->h", values.double(), mask).cpu().numpy()

        def pair_sum(A: torch.Tensor, at) -> np.ndarray:
            # sum over the listed (b, q, k) of A[b, :, q, k], per head, in float64
            b, q, k = at
            if b.numel() == 0:
                return np.zeros(A.shape[1])
            return A[b, :, q, k].double().sum(0).cpu().numpy()

        def consume(name: str, value: torch.Tensor) -> None:
            layer = int(name.split(".")[1])
            if name.endswith("attn.pattern"):
                A = value if value.dtype == torch.float32 else value.float()  # (B, H, T, T)
                sums = part.sums[:, layer]
                sums[0] = query_sum(-torch.special.xlogy(A, A).sum(-1), q_valid)
                sums[1] = query_sum(A[..., 0], q_after0)
                prev = A.diagonal(offset=-1, dim1=-2, dim2=-1)  # (B, H, T-1): q = 1..T-1
                sums[2] = query_sum(prev, q_after0[:, 1:])
                sums[3] = pair_sum(A, dup_at)
                sums[4] = pair_sum(A, ind_at)
            elif name.endswith("resid_out"):
                norms = value.float().norm(dim=-1).reshape(-1)[flat_valid]  # real tokens
                part.resid_sum[layer] = float(norms.double().sum())
                part.resid_max[layer] = float(norms.max())
            elif name.endswith("ffn.act"):
                rows = value.reshape(-1, value.shape[-1])[flat_valid]  # (N, F) real tokens
                part.active[layer] = (rows > 0).sum(0).cpu().numpy()

        forward(loaded, ids, lengths, self.select, consume)
        return part


def summary(state: ScanPartial, top: int = 5) -> dict:
    """Means per metric (L, H), residual norms, FFN activity and the strongest heads."""
    with np.errstate(invalid="ignore", divide="ignore"):
        means = state.sums / np.maximum(state.counts, 1)[:, None, None]
    for m in range(len(METRICS)):
        if state.counts[m] == 0:
            means[m] = np.nan
    L, H = means.shape[1:]
    strongest = {}
    for m, metric in enumerate(METRICS):
        if state.counts[m] == 0:
            strongest[metric] = []
            continue
        flat = means[m].ravel()
        # entropy: the most focused heads (lowest); the others: the highest scores
        order = np.argsort(flat if metric == "entropy" else -flat, kind="stable")[:top]
        strongest[metric] = [{"layer": int(i // H), "head": int(i % H),
                              "value": float(flat[i])} for i in order]
    active = state.active / max(state.tokens, 1)
    return {"means": means, "strongest": strongest,
            "resid_mean": state.resid_sum / max(state.tokens, 1),
            "resid_max": state.resid_max, "active": active,
            "dead": [int(x) for x in (state.active == 0).sum(1)]}


__all__ = ["METRICS", "ScanTask", "ScanPartial", "summary"]
