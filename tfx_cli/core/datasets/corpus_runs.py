"""The corpus commands' runs, end to end: `scan`, `top` and `collect` check their
options, open the output folder (resuming what it holds), run the pipeline and build the
typed result. patch --pairs runs in pairs.py, refusing an encoder–decoder with
`single_stack` from here."""
from __future__ import annotations

import json
from pathlib import Path
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

from ...errors import UsageError
from ..trace import Trace
from .collect import (CHUNK_BYTES, CollectTask, ShardWriter, default_shard_tokens,
                      shard_name, write_tokens_table)
from .corpus import Corpus, repeated_vocab
from .engines import Engine, engine_name
from .pipeline import Counts, Plan, corpus_windows, make_plan, run
from .scan import METRICS, ScanPartial, ScanTask, summary
from ..outputs import sha256_files
from .store import OutputDir, sha256_file
from .tasks import check_sites, parse_units, row_sites
from .top import Heaps, SAEUnits, SliceUnits, TopTask



def need_site(site: str | None, sae) -> None:
    """top reads the units of --site, or of --sae's SAE at its own site: one of them."""
    if site is None and sae is None:
        raise UsageError("--site is missing; name a site such as --site blocks.0.ffn.act "
                         "(or give --sae DIR: its features at its site)")

def single_stack(cfg, what: str) -> None:
    """A corpus is read as windows of one stream: refuse an encoder–decoder, by name."""
    if cfg.is_encoder_decoder:
        raise UsageError(f"{what} reads a corpus through single-stack models (one residual "
                         f"stream per window); {cfg.name} is an encoder–decoder: use a "
                         "decoder-only or encoder-only model, e.g. --config gpt2 or -w smollm2")


def prepare(loaded, corpus: Corpus, command: str) -> Corpus:
    single_stack(loaded.cfg, f"tfx {command}")
    if corpus.kind == "repeated-tokens":
        corpus.vocab = repeated_vocab(loaded.tokenizer, loaded.cfg.vocab_size)
    return corpus.survey() if not corpus.sha256 else corpus


# the spec fields collect records (core.spec.ModelSpec's, less what changes no number)
SPEC_KEYS = ("config", "weights", "seed", "heads", "layers", "d_model", "context",
             "tokenizer", "corpus", "dtype", "device")


def recorded_spec(spec) -> dict:
    """What collect writes into its manifest as `model_spec`."""
    out = {key: getattr(spec, key) for key in SPEC_KEYS}
    for key in ("tokenizer", "corpus"):  # a path given relative to where collect ran
        if out[key] is not None and Path(str(out[key])).expanduser().exists():
            out[key] = str(Path(str(out[key])).expanduser().resolve())
    return out


def _identity(loaded, corpus: Corpus, options: dict) -> dict:
    from ..results import to_json

    return {"model": to_json(loaded.info), "corpus": corpus.describe(), "options": options}


def _common(loaded, corpus: Corpus, plan: Plan, seen: Counts, engine: str | Engine,
            output) -> dict:
    return dict(model=loaded.info, corpus=corpus.describe(), documents=seen.documents,
                windows=seen.windows, tokens=seen.tokens, ctx=plan.ctx,
                batch_size=plan.batch_size, engine=engine_name(engine),
                output=None if output is None else str(output))


class Checkpoints:
    """scan and top with -o DIR: the reduction so far in DIR/state.npz after every
    chunk (with how many chunks it covers), the result in DIR/result.json at the end."""

    def __init__(self, out: OutputDir | None, load):
        self.out, self.chunks = out, 0
        self.state = None
        if out is not None and out.manifest is not None and (out.path / "state.npz").exists():
            with np.load(out.path / "state.npz") as saved:
                self.state = load(saved)
                self.chunks = int(saved["chunks_done"])
        if out is not None and out.manifest is None:
            out.write_manifest(complete=False)

    def save(self, chunks_done: int) -> None:
        self.chunks = chunks_done
        if self.out is None:
            return
        with self.out.atomic("state.npz") as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, chunks_done=np.int64(chunks_done), **self.state.arrays())

    def finish(self, result) -> None:
        if self.out is None:
            return
        doc = json.dumps(result.to_dict(), ensure_ascii=False, allow_nan=False)
        self.out.write_bytes("result.json", (doc + "\n").encode("utf-8"))
        self.out.write_manifest(complete=True, chunks=self.chunks, files=["result.json"])


