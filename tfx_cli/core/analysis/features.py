"""An SAE run on a model's text: `tfx features` (which features fire on each token, and
how well the SAE reconstructs the site), the parts of a site's value by feature (for
`tfx attribute --sae`), and activation patching of features (`tfx patch --site
features`). Opening an SAE against a model and editing features are feature_sites.py's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import torch

from ...errors import InputTextError, UsageError
from ..features import SAE, metrics
from ..results import FeatureAct, FeaturesResult, FeatureSummary, SAEInfo, TokenFeatures
from ..trace import Trace
from .common import encode, input_info, run
from .feature_sites import open_sae
from .sites import _metric, editing, resid_pre_name

FEATURE_ROWS = 32  # features patched by `tfx patch --site features` (the most changed)
SUMMARY = 10  # features listed in the summary of the whole text, at least


def sae_info(sae: SAE) -> SAEInfo:
    f = sae.file
    return SAEInfo(path=str(f.path), format=f.format, architecture=f.architecture,
                   d_in=f.d_in, d_sae=f.d_sae, site=sae.spec, name=sae.site, hook=f.hook,
                   k=f.k, apply_b_dec_to_input=f.apply_b_dec_to_input, normalize=f.normalize,
                   site_out=sae.site_out if sae.site_out != sae.site else None,
                   notes=list(f.notes) or None)


def _layer(name: str) -> int | None:
    """The block a tap belongs to (None before the blocks: the embedding)."""
    found = re.match(r"^blocks\.(\d+)\.", name)
    return int(found.group(1)) if found else None


def stop_after(sae: SAE) -> int | None:
    """The last block a run must reach to pass both of the SAE's sites."""
    if sae.site_out.startswith("embed."):
        return -1
    layer = _layer(sae.site_out)
    return layer  # None: ln_f (the whole stack)


def site_values(sae: SAE, tr: Trace) -> tuple[torch.Tensor, torch.Tensor]:
    """The SAE's input (T, d_in) and the value it reconstructs (T, d_out), flattened."""
    x_in = SAE.flatten(tr.raw(sae.site)[None], sae.dims)[0]
    x_out = x_in if sae.site_out == sae.site else \
        SAE.flatten(tr.raw(sae.site_out)[None], sae.dims_out)[0]
    return x_in, x_out


def _recon_dims(sae: SAE) -> tuple[str, str]:
    dims = sae.dims_out
    return ("T", "A") if dims == ("H", "T", "D") else ("T", dims[-1])


# -- tfx features ------------------------------------------------------------------------
def features(loaded, text: str, *, sae, sae_site: str | None = None, per_token: int = 5,
             truncate: bool = False) -> FeaturesResult:
    """`tfx features`: the SAE's features on every token of TEXT."""
    if isinstance(per_token, bool) or not isinstance(per_token, int) or per_token < 1:
        raise UsageError(f"--per-token {per_token!r} must be a whole number of at least 1")
    sae = sae if isinstance(sae, SAE) else open_sae(loaded, sae, sae_site)
    ids = encode(loaded, text, truncate=truncate)
    tr = run(loaded, ids, sorted({sae.site, sae.site_out}), validate=False,
             stop_after=stop_after(sae))
    with torch.inference_mode():
        x_in, x_out = site_values(sae, tr)
        acts = sae.encode(x_in)  # (T, F)
        recon = sae.decode(acts, x_in)  # (T, d_out)
        error = x_out.to(torch.float32) - recon
    tokens = loaded.tokenizer.pieces(ids)
    a64, t64, r64 = acts.double().cpu(), x_out.double().cpu(), recon.double().cpu()
    err = t64 - r64
    positions = []
    for t in range(len(ids)):
        values, index = torch.topk(a64[t], min(per_token, sae.d_sae))
        top = [FeatureAct(int(i), float(v)) for v, i in zip(values, index) if v > 0]
        norm, recon_norm = float(t64[t].norm()), float(r64[t].norm())
        cosine = float(t64[t] @ r64[t]) / (norm * recon_norm) if norm and recon_norm else None
        positions.append(TokenFeatures(position=t, token=tokens[t], l0=int(metrics.l0(a64[t])),
                                       norm=norm, error_norm=float(err[t].norm()),
                                       cosine=cosine, top=top))
    cosines = [p.cosine for p in positions if p.cosine is not None]
    best, where = a64.max(dim=0)  # per feature: its largest activation, and where
    fired = (a64 != 0).sum(dim=0)
    order = torch.argsort(best, descending=True, stable=True)
    summary = [FeatureSummary(index=int(k), max_activation=float(best[k]),
                              position=int(where[k]), tokens=int(fired[k]))
               for k in order[:max(SUMMARY, per_token)] if best[k] > 0]
    trace = Trace()
    trace.add("features.acts", acts.cpu(), ("T", "F"))
    trace.add("features.recon", recon.cpu(), _recon_dims(sae))
    trace.add("features.error", error.cpu(), _recon_dims(sae))
    return FeaturesResult(
        model=loaded.info, input=input_info(loaded, text, ids), tensors=trace,
        sae=sae_info(sae), per_token=per_token, positions=positions,
        l0_mean=float(metrics.l0(a64).double().mean()), fvu=metrics.fvu(t64, r64),
        cosine_mean=sum(cosines) / len(cosines) if cosines else None,
        error_norm_mean=float(err.norm(dim=-1).mean()), top_features=summary,
        dead=metrics.dead(a64))


