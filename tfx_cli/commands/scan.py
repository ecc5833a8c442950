"""`tfx scan CORPUS`: attention head statistics, residual norms and FFN activity over a
corpus."""
from ..options import command, need_corpus


@command("dataset", "engine", "display", "plot", "force", "model")
def scan(*, source, output, dataset, engine, display, plot, force, model, encoding) -> None:
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
                      **dataset, **engine, **model)
    plot_to(result, plot, force)
    emit(result, **display)
