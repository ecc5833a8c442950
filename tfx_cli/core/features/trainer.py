"""An SAE being trained: its parameters, Adam's moments, one step's loss and gradients
(written out by hand, not by autograd), and the encoder as it will be saved.

    x' = x·c − b_dec                      c: one constant making E|x·c| = √d_in
    pre = x'·W_encᵀ + b_enc               W_enc kept as (latents, d_in) rows here
    f = the k largest of pre, ReLU'd      (TopK)  |  ReLU(pre)  (ReLU, with --l1)
                                          |  pre·[pre > θ]  (JumpReLU, an L0 penalty)
    x̂ = f·W_dec + b_dec                   W_dec's rows held at unit norm
    loss = Σ_d (x̂ − x·c)² averaged over the batch
           + l1 · Σ f                    (ReLU)
           + aux_coef · Σ_d (ê − e)²      (TopK's AuxK: ê is the residual e = x·c − x̂,
                                           stopped, as the aux_k largest dead latents
                                           reconstruct it)

A TopK SAE's k-sparse f is never made dense: the decoder and every gradient but the
encoder's forward product go through the k chosen rows (sparse products), so a step
costs about one dense (batch × d_in × latents) product instead of five.

The decoder rows stay unit vectors: the part of W_dec's gradient along each row is
removed before the update and the rows are renormalised after it (Bricken et al. 2023,
"Towards Monosemanticity"; Gao et al. 2024, "Scaling and evaluating sparse autoencoders",
section 2.4). The encoder starts as the decoder's transpose (Gao et al., 2.5); AuxK's
default k_aux = 512 and coefficient 1/32 are theirs (appendix A.2).

c is folded out when the SAE is saved (weights()): the saved SAE reads raw activations,
its features are f / c and its decoder rows are still unit vectors.

A transcoder (`transcoder=True`) reads one site and reconstructs another: x' = x·c_in
(no b_dec taken off: its b_dec lives in the output's space), the target is y·c_out, and
with `skip` x̂ gains a linear skip path x'·W_skipᵀ (W_skip (d_out, d_in), started at 0).
Folded out on saving: features f / c_out, W_enc and W_skip × c_in / c_out, the biases
÷ c_out (ReLU and TopK commute with a positive scale).
"""
from __future__ import annotations

import math
import warnings

import torch

PARAMS = ("W_enc", "W_dec", "b_enc", "b_dec")
BETAS, EPS = (0.9, 0.999), 1e-8  # Adam's defaults (Kingma & Ba 2015)
# JumpReLU's kernel bandwidth ε and starting threshold θ, on inputs scaled to a mean norm
# of √d_in: SAELens's defaults (6.54, JumpReLUTrainingSAEConfig). Gemma Scope's 0.001 for
# both (Lieberum et al. 2024) suits its billions of tokens: over a short run almost no
# pre-activation falls within ε/2 of θ, and θ would barely move.
JUMP_BANDWIDTH, JUMP_THRESHOLD = 0.05, 0.01


def geometric_median(x: torch.Tensor, iterations: int = 64) -> torch.Tensor:
    """Weiszfeld's iteration, started at the mean (float64)."""
    x = x.to(torch.float64)
    point = x.mean(dim=0)
    for _ in range(iterations):
        weights = 1.0 / (x - point).norm(dim=1).clamp_min(1e-8)
        moved = (weights[:, None] * x).sum(dim=0) / weights.sum()
        if (moved - point).norm() <= 1e-7 * point.norm().clamp_min(1e-12):
            point = moved
            break
        point = moved
    return point


