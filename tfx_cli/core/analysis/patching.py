"""Activation patching (`tfx patch`): CORRUPT's run with one cell of CLEAN's activations
put in, for every layer and position (or head), batched.

Patching is where the peers are slow: TransformerLens runs one whole forward per
(layer, position) cell. Here CLEAN's activations are recorded once, CORRUPT's residual
entering every block is kept, and the cells of layer l run as one batch (one row per
cell) from block l's input: the blocks before l are never run again.

An encoder–decoder's CLEAN and CORRUPT are sources, read against one target (--target):
the sweep covers both stacks, each layer × its own positions (or heads), and for
attn_out and heads the decoder's cross-attention as a third table. An encoder cell runs
the encoder from its layer, then the whole decoder on that memory; a decoder cell runs
the decoder from its layer on CORRUPT's memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from ...errors import InputTextError, UsageError
from ...words import counted
from ..config_moe import ffn_out_label, ffn_out_name
from ..model import finite
from ..progress import after
from ..results import InputInfo, PatchResult, PatchTable, TokenRef
from ..trace import Trace
from .common import Seq, encode, input_info, read_seq, seq_info
from .fillmask import need_causal
from .generate import check_vocab, need_head
from .sites import Edit, _metric, editing, one_token, resid_pre_name

if TYPE_CHECKING:  # loaded only when an SAE is given
    from .features import FeatureSweep

PATCH_SITES = ("resid_pre", "attn_out", "ffn_out", "heads")  # the layer sweeps
# and the features of an SAE (--sae; core/analysis/features.py), features × positions
ALL_SITES = PATCH_SITES + ("features",)
# -- activation patching -----------------------------------------------------------------
PATCHED = {"resid_pre": "blocks.{i}.resid_pre", "attn_out": "blocks.{i}.attn.out",
           "ffn_out": "blocks.{i}.ffn.out", "heads": "blocks.{i}.attn.context"}
BATCH_TOKENS = 4096  # positions per batched forward when --batch is not given


def _source(site: str, layer: int, cfg=None) -> str:
    """The trace name a patch at `site` and `layer` copies from CLEAN (an MoE layer's FFN
    output is its moe.out)."""
    if site == "resid_pre":
        return resid_pre_name(layer)
    if site == "ffn_out" and cfg is not None:
        return ffn_out_name(cfg, layer)
    return PATCHED[site].format(i=layer)


@dataclass
class Sweep:
    """What a patching sweep measured: m per cell, and the two unpatched runs."""

    metric: torch.Tensor  # (L, T) or (L, H) float64: m of the patched run
    m_clean: float
    m_corrupt: float
    batched_runs: int


def default_batch(T: int) -> int:
    """Cells per forward pass when none is asked for: rows of T positions filling
    BATCH_TOKENS (at least one)."""
    return max(1, BATCH_TOKENS // T)


def sweep(model, clean: Sequence[int], corrupt: Sequence[int], answer: int,
          wrong: int | None, site: str = "resid_pre", *, batch: int | None = None,
          update=None) -> Sweep:
    """Patch every cell of `site` from CLEAN into CORRUPT; m at each cell.

    CLEAN's activations are recorded in one run and CORRUPT's residual entering each
    block in another. The cells of layer l (one per position, or per head for "heads")
    then run `batch` at a time as the rows of one forward pass from block l's input: each
    row is CORRUPT's residual with its one cell replaced (resid_pre), or carries an edit
    that replaces its cell at the patched tap as the batch passes it.

    Rows are independent runs, but a matrix product over more rows may round
    differently (the BLAS picks its kernel by size), so a batched cell agrees with the
    same patched run alone to float rounding, not bit for bit. batch=1 runs each cell
    alone: then a cell whose patch changes nothing is bit for bit the plain run (tests
    hold both). `update(fraction, text)` hears of every batch done (progress).
    """
    cfg = model.cfg
    L, T = cfg.n_layers, len(clean)
    wanted = [_source(site, layer, cfg) for layer in range(L)]
    pres = [resid_pre_name(layer) for layer in range(L)]
    with torch.inference_mode():
        with model.record(wanted) as clean_tr:
            m_clean = _metric(model(torch.tensor([list(clean)]), head="last"), answer, wrong)
        with model.record(pres) as corrupt_tr:
            m_corrupt = _metric(model(torch.tensor([list(corrupt)]), head="last"), answer,
                                wrong)
        context = model.attention_context(T)
        cells = cfg.n_heads if site == "heads" else T
        rows_per_batch = batch or default_batch(T)
        out = torch.empty(L, cells, dtype=torch.float64)
        runs = 0
        for layer in range(L):
            start = corrupt_tr.raw(pres[layer])  # (T, C), entering block `layer`
            source = clean_tr.raw(wanted[layer])  # (T, C) or (H, T, D) for heads
            for lo in range(0, cells, rows_per_batch):
                chosen = torch.arange(lo, min(lo + rows_per_batch, cells))
                rows = torch.arange(len(chosen))
                x = start.expand(len(chosen), *start.shape).clone()  # (B, T, C)
                if site == "resid_pre":
                    x[rows, chosen] = source[chosen]
                    logits = model.run_blocks(x, context, first=layer, head="last")
                else:
                    edit = _put_cells(source, chosen, rows)
                    with editing(model, [(wanted[layer], edit)]):
                        logits = model.run_blocks(x, context, first=layer, head="last")
                out[layer, lo:lo + len(chosen)] = _metric(logits, answer, wrong)
                runs += 1
                if update is not None:
                    done = layer * cells + lo + len(chosen)
                    update(done / (L * cells), f"patching: block {layer + 1} of {L}, "
                           f"{done:,} of {L * cells:,} cells")
    return Sweep(out, float(m_clean[0]), float(m_corrupt[0]), runs)


def _put_cells(source: torch.Tensor, chosen: torch.Tensor, rows: torch.Tensor) -> Edit:
    """An edit giving batch row r CLEAN's value at cell chosen[r]: a position of a (T, C)
    activation, or every position of one head of the (H, T, D) context."""

    def edit(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[rows, chosen] = source[chosen]  # (B, C) or (B, T, D)
        return out

    return edit


def check_site(site: str, sae_given: bool) -> None:
    """--site features and --sae come together (before any model is loaded)."""
    if site == "features" and not sae_given:
        raise UsageError("--site features patches the features of an SAE: give --sae DIR")
    if sae_given and site != "features":
        raise UsageError(f"--sae gives the SAE whose features --site features patches, but "
                         f"--site is {site}; pass --site features")


# -- an encoder–decoder's sweep ------------------------------------------------------------
# site -> the tables it sweeps: (part, the trace names patched)
SEQ2SEQ_PATCHED = {
    "resid_pre": (("encoder", "encoder.blocks.{i}.resid_pre"),
                  ("decoder", "decoder.blocks.{i}.resid_pre")),
    "attn_out": (("encoder", "encoder.blocks.{i}.attn.out"),
                 ("decoder", "decoder.blocks.{i}.attn.out"),
                 ("cross", "decoder.blocks.{i}.cross.out")),
    "ffn_out": (("encoder", "encoder.blocks.{i}.ffn.out"),
                ("decoder", "decoder.blocks.{i}.ffn.out")),
    "heads": (("encoder", "encoder.blocks.{i}.attn.context"),
              ("decoder", "decoder.blocks.{i}.attn.context"),
              ("cross", "decoder.blocks.{i}.cross.context")),
}


@dataclass
class Seq2SeqSweep:
    """What an encoder–decoder's sweep measured: m per cell of each table."""

    tables: dict  # part -> (L, cells) float64: m of the patched run
    m_clean: float
    m_corrupt: float
    batched_runs: int


