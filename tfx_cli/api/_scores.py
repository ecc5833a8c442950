"""The CE-loss score train-sae and train-transcoder add to their results: the collect
folder's model rebuilt from its manifest, eval-sae's definitions on its last windows
(core/datasets/train_score.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import RangeError, UsageError


@dataclass
class Scoring:
    spec: object | None  # the ModelSpec that rebuilds the folder's model; None: no score
    tokens: int  # at most this many of the folder's last tokens
    why_not: str | None = None  # the score left out by default, and why
    asked: bool = False  # --score-tokens given: a folder that cannot be scored is refused


def scoring(acts, score_tokens) -> Scoring:
    """Checked before anything is trained: with --score-tokens N a folder whose model cannot
    be rebuilt is refused by name; by default (None: DEFAULT_SCORE_TOKENS) the score is
    left out, and the result says why; 0 skips it."""
    from ..core.datasets.train_score import DEFAULT_SCORE_TOKENS, model_spec

    asked = score_tokens is not None
    if asked and (isinstance(score_tokens, bool) or not isinstance(score_tokens, int)
                  or score_tokens < 0):
        raise RangeError(f"--score-tokens {score_tokens!r} must be a whole number of tokens, "
                         "0 or more (0 skips the CE-loss score)")
    tokens = DEFAULT_SCORE_TOKENS if score_tokens is None else score_tokens
    if not tokens:
        return Scoring(None, 0)
    try:
        if not (acts.path / "tokens.parquet").is_file():
            raise UsageError(f"{acts.path} has no tokens.parquet, so the CE-loss score has no "
                             "tokens to run; collect the corpus again with tfx collect, or "
                             "pass --score-tokens 0")
        return Scoring(model_spec(acts.manifest, acts.path), tokens, asked=asked)
    except UsageError as exc:
        if asked:
            raise
        return Scoring(None, 0, why_not=exc.message)


def _ctx(acts) -> int:
    """The window length collect read with (the score's batches are formed as a corpus
    run with it would form them)."""
    return int(acts.manifest["options"]["ctx"])


def _model_and_windows(result, acts, scored: Scoring, holdout: float, skip_first: int,
                       progress):
    """The rebuilt model and the windows to score; (None, None) where the score is left
    out (result.score_note says why)."""
    from ..core.datasets.train_score import check_rebuilt, score_windows
    from ..core.features.training import split
    from ..core.load import load

    if scored.spec is None:
        result.score_note = scored.why_not
        return None, None
    keep, n_train, _ = split(acts, holdout, skip_first)
    first_held = int(keep[n_train]) if keep is not None else n_train
    try:
        loaded = load(scored.spec, progress=progress)
        check_rebuilt(loaded, acts.manifest, acts.path)
    except UsageError as exc:
        if scored.asked:
            raise
        result.score_note = exc.message
        return None, None
    return loaded, score_windows(acts, first_held, scored.tokens)


def score_sae(result, acts, scored: Scoring, *, holdout: float, skip_first: int,
              progress=None) -> None:
    """result.ce_loss_score (and score_tokens): the SAE train-sae wrote, its site replaced."""
    from ..core.datasets.train_score import score_sae as run

    loaded, windows = _model_and_windows(result, acts, scored, holdout, skip_first, progress)
    if loaded is None:
        return
    got = run(loaded, windows, result.output, _ctx(acts))
    result.ce_loss_score, result.score_tokens = got["ce_loss_score"], got["tokens"]
    result.ce_ablation_delta, result.ce_loss_score_noisy = got["ce_ablation_delta"], \
        got["noisy"]


def score_transcoders(result, acts, scored: Scoring, *, holdout: float, skip_first: int,
                      progress=None) -> None:
    """Each layer's ce_loss_score (its MLP alone replaced) and, once the whole set exists,
    the set's (every MLP replaced at once)."""
    from ..core.circuits.transcoders import read_layer, read_transcoders
    from ..core.datasets.train_score import default_score_tokens, score_layers, score_set

    if scored.spec is not None and not scored.asked:  # the default: shared among layers
        scored = replace(scored, tokens=default_score_tokens(len(result.layers)))
    loaded, windows = _model_and_windows(result, acts, scored, holdout, skip_first, progress)
    if loaded is None:
        return
    d_model, ctx = loaded.cfg.d_model, _ctx(acts)
    sets = [read_layer(result.output, row.layer, input_hook=result.feature_input_hook,
                       d_model=d_model) for row in result.layers]
    scores, tokens = score_layers(loaded, windows, sets, [row.layer for row in result.layers],
                                  ctx)
    for row, got in zip(result.layers, scores):
        row.ce_loss_score, row.ce_ablation_delta = got["ce_loss_score"], got["ce_ablation_delta"]
        row.ce_loss_score_noisy = got["noisy"]
    if result.config is not None:
        tc = read_transcoders(result.output, n_layers=loaded.cfg.n_layers, d_model=d_model)
        got = score_set(loaded, windows, tc, ctx)
        result.ce_loss_score, tokens = got["ce_loss_score"], got["tokens"]
    result.score_tokens = tokens
