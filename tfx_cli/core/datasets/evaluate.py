"""`tfx eval-sae`: an SAE (or transcoder) judged over a corpus by SAEBench's core scores.

The definitions are SAEBench's "core" evaluation (Karvonen et al. 2025, SAEBench,
github.com/adamkarvonen/SAEBench, evals/core), computed here over every real token of
every window:

    L0        features active per token, averaged
    FVU       Σ_t |x_t − x̂_t|² / Σ_t |x_t − mean x|²; explained variance = 1 − FVU
    cosine    cos(x_t, x̂_t), averaged over the tokens where both are nonzero
    CE        mean next-token cross-entropy over the positions that have a next token in
              their window, three runs: clean; the site zero-ablated; the site replaced
              by the SAE's reconstruction (no error term)
    CE-loss score = (CE_ablation − CE_replaced) / (CE_ablation − CE_clean)
    KL        KL(clean ‖ run) of the next-token distributions at the same positions
    KL score  = (KL_ablation − KL_replaced) / KL_ablation
    density   per feature: the fraction of tokens it is active on; dead = never active,
              dense = active on more than DENSE of the tokens

x is the value of the site the SAE reconstructs (a transcoder's output site), x̂ the
reconstruction from its input site. Only that one site is changed in a run, so
everything before it is the clean run's: the two changed runs resume at the site's block
from the clean run's input to it, and the replaced run sets the site to the clean run's x̂. Each batch's partial holds float64 sums and integer counts, merged in batch
order (the same bytes whichever engine runs it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from ..analysis.sites import editing, resid_pre_name
from .tasks import forward, valid_positions

DENSE = 0.1  # a feature active on more than this fraction of tokens is dense
ROWS = 4096  # rows encoded at once
# A score whose denominator, the loss zero-ablation adds, is below this share of the
# clean loss is flagged noisy: a reconstruction typically moves the loss by a few percent
# of it, as much as that denominator, so the ratio can land far above 1 or below 0.
NOISY_BELOW = 0.05


@dataclass
class EvalPartial:
    sums: np.ndarray  # (SUMS,) float64, by the names in SUMS
    x_sum: np.ndarray  # (d_out,) float64: Σ x, for the variance about the mean
    fired: np.ndarray  # (F,) int64: tokens each feature is active on
    tokens: int = 0  # real tokens whose site was read
    predicted: int = 0  # positions with a next token (CE and KL averaged over them)
    cosines: int = 0  # tokens with a cosine (x and x̂ both nonzero)

    SUMS = ("rss", "x_sq", "l0", "cosine", "ce_clean", "ce_ablation", "ce_replaced",
            "kl_ablation", "kl_replaced")

    @classmethod
    def empty(cls, d_out: int, d_sae: int) -> "EvalPartial":
        return cls(np.zeros(len(cls.SUMS)), np.zeros(d_out), np.zeros(d_sae, np.int64))

    def __getitem__(self, name: str) -> float:
        return float(self.sums[self.SUMS.index(name)])

    def merge(self, other: "EvalPartial") -> "EvalPartial":
        self.sums += other.sums
        self.x_sum += other.x_sum
        self.fired += other.fired
        self.tokens += other.tokens
        self.predicted += other.predicted
        self.cosines += other.cosines
        return self

    def arrays(self) -> dict:
        return {"sums": self.sums, "x_sum": self.x_sum, "fired": self.fired,
                "tokens": np.int64(self.tokens), "predicted": np.int64(self.predicted),
                "cosines": np.int64(self.cosines)}

    @classmethod
    def from_arrays(cls, a) -> "EvalPartial":
        return cls(a["sums"].copy(), a["x_sum"].copy(), a["fired"].copy(), int(a["tokens"]),
                   int(a["predicted"]), int(a["cosines"]))


def _logprobs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.to(torch.float32), dim=-1)


@dataclass(frozen=True)
class EvalTask:
    sae: object  # core.features.SAE, opened on the model (dims, dims_out set)

    @property
    def layer(self) -> int | None:
        """The block the edited site is in (None: outside the blocks, e.g. the embedding)."""
        found = re.match(r"^blocks\.(\d+)\.", self.sae.site_out)
        return int(found.group(1)) if found else None

    @property
    def select(self) -> tuple[str, ...]:
        names = [self.sae.site, self.sae.site_out, "logits"]
        if self.layer is not None:
            names.append(resid_pre_name(self.layer))
        return tuple(dict.fromkeys(names))

    def _run(self, loaded, ids, lengths, edit, got: dict) -> torch.Tensor:
        """The logits with the site edited. A site inside block L: the run resumes at
        block L from the clean run's input to it (everything before is unchanged), so a
        site halfway up the model costs half a forward pass."""
        model = loaded.model
        if self.layer is None:
            out: dict = {}
            with editing(model, [(self.sae.site_out, edit)]):
                forward(loaded, ids, lengths, ("logits",), out.__setitem__)
            return out["logits"]
        x = got[resid_pre_name(self.layer)]
        with editing(model, [(self.sae.site_out, edit)]), torch.inference_mode():
            return model.run_blocks(x, model.attention_context(x.shape[1]), first=self.layer,
                                    head="all")

    def compute(self, loaded, batch) -> EvalPartial:
        from ..features import SAE

        sae = self.sae
        ids, lengths = batch.padded()
        B, T = ids.shape
        got: dict = {}
        forward(loaded, ids, lengths, self.select, got.__setitem__)
        part = EvalPartial.empty(sae.d_out, sae.d_sae)
        with torch.inference_mode():
            x_in = SAE.flatten(got[sae.site], sae.dims)  # (B, T, d_in)
            x_out = SAE.flatten(got[sae.site_out], sae.dims_out)  # (B, T, d_out)
            valid = valid_positions(lengths, T, x_out.device)
            recon, l0 = self._features(x_in[valid], part)  # the real positions' rows
            flat = x_out.clone()  # padding keeps its own value: no real position sees it
            flat[valid] = recon.to(flat.dtype)
            like = got[sae.site_out]
            replaced = SAE.unflatten(flat, sae.dims_out, like).to(like.dtype)
            ablation = self._run(loaded, ids, lengths, lambda x: torch.zeros_like(x), got)
            replacing = self._run(loaded, ids, lengths, lambda x: replaced.to(x.device), got)
        x = x_out[valid].to(torch.float64).cpu()
        r = recon.to(torch.float64).cpu()
        norms = x.norm(dim=-1) * r.norm(dim=-1)
        has = norms > 0
        cos = (x * r).sum(-1)[has] / norms[has]
        sums = dict(rss=float(((x - r) ** 2).sum()), x_sq=float((x ** 2).sum()),
                    l0=l0, cosine=float(cos.sum()))
        sums.update(self._losses(ids, lengths, got["logits"], ablation, replacing))
        part.sums[:] = [sums.get(name, 0.0) for name in EvalPartial.SUMS]
        part.x_sum[:] = x.sum(0).numpy()
        part.tokens, part.cosines = int(valid.sum()), int(has.sum())
        part.predicted = int(np.maximum(lengths - 1, 0).sum())
        return part

    def _features(self, rows: torch.Tensor, part: EvalPartial) -> tuple[torch.Tensor, float]:
        """(N, d_in) rows -> their reconstructions (N, d_out) and the summed L0, ROWS at a
        time (a wide SAE's (N, F) activations never exist at once); each feature's count
        of active rows goes into `part.fired`."""
        from ..features import metrics

        recon, l0 = [], 0.0
        for i in range(0, len(rows), ROWS):
            block = rows[i:i + ROWS]
            acts = self.sae.encode(block)
            recon.append(self.sae.decode(acts, block))
            l0 += float(metrics.l0(acts).sum())
            part.fired += (acts != 0).sum(0).cpu().numpy()
        if not recon:
            return rows.new_zeros((0, self.sae.d_out)), 0.0
        return torch.cat(recon), l0

    @staticmethod
    def _losses(ids, lengths, clean, ablation, replaced) -> dict:
        """Summed next-token CE of the three runs and KL(clean ‖ run) of the two changed
        ones, one window at a time (a window's logits are (T, V): the batch's would be
        B times that in float32)."""
        out = dict.fromkeys(("ce_clean", "ce_ablation", "ce_replaced", "kl_ablation",
                             "kl_replaced"), 0.0)
        for row, n in enumerate(lengths):
            n = int(n)
            if n < 2:
                continue
            target = torch.from_numpy(ids[row, 1:n]).to(clean.device)[:, None]
            base = _logprobs(clean[row, :n - 1])
            p = base.exp()
            out["ce_clean"] -= float(base.gather(-1, target).double().sum())
            for name, run in (("ablation", ablation), ("replaced", replaced)):
                lp = _logprobs(run[row, :n - 1])
                out[f"ce_{name}"] -= float(lp.gather(-1, target).double().sum())
                out[f"kl_{name}"] += float((p * (base - lp)).double().sum())
        return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den != 0 else None


def ablation_delta(ce_clean, ce_ablation) -> tuple[float | None, bool | None]:
    """(what zero-ablating the site adds to the mean loss, whether a CE-loss score over
    it is noisy: that delta below NOISY_BELOW of the clean loss)."""
    if ce_clean is None or ce_ablation is None:
        return None, None
    delta = float(ce_ablation) - float(ce_clean)
    return delta, bool(delta < NOISY_BELOW * abs(float(ce_clean)))


def scores(part: EvalPartial) -> dict:
    """The sums -> SAEBench's numbers (None where a score has no denominator)."""
    n, m = part.tokens, max(part.predicted, 1)
    spread = part["x_sq"] - float((part.x_sum ** 2).sum()) / max(n, 1)
    fvu = _ratio(part["rss"], spread) if n >= 2 else None
    ce = {name: part[f"ce_{name}"] / m if part.predicted else None
          for name in ("clean", "ablation", "replaced")}
    kl = {name: part[f"kl_{name}"] / m if part.predicted else None
          for name in ("ablation", "replaced")}
    density = part.fired / max(n, 1)
    return dict(
        l0=part["l0"] / max(n, 1), fvu=fvu,
        explained_variance=None if fvu is None else 1.0 - fvu,
        cosine=part["cosine"] / part.cosines if part.cosines else None,
        ce_clean=ce["clean"], ce_ablation=ce["ablation"], ce_replaced=ce["replaced"],
        ce_loss_score=None if not part.predicted else
        _ratio(ce["ablation"] - ce["replaced"], ce["ablation"] - ce["clean"]),
        kl_ablation=kl["ablation"], kl_replaced=kl["replaced"],
        kl_score=None if not part.predicted else
        _ratio(kl["ablation"] - kl["replaced"], kl["ablation"]),
        **dict(zip(("ce_ablation_delta", "ce_loss_score_noisy"),
                   ablation_delta(ce["clean"], ce["ablation"]))),
        dead=int((part.fired == 0).sum()), dense=int((density > DENSE).sum()),
        density=density)


def need_next_token(loaded) -> None:
    """eval-sae scores next-token predictions: a causal model with its head."""
    from ...errors import UsageError
    from ..analysis.fillmask import need_causal
    from ..analysis.generate import need_head

    cfg = loaded.cfg
    need_head(cfg, "eval-sae")
    need_causal(cfg, "eval-sae")
    if not cfg.causal:
        raise UsageError(f"tfx eval-sae scores next-token predictions; {cfg.name} is not a "
                         "causal language model: use a decoder, e.g. -w smollm2 or -c gpt2")


def eval_sae(loaded, corpus, *, sae, sae_site: str | None = None, ctx=None, batch_size=8,
             max_tokens=None, output=None, force=False, engine="local", progress=None):
    """`tfx eval-sae`: the SAE in folder `sae` opened on the model and judged over the
    corpus; -o DIR keeps the sums after every chunk (resumable) and the result."""
    from ..analysis.feature_sites import open_sae
    from ..analysis.features import sae_info
    from ..outputs import sha256_files
    from ..results import EvalSAEResult
    from ..trace import Trace
    from .corpus_runs import _common, _run_reduced, prepare
    from .pipeline import make_plan

    cfg = loaded.cfg
    need_next_token(loaded)
    opened = open_sae(loaded, sae, sae_site)
    corpus = prepare(loaded, corpus, "eval-sae")
    plan = make_plan(cfg, ctx=ctx, batch_size=batch_size, max_tokens=max_tokens)
    info = sae_info(opened)
    # which SAE, by its path and by the content of its files: a resumed -o DIR whose
    # SAE changed since is another run
    options = {"sae": info.path, "sae_sha256": sha256_files(opened.file.files),
               "site": opened.site, "site_out": opened.site_out}
    with _run_reduced(loaded, corpus, plan, EvalTask(opened),
                      lambda: EvalPartial.empty(opened.d_out, opened.d_sae),
                      EvalPartial.from_arrays, output=output, force=force, kind="eval-sae",
                      options=options, engine=engine, progress=progress) as (cp, seen):
        got = scores(cp.state)
        tr = Trace()
        tr.add("eval.density", got.pop("density"), ("F",))
        result = EvalSAEResult(**_common(loaded, corpus, plan, seen, engine, output),
                               sae=info, predicted=cp.state.predicted, dense_above=DENSE,
                               **got, tensors=tr)
        cp.finish(result)
    return result


__all__ = ["EvalTask", "EvalPartial", "scores", "eval_sae", "need_next_token",
           "ablation_delta", "DENSE", "NOISY_BELOW"]