def _patched_name(site: str, template: str, layer: int) -> str:
    if site == "resid_pre":
        return resid_pre_name(layer, template.split("blocks")[0])
    return template.format(i=layer)


def sweep_seq2seq(model, clean: Sequence[int], corrupt: Sequence[int],
                  target: Sequence[int], answer: int, wrong: int | None,
                  site: str = "resid_pre", *, batch: int | None = None) -> Seq2SeqSweep:
    """Patch every cell of `site`, in both stacks, from CLEAN's run into CORRUPT's (two
    sources, one target); m at each cell, at the target's last position. As sweep does
    for one stack: CLEAN's activations recorded once, CORRUPT's residual entering every
    block of both stacks kept, the cells of one layer run as the rows of one batch from
    that layer's input (an encoder layer's rows then through the whole decoder)."""
    cfg = model.cfg
    enc, dec = model.encoder, model.decoder
    S, T = len(clean), len(target)
    parts = SEQ2SEQ_PATCHED[site]
    layers = {"encoder": cfg.n_layers, "decoder": cfg.n_decoder_layers,
              "cross": cfg.n_decoder_layers}
    wanted = [_patched_name(site, template, layer) for part, template in parts
              for layer in range(layers[part])]
    pres = {stack: [resid_pre_name(layer, stack + ".") for layer in range(layers[stack])]
            for stack in ("encoder", "decoder")}
    source_c, source_x = torch.tensor([list(clean)]), torch.tensor([list(corrupt)])
    tgt = torch.tensor([list(target)])
    with torch.inference_mode():
        with model.record(wanted) as clean_tr:
            m_clean = _metric(model(source_c, target=tgt, head="last"), answer, wrong)
        with model.record(pres["encoder"] + pres["decoder"]) as corrupt_tr:
            m_corrupt = _metric(model(source_x, target=tgt, head="last"), answer, wrong)
        memory = model.encode(source_x)  # CORRUPT's, which every decoder cell reads
        enc_context = model.encoder_context(S)
        dec_context = model.attention_context(T, causal=True, stack=dec)
        rows_per_batch = batch or default_batch(max(S, T))
        tables, runs = {}, 0
        for part, template in parts:
            stack = "encoder" if part == "encoder" else "decoder"
            cells = cfg.n_heads if site == "heads" else S if stack == "encoder" else T
            table = torch.empty(layers[part], cells, dtype=torch.float64)
            for layer in range(layers[part]):
                start = corrupt_tr.raw(pres[stack][layer])  # (S or T, C)
                name = _patched_name(site, template, layer)
                source = clean_tr.raw(name)
                for lo in range(0, cells, rows_per_batch):
                    chosen = torch.arange(lo, min(lo + rows_per_batch, cells))
                    rows = torch.arange(len(chosen))
                    B = len(chosen)
                    x = start.expand(B, *start.shape).clone()
                    edits = []
                    if site == "resid_pre":
                        x[rows, chosen] = source[chosen]
                    else:
                        edits = [(name, _put_cells(source, chosen, rows))]
                    with editing(model, edits):
                        if stack == "encoder":
                            patched = model.run_blocks(x, enc_context, first=layer, stack=enc)
                            logits = model(source_x, target=tgt.expand(B, T), memory=patched,
                                           head="last")
                        else:
                            context = {**dec_context, "memory_keep": None,
                                       "memory": memory.expand(B, *memory.shape[1:])}
                            logits = model.run_blocks(x, context, first=layer, stack=dec,
                                                      head="last")
                    table[layer, lo:lo + B] = _metric(logits, answer, wrong)
                    runs += 1
            tables[part] = table
    return Seq2SeqSweep(tables, float(m_clean[0]), float(m_corrupt[0]), runs)


