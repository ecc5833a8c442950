"""`tfx train-sae COLLECT_DIR --site SITE -o SAE_DIR`: an SAE trained on collected rows."""
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..options import command


# train-sae's own options; train-transcoder takes --batch-size, --seed and --score-tokens
# from here too. The training options both share are the "training" group
# (tfx_cli/option_table.py); these stay here as their names are other options' there.
SiteOpt = Annotated[Optional[str], typer.Option(
    "--site", metavar="SITE", show_default=False,
    help="The collected site to train on, e.g. blocks.15.resid_out.")]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", metavar="SAE_DIR", show_default=False,
    help="The SAE folder to write (a killed run in it is continued).")]
BatchSizeOpt = Annotated[int, typer.Option(
    "--batch-size", metavar="TOKENS", rich_help_panel="Training", help="Tokens per step.")]
SeedOpt = Annotated[int, typer.Option("--seed", rich_help_panel="Training",
                                      help="Initialisation and shuffling.")]
BDecInitOpt = Annotated[str, typer.Option(
    "--b-dec-init", metavar="HOW",
    help="The decoder bias's start: median (geometric), mean or zeros.")]
DeadAfterOpt = Annotated[Optional[int], typer.Option(
    "--dead-after", metavar="TOKENS", show_default=False,
    help="A latent is dead once it has not fired in this many training tokens "
         "(default: an epoch, at most 10M).")]
AuxKOpt = Annotated[Optional[int], typer.Option(
    "--aux-k", metavar="N", show_default=False,
    help="TopK's auxiliary loss: the N most active dead latents model the residual "
         "(default min(512, latents/2); 0 turns it off).")]
AuxCoefOpt = Annotated[float, typer.Option(
    "--aux-coef", metavar="C", help="The auxiliary loss's weight.")]
ScoreTokensOpt = Annotated[Optional[int], typer.Option(
    "--score-tokens", metavar="N", min=0, show_default=False,
    help="The CE-loss score of what was written (eval-sae's: its site or MLP replaced by "
         "the reconstruction) on up to N of the collect folder's last tokens, the model "
         "rebuilt from its manifest (default 4096; train-transcoder's, 4096 shared out "
         "among its layers, at least 512; left out with a note where the folder's model "
         "cannot be rebuilt); 0 skips it.")]


@command("training", "json", "precision", "force")
def train_sae(
    collect: Annotated[Optional[Path], typer.Argument(
        metavar="COLLECT_DIR", show_default=False,
        help="A folder written by tfx collect.")] = None,
    site: SiteOpt = None,
    output: OutputOpt = None,
    batch_size: BatchSizeOpt = 4096,
    seed: SeedOpt = 0,
    b_dec_init: BDecInitOpt = "median",
    dead_after: DeadAfterOpt = None,
    aux_k: AuxKOpt = None,
    aux_coef: AuxCoefOpt = 1 / 32,
    score_tokens: ScoreTokensOpt = None,
    *, training, json, precision, force,
) -> None:
    """Train a sparse autoencoder on a collect folder's site and write it in SAELens's
    format (read back with --sae).

    TopK by default (the K largest pre-activations kept, ReLU'd); --l1 trains a ReLU SAE
    whose loss adds COEF × the sum of its activations. Adam over batches of --batch-size
    tokens shuffled per epoch; the decoder's rows are kept unit vectors; b_dec starts at
    the data's geometric median; inputs are scaled to a mean norm of √d_in while training
    and the scale is folded into the saved weights. The last --holdout of the tokens are
    never trained on: the fraction of variance unexplained, L0 and dead latents are
    measured on them. SAE_DIR gets cfg.json (architecture, d_in, d_sae, k,
    metadata.hook_name) and sae_weights.safetensors; while training it holds a
    checkpoint, so a killed run continues when the same command runs again. At the end
    the model the collect folder was made with is rebuilt from its manifest and the
    SAE's CE-loss score measured on the folder's last windows (--score-tokens; 0 skips).

    JSON: result.fvu, l0, dead, dead_fraction (held-out), ce_loss_score, losses, and
    every option.

    Examples:

      tfx collect python-docs -w smollm2 --select blocks.15.resid_out -o acts --max-tokens 200000

      tfx train-sae acts --site blocks.15.resid_out -o my-sae --k 32 --latents 4096 --epochs 20 --skip-first 1

      tfx top python-docs -w smollm2 --sae my-sae --units 12,40 -k 10
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit, progress, warn

    if collect is None:
        raise UsageError("COLLECT_DIR is missing: tfx train-sae COLLECT_DIR --site SITE -o "
                         "SAE_DIR (a folder written by tfx collect)")
    result = api.train_sae(collect, site=site, output=output, batch_size=batch_size,
                           seed=seed, b_dec_init=b_dec_init, dead_after=dead_after,
                           aux_k=aux_k, aux_coef=aux_coef, score_tokens=score_tokens,
                           force=force, progress=progress, **training)
    emit(result, json=json, precision=precision)
    if result.not_converged:
        warn(result.not_converged)
