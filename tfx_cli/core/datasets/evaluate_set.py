"""`tfx eval-sae --transcoders DIR`: a whole transcoder set judged over a corpus, every
MLP replaced at once.

Set-wide, per batch, three runs of the model:

    clean      the plain model; each layer's transcoder is measured here, on the clean
               run's input site and MLP output (ffn.out) of its block: L0, FVU, cosine,
               which features fire (SAEBench's core numbers, per layer)
    ablation   every block's MLP output set to zeros
    replaced   every block's MLP output set to its transcoder's reconstruction, no error
               term, each transcoder reading its input site in this replaced run: the
               replacement model without error nodes, whose errors compound up the layers

CE-loss score and KL score as for one SAE (evaluate.py): (CE_ablation − CE_replaced) /
(CE_ablation − CE_clean), (KL_ablation − KL_replaced) / KL_ablation. The set's L0 is the
mean of the layers', its FVU pooled (Σ over layers of the residual sum of squares / Σ of
the variance about each layer's mean), its cosine the mean over every (layer, token).

A cross-layer transcoder's layer L output is what every layer k ≤ L's features write
into it (plus layer L's b_dec); a per-layer set's, layer L's features alone (plus its
skip path): TranscoderSet.reconstruct (core/features/transcoder_set.py) on the device
the model runs on."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..analysis.sites import editing, resid_pre_name
from ..features.transcoder_set import TranscoderSet
from .evaluate import DENSE, ROWS, EvalTask, _ratio, ablation_delta
from .tasks import forward, valid_positions

LOSSES = ("ce_clean", "ce_ablation", "ce_replaced", "kl_ablation", "kl_replaced")
LAYER_SUMS = ("rss", "x_sq", "l0", "cosine")


@dataclass
class SetPartial:
    layer_sums: np.ndarray  # (L, LAYER_SUMS) float64
    x_sum: np.ndarray  # (L, D) float64: Σ of each layer's MLP output
    fired: np.ndarray  # (L, F) int64: tokens each feature is active on
    cosines: np.ndarray  # (L,) int64: tokens with a cosine
    losses: np.ndarray  # (LOSSES,) float64
    tokens: int = 0
    predicted: int = 0

    @classmethod
    def empty(cls, n_layers: int, d_model: int, width: int) -> "SetPartial":
        return cls(np.zeros((n_layers, len(LAYER_SUMS))), np.zeros((n_layers, d_model)),
                   np.zeros((n_layers, width), np.int64), np.zeros(n_layers, np.int64),
                   np.zeros(len(LOSSES)))

    def merge(self, other: "SetPartial") -> "SetPartial":
        self.layer_sums += other.layer_sums
        self.x_sum += other.x_sum
        self.fired += other.fired
        self.cosines += other.cosines
        self.losses += other.losses
        self.tokens += other.tokens
        self.predicted += other.predicted
        return self

    def arrays(self) -> dict:
        return {"layer_sums": self.layer_sums, "x_sum": self.x_sum, "fired": self.fired,
                "cosines": self.cosines, "losses": self.losses,
                "tokens": np.int64(self.tokens), "predicted": np.int64(self.predicted)}

    @classmethod
    def from_arrays(cls, a) -> "SetPartial":
        return cls(a["layer_sums"].copy(), a["x_sum"].copy(), a["fired"].copy(),
                   a["cosines"].copy(), a["losses"].copy(), int(a["tokens"]),
                   int(a["predicted"]))


def _reader(rep: TranscoderSet, acts: dict, inputs: dict, rows_of):
    """reader(layer): an edit at that layer's input site that passes the run on unchanged
    and keeps its rows (`rows_of(x)` (N, D), float32) in `inputs` and their features in
    `acts`, for the layer's MLP output to be judged or rebuilt from."""
    def reader(layer):
        def edit(x):
            rows = rows_of(x).to(torch.float32)
            inputs[layer] = rows
            acts[layer] = rep.encode(layer, rows)
            return x
        return edit
    return reader


