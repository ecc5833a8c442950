"""What the HTML report shows, from one forward pass: every shown layer's attention
patterns, the statistics entering every norm, and the next-token top-k after every
position. (render/report.py draws the page; this computes it.)"""
from __future__ import annotations

import torch

from ...errors import UsageError
from ...words import counted
from ..load import Loaded
from ..outputs import check_output_size
from ..progress import after, blocks
from ..results import Candidate, NormStats, ReportResult
from ..trace import Trace
from .common import check_range, encode, read_seq, run, seq_info


# -- report ---------------------------------------------------------------------------
def report_layers(value: str | None, n_layers: int) -> list[int]:
    """'0,1,5' / '2-4' / 'all' (None) -> sorted layer indices, each checked."""
    if value is None or value.strip().lower() == "all":
        return list(range(n_layers))
    layers: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        try:
            if "-" in part.lstrip("-"):
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                chosen = range(lo, hi + 1)
            else:
                chosen = [int(part)]
        except ValueError:
            raise UsageError(f"--show-layers {value!r}: expected layer numbers like "
                             "'0,1,5', a range like '0-3', or 'all'") from None
        for layer in chosen:
            check_range("layer", layer, n_layers, "--show-layers")
            layers.add(layer)
    return sorted(layers)


def norm_stats(tr: Trace, rms: bool) -> list[NormStats]:
    """Every recorded norm's statistics, from its own mean and var taps, in forward order."""
    out = []
    for name in tr.names():
        if name.endswith(".var") and tr.dims(name) == ("T",):
            prefix = name[:-len(".var")]
            mean = None if rms or prefix + ".mean" not in tr else \
                tr.array(prefix + ".mean").astype(float).tolist()
            out.append(NormStats(prefix, mean, tr.array(name).astype(float).tolist()))
    return out


def top_k_per_position(logits: torch.Tensor, k: int, pieces) -> list[list[Candidate]]:
    """The k most likely next tokens after every position, softmax in float64."""
    probs = torch.softmax(logits.to("cpu", torch.float64), dim=-1)  # (T, V)
    top = torch.topk(probs, min(k, probs.shape[-1]), dim=-1)
    rows = []
    for values, indices, row in zip(top.values.tolist(), top.indices.tolist(), logits):
        rows.append([Candidate(id=i, token=piece, prob=p, logit=float(row[i]))
                     for i, p, piece in zip(indices, values, pieces(indices))])
    return rows


def page_bytes(n_layers: int, n_heads: int, T: int, S: int, cross: int = 0) -> int:
    """About what the HTML page takes: every shown layer's (H, T, S) pattern (and, for a
    decoder, its (H, T, source) cross pattern) in 16 bits, base64 (4/3), plus a little for
    each token (chips, norms, next tokens) and the page itself."""
    weights = n_layers * n_heads * T * (S + cross)
    return int(weights * 2 * 4 / 3) + 2_000 * T + 100_000


def check_page(loaded: Loaded, ids: list[int], seq, layers: list[int], force: bool) -> None:
    """Refuse, before the forward pass, a page past the output limit."""
    T = len(seq.target) if seq.target is not None else len(ids)
    cross = len(ids) if seq.stack == "decoder" else 0
    size = page_bytes(len(layers), loaded.cfg.n_heads, T, T, cross)
    check_output_size(size, what="the page", force=force,
                      detail=f"{counted(len(layers), 'layer')} × "
                             f"{counted(loaded.cfg.n_heads, 'head')} × {T:,}² attention "
                             "weights",
                      narrow="--show-layers (e.g. --show-layers 0), or a shorter text")


def report(loaded: Loaded, text: str, *, layers: list[int] | None = None, top_k: int = 5,
           truncate: bool = False, output: str | None = None,
           target: str | None = None, force: bool = False,
           progress=None) -> ReportResult:
    """What the HTML page shows, from one forward pass: each shown layer's attention
    pattern, the mean and variance entering every norm (lazy taps: the norms keep their
    fused kernel, so the patterns are bit for bit what `tfx trace` records), and the
    next-token top-k after every position (causal models with an output head).

    With `output` (the page will be written) a page past the output limit is refused
    before the forward pass, unless `force`; `progress` shows a long forward pass."""
    cfg = loaded.cfg
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, truncate=truncate, target=target)
    layers = list(range(seq.n_layers)) if layers is None else layers
    if output is not None:
        check_page(loaded, ids, seq, layers, force)
    p = seq.prefix
    select = [f"{p}blocks.{layer}.attn.pattern" for layer in layers]
    if seq.stack == "decoder":  # and what each target word read of the source
        select += [f"{p}blocks.{layer}.cross.pattern" for layer in layers]
    # the norms of the residual stream (not the per-head q/k norms): ln1, ln2, the
    # sandwich norms, ln_f and BERT's embedding norm
    select += [f"{p}{where}.{stat}" for where in ("embed.ln", "blocks.*.ln*", "ln_f")
               for stat in ("mean", "var")]
    predicts = (cfg.causal or seq.stack == "decoder") and cfg.lm_head and top_k > 0
    if predicts:
        select.append("logits")
    with after(progress, "report") as update, blocks(loaded.model, update, "report"):
        tr = run(loaded, ids, select, validate=False, seq=seq)
    rms = cfg.norm == "rmsnorm"
    next_tokens = top_k_per_position(tr.raw("logits"), top_k, loaded.tokenizer.pieces) \
        if predicts else []
    shown = tr.subset([n for n in tr.names() if n != "logits"])
    return ReportResult(model=loaded.info, input=seq_info(loaded, text, ids, seq),
                        stack=seq.stack,
                        tensors=shown, layers=layers, n_heads=cfg.n_heads, norm=cfg.norm,
                        norms=norm_stats(tr, rms), top_k=top_k if predicts else 0,
                        next_tokens=next_tokens, output=output)


__all__ = ["report", "report_layers", "norm_stats", "top_k_per_position", "page_bytes",
           "check_page"]