@contextmanager
def _run_reduced(loaded, corpus, plan, task, empty, load, *, output, force, kind,
                 options, engine: str | Engine, progress):
    """Yields (checkpoints, counts) of the run, DIR held until the block ends (the caller
    finishes the result in it)."""
    out = None if output is None else OutputDir(output, kind, _identity(loaded, corpus, {
        **plan.options(), **options}), force=force)
    with out if out is not None else nullcontext():
        cp = Checkpoints(out, load)
        if cp.state is None:
            cp.state = empty()
        done_before = cp.chunks

        def chunk_done(c, chunk):
            cp.save(c + 1)

        seen = run(loaded, corpus, plan, task, take=lambda b, p: cp.state.merge(p),
                   skip=lambda c, chunk: c < done_before, chunk_done=chunk_done,
                   engine=engine, progress=progress, what=f"tfx {kind}")
        yield cp, seen


# -- scan ---------------------------------------------------------------------------------
def scan(loaded, corpus: Corpus, *, ctx=None, batch_size=8, max_tokens=None, output=None,
         force=False, engine: str | Engine = "local", progress=None):
    from ..results import ScanResult

    corpus = prepare(loaded, corpus, "scan")
    cfg = loaded.cfg
    plan = make_plan(cfg, ctx=ctx, batch_size=batch_size, max_tokens=max_tokens)
    with _run_reduced(
            loaded, corpus, plan, ScanTask(),
            lambda: ScanPartial.empty(cfg.n_layers, cfg.n_heads, cfg.d_ff),
            ScanPartial.from_arrays, output=output, force=force, kind="scan", options={},
            engine=engine, progress=progress) as (cp, seen):
        s = summary(cp.state)
        tr = Trace()
        # a metric no query qualified for (no token repeats: duplicate_token, induction)
        # has no mean: it is left out, never a NaN; `queries` shows its 0
        measured = [metric for metric, n in zip(METRICS, cp.state.counts) if n]
        for m, metric in enumerate(METRICS):
            if metric in measured:
                tr.add(f"scan.{metric}", s["means"][m], ("L", "H"))
        tr.add("scan.resid_norm_mean", s["resid_mean"], ("L",))
        tr.add("scan.resid_norm_max", s["resid_max"], ("L",))
        tr.add("scan.ffn_active", s["active"], ("L", "F"))
        result = ScanResult(
            **_common(loaded, corpus, plan, seen, engine, output), metrics=measured,
            queries={metric: int(n) for metric, n in zip(METRICS, cp.state.counts)},
            strongest=s["strongest"], dead_neurons=s["dead"], ffn_width=cfg.d_ff, tensors=tr)
        cp.finish(result)
    return result


MAX_EXAMPLES = 100_000  # -k: past it the heaps of every unit would not fit in memory


# -- top ----------------------------------------------------------------------------------
def top(loaded, corpus: Corpus, *, site: str | None = None, units=None, k=10, context=8,
        ctx=None, batch_size=8, max_tokens=None, output=None, force=False,
        engine: str | Engine = "local", progress=None, unit_map=None, sae=None, sae_site=None):
    """`unit_map`: a map from the site's rows to unit values (default: SliceUnits of
    `units`); its `labels` name the units in the result. `sae`: an SAE folder whose
    features are the units (at its site, or `sae_site`/`site`)."""
    from ..results import TopResult

    if not 1 <= k <= MAX_EXAMPLES:
        raise UsageError(f"-k {k} must be between 1 and {MAX_EXAMPLES:,} (examples per unit)")
    if not 0 <= context <= loaded.cfg.context_length:
        raise UsageError(f"--around {context} must be between 0 and the model's context "
                         f"({loaded.cfg.context_length} tokens): no window holds more")
    if unit_map is not None and not (callable(unit_map) and hasattr(unit_map, "labels")):
        raise UsageError(f"unit_map must be a callable with .labels (as "
                         f"core.datasets.top.SliceUnits), not {type(unit_map).__name__} "
                         f"{unit_map!r:.40}")
    info = None
    if sae is not None:
        name, dims, unit_map, info = _sae_units(loaded, sae, sae_site, site, units)
    else:
        need_site(site, sae)
        sites = row_sites(loaded.model)
        name = check_sites(loaded.model, [site], "--site")
        if len(name) != 1:
            raise UsageError(f"--site {site!r} names {len(name)} sites ({', '.join(name[:4])}"
                             f"{' ...' if len(name) > 4 else ''}); name one")
        name = name[0]
        dims, width = sites[name]
        unit_map = unit_map or SliceUnits(parse_units(units, width))
    corpus = prepare(loaded, corpus, "top")
    plan = make_plan(loaded.cfg, ctx=ctx, batch_size=batch_size, max_tokens=max_tokens)
    labels = list(unit_map.labels)
    options = {"site": name, "units": labels, "k": k, "context": context}
    if info is not None:  # which SAE, by its path and by the content of its files
        options["sae"] = info.path
        options["sae_sha256"] = sha256_files(unit_map.sae.file.files)
    with _run_reduced(
            loaded, corpus, plan, TopTask(name, dims, unit_map, k, context),
            lambda: Heaps.empty(len(labels), k, context), Heaps.from_arrays, output=output,
            force=force, kind="top", options=options, engine=engine,
            progress=progress) as (cp, seen):
        result = TopResult(**_common(loaded, corpus, plan, seen, engine, output), site=name,
                           k=k, context=context, units=_top_units(loaded, cp.state, labels),
                           sae=info)
        cp.finish(result)
    return result