@dataclass(frozen=True)
class SetEvalTask:
    tc: TranscoderSet  # checked against the model (analysis.replacement)
    # the block each of the set's layers replaces (None: layer i replaces block i); a
    # one-layer set on block 5 is blocks=(5,): only that MLP is zeroed and replaced
    blocks: tuple[int, ...] | None = None
    _on: dict = field(default_factory=dict, compare=False, repr=False)

    def replacement(self, device) -> TranscoderSet:
        """The set on `device` (made once per device)."""
        key = str(device)
        if key not in self._on:
            self._on[key] = self.tc.to(device)
        return self._on[key]

    def sites(self, layer: int) -> tuple[str, str]:
        """(the input site, the MLP output) in the block the set's `layer` replaces."""
        block = layer if self.blocks is None else self.blocks[layer]
        return f"blocks.{block}.{self.tc.site}", f"blocks.{block}.ffn.out"

    def compute(self, loaded, batch) -> SetPartial:
        ids, lengths = batch.padded()
        T = ids.shape[1]
        tc = self.tc
        part = SetPartial.empty(tc.n_layers, tc.d_model, tc.width)
        rep = self.replacement(loaded.model.device)
        valid = valid_positions(lengths, T, loaded.model.device)
        with torch.inference_mode():
            clean = self._clean(loaded, ids, lengths, rep, valid, part)
            zero = [(self.sites(i)[1], torch.zeros_like) for i in range(tc.n_layers)]
            ablation = self._logits(loaded, ids, lengths, zero)
            replaced = self._logits(loaded, ids, lengths, self._replacing(rep))
        sums = EvalTask._losses(ids, lengths, clean, ablation, replaced)
        part.losses[:] = [sums[name] for name in LOSSES]
        part.tokens = int(valid.sum())
        part.predicted = int(np.maximum(lengths - 1, 0).sum())
        return part

    @staticmethod
    def _logits(loaded, ids, lengths, edits) -> torch.Tensor:
        got: dict = {}
        with editing(loaded.model, edits):
            forward(loaded, ids, lengths, ("logits",), got.__setitem__)
        return got["logits"]

    def _clean(self, loaded, ids, lengths, rep: TranscoderSet, valid, part) -> torch.Tensor:
        """The clean run's logits; each layer measured on its real positions as the run
        passes it (its input site's rows read, then its MLP output judged)."""
        acts: dict = {}
        inputs: dict = {}
        read = _reader(rep, acts, inputs, lambda x: x[valid])

        def judge(layer):
            def edit(y):
                self._measure(layer, y[valid], rep, acts, inputs.pop(layer), part)
                if not self.tc.cross:
                    acts.pop(layer)
                return y
            return edit

        edits = [e for i in range(self.tc.n_layers)
                 for e in ((self.sites(i)[0], read(i)), (self.sites(i)[1], judge(i)))]
        return self._logits(loaded, ids, lengths, edits)

    def _measure(self, layer, y, rep: TranscoderSet, acts, x, part: SetPartial) -> None:
        """One layer's sums: y (N, D) its MLP output, x (N, D) its input, ROWS at once."""
        s = dict.fromkeys(LAYER_SUMS, 0.0)
        fired = np.zeros(self.tc.width, np.int64)
        n_cos = 0
        a = acts[layer]
        s["l0"] = float((a != 0).sum())
        fired += (a != 0).sum(0).cpu().numpy()
        for i in range(0, len(x), ROWS):
            rows = slice(i, i + ROWS)
            recon = rep.reconstruct(layer, {k: v[rows] for k, v in acts.items()}, x[rows])
            yy, r = y[rows].to(torch.float64).cpu(), recon.to(torch.float64).cpu()
            norms = yy.norm(dim=-1) * r.norm(dim=-1)
            has = norms > 0
            s["rss"] += float(((yy - r) ** 2).sum())
            s["x_sq"] += float((yy ** 2).sum())
            s["cosine"] += float(((yy * r).sum(-1)[has] / norms[has]).sum())
            n_cos += int(has.sum())
            part.x_sum[layer] += yy.sum(0).numpy()
        part.layer_sums[layer] = [s[name] for name in LAYER_SUMS]
        part.fired[layer] = fired
        part.cosines[layer] = n_cos

    def _replacing(self, rep: TranscoderSet) -> list:
        """Edits making every MLP output its transcoder's reconstruction from this run's
        own input sites (every position: the padding after a row's end is seen by no
        real one)."""
        acts: dict = {}
        inputs: dict = {}
        read = _reader(rep, acts, inputs, lambda x: x.reshape(-1, x.shape[-1]))

        def put(layer):
            def edit(y):
                out = rep.reconstruct(layer, acts, inputs.pop(layer))
                if not self.tc.cross:
                    acts.pop(layer)
                return out.reshape(y.shape).to(y.dtype)
            return edit

        return [e for i in range(self.tc.n_layers)
                for e in ((self.sites(i)[0], read(i)), (self.sites(i)[1], put(i)))]


