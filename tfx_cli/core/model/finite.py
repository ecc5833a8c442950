"""Non-finite values caught where they arise: the one check every forward pass makes.

A NaN or an infinity never helps an answer: a float16 model whose residual stream grows
past 65,504 (Gemma's does), a steering vector scaled past float32's range, a training run
whose learning rate blows the weights up. Left alone they turn every later number into
NaN and the command prints a table of them with exit 0. So the Transformer checks the
residual stream as it leaves the embedding and every block, and the output of the head
(`Transformer.run_blocks`): one float32 vector norm each (a NaN or infinity makes it
non-finite, and so does a finite value whose square overflows, which the next norm would
divide by: see fits_norm), under 1% of a gpt124m forward at T = 1024 on a CPU
(bench/finite_cost.py). Only when a check fires is the part run again with a watch on its
taps, to name the first intermediate that went bad (`blocks.7.resid_out`), and the run
stops with a NonFiniteError: one line, the site, and the likely fix.

The fix depends on why it happened, which the model does not know by itself: callers
that can say add a hint for the duration of their work (`hinting(model, "...")`):
steering says "a smaller --scale", training "a lower --lr". A float16 model gets the
dtype advice from its own dtype.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import torch

from ...errors import NonFiniteError

# Trace names whose infinities are by design: a masked score is -inf where it is hidden.
_INFINITE_BY_DESIGN = (".masked",)
FLOAT16_MAX = 65504.0  # the largest finite float16


def is_finite(x: torch.Tensor) -> bool:
    """Every value of x is a finite number. Integer tensors are always finite.

    One sum, accumulated in float32 or wider: a NaN anywhere makes it NaN and an infinity
    makes it inf (or NaN with both signs), so a finite sum proves every value finite.
    Summing is the cheapest full read torch has on a CPU (about half of torch.aminmax,
    a sixtieth of isfinite().all(); bench/finite_cost.py). Only when the sum itself
    overflows, values all finite but huge, is every value tested."""
    if not x.is_floating_point() or x.is_meta or x.numel() == 0:
        return True
    x = x.detach()
    wide = torch.float32 if x.element_size() < 4 else x.dtype
    if bool(torch.isfinite(x.sum(dtype=wide))):
        return True
    return bool(torch.isfinite(x).all())


def fits_norm(x: torch.Tensor) -> bool:
    """x is finite and a norm can read it: every row's mean square (the variance a
    LayerNorm or RMSNorm divides by) is a finite float32.

    A row of 1e30s is finite, but its square is not: the norm divides by an infinite
    variance and hands on zeros, and every later number (the final norm's output, the
    logits) is finite and meaningless. One vector norm over the whole of x, in float32
    (about twice is_finite's sum); only when that overflows are the rows taken one by
    one, so values merely large together are never refused."""
    if not x.is_floating_point() or x.is_meta or x.numel() == 0:
        return True
    x = x.detach()
    if bool(torch.isfinite(torch.linalg.vector_norm(x, dtype=torch.float32))):
        return True
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    return bool(torch.isfinite(torch.linalg.vector_norm(rows, dim=-1,
                                                        dtype=torch.float32)).all())


def describe(x: torch.Tensor) -> str:
    """'NaN', 'inf', '-inf' or 'inf and NaN': what is wrong with x (or, for finite
    values a norm cannot read, how large they are)."""
    x = x.detach()
    if is_finite(x):
        biggest = float(x.abs().max())
        return (f"too large to normalise (values up to {biggest:.3g}, whose squares pass "
                "float32's largest number)")
    kinds = []
    if bool(torch.isnan(x).any()):
        kinds.append("NaN")
    if bool(torch.isposinf(x).any()):
        kinds.append("inf")
    if bool(torch.isneginf(x).any()):
        kinds.append("-inf")
    return " and ".join(kinds) or "not finite"


@contextmanager
def watching(taps: Iterable) -> Iterator[list]:
    """Note the first of `taps` (in the order the forward reaches them) whose value is
    not finite: yields a list that holds (name, what) once one is found. Each tap's
    edit is wrapped (an intervention already there still applies first), so the watch
    sees whole batches, not the first row a trace records."""
    found: list = []
    saved = [(tap, tap.edit) for tap in taps]
    for tap, before in saved:
        def watch(x, tap=tap, before=before):
            if before is not None:
                x = before(x)
            if not found and not tap.name.endswith(_INFINITE_BY_DESIGN) and not is_finite(x):
                found.append((tap.name, describe(x)))
            return x

        tap.edit = watch
    try:
        yield found
    finally:
        for tap, before in saved:
            tap.edit = before


@contextmanager
def hinting(model, fix: str):
    """While the block runs, a non-finite value in `model` suggests `fix` first (an
    instruction: "use a smaller --scale (now 1e+30)")."""
    model.finite_hints = (fix,) + tuple(getattr(model, "finite_hints", ()))
    try:
        yield
    finally:
        hints = list(model.finite_hints)
        hints.remove(fix)
        model.finite_hints = tuple(hints)


def fixes(model) -> list[str]:
    """What to try, most likely first: the callers' hints, then the dtype's advice."""
    out = list(getattr(model, "finite_hints", ()))
    if model.dtype == torch.float16:
        out.append("run with --dtype bfloat16 (float16's largest value is 65,504 and this "
                   "model's activations pass it; bfloat16 has float32's range) or float32")
    if not out:
        out.append("check the weights (a damaged checkpoint, or one trained with too high a "
                   "learning rate, holds NaN or infinite values)")
    return out


def refuse(model, site: str, what: str) -> NonFiniteError:
    dtype = str(model.dtype).replace("torch.", "")
    return NonFiniteError(f"{site} became {what} in this {dtype} run, so every number "
                          f"after it would be meaningless; {'; or '.join(fixes(model))}")


def require(model, value, site: str) -> None:
    """An output computed outside the forward (a lens row, a patching effect, an
    attribution part) must be finite too: NonFiniteError naming `site` if not."""
    if isinstance(value, torch.Tensor):
        if not is_finite(value):
            raise refuse(model, site, describe(value))
        return
    values = [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    bad = [v for v in values if v != v or v in (float("inf"), float("-inf"))]
    if bad:
        raise refuse(model, site, "NaN" if bad[0] != bad[0] else "inf")


def check(model, x: torch.Tensor, where: str, taps: Callable[[], Iterable],
          rerun: Callable[[], object], reader: str | None = None) -> None:
    """Raise NonFiniteError if x is not finite, or too large for a norm to read (see
    fits_norm): re-run the part that made it (`rerun`)
    watching its `taps` to name the first bad one (`where` when none is found: the part's
    output is the first value seen bad). x finite but too large for a norm is named by
    `reader`, the variance of the norm that would read it, when one is given."""
    if fits_norm(x):
        return
    with watching(taps()) as found, torch.no_grad():
        try:
            rerun()
        except NonFiniteError:
            pass
    if found:
        site, what = found[0]
    elif reader is not None and is_finite(x):
        site, what = reader, f"inf (the variance of {where}, too large for float32)"
    else:
        site, what = where, describe(x)
    raise refuse(model, site, what)


__all__ = ["is_finite", "fits_norm", "describe", "watching", "hinting", "fixes", "refuse", "check", "require",
           "FLOAT16_MAX"]