@dataclass
class _Pair:
    """CLEAN and CORRUPT read for patching: their ids and shown inputs, the decoder's
    sequence (an encoder–decoder's target), the answer and wrong tokens."""

    seq: Seq
    ids: list[int]
    bad_ids: list[int]
    clean_info: InputInfo
    corrupt_info: InputInfo
    good: TokenRef  # --answer
    bad: TokenRef  # --wrong


def _pair(loaded, clean_text: str, corrupt: str, answer: str, wrong: str,
          target: str | None, truncate: bool) -> _Pair:
    """The two texts, which must line up token by token, and two different answers."""
    seq = read_seq(loaded, target=target)
    if loaded.cfg.is_encoder_decoder:
        seq = read_seq(loaded, target=target or "")  # the start token at least
    ids = encode(loaded, clean_text, truncate=truncate)
    bad_ids = encode(loaded, corrupt, truncate=truncate)
    clean_info = seq_info(loaded, clean_text, ids, seq)
    corrupt_info = input_info(loaded, corrupt, bad_ids)
    if len(ids) != len(bad_ids):
        raise InputTextError(
            f"CLEAN and CORRUPT must have the same number of tokens, to be patched position "
            f"by position, but CLEAN is {counted(len(ids), 'token')} {clean_info.tokens} and "
            f"CORRUPT is {counted(len(bad_ids), 'token')} {corrupt_info.tokens}; change "
            "words so the two line up")
    good, bad = one_token(loaded, answer, "--answer"), one_token(loaded, wrong, "--wrong")
    if good.id == bad.id:
        raise InputTextError(f"--answer and --wrong are the same token ({good.token!r}); "
                             "the logit difference would be 0 in every run")
    return _Pair(seq, ids, bad_ids, clean_info, corrupt_info, good, bad)