def _sae_units(loaded, sae, sae_site, site, units):
    """--sae: the SAE opened on the model (its site, or --sae-site / --site naming it) and
    its features `units` as the unit map."""
    from ..analysis.feature_sites import open_sae
    from ..analysis.features import sae_info

    if sae_site is not None and site is not None and sae_site.strip() != site.strip():
        raise UsageError(f"--site {site!r} and --sae-site {sae_site!r} disagree; with --sae "
                         "both name the SAE's site: give one")
    opened = open_sae(loaded, sae, sae_site if sae_site is not None else site)
    unit_map = SAEUnits(opened, parse_units(units, opened.d_sae, "--units",
                                                   "the SAE has", "features"))
    return opened.site, tuple(opened.dims), unit_map, sae_info(opened)


def _top_units(loaded, heaps: Heaps, labels) -> list:
    from ..results import TopContext, TopExample, TopUnit

    pieces = loaded.tokenizer.pieces
    units = []
    for u, label in enumerate(labels):
        examples = []
        for j in range(heaps.values.shape[1]):
            if heaps.doc[u, j] < 0:
                continue
            ids = heaps.ctx_ids[u, j]
            inside = ids >= 0
            shown = [int(i) for i in ids[inside]]
            values = [float(v) for v in heaps.ctx_values[u, j][inside]]
            C = len(ids) // 2
            at = int(inside[:C].sum())
            tokens = pieces(shown)
            examples.append(TopExample(value=float(heaps.values[u, j]), doc=int(heaps.doc[u, j]),
                                       position=int(heaps.position[u, j]), token=tokens[at],
                                       context=TopContext(tokens, values, at)))
        units.append(TopUnit(int(label), examples))
    return units


