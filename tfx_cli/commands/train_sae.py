"""`tfx train-sae COLLECT_DIR --site SITE -o SAE_DIR`: an SAE trained on collected rows."""
from ..options import command


@command("training", "json", "precision", "force")
def train_sae(*, collect, site, output, batch_size, seed, b_dec_init, dead_after, aux_k,
              aux_coef, score_tokens, training, json, precision, force) -> None:
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
