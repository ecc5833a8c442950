"""train-sae and train-transcoder end to end (`train_sae`, `train_transcoder`: the
collect folder checked, the features layer's trainer run, the note on unfinished
training) and the CE-loss score they add for what they wrote: eval-sae's definitions
(evaluate.py, evaluate_set.py), on the collect folder's own last windows.

The collect folder's manifest names the model that made it (`model_spec`: the options it
was built from; `model`: every config field it had) and tokens.parquet holds the token
windows it read. The model is rebuilt from the spec (a folder collected before the spec
was recorded: from the preset or checkpoint and the sizes its config records) and refused
by name unless its config is the manifest's field for field. The windows scored are the ones holding the held-out
tokens (the last of the folder), whole, counted from the end up to `score_tokens` tokens
(the last window cut to its first tokens when it alone is longer): a window's first
positions can be training tokens, the context the held-out ones were collected with."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ...errors import RangeError, UsageError
from .corpus_runs import SPEC_KEYS, recorded_spec  # noqa: F401  (collect writes it)
from .evaluate import NOISY_BELOW, ablation_delta  # noqa: F401  (the score's flag)
from .windows import Window, batches, chunks

DEFAULT_SCORE_TOKENS = 4096
# train-transcoder's default shares DEFAULT_SCORE_TOKENS out among the layers it scores
# (each costs about one more pass over the tokens), down to this floor
LEAST_LAYER_TOKENS = 512


def default_score_tokens(layers: int) -> int:
    """train-transcoder's --score-tokens when none is given: DEFAULT_SCORE_TOKENS for one
    layer, shared out among more (4 layers: 1024), at least LEAST_LAYER_TOKENS; the
    scoring then costs about as much whatever the layer count."""
    return max(LEAST_LAYER_TOKENS, DEFAULT_SCORE_TOKENS // max(int(layers), 1))


def _again(path) -> str:
    return (f"collect the corpus again into a new folder with this tfx (its manifest then "
            f"names the model), or pass --score-tokens 0 to train without the score "
            f"({path})")


def model_spec(manifest: dict, path) -> object:
    """The ModelSpec that rebuilds the collect folder's model, its config checked against
    the manifest's (cheap: no weights are read)."""
    from ...errors import TfxError
    from ..results import to_json
    from ..spec import ModelSpec, spec_config

    saved = manifest.get("model_spec")
    model = manifest.get("model") or {}
    full = all(key in model for key in ("n_layers", "d_model", "vocab_size"))
    if saved is None and full:  # an older folder: its preset or checkpoint and its sizes
        saved = {"weights": model.get("weights"), "dtype": model.get("dtype", "float32")}
        if not model.get("weights"):
            saved.update(config=model.get("config"), seed=model.get("seed", 123),
                         heads=model.get("n_heads"), layers=model.get("n_layers"),
                         d_model=model.get("d_model"), context=model.get("context_length"))
    if not isinstance(saved, dict) or set(saved) - set(SPEC_KEYS):
        raise UsageError(f"{path}'s manifest does not say how its model was built, so the "
                         f"CE-loss score cannot rebuild it; {_again(path)}")
    spec = ModelSpec(**{k: (Path(v) if k == "corpus" and v is not None else v)
                        for k, v in saved.items()})
    want = {k: v for k, v in model.items() if k not in ("dtype", "device", "streamed")}
    try:
        cfg = spec_config(spec)
    except TfxError as exc:
        raise UsageError(f"{path}: the model its manifest names cannot be built again "
                         f"({exc}); {_again(path)}") from None
    got = {"config": cfg.name, "weights": spec.weights,
           "seed": None if spec.weights else spec.seed, **to_json(cfg.to_dict())}
    if spec.tokenizer is None and spec.corpus is None:
        differ = sorted(k for k in want if got.get(k) != want[k])
        if differ:
            raise UsageError(f"{path}: the model its manifest's options build differs from "
                             f"the one it records ({', '.join(differ[:3])}); "
                             f"{_again(path)}")
    return spec


def check_rebuilt(loaded, manifest: dict, path) -> None:
    """The model built for the score is the collect folder's, config field for field."""
    from ..results import to_json

    want = {k: v for k, v in (manifest.get("model") or {}).items()
            if k not in ("dtype", "device", "streamed")}
    got = to_json(loaded.info)
    differ = sorted(k for k in want if got.get(k) != want[k])
    if differ:
        raise UsageError(f"{path}: the model rebuilt from its manifest differs from the one "
                         f"it records ({', '.join(differ[:3])}); {_again(path)}")


