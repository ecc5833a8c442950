"""`tfx eval-sae CORPUS --sae DIR`: an SAE judged over a corpus by SAEBench's core scores."""
from ..options import CorpusArg, SaeOpt, SaeSiteOpt, StateDirOpt, command, need_corpus


@command("dataset", "engine", "display", "plot", "force", "model")
def eval_sae(
    source: CorpusArg = None,
    sae: SaeOpt = None,
    sae_site: SaeSiteOpt = None,
    output: StateDirOpt = None,
    *, dataset, engine, display, plot, force, model, encoding,
) -> None:
    """Judge a sparse autoencoder (or transcoder) over a corpus by SAEBench's core
    scores: sparsity, reconstruction, and how much of the model's loss it keeps.

    Over every real token: L0 (features active per token), the fraction of variance
    unexplained FVU = Σ|x − x̂|² / Σ|x − mean x|² (explained variance 1 − FVU) and the mean
    cosine of x and x̂, x the site the SAE reconstructs. The model runs three times per
    batch: clean, with the site set to zeros, and with it set to the reconstruction (no
    error term). CE-loss score = (CE_ablation − CE_replaced) / (CE_ablation − CE_clean),
    KL score = (KL_ablation − KL_replaced) / KL_ablation, KL of the clean next-token
    distribution to the changed one, both over the positions that have a next token.
    Dead features are active on no token, dense ones on more than 10% of them; --plot
    draws the histogram of the features' densities.

    JSON: result.l0, fvu, explained_variance, cosine, ce_clean, ce_ablation, ce_replaced,
    ce_loss_score, kl_ablation, kl_replaced, kl_score, dead, dense; tensor eval.density (F).

    Examples:

      tfx eval-sae python-docs -w smollm2 --sae my-sae --max-tokens 20000

      tfx eval-sae corpus.jsonl -c gpt2 --sae my-sae --json | jq .result.ce_loss_score

      tfx eval-sae python-docs -w smollm2 --sae my-sae --plot density.png
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to
    from ..render import plot_eval  # noqa: F401  registers the density histogram

    check_plot(plot, force)
    if sae is None:
        raise UsageError("--sae is missing; tfx eval-sae CORPUS --sae DIR (an SAE or "
                         "transcoder folder, e.g. one tfx train-sae wrote)")
    result = api.eval_sae(need_corpus(source), sae=sae, sae_site=sae_site, output=output,
                          **dataset, **engine, **model)
    plot_to(result, plot, force)
    emit(result, **display)
