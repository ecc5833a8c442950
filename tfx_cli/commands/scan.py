"""`tfx scan CORPUS`: attention head statistics, residual norms and FFN activity over a
corpus."""
from ..options import (BatchSizeOpt, CorpusArg, CtxOpt, EngineOpt, FieldOpt, ForceOpt,
                       FullOpt, GpusPerWorkerOpt, JsonOpt, MaxDocsOpt, MaxTokensOpt,
                       PlotOpt, PrecisionOpt, RayAddressOpt, StateDirOpt, VerboseOpt,
                       WorkersOpt, corpus_options, engine_options, model_command, need_corpus)


@model_command
def scan(
    source: CorpusArg = None,
    field: FieldOpt = "text",
    max_docs: MaxDocsOpt = None,
    max_tokens: MaxTokensOpt = None,
    ctx: CtxOpt = None,
    batch_size: BatchSizeOpt = 8,
    output: StateDirOpt = None,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    gpus_per_worker: GpusPerWorkerOpt = None,
    verbose: VerboseOpt = False,
    json_out: JsonOpt = False,
    precision: PrecisionOpt = 3,
    full: FullOpt = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
    *,
    model,
    encoding,
) -> None:
    """Attention head statistics, residual norms and FFN activity over a corpus.

    Per layer and head, averaged over every qualifying query of every window: entropy
    (−Σ A ln A), sink (weight on the first token), prev_token (on the token before),
    duplicate_token (on earlier copies of the query's token) and induction (on the token
    after an earlier copy). Per layer: the residual stream's mean and largest norm, and how
    many FFN neurons are never active (act > 0). Documents never attend to each other.

    JSON: tensors scan.<metric> (L, H), scan.resid_norm_mean, scan.resid_norm_max (L),
    scan.ffn_active (L, F); result.strongest lists the 5 strongest heads of each kind.

    Examples:

      tfx scan python-docs -w smollm2 --max-docs 200

      tfx scan repeated-tokens -w smollm2 --json | jq '.result.strongest.induction'

      tfx scan corpus.jsonl --field text -c gpt2 -o scan-run --plot heads.png
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    result = api.scan(need_corpus(source), output=output,
                      **corpus_options(field, max_docs, max_tokens, ctx, batch_size, engine),
                      **engine_options(ray_address, workers, gpus_per_worker, verbose),
                      **model)
    plot_to(result, plot, force)
    emit(result, json=json_out, precision=precision, full=full)