def _run_sweep(loaded, pair: _Pair, site: str, batch: int | None,
               sae) -> Sweep | Seq2SeqSweep | FeatureSweep:
    """The sweep `site` asks for: over an SAE's features, both stacks of an
    encoder–decoder, or one stack's layers; its numbers checked finite, m_clean and
    m_corrupt apart."""
    ids, bad_ids, good, bad = pair.ids, pair.bad_ids, pair.good.id, pair.bad.id
    cells = loaded.cfg.n_layers * (loaded.cfg.n_heads if site == "heads" else len(ids))
    with after(loaded.progress, f"patching {cells:,} cells") as update:
        if sae is not None:
            from .features import feature_sweep

            done = feature_sweep(loaded.model, sae, ids, bad_ids, good, bad,
                                 batch=batch or default_batch(len(ids)))
        elif pair.seq.target is not None:
            done = sweep_seq2seq(loaded.model, ids, bad_ids, pair.seq.target, good, bad,
                                 site, batch=batch)
        else:
            done = sweep(loaded.model, ids, bad_ids, good, bad, site, batch=batch,
                         update=update)
    finite.require(loaded.model, [done.m_clean, done.m_corrupt], "the logit difference m")
    for name, metric in (done.tables.items() if isinstance(done, Seq2SeqSweep)
                         else [("", done.metric)]):
        finite.require(loaded.model, metric, f"patch.{name + '.' if name else ''}metric")
    if done.m_clean - done.m_corrupt == 0:
        raise InputTextError(
            f"CLEAN and CORRUPT give the same logit difference ({done.m_clean:.6g}), so the "
            "effect (m - m_corrupt) / (m_clean - m_corrupt) is undefined; choose texts whose "
            "answers differ")
    return done


@dataclass
class _Effects:
    """A sweep's numbers as the result shows them: the effect and metric tensors, an
    encoder–decoder's tables, the cell count, the widest row and what was patched."""

    tensors: Trace
    tables: list[PatchTable] | None
    n_cells: int
    widest: int
    patched: str


