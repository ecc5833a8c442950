"""The CE-loss score train-sae and train-transcoder print for what they wrote: eval-sae's
definitions (evaluate.py, evaluate_set.py), on the collect folder's own last windows.

The collect folder's manifest names the model that made it (`model_spec`: the options it
was built from; `model`: every config field it had) and tokens.parquet holds the token
windows it read. The model is rebuilt from the spec (a folder collected before the spec
was recorded: from the preset or checkpoint and the sizes its config records) and refused
by name unless its config is the manifest's field for field. The windows scored are the ones holding the held-out
tokens (the last of the folder), whole, counted from the end up to `score_tokens` tokens
(the last window cut to its first tokens when it alone is longer): a window's first
positions can be training tokens, the context the held-out ones were collected with."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import UsageError
from .corpus_runs import SPEC_KEYS, recorded_spec  # noqa: F401  (collect writes it)
from .windows import Window, batches, chunks

DEFAULT_SCORE_TOKENS = 4096
# train-transcoder's default shares DEFAULT_SCORE_TOKENS out among the layers it scores
# (each costs about one more pass over the tokens), down to this floor
LEAST_LAYER_TOKENS = 512
# A score whose denominator, the loss zero-ablation adds, is below this share of the
# clean loss is flagged noisy: a reconstruction typically moves the loss by a few percent
# of it, as much as that denominator, so the ratio can land far above 1 or below 0.
NOISY_BELOW = 0.05


def default_score_tokens(layers: int) -> int:
    """train-transcoder's --score-tokens when none is given: DEFAULT_SCORE_TOKENS for one
    layer, shared out among more (4 layers: 1024), at least LEAST_LAYER_TOKENS; the
    scoring then costs about as much whatever the layer count."""
    return max(LEAST_LAYER_TOKENS, DEFAULT_SCORE_TOKENS // max(int(layers), 1))


def ablation_delta(ce_clean, ce_ablation) -> tuple[float | None, bool | None]:
    """(what zero-ablating the site adds to the mean loss, whether a CE-loss score over
    it is noisy: that delta below NOISY_BELOW of the clean loss)."""
    if ce_clean is None or ce_ablation is None:
        return None, None
    delta = float(ce_ablation) - float(ce_clean)
    return delta, bool(delta < NOISY_BELOW * abs(float(ce_clean)))


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


__all__ = ["score_layers", "DEFAULT_SCORE_TOKENS", "default_score_tokens", "ablation_delta", "recorded_spec", "model_spec", "check_rebuilt",
           "score_windows", "judge", "score_sae", "score_set"]
