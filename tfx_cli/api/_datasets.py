"""The dataset commands as functions: a corpus in, the typed result back.

    from tfx_cli import api

    s = api.scan("python-docs", weights="smollm2", max_docs=200)
    s.tensors["scan.induction"]             # (layers, heads)
    t = api.top("python-docs", site="blocks.3.ffn.act", units="0:8", k=5, weights="smollm2")
    api.collect("corpus.jsonl", select=["blocks.*.resid_out"], output="acts", config="gpt2")
    acts = api.activations("acts")          # acts["blocks.3.resid_out"]: (tokens, 768)
    api.patch(pairs="samples/ioi_pairs.jsonl", site="heads", weights="smollm2")

The corpus (`source`, CORPUS on the command line) is a .txt, .jsonl or .parquet file, a folder of .txt files, or a built-in corpus
(python-docs, repeated-tokens). Keywords are the command-line option names: field,
max_docs, max_tokens, ctx, batch_size, output (-o DIR: resumable), engine ("local" or
"ray", or an engine object), ray_address, workers, gpus_per_worker, verbose, plus the model
options. With engine="ray" a Ray runtime is started for the call (and stopped after) unless
ray_address, RAY_ADDRESS or one this process already holds (ray.init) is there to join. `progress` (a model option) gets a counted bar: the factory is called with
total= and unit= (see core.progress.counting).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UsageError
from ..values import as_path
from ._options import _spec, checked

if TYPE_CHECKING:
    from ..core.datasets.read import Activations
    from ..core.results import CollectResult, PatchPairsResult, ScanResult, TopResult


def _corpus(corpus, field: str, max_docs: int | None):
    from ..core.datasets.corpus import open_corpus

    opened = open_corpus(corpus, field=field, max_docs=max_docs)
    if opened.kind != "repeated-tokens":
        opened.survey()  # bad input is found before a model loads
    return opened


def _loaded(model: dict):
    from ..core.load import load as load_model

    spec, hooks = _spec(model)
    return load_model(spec, **hooks), hooks


def _engine(engine, ray_address=None, workers=None, gpus_per_worker=None, verbose=False):
    """The engine object, its options checked before the corpus is read or a model loads."""
    from ..core.datasets.engines import get_engine

    return get_engine(engine, ray_address=ray_address, workers=workers,
                      gpus_per_worker=gpus_per_worker, verbose=verbose)


def _output(output, option="-o"):
    if output is not None and not str(output).strip():
        from ..errors import UsageError

        raise UsageError(f"{option} is empty; give a folder")
    return output


@checked
def scan(source: str | Path, *, field: str = "text", max_docs: int | None = None,
         max_tokens: int | None = None, ctx: int | None = None, batch_size: int = 8,
         output: str | Path | None = None, engine: str = "local",
         ray_address: str | None = None, workers: int | None = None,
         gpus_per_worker: float | None = None, verbose: bool = False,
         **model: Any) -> ScanResult:
    """Per (layer, head) attention statistics over a corpus (entropy, sink, previous
    token, duplicate token, induction), residual norms and FFN activity per layer."""
    from ..core.datasets import corpus_runs

    engine = _engine(engine, ray_address, workers, gpus_per_worker, verbose)
    opened = _corpus(source, field, max_docs)
    with engine:
        loaded, hooks = _loaded(model)
        return corpus_runs.scan(loaded, opened, ctx=ctx, batch_size=batch_size,
                                 max_tokens=max_tokens, output=_output(output),
                                 force=bool(model.get("force")), engine=engine,
                                 progress=hooks.progress)


@checked
def top(source: str | Path, *, site: str | None = None,
        units: str | Sequence[int] | None = None,
        k: int = 10, around: int = 8, field: str = "text", max_docs: int | None = None,
        max_tokens: int | None = None, ctx: int | None = None, batch_size: int = 8,
        output: str | Path | None = None, html: str | Path | None = None,
        engine: str = "local", ray_address: str | None = None, workers: int | None = None,
        gpus_per_worker: float | None = None, verbose: bool = False, unit_map: Any = None,
        sae: str | Path | None = None, sae_site: str | None = None,
        **model: Any) -> TopResult:
    """The `k` highest activations of each unit of `site` over a corpus, each with its
    document, position and `around` tokens of context either side. `units`: '0,5,9', '0:64' or a
    list of indices (default: every unit). `html`: also write the self-contained page.
    `unit_map`: your own map from the site's rows to unit values (see core.datasets.top).
    `sae`: an SAE folder; the units are then its features, at its site (`sae_site` or
    `site` name the site when the folder does not, as in api.features)."""
    from ..core.datasets import corpus_runs
    from ..errors import UsageError

    if sae is not None and unit_map is not None:
        raise UsageError("sae= and unit_map= both give the units; pass one")
    if sae is not None and not str(sae).strip():
        raise UsageError("--sae is empty; give the SAE's folder")
    if sae is None and sae_site is not None:
        raise UsageError("--sae-site names the site of --sae's SAE, which was not given; add "
                         "--sae DIR")
    corpus_runs.need_site(site, sae)

    if html is not None:
        from ..render.plot import check_output_path

        check_output_path(html, bool(model.get("force")), suffixes=(".html", ".htm"),
                          option="--html")
    engine = _engine(engine, ray_address, workers, gpus_per_worker, verbose)
    opened = _corpus(source, field, max_docs)
    with engine:
        loaded, hooks = _loaded(model)
        result = corpus_runs.top(loaded, opened, site=site, units=units, k=k, context=around,
                                  ctx=ctx, batch_size=batch_size, max_tokens=max_tokens,
                                  output=_output(output), force=bool(model.get("force")),
                                  engine=engine, progress=hooks.progress, unit_map=unit_map,
                                  sae=sae, sae_site=sae_site)
    if html is not None:
        write_top_html(result, html, force=bool(model.get("force")))
    return result


def write_top_html(result: TopResult, path: str | Path, *, force: bool = False) -> int:
    """Write `tfx top`'s page atomically; returns its size in bytes."""
    from ..render.plot import atomic_output
    from ..render.top_page import build_page

    page = build_page(result).encode("utf-8")
    with atomic_output(Path(path), force) as tmp:
        tmp.write_bytes(page)
    result.html = str(path)
    return len(page)