def score_windows(acts, first_held: int, score_tokens: int) -> list[Window]:
    """The windows holding the held-out tokens (rows from `first_held` on, in the
    tokens table's order), whole, from the end up to `score_tokens` tokens."""
    table = acts.tokens()
    doc = table.column("doc").to_numpy()
    pos = table.column("position").to_numpy()
    ids = table.column("token").to_numpy().astype(np.int64)
    ctx = int(acts.manifest["options"]["ctx"])
    n = len(doc)
    if n == 0:
        return []
    new = np.ones(n, dtype=bool)
    new[1:] = (doc[1:] != doc[:-1]) | (pos[1:] % ctx == 0)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    out: list[Window] = []
    left = score_tokens
    for start, end in zip(starts[::-1], ends[::-1]):
        if end <= first_held or left <= 0:
            break
        if end - start > left:
            if out:
                break
            end = start + left  # one long window alone: its first tokens
        out.append(Window(int(doc[start]), int(pos[start]), int(start),
                          ids[start:end].copy()))
        left -= end - start
    return out[::-1]


def judge(loaded, windows: list[Window], task, empty, ctx: int, batch_size: int = 8):
    """The task's partial sums over the windows, in the chunks and batches a corpus run
    of these windows forms (pipeline.run's: the same sums to the last bit as eval-sae on
    a corpus of the same documents), merged in batch order."""
    from .pipeline import make_plan

    plan = make_plan(loaded.cfg, ctx=ctx, batch_size=batch_size, max_tokens=None)
    part = empty()
    first = 0
    for c, chunk in enumerate(chunks(windows, batch_size=batch_size,
                                     chunk_tokens=plan.chunk_tokens)):
        todo = batches(chunk, chunk_index=c, first_batch=first, batch_size=batch_size)
        first += len(todo)
        for batch in todo:
            part.merge(task.compute(loaded, batch))
    return part


def score_sae(loaded, windows: list[Window], sae_dir, ctx: int, batch_size: int = 8) -> dict:
    """eval-sae's numbers of the SAE folder on the windows (evaluate.py's task)."""
    from ..analysis.feature_sites import open_sae
    from .evaluate import EvalPartial, EvalTask, scores

    opened = open_sae(loaded, sae_dir)
    part = judge(loaded, windows, EvalTask(opened),
                 lambda: EvalPartial.empty(opened.d_out, opened.d_sae), ctx, batch_size)
    got = scores(part)
    got["tokens"] = part.tokens
    got["ce_ablation_delta"], got["noisy"] = ablation_delta(got["ce_clean"],
                                                            got["ce_ablation"])
    return got


def score_set(loaded, windows: list[Window], tc, ctx: int, blocks=None,
              batch_size: int = 8) -> dict:
    """eval-sae --transcoders' numbers of the set (or of a one-layer set on `blocks`)."""
    from .evaluate_set import SetEvalTask, SetPartial, set_scores

    part = judge(loaded, windows, SetEvalTask(tc, blocks),
                 lambda: SetPartial.empty(tc.n_layers, tc.d_model, tc.width), ctx,
                 batch_size)
    got = set_scores(part)
    got["tokens"] = part.tokens
    return got


def score_layers(loaded, windows: list[Window], sets: list, blocks: list[int], ctx: int,
                 batch_size: int = 8) -> tuple[list[dict], int]:
    """Each one-layer set's CE-loss score, its block's MLP alone replaced (the clean run
    shared), with what zero-ablating that MLP adds to the loss and whether the score is
    noisy (ablation_delta); and the tokens run."""
    from .evaluate_set import LayerwisePartial, LayerwiseTask, layerwise_scores

    part = judge(loaded, windows, LayerwiseTask(tuple(sets), tuple(blocks)),
                 lambda: LayerwisePartial(np.zeros((len(sets), 3))), ctx, batch_size)
    rows = layerwise_scores(part)
    for row in rows:
        row["ce_ablation_delta"], row["noisy"] = ablation_delta(row["ce_clean"],
                                                                row["ce_ablation"])
    return rows, part.tokens


# -- what the trainers add to their results ------------------------------------------------
@dataclass
class Scoring:
    spec: object | None  # the ModelSpec that rebuilds the folder's model; None: no score
    tokens: int  # at most this many of the folder's last tokens
    why_not: str | None = None  # the score left out by default, and why
    asked: bool = False  # --score-tokens given: a folder that cannot be scored is refused