@dataclass
class LayerwisePartial:
    losses: np.ndarray  # (sets, 3) float64: summed CE clean, zeroed, replaced
    tokens: int = 0
    predicted: int = 0

    def merge(self, other: "LayerwisePartial") -> "LayerwisePartial":
        self.losses += other.losses
        self.tokens += other.tokens
        self.predicted += other.predicted
        return self


@dataclass(frozen=True)
class LayerwiseTask:
    """Several one-layer sets, each judged alone (its block's MLP zeroed, then replaced by
    its reconstruction) with the clean run shared: each changed run resumes at the set's
    block from the clean run's input to it, so a block halfway up costs half a pass."""

    sets: tuple[TranscoderSet, ...]  # one-layer sets
    blocks: tuple[int, ...]  # the block each replaces
    _on: dict = field(default_factory=dict, compare=False, repr=False)

    def compute(self, loaded, batch) -> LayerwisePartial:
        ids, lengths = batch.padded()
        got: dict = {}
        names = ("logits", *dict.fromkeys(resid_pre_name(b) for b in self.blocks))
        forward(loaded, ids, lengths, names, got.__setitem__)
        part = LayerwisePartial(np.zeros((len(self.sets), 3)),
                                int(valid_positions(lengths, ids.shape[1]).sum()),
                                int(np.maximum(lengths - 1, 0).sum()))
        clean = _ce_sum(ids, lengths, got.pop("logits"))
        for j, (tc, block) in enumerate(zip(self.sets, self.blocks)):
            task = self._on.setdefault(j, SetEvalTask(tc, (block,)))
            rep = task.replacement(loaded.model.device)
            with torch.inference_mode():
                zero = _resumed(loaded, got, block, [(task.sites(0)[1], torch.zeros_like)])
                ablation = _ce_sum(ids, lengths, zero)
                del zero
                replaced = _ce_sum(ids, lengths,
                                   _resumed(loaded, got, block, task._replacing(rep)))
            part.losses[j] = [clean, ablation, replaced]
        return part


def _ce_sum(ids, lengths, logits) -> float:
    """Summed next-token CE of a run, window by window: evaluate.py's CE to the bit (its
    KL is not needed for a CE-loss score)."""
    total = 0.0
    for row, n in enumerate(lengths):
        n = int(n)
        if n < 2:
            continue
        target = torch.from_numpy(ids[row, 1:n]).to(logits.device)[:, None]
        lp = torch.log_softmax(logits[row, :n - 1].to(torch.float32), dim=-1)
        total -= float(lp.gather(-1, target).double().sum())
    return total


def _resumed(loaded, got: dict, block: int, edits) -> torch.Tensor:
    """The logits of the rest of the model from `block` on, the clean run's input to it
    taken, with `edits` on."""
    model = loaded.model
    x = got[resid_pre_name(block)]
    with editing(model, edits):
        return model.run_blocks(x, model.attention_context(x.shape[1]), first=block,
                                head="all")


def layerwise_scores(part: LayerwisePartial) -> list[dict]:
    """Each set's mean CE clean, zeroed and replaced, and its CE-loss score (None
    without a denominator, or without positions to predict)."""
    if not part.predicted:
        return [dict.fromkeys(("ce_clean", "ce_ablation", "ce_replaced", "ce_loss_score"))
                for _ in part.losses]
    return [dict(ce_clean=float(c), ce_ablation=float(a), ce_replaced=float(r),
                 ce_loss_score=_ratio(float(a - r), float(a - c)))
            for c, a, r in part.losses / part.predicted]


def _layer_scores(part: SetPartial, layer: int) -> dict:
    n = part.tokens
    rss, x_sq, l0, cos = part.layer_sums[layer]
    spread = x_sq - float((part.x_sum[layer] ** 2).sum()) / max(n, 1)
    fvu = _ratio(rss, spread) if n >= 2 else None
    density = part.fired[layer] / max(n, 1)
    return dict(layer=layer, l0=l0 / max(n, 1), fvu=fvu,
                explained_variance=None if fvu is None else 1.0 - fvu,
                cosine=cos / part.cosines[layer] if part.cosines[layer] else None,
                dead=int((part.fired[layer] == 0).sum()),
                dense=int((density > DENSE).sum()))