class Trainer:
    """Parameters and optimiser state of one SAE; `step(x)` trains on a batch of
    normalised rows (x·scale)."""

    def __init__(self, d_in: int, latents: int, *, activation: str, k: int | None = None,
                 l1: float = 0.0, lr: float = 4e-4, aux_k: int = 0, aux_coef: float = 1 / 32,
                 dead_after: int = 10_000_000, scale: float = 1.0, seed: int = 0,
                 b_dec: torch.Tensor | None = None, transcoder: bool = False,
                 d_out: int | None = None, scale_out: float | None = None,
                 skip: bool = False):
        self.d_in, self.latents, self.activation = d_in, latents, activation
        self.k, self.l1, self.lr = k, l1, lr
        self.aux_k, self.aux_coef, self.dead_after, self.scale = aux_k, aux_coef, dead_after, scale
        self.transcoder, self.skip = transcoder, skip
        self.scale_out = scale if scale_out is None else scale_out
        d_out = d_in if d_out is None else d_out
        g = torch.Generator().manual_seed(seed)
        W_dec = torch.randn(latents, d_out, generator=g, dtype=torch.float32)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        if d_out == d_in:
            W_enc = W_dec.clone()
        else:
            W_enc = torch.randn(latents, d_in, generator=g, dtype=torch.float32)
            W_enc /= W_enc.norm(dim=1, keepdim=True)
        self.p = {"W_enc": W_enc, "W_dec": W_dec, "b_enc": torch.zeros(latents),
                  "b_dec": torch.zeros(d_out) if b_dec is None else b_dec.to(torch.float32)}
        if skip:
            self.p["W_skip"] = torch.zeros(d_out, d_in)
        self.bandwidth = JUMP_BANDWIDTH
        if activation == "jumprelu":
            self.p["log_threshold"] = torch.full((latents,), math.log(JUMP_THRESHOLD))
        self.m = {n: torch.zeros_like(t) for n, t in self.p.items()}
        self.v = {n: torch.zeros_like(t) for n, t in self.p.items()}
        self.t = 0  # Adam's step count
        self.since_fired = torch.zeros(latents, dtype=torch.int64)  # tokens since each fired

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, torch.Tensor]:
        out = {n: t for n, t in self.p.items()}
        out.update({f"adam_m.{n}": t for n, t in self.m.items()})
        out.update({f"adam_v.{n}": t for n, t in self.v.items()})
        out["since_fired"] = self.since_fired
        out["adam_t"] = torch.tensor([self.t], dtype=torch.int64)
        return out

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        for n in self.p:
            self.p[n] = tensors[n].clone()
            self.m[n] = tensors[f"adam_m.{n}"].clone()
            self.v[n] = tensors[f"adam_v.{n}"].clone()
        self.since_fired = tensors["since_fired"].clone()
        self.t = int(tensors["adam_t"][0])

    @property
    def dead(self) -> torch.Tensor:
        """(latents,) True for latents that have not fired in `dead_after` tokens."""
        return self.since_fired >= self.dead_after

    # -- the forward pass -----------------------------------------------------------------
    def _pre(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xc = x if self.transcoder else x - self.p["b_dec"]
        return xc, torch.addmm(self.p["b_enc"], xc, self.p["W_enc"].T)  # (B, L)

    def _decoded(self, x: torch.Tensor, recon: torch.Tensor) -> torch.Tensor:
        """The reconstruction with the skip path's x·W_skipᵀ added (in place)."""
        return recon.addmm_(x, self.p["W_skip"].T) if self.skip else recon

    def _b_dec_grad(self, dr: torch.Tensor, g_b_enc: torch.Tensor) -> torch.Tensor:
        """b_dec's gradient: its own, and (an SAE's) through the input it is taken off."""
        own = dr.sum(0)
        return own if self.transcoder else own - g_b_enc @ self.p["W_enc"]

    def _topk(self, pre: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        values, index = torch.topk(pre, k, dim=-1, sorted=False)
        return torch.relu(values), index

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Raw activations (N, d_in) -> feature activations (N, latents) in the saved SAE's
        units (f / scale_out), dense."""
        _, pre = self._pre(x.to(torch.float32) * self.scale)
        if self.activation == "relu":
            return torch.relu(pre) / self.scale_out
        if self.activation == "jumprelu":
            return pre * (pre > self.p["log_threshold"].exp()) / self.scale_out
        acts, index = self._topk(pre, self.k)
        return torch.zeros_like(pre).scatter_(-1, index, acts) / self.scale_out

    # -- sparse products ---------------------------------------------------------------
    def _sparse(self, values: torch.Tensor, index: torch.Tensor) -> tuple:
        """(B, k) values at latent `index` -> f (B, latents) and fᵀ (latents, B) as CSR
        matrices (fᵀ's rows found by one sort of the latent indices)."""
        B, k = index.shape
        flat, vals = index.reshape(-1), values.reshape(-1)
        with warnings.catch_warnings():  # torch calls its CSR tensors beta; these are tested
            warnings.simplefilter("ignore", UserWarning)
            f = torch.sparse_csr_tensor(torch.arange(0, B * k + 1, k), flat, vals,
                                        (B, self.latents), check_invariants=False)
        order = torch.sort(flat).indices
        crow = torch.zeros(self.latents + 1, dtype=torch.int64)
        crow[1:] = torch.cumsum(torch.bincount(flat, minlength=self.latents), 0)
        rows = torch.arange(B)[:, None].expand(B, k).reshape(-1)
        fT = torch.sparse_csr_tensor(crow, rows[order], vals[order], (self.latents, B),
                                     check_invariants=False)
        return f, fT

    @staticmethod
    def _sorted(values: torch.Tensor, index: torch.Tensor):
        """Each row's chosen latents in increasing order (CSR's column order)."""
        index, order = index.sort(dim=1)
        return values.gather(1, order), index

    def _gathered_dot(self, d: torch.Tensor, index: torch.Tensor, W: torch.Tensor):
        """(B, k): d[b]·W[index[b, j]] for each row's k (sorted) latents: a sampled
        product, never the dense (B, latents) one."""
        B, k = index.shape
        mask = torch.sparse_csr_tensor(torch.arange(0, B * k + 1, k), index.reshape(-1),
                                       torch.zeros(B * k, dtype=d.dtype), (B, self.latents),
                                       check_invariants=False)
        return torch.sparse.sampled_addmm(mask, d, W.T, beta=0.0).values().reshape(B, k)

    # -- one step -----------------------------------------------------------------------
    def _dense_step(self, x, target, xc, pre) -> tuple[float, dict, torch.Tensor]:
        """ReLU with its L1 penalty, or JumpReLU with its L0 penalty (both weighted by
        `l1`): every latent's activation is computed, so the products are dense. JumpReLU's
        threshold θ = exp(log_threshold) gets the straight-through pseudo-derivatives of
        Rajamanoharan et al. 2024 ("Jumping Ahead", eqs. 11-12): with the rectangle
        kernel K(u) = [|u| < ½] of bandwidth ε, ∂f/∂θ = −(θ/ε)·K((pre − θ)/ε) and
        ∂[pre > θ]/∂θ = −(1/ε)·K((pre − θ)/ε); f itself passes gradient to pre where it
        is open."""
        B, W_dec = len(x), self.p["W_dec"]
        if self.activation == "relu":
            gate = pre > 0
            f = torch.relu(pre)
        else:
            theta = self.p["log_threshold"].exp()
            gate = pre > theta
            f = pre * gate
        recon = self._decoded(x, torch.addmm(self.p["b_dec"], f, W_dec))
        err = recon - target
        penalty = f.sum() if self.activation == "relu" else gate.sum()
        loss = float((err ** 2).sum() / B + self.l1 * penalty / B)
        dr = err * (2.0 / B)
        g_f = dr @ W_dec.T
        if self.activation == "relu":
            g_f += self.l1 / B
        g_pre = g_f * gate
        g = {"W_dec": f.T @ dr, "W_enc": g_pre.T @ xc, "b_enc": g_pre.sum(0)}
        g["b_dec"] = self._b_dec_grad(dr, g["b_enc"])
        if self.skip:
            g["W_skip"] = dr.T @ x
        if self.activation == "jumprelu":
            eps = self.bandwidth
            K = ((pre - theta).abs() < eps / 2).to(pre.dtype)
            g_theta = (g_f * K).sum(0) * (-theta / eps) - (self.l1 / (B * eps)) * K.sum(0)
            g["log_threshold"] = g_theta * theta
        return loss, g, gate.any(dim=0)


    def loss_and_grads(self, x: torch.Tensor, y: torch.Tensor | None = None
                       ) -> tuple[float, dict, torch.Tensor]:
        """The loss on batch x (B, d_in), already × scale (a transcoder's target y, ×
        scale_out; an SAE's is x); its gradients; (latents,) bool of the latents that
        fired."""
        B = len(x)
        target = x if y is None else y
        W_dec = self.p["W_dec"]
        xc, pre = self._pre(x)
        if self.activation in ("relu", "jumprelu"):
            return self._dense_step(x, target, xc, pre)
        acts, index = self._sorted(*self._topk(pre, self.k))
        f, fT = self._sparse(acts, index)
        recon = self._decoded(x, (f @ W_dec).add_(self.p["b_dec"]))  # (B, d)
        err = recon - target
        loss = float((err ** 2).sum() / B)
        dr = err * (2.0 / B)
        g_pre = self._gathered_dot(dr, index, W_dec) * (acts > 0)  # (B, k)
        g_W_dec = fT @ dr
        g_W_enc = self._sparse(g_pre, index)[1] @ xc
        g_b_enc = torch.zeros(self.latents).index_add_(0, index.reshape(-1), g_pre.reshape(-1))
        fired = torch.zeros(self.latents, dtype=torch.bool)
        fired[index[acts > 0]] = True
        dead = self.dead
        n_dead = int(dead.sum())
        if self.aux_k > 0 and n_dead > 0:  # AuxK: dead latents model the residual
            resid = (target - recon).detach()
            aux_acts, aux_index = self._sorted(*self._topk(
                pre.masked_fill(~dead, -math.inf), min(self.aux_k, n_dead)))
            a, aT = self._sparse(aux_acts, aux_index)
            aux_err = a @ W_dec - resid
            loss += float(self.aux_coef * (aux_err ** 2).sum() / B)
            da = aux_err * (2.0 * self.aux_coef / B)
            g_aux = self._gathered_dot(da, aux_index, W_dec) * (aux_acts > 0)
            g_W_dec += aT @ da
            g_W_enc += self._sparse(g_aux, aux_index)[1] @ xc
            g_b_enc.index_add_(0, aux_index.reshape(-1), g_aux.reshape(-1))
        g = {"W_dec": g_W_dec, "W_enc": g_W_enc, "b_enc": g_b_enc,
             "b_dec": self._b_dec_grad(dr, g_b_enc)}
        if self.skip:
            g["W_skip"] = dr.T @ x
        return loss, g, fired

    def step(self, x: torch.Tensor, y: torch.Tensor | None = None) -> float:
        """One Adam update on batch x (B, d_in), already × scale (and a transcoder's
        target y × scale_out); returns the loss."""
        loss, grads, fired = self.loss_and_grads(x, y)
        W_dec = self.p["W_dec"]
        # keep the decoder rows' norms: no gradient along a row
        grads["W_dec"] -= (grads["W_dec"] * W_dec).sum(dim=1, keepdim=True) * W_dec
        self.t += 1
        b1, b2 = BETAS
        lr = self.lr * math.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
        for n in self.p:
            m, v, g = self.m[n], self.v[n], grads[n]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            self.p[n].addcdiv_(m, v.sqrt().add_(EPS * math.sqrt(1 - b2 ** self.t)), value=-lr)
        self.p["W_dec"] /= self.p["W_dec"].norm(dim=1, keepdim=True)
        self.since_fired += len(x)
        self.since_fired[fired] = 0
        return loss

    # -- the saved SAE ------------------------------------------------------------------
    def weights(self) -> dict[str, torch.Tensor]:
        """SAELens's tensors of the SAE that reads raw activations: the scale folded
        into b_enc and b_dec (f and x̂ divided by it), W_dec's rows still unit norm (a
        transcoder's: as the module's docstring says; W_skip (d_out, d_in) with skip)."""
        c = self.scale_out
        W_enc = self.p["W_enc"].T.contiguous()
        out = {"W_enc": W_enc * (self.scale / c) if self.transcoder else W_enc,
               "W_dec": self.p["W_dec"].clone(), "b_enc": self.p["b_enc"] / c,
               "b_dec": self.p["b_dec"] / c}
        if self.skip:
            out["W_skip"] = self.p["W_skip"] * (self.scale / c)
        if self.activation == "jumprelu":
            out["threshold"] = self.p["log_threshold"].exp() / c
        return out


__all__ = ["Trainer", "geometric_median", "PARAMS"]
