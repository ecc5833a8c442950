"""`tfx eval-sae CORPUS --sae DIR`: an SAE judged over a corpus by SAEBench's core scores;
`--transcoders DIR`: a whole transcoder set, every MLP replaced at once."""
from typing import Annotated, Optional

import typer

from ..options import command, need_corpus

# This command's own option, declared once here.
EvalTranscodersOpt = Annotated[Optional[str], typer.Option(
    "--transcoders", metavar="DIR", show_default=False, rich_help_panel="Features",
    help="Judge a whole transcoder set in circuit-tracer's layout instead of --sae: every "
    "MLP replaced by its transcoder at once.")]


@command("dataset", "engine", "display", "plot", "force", "model")
def eval_sae(
    *, source, sae,
    transcoders: EvalTranscodersOpt = None,
    sae_site, output, dataset, engine, display, plot, force, model, encoding,
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

    --transcoders DIR judges a whole transcoder set (circuit-tracer's layout): every
    block's MLP output zeroed for the ablation, replaced by its transcoder's
    reconstruction for the replaced run (each reading its input in that run: errors
    compound up the layers). Per layer (result.layers), on the clean run: L0, FVU of the
    MLP output, cosine, dead, dense; the set's l0 is their mean, its fvu pooled over
    the layers; eval.density is (L, F).

    JSON: result.l0, fvu, explained_variance, cosine, ce_clean, ce_ablation, ce_replaced,
    ce_loss_score, kl_ablation, kl_replaced, kl_score, dead, dense; tensor eval.density (F).

    Examples:

      tfx eval-sae python-docs -w smollm2 --sae my-sae --max-tokens 20000

      tfx eval-sae corpus.jsonl -c gpt2 --sae my-sae --json | jq .result.ce_loss_score

      tfx eval-sae python-docs -w smollm2 --sae my-sae --plot density.png

      tfx eval-sae python-docs -w smollm2 --transcoders my-set --max-tokens 2000
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to
    from ..render import plot_eval  # noqa: F401  registers the density histogram

    check_plot(plot, force)
    result = api.eval_sae(need_corpus(source), sae=sae, transcoders=transcoders,
                          sae_site=sae_site, output=output, **dataset, **engine, **model)
    plot_to(result, plot, force)
    emit(result, **display)
