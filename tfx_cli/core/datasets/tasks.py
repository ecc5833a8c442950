"""What every per-batch function shares: a Trace that takes whole batches (and hands
each recorded value over at once, so one layer's pattern is reduced and freed before the
next layer runs), the forward pass over a padded batch, and the sites a task may read."""
from __future__ import annotations

import re
from typing import Callable, Iterable

import numpy as np
import torch

from ...errors import RangeError, SelectError
from ..features.sae import row_width
from ..trace import Trace, compile_globs, summarise_names


class BatchTrace(Trace):
    """Hands every tap's whole batch (B, *dims) to `consume(name, value)`; keeps
    nothing itself."""

    def __init__(self, consume: Callable[[str, torch.Tensor], None]):
        super().__init__()
        self.consume = consume

    def take(self, name, batch, dims) -> None:
        self.consume(name, batch.detach())

    def add(self, name, value, dims) -> None:  # lazily recorded scores are never asked for
        raise RuntimeError(f"{name} is recorded lazily; a dataset task cannot read it")


def forward(loaded, ids: np.ndarray, lengths: np.ndarray, select: Iterable[str],
            consume: Callable[[str, torch.Tensor], None]) -> None:
    """One forward pass over a batch of windows padded on the right, recording `select`
    (exact names or globs) into `consume`. Blocks after the last one recorded do not
    run; the head runs only when `logits` is recorded. A causal model's real positions
    never see the padding; a bidirectional one gets a key mask per row."""
    select = list(select)
    model, cfg = loaded.model, loaded.cfg
    rx = compile_globs(select)
    names = [n for n in model.tap_names() if rx.match(n)]
    layers = [int(m.group(1)) for m in (re.match(r"blocks\.(\d+)\.", n) for n in names) if m]
    tail = any(not n.startswith(("blocks.", "tokens.", "embed.")) for n in names)
    stop = None if tail or not layers else max(layers)
    if not layers and not tail:
        stop = -1  # the embedding alone
    head = "all" if any(n.startswith("logits") for n in names) else "none"
    # a norm's mean and variance are computed lazily, for one text, unless its normalised
    # rows are recorded too: record those as well, and hand over only what was asked for
    wanted = set(names)
    normed = [n.rsplit(".", 1)[0] + ".normed" for n in names if n.endswith((".mean", ".var"))]
    batch = torch.from_numpy(ids)
    keep = "auto"
    if not cfg.causal:
        T = ids.shape[1]
        real = torch.arange(T)[None, :] < torch.from_numpy(lengths)[:, None]  # (B, S)
        keep = real[:, None, None, :].expand(-1, 1, T, T).to(model.device)
    B = ids.shape[0]

    def per_row(name: str, value: torch.Tensor) -> None:
        # a site shared by the batch (learned positions: (1, T, C)) counts for every row
        if name in wanted:
            consume(name, value.expand(B, *value.shape[1:]) if len(value) == 1 < B else value)

    with model.record(select + normed, trace=BatchTrace(per_row)), torch.inference_mode():
        model(batch, keep=keep, stop_after=stop, head=head)


def valid_positions(lengths: np.ndarray, T: int, device=None) -> torch.Tensor:
    """(B, T) True at a row's real positions."""
    return torch.arange(T, device=device)[None, :] < torch.as_tensor(lengths, device=device)[:, None]


def row_sites(model) -> dict[str, tuple[tuple[str, ...], int]]:
    """Sites with one row per token: name -> (dims, row width). A site with key
    positions (S: scores, patterns) has no fixed width and is left out."""
    cfg = model.cfg
    out = {}
    for name, tap in model.taps.items():
        dims = tuple(tap.dims)
        if "T" not in dims or "S" in dims or name == "tokens.ids" or name.startswith(
                ("encoder.", "decoder.")):
            continue
        if name.endswith(".mean") and cfg.norm == "rmsnorm":  # an RMSNorm takes no mean
            continue
        width = row_width(cfg, dims)
        if width:
            out[name] = (dims, width)
    return out


def as_rows(value: torch.Tensor, dims: tuple[str, ...]) -> torch.Tensor:
    """(B, *dims) -> (B, T, width): T first, the other dims flattened in their order
    (a head's output (H, T, D) becomes H * D columns, head-major)."""
    t = dims.index("T") + 1
    if t != 1:
        value = value.movedim(t, 1)
    return value.reshape(value.shape[0], value.shape[1], -1)


def check_sites(model, globs: list[str], option: str) -> list[str]:
    """The row sites `globs` name, in forward order; a glob that names none is refused
    with the valid names."""
    sites = row_sites(model)
    names = list(sites)
    chosen: list[str] = []
    for glob in globs:
        rx = compile_globs([glob])
        hit = [n for n in names if rx.match(n)]
        if not hit:
            raise SelectError(f"{option} {glob!r} matches no site with one row per token; "
                              f"valid: {summarise_names(names)}")
        chosen += [n for n in hit if n not in chosen]
    return [n for n in names if n in chosen]


def parse_units(text: str | None, width: int, option: str = "--units",
                owner: str = "the site has", noun: str = "units") -> tuple[int, ...]:
    """'0,5,9' or '0:64' (or both, comma-separated) -> unit indices; None: all.
    `owner`/`noun` word the range error (an SAE: "the SAE has", "features")."""
    if text is None:
        return tuple(range(width))
    units: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if ":" in part:
                lo, hi = part.split(":", 1)
                span = range(int(lo or 0), int(hi) if hi else width)
            else:
                span = [int(part)]
        except ValueError:
            raise RangeError(f"{option} {text!r}: {part!r} is not a unit index or a range "
                             "such as 0:64") from None
        for u in span:
            if not 0 <= u < width:
                raise RangeError(f"{option} unit {u} is out of range: {owner} {width:,} "
                                 f"{noun} (0 to {width - 1})")
            if u not in units:
                units.append(u)
    if not units:
        raise RangeError(f"{option} {text!r} names no unit; e.g. {option} 0:16")
    return tuple(units)


__all__ = ["BatchTrace", "forward", "valid_positions", "row_sites", "as_rows",
           "check_sites", "parse_units"]