# -- collect ------------------------------------------------------------------------------
STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def collect(loaded, corpus: Corpus, *, select, output, shard_tokens=None, ctx=None,
            batch_size=8, max_tokens=None, force=False, engine: str | Engine = "local",
            progress=None):
    if not select:
        raise UsageError("--select is missing; name the sites to collect, e.g. --select "
                         "'blocks.*.resid_out'")
    names = check_sites(loaded.model, list(select), "--select")
    if shard_tokens is not None and not 1 <= shard_tokens <= 2**40:
        raise UsageError(f"--shard-tokens {shard_tokens} must be between 1 and 2**40")
    corpus = prepare(loaded, corpus, "collect")
    sites = row_sites(loaded.model)
    dtype_name = loaded.spec.dtype
    dtype = STORE_DTYPES[dtype_name]
    widths = {n: sites[n][1] for n in names}
    row_bytes = sum(widths.values()) * dtype.itemsize
    shard_tokens = shard_tokens or default_shard_tokens(row_bytes)
    plan = make_plan(loaded.cfg, ctx=ctx, batch_size=batch_size, max_tokens=max_tokens,
                     chunk_tokens=max(1, CHUNK_BYTES // max(row_bytes, 1)))
    options = {**plan.options(), "select": names, "dtype": dtype_name,
               "shard_tokens": shard_tokens}
    with OutputDir(output, "activations", _identity(loaded, corpus, options),
                   force=force) as out:
        return _write_shards(loaded, corpus, plan, out, names, sites, shard_tokens,
                             engine=engine, progress=progress, output=output)


def _write_shards(loaded, corpus, plan, out: OutputDir, names, sites, shard_tokens, *,
                  engine: str | Engine, progress, output):
    """collect's run into DIR (held): the shards a previous run finished kept, the rest
    written in corpus order, each listed in the manifest with its sha256 as it lands;
    `complete` only once every shard listed is checked on disk against its sha256."""
    from safetensors.torch import save

    from ..results import CollectResult, ShardInfo, SiteInfo

    dtype_name = loaded.spec.dtype
    dtype = STORE_DTYPES[dtype_name]
    widths = {n: sites[n][1] for n in names}
    site_info = lambda tokens: [
        {"name": n, "dims": list(sites[n][0]), "shape": [tokens, widths[n]],
         "dtype": SAFETENSORS_DTYPE[dtype_name]} for n in names]
    shards = _complete_shards(out)
    resumed = len(shards)
    # how the model was built, so that train-sae and train-transcoder can rebuild it for
    # the CE-loss score of what they train
    state = {"shards": shards, "sites": site_info(None), "complete": False,
             "model_spec": recorded_spec(loaded.spec)}
    out.write_manifest(**state)

    def write(i: int, tensors: dict) -> None:
        data = save({n: tensors[n].contiguous() for n in names},
                    metadata={"first_token": str(i * shard_tokens)})
        sha = out.write_bytes(shard_name(i), data)
        rows = next(iter(tensors.values())).shape[0]
        shards.append({"file": shard_name(i), "first_token": i * shard_tokens,
                       "tokens": int(rows), "sha256": sha, "complete": True})
        shards.sort(key=lambda s: s["first_token"])
        out.write_manifest(**state)

    writer = ShardWriter(widths, dtype, shard_tokens, resumed, write)
    skip_below = resumed * shard_tokens
    seen = run(loaded, corpus, plan, CollectTask(tuple(names), tuple(sites[n][0] for n in names)),
               take=lambda b, rows: writer.put(rows),
               skip=lambda c, chunk: chunk[-1].first + len(chunk[-1]) <= skip_below,
               engine=engine, progress=progress, what="tfx collect")
    writer.finish(seen.tokens)
    with out.atomic("tokens.parquet") as tmp:
        write_tokens_table(tmp, _token_rows(loaded, corpus, plan), shard_tokens)
    out.verify(shards)
    state.update(sites=site_info(seen.tokens), complete=True, tokens=seen.tokens,
                 documents=seen.documents, windows=seen.windows,
                 tokens_file="tokens.parquet",
                 tokens_sha256=sha256_file(out.path / "tokens.parquet"))
    out.write_manifest(**state)
    return CollectResult(
        **_common(loaded, corpus, plan, seen, engine, output),
        sites=[SiteInfo(**s) for s in state["sites"]], dtype=dtype_name,
        shard_tokens=shard_tokens,
        shards=[ShardInfo(s["file"], s["first_token"], s["tokens"], s["sha256"])
                for s in shards], resumed_shards=resumed, manifest=str(out.path / "manifest.json"))


def _complete_shards(out: OutputDir) -> list[dict]:
    """The shards a previous run finished, as long as each is on disk with its checksum
    (the first one that is not ends the list: it and the rest are written again)."""
    if out.manifest is None:
        return []
    kept = []
    for i, shard in enumerate(out.manifest.get("shards", [])):
        path = out.path / shard["file"]
        if shard["file"] != shard_name(i) or not shard.get("complete") or not path.exists() \
                or sha256_file(path) != shard["sha256"]:
            break
        kept.append(shard)
    return kept


def _token_rows(loaded, corpus, plan):
    pieces = loaded.tokenizer.pieces
    for window in corpus_windows(loaded, corpus, plan):
        ids = [int(i) for i in window.ids]
        for offset, (i, piece) in enumerate(zip(ids, pieces(ids))):
            yield window.doc, window.start + offset, i, piece


__all__ = ["scan", "top", "collect", "prepare"]
