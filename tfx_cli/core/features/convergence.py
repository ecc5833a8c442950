"""Whether a training run looks finished: train-sae and train-transcoder end with one
note when it does not, naming the fix.

Two signs, read from what the result already holds:

    still falling   the loss curve (means over equal spans of the steps) averaged over its
                    last tenth is below its tenth before by more than STILL_FALLING of it:
                    at a plateau the two differ by the minibatch noise the span means
                    smooth away (well under 1%), so a 3% drop in the last tenth of the
                    steps says more steps would still buy loss. A curve of fewer than
                    MIN_POINTS spans is too short to tell.
    dead latents    more than DEAD_SHARE of the latents had not fired in the last
                    dead_after training tokens (an epoch by default): a quarter of the
                    width wasted, usually a learning rate too high or a sparsity penalty
                    too strong for the width.
"""
from __future__ import annotations

STILL_FALLING = 0.03
DEAD_SHARE = 0.25
MIN_POINTS = 20


def still_falling(curve: list[float]) -> float | None:
    """The share by which the loss fell over the last tenth of the steps, when it is above
    STILL_FALLING; None otherwise (or for a curve too short to tell)."""
    values = [float(v) for v in curve]
    if len(values) < MIN_POINTS or any(v != v for v in values):
        return None
    tenth = len(values) // 10
    last = sum(values[-tenth:]) / tenth
    before = sum(values[-2 * tenth:-tenth]) / tenth
    if before <= 0:
        return None
    drop = (before - last) / before
    return drop if drop > STILL_FALLING else None


def dead_share(dead_in_training: int, latents: int) -> float | None:
    """The share of dead latents, when it is above DEAD_SHARE; None otherwise."""
    share = dead_in_training / latents if latents else 0.0
    return share if share > DEAD_SHARE else None


def _which(labels: list) -> str:
    return "" if labels == [None] else \
        f" (layer{'s' if len(labels) > 1 else ''} {', '.join(map(str, labels))})"


def convergence_note(runs: list[tuple], architecture: str) -> str | None:
    """One line for the runs that look unfinished, with the fix; None when none does.
    `runs`: (label or None, loss curve, dead_in_training, latents) per trained SAE or
    layer."""
    falling = [(label, got) for label, curve, *_ in runs
               if (got := still_falling(curve)) is not None]
    dead = [(label, got) for label, _, n_dead, latents in runs
            if (got := dead_share(n_dead, latents)) is not None]
    parts = []
    if falling:
        parts.append(f"the loss still fell {max(g for _, g in falling):.0%} over the last "
                     f"tenth of the steps{_which([label for label, _ in falling])}: train "
                     "longer (more --steps or --epochs, into a new -o folder or with --force)")
    if dead:
        fix = {"topk": "a larger --aux-k", "jumprelu": "a smaller --jumprelu"}.get(
            architecture, "a smaller --l1")
        parts.append(f"{max(g for _, g in dead):.0%} of the latents are dead (no firing in "
                     f"the last --dead-after training tokens){_which([l for l, _ in dead])}: "
                     f"try a lower --lr, fewer --latents or {fix}")
    return "training looks unfinished: " + "; ".join(parts) if parts else None


__all__ = ["convergence_note", "still_falling", "dead_share", "STILL_FALLING", "DEAD_SHARE"]