def scoring(acts, score_tokens) -> Scoring:
    """Checked before anything is trained: with --score-tokens N a folder whose model cannot
    be rebuilt is refused by name; by default (None: DEFAULT_SCORE_TOKENS) the score is
    left out, and the result says why; 0 skips it. A tokens.parquet that is there but
    damaged, or changed since collect wrote it, is refused either way."""
    asked = score_tokens is not None
    if asked and (isinstance(score_tokens, bool) or not isinstance(score_tokens, int)
                  or score_tokens < 0):
        raise RangeError(f"--score-tokens {score_tokens!r} must be a whole number of tokens, "
                         "0 or more (0 skips the CE-loss score)")
    tokens = DEFAULT_SCORE_TOKENS if score_tokens is None else score_tokens
    if not tokens:
        return Scoring(None, 0)
    there = (acts.path / "tokens.parquet").is_file()
    if there:
        acts.tokens()  # read now, not after the training
    try:
        if not there:
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
    from ..features.training import split
    from ..load import load

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


def _score_trained_sae(result, acts, scored: Scoring, *, holdout: float, skip_first: int,
                       progress=None) -> None:
    """result.ce_loss_score (and score_tokens): the SAE train-sae wrote, its site replaced."""
    loaded, windows = _model_and_windows(result, acts, scored, holdout, skip_first, progress)
    if loaded is None:
        return
    got = score_sae(loaded, windows, result.output, _ctx(acts))
    result.ce_loss_score, result.score_tokens = got["ce_loss_score"], got["tokens"]
    result.ce_ablation_delta, result.ce_loss_score_noisy = got["ce_ablation_delta"], \
        got["noisy"]


def _score_trained_set(result, acts, scored: Scoring, *, holdout: float, skip_first: int,
                       progress=None) -> None:
    """Each layer's ce_loss_score (its MLP alone replaced) and, once the whole set exists,
    the set's (every MLP replaced at once)."""
    from ..features.transcoder_set import read_layer, read_transcoders

    if scored.spec is not None and not scored.asked:  # the default: shared among layers
        scored = replace(scored, tokens=default_score_tokens(len(result.layers)))
    loaded, windows = _model_and_windows(result, acts, scored, holdout, skip_first, progress)
    if loaded is None:
        return
    d_model, ctx = loaded.cfg.d_model, _ctx(acts)
    sets = [read_layer(row.file, d_model=d_model) for row in result.layers]
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


def train_sae(acts, *, score_tokens=None, holdout=0.05, skip_first=0, progress=None,
              **options):
    """tfx train-sae: the scoring checked first, the SAE trained (features.training), the
    note on unfinished training, then its CE-loss score."""
    from ..features.convergence import convergence_note
    from ..features.training import train_sae as run

    scored = scoring(acts, score_tokens)
    result = run(acts, holdout=holdout, skip_first=skip_first, progress=progress, **options)
    result.not_converged = convergence_note(
        [(None, result.losses, result.dead_in_training, result.latents)], result.architecture)
    _score_trained_sae(result, acts, scored, holdout=holdout, skip_first=skip_first,
                       progress=progress)
    return result


def train_transcoder(acts, *, score_tokens=None, holdout=0.05, skip_first=0, progress=None,
                     **options):
    """tfx train-transcoder: the scoring checked first, the layers trained
    (features.transcoders), the note on unfinished training, then each layer's CE-loss
    score and, once the set is whole, the set's."""
    from ..features.convergence import convergence_note
    from ..features.transcoders import train_transcoders as run

    scored = scoring(acts, score_tokens)
    result = run(acts, holdout=holdout, skip_first=skip_first, progress=progress, **options)
    result.not_converged = convergence_note(
        [(row.layer, row.losses, row.dead_in_training, result.latents)
         for row in result.layers], result.architecture)
    _score_trained_set(result, acts, scored, holdout=holdout, skip_first=skip_first,
                       progress=progress)
    return result


__all__ = ["train_sae", "train_transcoder", "scoring", "Scoring", "score_layers",
           "DEFAULT_SCORE_TOKENS", "default_score_tokens", "ablation_delta", "NOISY_BELOW",
           "recorded_spec", "model_spec", "check_rebuilt", "score_windows", "judge",
           "score_sae", "score_set"]
