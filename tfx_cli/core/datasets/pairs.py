"""`tfx patch --pairs FILE.jsonl`: activation patching averaged over prompt pairs.

Each line is {"clean", "corrupt", "answer", "wrong"}. A batch is up to PAIRS_PER_BATCH
consecutive pairs of the same token length: their CLEAN runs are one forward pass (the
patched sites recorded), their CORRUPT runs another (each block's input kept), and then
the cells of every pair at layer l run together, `batch` rows per forward pass from block
l's input, as `tfx patch` runs one pair's. A partial result is each pair's m per cell;
the reduction adds effects and their squares in float64, in batch order.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...errors import InputTextError
from ...words import counted
from ..analysis.common import encode
from ..analysis.patching import PATCHED, default_batch
from ..analysis.sites import editing, one_token, resid_pre_name
from .corpus import BOM, json_kind
from .engines import Engine, engine_name
from .pipeline import mapped
from .tasks import BatchTrace

PAIRS_PER_BATCH = 8
KEYS = ("clean", "corrupt", "answer", "wrong")


@dataclass
class Pair:
    index: int  # 0-based line of the file (blank lines not counted)
    line: int  # 1-based line number, for messages
    clean: list[int]
    corrupt: list[int]
    answer: int
    wrong: int
    texts: dict


@dataclass
class PairBatch:
    index: int
    pairs: list[Pair]
    chunk: int = 0
    end_of_chunk: bool = True

    @property
    def tokens(self) -> int:
        return sum(len(p.clean) for p in self.pairs)


def _check_row(row, number: int, path: Path) -> None:
    """A line is an object holding clean, corrupt, answer and wrong, each a string."""
    needs = "each line needs clean, corrupt, answer and wrong"
    if not isinstance(row, dict):
        raise InputTextError(f"line {number} of {path} is {json_kind(row)}, not an object; "
                             f"{needs}, as {{\"clean\": \"...\", ...}}")
    for key in KEYS:
        if key not in row:
            raise InputTextError(f"line {number} of {path} has no text {key!r}; {needs}")
        if not isinstance(row[key], str):
            raise InputTextError(f"line {number} of {path}: {key!r} is {json_kind(row[key])}, "
                                 "not text; put it in quotes")


def read_pairs(loaded, path: Path) -> list[Pair]:
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputTextError(f"--pairs {path} does not exist; give a JSONL file with one "
                             '{"clean", "corrupt", "answer", "wrong"} object per line')
    pairs = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputTextError(f"line {number} of {path} is not UTF-8 text") from None
        if number == 1:
            line = line.removeprefix(BOM)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputTextError(f"line {number} of {path} is not JSON ({exc.msg}, column "
                                 f"{exc.colno})") from None
        _check_row(row, number, path)
        clean, corrupt = encode(loaded, row["clean"]), encode(loaded, row["corrupt"])
        if len(clean) != len(corrupt):
            raise InputTextError(f"line {number} of {path}: clean is "
                                 f"{counted(len(clean), 'token')} and corrupt "
                                 f"{counted(len(corrupt), 'token')}; a pair must line up "
                                 "token by token")
        good = one_token(loaded, row["answer"], f"answer (line {number})")
        bad = one_token(loaded, row["wrong"], f"wrong (line {number})")
        if good.id == bad.id:
            raise InputTextError(f"line {number} of {path}: answer and wrong are the same "
                                 f"token ({good.token!r})")
        pairs.append(Pair(len(pairs), number, clean, corrupt, good.id, bad.id,
                          {k: row[k] for k in KEYS}))
    if not pairs:
        raise InputTextError(f"--pairs {path} holds no pair; one JSON object per line")
    return pairs


def pair_batches(pairs: list[Pair]) -> list[PairBatch]:
    out: list[PairBatch] = []
    for pair in pairs:
        last = out[-1].pairs if out else None
        if last and len(last) < PAIRS_PER_BATCH and len(last[0].clean) == len(pair.clean):
            last.append(pair)
        else:
            out.append(PairBatch(len(out), [pair], chunk=len(out)))
    return out


@dataclass
class PairsPartial:
    metric: np.ndarray  # (P, L, cells) float64: m of each patched run
    m_clean: np.ndarray  # (P,)
    m_corrupt: np.ndarray  # (P,)
    runs: int


def _metric(logits: torch.Tensor, answer: torch.Tensor, wrong: torch.Tensor) -> torch.Tensor:
    last = logits[:, -1].double()  # (R, V)
    rows = torch.arange(len(last))
    return last[rows, answer] - last[rows, wrong]


@dataclass(frozen=True)
class PairsTask:
    site: str
    batch: int | None = None  # rows per patched forward pass

    def compute(self, loaded, pb: PairBatch) -> PairsPartial:
        model, cfg = loaded.model, loaded.cfg
        L, P, T = cfg.n_layers, len(pb.pairs), len(pb.pairs[0].clean)
        answer = torch.tensor([p.answer for p in pb.pairs])
        wrong = torch.tensor([p.wrong for p in pb.pairs])
        wanted = [resid_pre_name(i) if self.site == "resid_pre" else
                  PATCHED[self.site].format(i=i) for i in range(L)]
        pres = [resid_pre_name(i) for i in range(L)]
        clean_tr, corrupt_tr = {}, {}
        with torch.inference_mode():
            with model.record(wanted, trace=BatchTrace(clean_tr.__setitem__)):
                m_clean = _metric(model(torch.tensor([p.clean for p in pb.pairs]), head="last"),
                                  answer, wrong)
            with model.record(pres, trace=BatchTrace(corrupt_tr.__setitem__)):
                m_corrupt = _metric(model(torch.tensor([p.corrupt for p in pb.pairs]),
                                          head="last"), answer, wrong)
            context = model.attention_context(T)
            cells = cfg.n_heads if self.site == "heads" else T
            rows_per = self.batch or default_batch(T)
            pair_of = torch.arange(P).repeat_interleave(cells)  # row r: pair, cell
            cell_of = torch.arange(cells).repeat(P)
            out = torch.empty(P * cells, L, dtype=torch.float64)
            runs = 0
            for layer in range(L):
                start, source = corrupt_tr[pres[layer]], clean_tr[wanted[layer]]
                for lo in range(0, P * cells, rows_per):
                    p = pair_of[lo:lo + rows_per]
                    c = cell_of[lo:lo + rows_per]
                    rows = torch.arange(len(p))
                    x = start[p].clone()  # (R, T, C): each row its pair's CORRUPT input
                    if self.site == "resid_pre":
                        x[rows, c] = source[p, c]
                        logits = model.run_blocks(x, context, first=layer, head="last")
                    else:
                        def edit(value, p=p, c=c, rows=rows, source=source):
                            value = value.clone()
                            value[rows, c] = source[p, c]
                            return value

                        with editing(model, [(wanted[layer], edit)]):
                            logits = model.run_blocks(x, context, first=layer, head="last")
                    out[lo:lo + len(p), layer] = _metric(logits, answer[p], wrong[p])
                    runs += 1
        metric = out.reshape(P, cells, L).permute(0, 2, 1).numpy()
        return PairsPartial(metric, m_clean.numpy(), m_corrupt.numpy(), runs)


class PairsReduction:
    """Sums of each cell's effect and of its square over pairs (float64, batch order)."""

    def __init__(self):
        self.sum = self.sumsq = self.metric = None
        self.n, self.runs = 0, 0
        self.m_clean: list[float] = []
        self.m_corrupt: list[float] = []

    def take(self, pb: PairBatch, part: PairsPartial) -> None:
        gap = part.m_clean - part.m_corrupt
        for pair, g in zip(pb.pairs, gap):
            if g == 0:
                raise InputTextError(f"line {pair.line}: clean and corrupt give the same logit "
                                     "difference, so the effect is undefined; change the pair")
        effect = (part.metric - part.m_corrupt[:, None, None]) / gap[:, None, None] + 0.0
        for e, m in zip(effect, part.metric):  # pair by pair, in order
            self.sum = e.copy() if self.sum is None else self.sum + e
            self.sumsq = e * e if self.sumsq is None else self.sumsq + e * e
            self.metric = m.copy() if self.metric is None else self.metric + m
        self.n += len(effect)
        self.runs += part.runs
        self.m_clean += [float(x) for x in part.m_clean]
        self.m_corrupt += [float(x) for x in part.m_corrupt]