def set_scores(part: SetPartial) -> dict:
    """The sums -> per-layer rows and the set's numbers (None without a denominator)."""
    n, L = part.tokens, part.layer_sums.shape[0]
    layers = [_layer_scores(part, i) for i in range(L)]
    spread = float(part.layer_sums[:, 1].sum()) - float((part.x_sum ** 2).sum()) / max(n, 1)
    fvu = _ratio(float(part.layer_sums[:, 0].sum()), spread) if n >= 2 else None
    m = part.predicted
    got = {name: float(v) / m if m else None for name, v in zip(LOSSES, part.losses)}
    return dict(
        layers=layers, l0=float(np.mean([row["l0"] for row in layers])), fvu=fvu,
        explained_variance=None if fvu is None else 1.0 - fvu,
        cosine=float(part.layer_sums[:, 3].sum()) / int(part.cosines.sum())
        if part.cosines.sum() else None,
        **got,
        ce_loss_score=None if not m else _ratio(got["ce_ablation"] - got["ce_replaced"],
                                                got["ce_ablation"] - got["ce_clean"]),
        kl_score=None if not m else _ratio(got["kl_ablation"] - got["kl_replaced"],
                                           got["kl_ablation"]),
        **dict(zip(("ce_ablation_delta", "ce_loss_score_noisy"),
                   ablation_delta(got["ce_clean"], got["ce_ablation"]))),
        dead=sum(row["dead"] for row in layers), dense=sum(row["dense"] for row in layers),
        density=part.fired / max(n, 1))


def transcoder_set_info(tc: TranscoderSet) -> dict:
    return dict(path=tc.folder, kind=tc.model_kind, feature_input_hook=tc.input_hook,
                feature_output_hook=tc.output_hook, site=tc.site, n_layers=tc.n_layers,
                d_model=tc.d_model, width=tc.width, activation=tc.activation,
                skip=tc.has_skip)


def eval_transcoders(loaded, corpus, *, transcoders, ctx=None, batch_size=8,
                     max_tokens=None, output=None, force=False, engine="local",
                     progress=None):
    """`tfx eval-sae --transcoders DIR`: the set in DIR read against the model (refused by
    name when it does not fit) and judged whole; -o DIR keeps the sums after every chunk
    and the result."""
    from ..analysis.replacement import open_transcoders
    from ..results import EvalLayer, EvalSAEResult, TranscoderSetInfo
    from ..trace import Trace
    from .corpus_runs import _common, _run_reduced, prepare
    from .evaluate import need_next_token
    from .pipeline import make_plan

    cfg = loaded.cfg
    need_next_token(loaded)
    tc = open_transcoders(loaded, transcoders, "tfx eval-sae --transcoders")
    corpus = prepare(loaded, corpus, "eval-sae")
    plan = make_plan(cfg, ctx=ctx, batch_size=batch_size, max_tokens=max_tokens)
    info = TranscoderSetInfo(**transcoder_set_info(tc))
    # which set, by its folder and by the content of its files: a resumed -o DIR whose
    # set changed since is another run
    options = {"transcoders": info.path, "transcoders_sha256": tc.sha256(), "site": tc.site}
    with _run_reduced(loaded, corpus, plan, SetEvalTask(tc),
                      lambda: SetPartial.empty(tc.n_layers, tc.d_model, tc.width),
                      SetPartial.from_arrays, output=output, force=force, kind="eval-sae",
                      options=options, engine=engine, progress=progress) as (cp, seen):
        got = set_scores(cp.state)
        tr = Trace()
        tr.add("eval.density", got.pop("density"), ("L", "F"))
        layers = [EvalLayer(**row) for row in got.pop("layers")]
        result = EvalSAEResult(**_common(loaded, corpus, plan, seen, engine, output),
                               transcoders=info, layers=layers,
                               predicted=cp.state.predicted, dense_above=DENSE,
                               **got, tensors=tr)
        cp.finish(result)
    return result


__all__ = ["SetEvalTask", "SetPartial", "set_scores", "eval_transcoders", "LayerwiseTask",
           "LayerwisePartial", "layerwise_scores"]
