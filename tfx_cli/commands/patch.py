"""`tfx patch CLEAN --corrupt CORRUPT --answer A --wrong W`: activation patching."""
from ..options import command, read_text


@command("engine", "truncate", "target", "ablations", "display", "plot", "force", "model")
def patch(*, clean, corrupt, answer, wrong, site, batch, pairs, engine, truncate, target,
          ablations, display, plot, force, model, encoding) -> None:
    """Activation patching: run CORRUPT, put in CLEAN's activation at one cell, and see
    how much of CLEAN's answer comes back.

    The metric is m = logit(--answer) − logit(--wrong) at the last position; each cell's
    effect is (m_patched − m_corrupt) / (m_clean − m_corrupt): 1 means that cell alone
    restores CLEAN's answer, 0 that it changes nothing. The table is layers × positions
    (× heads for --site heads), shaded, with CLEAN's tokens on the columns (* where CORRUPT
    differs). CLEAN and CORRUPT must have the same number of tokens, and --answer and
    --wrong must each be one token.

    CLEAN's activations are recorded once; each cell at layer l starts from CORRUPT's
    residual entering block l, and the cells of one layer run together as one batch.

    On an encoder–decoder CLEAN and CORRUPT are sources, the answer is the token after
    --target, and the sweep covers both stacks: the encoder's layers × source positions,
    the decoder's layers × target positions and, for attn_out and heads, the decoder's
    cross-attention (patch.encoder.effect, patch.decoder.effect, patch.cross.effect).

    JSON: tensors patch.effect (L, T) or (L, H) and patch.metric (m per cell);
    result.m_clean, m_corrupt, answer, wrong, site and differing_positions.

    Examples:

      tfx patch "The capital of France is" --corrupt "The capital of Italy is" --answer " Paris" --wrong " Rome" -w smollm2

      tfx patch "When Mary and John went to the store, John gave a drink to" --corrupt "When Mary and John went to the store, Mary gave a drink to" --answer " Mary" --wrong " John" --site heads --plot heads.png

      tfx patch "When you play game of thrones" --corrupt "When you play game of swords" --target "you win or you" --answer die --wrong win -c toy

      tfx patch --pairs samples/ioi_pairs.jsonl --site heads -w smollm2

    With --pairs, each cell's effect is averaged over the pairs (patch.effect, and its
    standard deviation patch.effect_std), the pairs batched together; --engine ray runs
    the batches of pairs on Ray workers (see tfx scan).
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    texts = dict(clean=clean, corrupt=corrupt, answer=answer, wrong=wrong)
    if pairs is None:  # one pair, from the command line
        texts = _one_pair(encoding=encoding, **texts)
    result = api.patch(pairs=pairs, site=site, batch=batch, truncate=truncate,
                       target=target, **texts, **ablations, **engine, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)


def _one_pair(clean, corrupt, answer, wrong, encoding) -> dict:
    """CLEAN (or stdin) and the options that make its pair; each is needed."""
    from ..errors import UsageError

    for option, value in (("--corrupt", corrupt), ("--answer", answer), ("--wrong", wrong)):
        if value is None:
            raise UsageError(f"{option} is missing; tfx patch CLEAN --corrupt TEXT --answer "
                             "TOKEN --wrong TOKEN")
    return dict(clean=read_text(clean, encoding=encoding, what="CLEAN text"),
                corrupt=read_text(corrupt, what="--corrupt text"), answer=answer,
                wrong=wrong)