@checked
def collect(source: str | Path, *, select: Sequence[str], output: str | Path,
            shard_tokens: int | None = None, field: str = "text",
            max_docs: int | None = None, max_tokens: int | None = None,
            ctx: int | None = None, batch_size: int = 8, engine: str = "local",
            ray_address: str | None = None, workers: int | None = None,
            gpus_per_worker: float | None = None, verbose: bool = False,
            **model: Any) -> CollectResult:
    """An activation dataset in `output`: safetensors shards (one 2-D tensor per site,
    rows = tokens in corpus order), manifest.json and tokens.parquet. Resumable: the
    same call finishes what a killed one left."""
    from ..core.datasets import corpus_runs
    from ..errors import UsageError

    if output is None:
        raise UsageError("-o DIR is missing: collect writes a folder, e.g. -o acts")
    if isinstance(select, str):
        select = [select]
    engine = _engine(engine, ray_address, workers, gpus_per_worker, verbose)
    opened = _corpus(source, field, max_docs)
    with engine:
        loaded, hooks = _loaded(model)
        return corpus_runs.collect(loaded, opened, select=list(select or ()),
                                    output=_output(output), shard_tokens=shard_tokens, ctx=ctx,
                                    batch_size=batch_size, max_tokens=max_tokens,
                                    force=bool(model.get("force")), engine=engine,
                                    progress=hooks.progress)


@checked(path=as_path)
def activations(path: str | Path) -> Activations:
    """A collect folder as a read-only mapping of site -> numpy array (rows in corpus
    order) and its tokens table: `acts = api.activations("acts");
    acts["blocks.3.resid_out"]`, `list(acts)` (the sites), `acts.tokens()`."""
    from ..core.datasets.read import Activations

    if path is None:
        raise UsageError("api.activations needs the folder tfx collect wrote, e.g. "
                         "api.activations(\"acts\")")
    return Activations(path)


@checked(command="patch")
def patch_pairs(pairs: str | Path, *, site: str = "resid_pre", batch: int | None = None,
                engine: str = "local", ray_address: str | None = None,
                workers: int | None = None, gpus_per_worker: float | None = None,
                verbose: bool = False, **model: Any) -> PatchPairsResult:
    """Activation patching averaged over the prompt pairs of a JSONL file (api.patch
    with pairs=)."""
    from ..core.datasets.pairs import patch_pairs as run_pairs

    engine = _engine(engine, ray_address, workers, gpus_per_worker, verbose)
    with engine:
        loaded, hooks = _loaded(model)
        return run_pairs(loaded, Path(pairs), site=site, batch=batch, engine=engine,
                         progress=hooks.progress)
