"""Models larger than memory: the weights stay on disk, and each part of the model is
read, run and let go in turn.

A streamed model is the ordinary Transformer built on the meta device (every shape, no
storage) with `residency = Streamed(...)`. Transformer.forward asks for each part as it
reaches it (`holding("embed")`, `holding("blocks.3")`, `holding("head")`; an
encoder–decoder's parts carry their stack: `holding("encoder.blocks.0")`); Streamed reads
that part's tensors from the checkpoint (checkpoints.plan.Plan: the reads, mapping and dtype
conversion of a load into memory), hands them to the part's modules, and after the part
has run puts the meta parameters back, so the tensors are freed and the file's pages let
go (checkpoints/sources.py). At most one part is in memory at a time (a stage that reads a part's
weights itself holds that part too). The arithmetic is the in-memory one, on the same
values in the same layout, so the results are bit for bit the in-memory run's
(tests/core/test_streaming.py).

The cost is reading: every forward reads every part it runs, so decoding reads the whole
model once per token (the KV cache stays in memory, as do the recorded tensors).

A mixture of experts reads less: where each expert's tensors are its own in the file
(the Hub's per-expert layout), every expert is a part of its own,
`blocks.{i}.moe.expert.{e}`, read only while a token routed to it runs and let go before
the next expert (core/model/moe.py asks for it through `MoE.hold`). A block's part then
holds its attention, norms, router and shared expert, and the budget needs that plus one
expert. Stacked expert tensors (one per layer) are read with their block.
"""
from __future__ import annotations

import re
from collections import Counter
from contextlib import ExitStack, contextmanager

import torch
import torch.nn as nn

from ..config import part_of, split_stack

# A checkpoint is loaded whole when its weights take at most this share of the budget;
# the rest is left for the run (KV cache, recorded tensors, working space).
IN_MEMORY_SHARE = 0.8


def forward_order(part: str) -> tuple:
    """Sort key of a part: the encoder's before the decoder's, and in each stack the
    embedding, the blocks by number, the final norm, then the head."""
    stack, kind = split_stack(part)
    first = 0 if stack == "encoder" else 1
    if kind.startswith("blocks."):
        return first, 1, int(kind.split(".")[1])
    return first, {"embed": 0, "ln_f": 2, "head": 3}.get(kind, 4), 0


