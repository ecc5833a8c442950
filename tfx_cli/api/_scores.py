"""The CE-loss score train-sae and train-transcoder add to their results: the collect
folder's model rebuilt from its manifest, eval-sae's definitions on its last windows
(core/datasets/train_score.py)."""
from __future__ import annotations

from ..errors import RangeError


def check_score_tokens(score_tokens) -> int:
    if isinstance(score_tokens, bool) or not isinstance(score_tokens, int) or score_tokens < 0:
        raise RangeError(f"--score-tokens {score_tokens!r} must be a whole number of tokens, "
                         "0 or more (0 skips the CE-loss score)")
    return score_tokens


def scoring(acts, score_tokens: int):
    """The spec that rebuilds the folder's model (checked before anything is trained), or
    None with --score-tokens 0."""
    from ..core.datasets.train_score import model_spec

    if not check_score_tokens(score_tokens):
        return None
    return model_spec(acts.manifest, acts.path)


def _ctx(acts) -> int:
    """The window length collect read with (the score's batches are formed as a corpus
    run with it would form them)."""
    return int(acts.manifest["options"]["ctx"])


def _model_and_windows(acts, spec, holdout: float, skip_first: int, score_tokens: int,
                       progress):
    from ..core.datasets.train_score import check_rebuilt, score_windows
    from ..core.features.training import split
    from ..core.load import load

    keep, n_train, _ = split(acts, holdout, skip_first)
    first_held = int(keep[n_train]) if keep is not None else n_train
    loaded = load(spec, progress=progress)
    check_rebuilt(loaded, acts.manifest, acts.path)
    return loaded, score_windows(acts, first_held, score_tokens)


def score_sae(result, acts, spec, *, holdout: float, skip_first: int, score_tokens: int,
              progress=None) -> None:
    """result.ce_loss_score (and score_tokens): the SAE train-sae wrote, its site replaced."""
    from ..core.datasets.train_score import score_sae as run

    loaded, windows = _model_and_windows(acts, spec, holdout, skip_first, score_tokens,
                                         progress)
    got = run(loaded, windows, result.output, _ctx(acts))
    result.ce_loss_score, result.score_tokens = got["ce_loss_score"], got["tokens"]


def score_transcoders(result, acts, spec, *, holdout: float, skip_first: int,
                      score_tokens: int, progress=None) -> None:
    """Each layer's ce_loss_score (its MLP alone replaced) and, once the whole set exists,
    the set's (every MLP replaced at once)."""
    from ..core.circuits.transcoders import read_layer, read_transcoders
    from ..core.datasets.train_score import score_set

    loaded, windows = _model_and_windows(acts, spec, holdout, skip_first, score_tokens,
                                         progress)
    d_model = loaded.cfg.d_model
    tokens = 0
    for row in result.layers:
        one = read_layer(result.output, row.layer, input_hook=result.feature_input_hook,
                         d_model=d_model)
        got = score_set(loaded, windows, one, _ctx(acts), blocks=(row.layer,))
        row.ce_loss_score, tokens = got["ce_loss_score"], got["tokens"]
    if result.config is not None:
        tc = read_transcoders(result.output, n_layers=loaded.cfg.n_layers, d_model=d_model)
        got = score_set(loaded, windows, tc, _ctx(acts))
        result.ce_loss_score, tokens = got["ce_loss_score"], got["tokens"]
    result.score_tokens = tokens