# -- the parts of a site, by feature -----------------------------------------------------
def feature_parts(sae: SAE, x_in: torch.Tensor, x_out: torch.Tensor
                  ) -> list[tuple[str, torch.Tensor]]:
    """One position's value of the site the SAE reconstructs (x_out, (d_out,)) split into
    float64 parts that sum to it: features.{k} (f_k × its decoder row, each active
    feature), features.bias (b_dec) and features.error (x − x̂)."""
    with torch.inference_mode():
        acts = sae.encode(x_in[None])[0].to("cpu", torch.float64)
    scale, shift = sae.factors(x_in.to("cpu"))
    rows = sae.decoder_rows().cpu()
    parts = []
    for k in torch.nonzero(acts).flatten().tolist():
        vector = acts[k] * rows[k]
        parts.append((f"features.{k}", vector * scale if scale is not None else vector))
    bias = sae.b_dec.to("cpu", torch.float64)
    bias = bias * scale if scale is not None else bias
    if shift is not None:
        bias = bias + shift
    parts.append(("features.bias", bias))
    total = bias + sum((v for _, v in parts[:-1]), torch.zeros_like(bias))
    parts.append(("features.error", x_out.to("cpu", torch.float64) - total))
    return parts


# -- patching features ---------------------------------------------------------------------
@dataclass
class FeatureSweep:
    """m per (feature, position) cell, the features patched (rows), the two runs."""

    metric: torch.Tensor  # (K, T) float64
    features: list[int]
    m_clean: float
    m_corrupt: float
    batched_runs: int
    cells_run: int  # cells where the features differ, each run once


def feature_sweep(model, sae: SAE, clean: Sequence[int], corrupt: Sequence[int],
                  answer: int, wrong: int | None, *, batch: int | None = None,
                  rows: int = FEATURE_ROWS) -> FeatureSweep:
    """Patch CLEAN's activation of one feature at one position into CORRUPT's run: the
    site becomes x_corrupt + (f_clean − f_corrupt)·W_dec at that cell. The `rows`
    features whose activations differ most between the two texts are patched, at every
    position where they differ (a cell where they agree changes nothing and keeps
    m_corrupt without a run). Runs start at the site's block, `batch` cells at a time
    (default: one run for every cell)."""
    T = len(clean)
    layer = _layer(sae.site_out)
    names = sorted({sae.site, sae.site_out})
    pre = [resid_pre_name(layer)] if layer is not None else []
    with torch.inference_mode():
        with model.record(names) as clean_tr:
            m_clean = _metric(model(torch.tensor([list(clean)]), head="last"), answer, wrong)
        with model.record(names + pre) as corrupt_tr:
            m_corrupt = _metric(model(torch.tensor([list(corrupt)]), head="last"), answer,
                                wrong)
        x_clean, _ = site_values(sae, clean_tr)
        x_corrupt, _ = site_values(sae, corrupt_tr)
        diff = sae.encode(x_clean) - sae.encode(x_corrupt)  # (T, F)
        score = diff.abs().sum(dim=0)
        order = torch.argsort(score, descending=True, stable=True)
        chosen = [int(k) for k in order[:rows] if score[k] > 0]
        if not chosen:
            raise InputTextError(f"no feature of the SAE at {sae.spec} differs between CLEAN "
                                 "and CORRUPT, so patching features changes nothing; choose "
                                 "a later site or texts that differ before it")
        metric = torch.full((len(chosen), T), float(m_corrupt[0]), dtype=torch.float64)
        cells = [(r, t) for r, k in enumerate(chosen) for t in range(T) if diff[t, k] != 0]
        context = model.attention_context(T)
        per_run = batch or max(len(cells), 1)
        runs = 0
        for lo in range(0, len(cells), per_run):
            part = cells[lo:lo + per_run]
            B = len(part)
            where = torch.tensor([t for _, t in part])
            change = torch.zeros(B, sae.d_sae, dtype=diff.dtype, device=diff.device)
            for b, (r, t) in enumerate(part):
                change[b, chosen[r]] = diff[t, chosen[r]]
            moved = torch.zeros(B, T, sae.d_out, dtype=diff.dtype, device=diff.device)
            moved[torch.arange(B), where] = sae.delta(change, x_corrupt[where])

            def edit(x, moved=moved):
                flat = SAE.unflatten(moved, sae.dims_out, x)
                return x + flat.to(x.dtype)

            with editing(model, [(sae.site_out, edit)]):
                if layer is None:
                    logits = model(torch.tensor([list(corrupt)] * B), head="last")
                else:
                    start = corrupt_tr.raw(pre[0])
                    logits = model.run_blocks(start.expand(B, *start.shape).clone(), context,
                                              first=layer, head="last")
            values = _metric(logits, answer, wrong)
            for b, (r, t) in enumerate(part):
                metric[r, t] = values[b]
            runs += 1
    return FeatureSweep(metric, chosen, float(m_clean[0]), float(m_corrupt[0]), runs,
                        len(cells))


__all__ = ["features", "feature_parts", "feature_sweep", "FeatureSweep", "sae_info",
           "site_values", "FEATURE_ROWS", "stop_after"]
