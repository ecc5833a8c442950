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
        same = (t[:, :, None] == t[:, None, :]) & earlier & valid[:, None, :]  # (B, T, T)
        dup_q = same.any(-1) & valid
        before_prev = pos[None, :] < (pos[:, None] - 1)  # k < q - 1
        ind_src = same & before_prev
        ind_q = ind_src.any(-1) & valid
        ind_mask = torch.zeros_like(ind_src)
        ind_mask[:, :, 1:] = ind_src[:, :, :-1]  # weight on k + 1 for each earlier match k
        dup_f, ind_f = same.float(), ind_mask.float()
        part = ScanPartial.empty(cfg.n_layers, cfg.n_heads, cfg.d_ff)
        masks = (valid, after0, after0, dup_q, ind_q)
        part.counts[:] = [int(m.sum()) for m in masks]
        part.tokens, part.windows = int(lengths.sum()), B

        def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
            # values (B, H, T) per query; summed over the qualifying queries in float64
            return (values.double() * mask[:, None, :]).sum((0, 2)).cpu().numpy()

        def consume(name: str, value: torch.Tensor) -> None:
            layer = int(name.split(".")[1])
            if name.endswith("attn.pattern"):
                A = value.float()  # (B, H, T, T)
                per_query = (
                    -torch.special.xlogy(A, A).sum(-1),
                    A[..., 0],
                    torch.cat([A.new_zeros(B, A.shape[1], 1),
                               A.diagonal(offset=-1, dim1=-2, dim2=-1)], -1),
                    (A * dup_f[:, None]).sum(-1),
                    (A * ind_f[:, None]).sum(-1),
                )
                for m, (values, mask) in enumerate(zip(per_query, masks)):
                    part.sums[m, layer] = masked_sum(values, mask)
            elif name.endswith("resid_out"):
                norms = value.float().norm(dim=-1)  # (B, T)
                part.resid_sum[layer] = float(norms.double()[valid].sum())
                part.resid_max[layer] = float(norms[valid].max())
            elif name.endswith("ffn.act"):
                on = (value > 0) & valid[:, :, None]  # (B, T, F)
                part.active[layer] = on.sum((0, 1)).cpu().numpy()

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