class Streamed:
    """Where a streamed model's weights are: on disk, read one part at a time."""

    streamed = True

    def __init__(self, model: nn.Module, plan, dtype: torch.dtype, device,
                 progress=None):
        self.model, self.plan, self.dtype, self.device = model, plan, dtype, device
        self.parts: dict[str, list[str]] = {}
        experts = _expert_parts(plan)  # name -> its expert's own part, where it has one
        for name in plan.shapes:
            self.parts.setdefault(experts.get(name) or part_of(name), []).append(name)
        # in the order a forward reads them, which is what the progress counts
        self.parts = dict(sorted(self.parts.items(), key=lambda item: forward_order(item[0])))
        self.slots = {}
        for name in plan.shapes:
            path, _, attr = name.rpartition(".")  # "" for a top-level one: the model
            module = model.get_submodule(path)
            self.slots[name] = (module, attr, getattr(module, attr))  # the meta parameter
        self.held: set[str] = set()
        self.reads = 0  # parts read so far
        self.bytes_read = 0  # and their bytes in memory (what streaming costs)
        self.progress = progress
        self.label: str | None = None  # what the reads are for ("token 3 of 20")
        # a long generation stores the weights as decoding reads them fastest
        # (decoding.decoding_layout), in memory once, here each part as it is read, so
        # the two decode with the same layout and so the same numbers
        self.decoding_layout = False
        self._update = None

    # -- sizes ----------------------------------------------------------------------------
    def part_bytes(self) -> dict[str, int]:
        """Bytes each part takes in memory while it runs."""
        return {part: self.plan.nbytes(self.dtype, names) for part, names in self.parts.items()}

    @property
    def total_bytes(self) -> int:
        return self.plan.nbytes(self.dtype)

    @property
    def largest(self) -> tuple[str, int]:
        """The most a forward holds at once: a part, or a block with its largest expert
        (an expert part is read while its block is held)."""
        sizes = self.part_bytes()
        expert: dict[str, int] = {}  # block -> its largest expert part
        for part, n in sizes.items():
            match = _EXPERT_PART.match(part)
            if match:
                expert[match.group(1)] = max(expert.get(match.group(1), 0), n)
        held = {part: n + expert.get(part, 0) for part, n in sizes.items()
                if not _EXPERT_PART.match(part)}
        return max(held.items(), key=lambda item: item[1])

    # -- holding parts ------------------------------------------------------------------
    @contextmanager
    def holding(self, *parts: str):
        read = []
        try:
            for part in dict.fromkeys(parts):
                if part in self.parts and part not in self.held:
                    self._read(part)
                    read.append(part)
            yield
        finally:
            for part in read:
                self._drop(part)

    def _read(self, part: str) -> None:
        if self._update is not None:
            order = list(self.parts)
            where = f"{self.label}: " if self.label else ""
            self._update(order.index(part) / len(order), f"{where}reading {part}")
        tensors = self.plan.tensors(self.parts[part], self.dtype, self.device)
        for name, tensor in tensors.items():
            module, attr, meta = self.slots[name]
            # a parameter stays one; a buffer (an encoder–decoder's final_logits_bias) too
            setattr(module, attr, nn.Parameter(tensor, requires_grad=False)
                    if isinstance(meta, nn.Parameter) else tensor)
        if self.decoding_layout:
            from .decoding import decoding_layout

            root = self.model.get_submodule(part) if part != "head" else \
                getattr(self.model, "lm_head", nn.Identity())
            decoding_layout(self.model, list(root.modules()))
        self.held.add(part)
        self.reads += 1
        self.bytes_read += self.plan.nbytes(self.dtype, self.parts[part])

    def _drop(self, part: str) -> None:
        for name in self.parts[part]:
            module, attr, meta = self.slots[name]
            setattr(module, attr, meta)
        self.held.discard(part)
        self.plan.source.release()

    @contextmanager
    def reading(self):
        """Progress for one forward pass (every part it reads), on the progress bar given
        at load."""
        if self.progress is None or self._update is not None:
            yield
            return
        with ExitStack() as stack:
            self._update = stack.enter_context(self.progress(
                f"{self.label + ': ' if self.label else ''}streaming {len(self.parts)} "
                f"parts from disk"))
            try:
                yield
            finally:
                self._update = None


_EXPERT_PART = re.compile(r"^(blocks\.\d+)\.moe\.expert\.\d+$")
_EXPERT_NAME = re.compile(r"^(blocks\.\d+\.moe\.expert\.\d+)\.")


def _expert_parts(plan) -> dict[str, str]:
    """Each expert parameter's own part, `blocks.{i}.moe.expert.{e}`, where the file
    holds that expert's tensors apart from every other (a stacked tensor, read for every
    expert it holds, stays with its block)."""
    users = Counter(plan.keys[n] for n in plan.shapes if plan.keys.get(n))
    out = {}
    for name in plan.shapes:
        match = _EXPERT_NAME.match(name)
        key = plan.keys.get(name)
        if match and key and users[key] == 1:
            out[name] = match.group(1)
    # an expert is its own part only if every tensor of it is
    whole = {part for part in set(out.values())
             if all(out.get(n) == part for n in plan.shapes if n.startswith(part + "."))}
    return {n: p for n, p in out.items() if p in whole}


def stream(plan, dtype: torch.dtype, device, budget, progress=None):
    """The checkpoint as a streamed Transformer: built on the meta device, each part read
    when it runs. Refuses a budget that cannot hold the largest part."""
    from .transformer import build_model

    model = build_model(plan.cfg, device="meta")
    residency = Streamed(model, plan, dtype, torch.device(device), progress)
    part, need = residency.largest
    if not budget.force and not budget.fits(need):
        raise budget.refuse_part(plan.cfg.name, part, need, residency.part_bytes(),
                                 dtype=str(dtype).removeprefix("torch."))
    model.residency = residency
    for i, block in enumerate(getattr(model, "blocks", [])):
        if getattr(block, "is_moe", False):  # read an expert only when a token needs it
            block.moe.hold = lambda e, p=f"blocks.{i}.moe.expert": residency.holding(f"{p}.{e}")
    model.dtype, model.device = dtype, torch.device(device)
    model.fill_sinusoids(dtype, device)  # not in checkpoints: computed, and kept
    return model


__all__ = ["Streamed", "stream", "IN_MEMORY_SHARE"]