def patch_pairs(loaded, pairs_file, *, site: str = "resid_pre", batch: int | None = None,
                engine: str | Engine = "local", progress=None):
    from ...errors import UsageError
    from ..analysis.generate import check_vocab, need_head
    from ..analysis.patching import PATCH_SITES
    from .corpus_runs import single_stack
    from ..progress import counting
    from ..results import InputInfo, PairInfo, PatchPairsResult
    from ..trace import Trace

    if site not in PATCH_SITES:
        raise UsageError(f"--site {site!r} is not a patching site; valid: "
                         f"{', '.join(PATCH_SITES)}")
    if batch is not None and batch < 1:
        raise UsageError(f"--batch {batch} must be at least 1 (cells per forward pass)")
    single_stack(loaded.cfg, "tfx patch")
    need_head(loaded.cfg, "patch")
    check_vocab(loaded)
    pairs = read_pairs(loaded, pairs_file)
    lengths = sorted({len(p.clean) for p in pairs})
    if site != "heads" and len(lengths) > 1:
        raise InputTextError(f"--pairs: --site {site} averages position by position, but the "
                             f"pairs are of {len(lengths)} token lengths ({lengths[0]} to "
                             f"{lengths[-1]}); give pairs of one length, or use --site heads")
    reduction = PairsReduction()
    todo = pair_batches(pairs)
    with counting(progress, "tfx patch --pairs", len(pairs), "pairs") as update:
        for pb, part in mapped(loaded, PairsTask(site, batch), todo, engine):
            reduction.take(pb, part)
            update(reduction.n, sum(len(p.clean) for p in pairs[:reduction.n]))
    n = reduction.n
    mean = reduction.sum / n
    std = np.sqrt(np.maximum(reduction.sumsq / n - mean * mean, 0.0))
    cols = "H" if site == "heads" else "T"
    tr = Trace()
    tr.add("patch.effect", mean, ("L", cols))
    tr.add("patch.effect_std", std, ("L", cols))
    tr.add("patch.metric", reduction.metric / n, ("L", cols))
    first = pairs[0]
    return PatchPairsResult(
        model=loaded.info,
        input=InputInfo(file=str(pairs_file), tokens=loaded.tokenizer.pieces(first.clean),
                        ids=list(first.clean)),
        tensors=tr, pairs_file=str(pairs_file), n_pairs=n, site=site,
        patched=PATCHED[site], metric="m = logit(answer) - logit(wrong) at the last position",
        effect="mean over pairs of (m_patched - m_corrupt) / (m_clean - m_corrupt); "
               "patch.effect_std: their standard deviation (over pairs, ddof 0)",
        m_clean=float(np.mean(reduction.m_clean)), m_corrupt=float(np.mean(reduction.m_corrupt)),
        pairs=[PairInfo(p.texts["clean"], p.texts["corrupt"], p.texts["answer"],
                        p.texts["wrong"], mc, mk)
               for p, mc, mk in zip(pairs, reduction.m_clean, reduction.m_corrupt)],
        batch=min(batch or default_batch(lengths[0]), len(pairs) * (
            loaded.cfg.n_heads if site == "heads" else lengths[0])),
        batched_runs=reduction.runs, engine=engine_name(engine))


__all__ = ["patch_pairs", "read_pairs", "PairsTask", "PairBatch", "pair_batches"]