def _effects(loaded, done: Sweep | Seq2SeqSweep | FeatureSweep, site: str,
             sae) -> _Effects:
    gap = done.m_clean - done.m_corrupt
    cols = "H" if site == "heads" else "T"
    rows = "F" if site == "features" else "L"  # features × positions, or layers × ...
    tr = Trace()
    if isinstance(done, Seq2SeqSweep):
        tables = [PatchTable(part=part, patched=template, cells="heads" if site == "heads"
                             else "source" if part == "encoder" else "target")
                  for part, template in SEQ2SEQ_PATCHED[site]]
        for table in tables:
            metric = done.tables[table.part]
            # + 0.0: no -0.0 where m = m_corrupt
            tr.add(f"patch.{table.part}.effect", (metric - done.m_corrupt) / gap + 0.0,
                   ("L", cols))
            tr.add(f"patch.{table.part}.metric", metric, ("L", cols))
        return _Effects(tr, tables, sum(int(t.numel()) for t in done.tables.values()),
                        max(int(t.shape[1]) for t in done.tables.values()),
                        ", ".join(t.patched for t in tables))
    effect = (done.metric - done.m_corrupt) / gap + 0.0
    tr.add("patch.effect", effect, (rows, cols))
    tr.add("patch.metric", done.metric, (rows, cols))
    patched = f"features.{{k}} at {sae.spec}" if sae is not None else \
        ffn_out_label(loaded.cfg) if site == "ffn_out" else PATCHED[site]
    return _Effects(tr, None, int(effect.numel()),
                    getattr(done, "cells_run", None) or int(effect.shape[1]), patched)


def patch(loaded, clean_text: str, *, corrupt: str, answer: str, wrong: str,
          site: str = "resid_pre", batch: int | None = None,
          truncate: bool = False, target: str | None = None, sae=None) -> PatchResult:
    """`tfx patch`: the sweep over every layer and position (or head) of `site`; an
    encoder–decoder's over both stacks, CLEAN and CORRUPT its sources and `target` the
    decoder's input (its start token alone when None); with site "features", over the
    features of `sae` (a core.features.SAE) × positions."""
    check_site(site, sae is not None)
    if site not in ALL_SITES:
        raise UsageError(f"--site {site!r} is not a patching site; valid: "
                         f"{', '.join(ALL_SITES)}")
    if sae is not None and loaded.cfg.is_encoder_decoder:
        raise UsageError("--site features patches a single-stack model's SAE; an "
                         "encoder–decoder's features are not patched yet: use another --site")
    need_head(loaded.cfg, "patch")
    need_causal(loaded.cfg, "patch")
    check_vocab(loaded)
    pair = _pair(loaded, clean_text, corrupt, answer, wrong, target, truncate)
    if batch is not None and batch < 1:
        raise UsageError(f"--batch {batch} must be at least 1 (cells per forward pass)")
    done = _run_sweep(loaded, pair, site, batch, sae)
    shown = _effects(loaded, done, site, sae)
    ids, bad_ids, seq, good, bad = pair.ids, pair.bad_ids, pair.seq, pair.good, pair.bad
    where = "the target's last position" if seq.target is not None else "the last position"
    return PatchResult(
        model=loaded.info, input=pair.clean_info, tensors=shown.tensors,
        corrupt=pair.corrupt_info, site=site, patched=shown.patched, answer=good,
        wrong=bad, tables=shown.tables,
        metric=f"m = logit({good.token!r}) - logit({bad.token!r}) at {where}",
        m_clean=done.m_clean, m_corrupt=done.m_corrupt,
        effect="(m_patched - m_corrupt) / (m_clean - m_corrupt)",
        differing_positions=[i for i, (a, b) in enumerate(zip(ids, bad_ids)) if a != b],
        n_cells=shown.n_cells,
        batch=min(batch or default_batch(max(len(ids), len(seq.target or ()))),
                  shown.widest),
        batched_runs=done.batched_runs,
        sae=None if sae is None else _sae_info(sae),
        features=getattr(done, "features", None))


def _sae_info(sae):
    from .features import sae_info

    return sae_info(sae)


__all__ = ["PATCH_SITES", "ALL_SITES", "check_site", "patch", "sweep", "Sweep",
           "default_batch", "sweep_seq2seq", "Seq2SeqSweep", "SEQ2SEQ_PATCHED"]
