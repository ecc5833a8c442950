"""The registry of the families tfx reads, and what their tensor mappings share.

A family is one `Family` declaration in its own module: the config.json `architectures`
and `model_type` names it answers to, its config reader, its tensor mapping, the names
its token table may be saved under, and whether its stack is causal. The module calls
`register` on import, and the package's __init__ imports every family module, so the
tables below are filled once; `family_of` and the dispatch in __init__ read nothing else.

`TensorMap` is the accumulator each mapping writes into (tfx name -> tensor, tfx name ->
checkpoint name), and `Renames` a family's table of rename rules: a pattern of checkpoint
names, the tfx name (or names) it becomes, and the converters its tensor goes through on
the way (`Split` a fused tensor into its parts, `Transpose` a Conv1D matrix, `HeadByHead`
for q, k and v interleaved per head), first match wins. A mapping is then its rules and
what no rule can say (a tied table, a tensor the checkpoint leaves out).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ....errors import WeightsError

# what a base model without an output head (BartModel) changes in its family's config
NO_HEAD = {"lm_head": False, "logits_bias": False, "tie_embeddings": False}


def no_token_tables(cfg) -> tuple[str, ...]:
    """A family whose one token table is saved once (every decoder and encoder)."""
    return ()


@dataclass(frozen=True)
class Family:
    """One family as tfx reads it. `config(hf, where)` -> ModelConfig keyword arguments
    (all but the tokenizer); `mapping(state, cfg)` -> (tfx name -> tensor, tfx name ->
    checkpoint name); `token_tables(cfg)` -> the names under which an encoder–decoder
    saves its one token table (each copy must be the same tensor); `causal` sets
    ModelConfig.causal over what the reader says; `headless`: further architectures of
    the family built without an output head (NO_HEAD); `size_keys`: the config.json keys
    that must be there (values.SIZE_KEYS where the family's defaults would make up a
    size)."""
    name: str
    architectures: tuple[str, ...]
    config: Callable[[dict, str], dict]
    mapping: Callable[..., tuple[dict, dict]]
    model_types: tuple[str, ...] = ()
    token_tables: Callable[[Any], tuple[str, ...]] = no_token_tables
    causal: bool = False
    headless: tuple[str, ...] = ()
    size_keys: tuple[str, ...] = ()

    @property
    def stack(self) -> str:
        """What it is built as: "decoder", "encoder" or "encoder–decoder" (a family whose
        token table is saved under several names)."""
        if self.causal:
            return "decoder"
        return "encoder" if self.token_tables is no_token_tables else "encoder–decoder"

    def read(self, hf: dict, where: str) -> dict:
        """ModelConfig keyword arguments of a config.json of this family."""
        out = self.config(hf, where)
        if self.causal:
            out = {**out, "causal": True}
        if self.headless and any(arch in self.headless for arch in archs_of(hf)):
            out = {**out, **NO_HEAD}
        return out


FAMILIES: dict[str, Family] = {}
ARCHITECTURES: dict[str, str] = {}  # config.json `architectures` entry -> family
MODEL_TYPES: dict[str, str] = {}  # config.json `model_type` -> family


def register(*families: Family) -> tuple[Family, ...]:
    """Make families readable; a name, architecture or model type taken twice is a
    mistake in the declarations, refused before anything is changed."""
    for family in families:
        taken = [n for n in (*family.architectures, *family.headless) if n in ARCHITECTURES]
        taken += [t for t in family.model_types if t in MODEL_TYPES]
        if family.name in FAMILIES or taken:
            raise ValueError(f"family {family.name!r} is declared twice "
                             f"({', '.join(taken) or family.name} already taken)")
    for family in families:
        FAMILIES[family.name] = family
        ARCHITECTURES.update(dict.fromkeys((*family.architectures, *family.headless),
                                           family.name))
        MODEL_TYPES.update(dict.fromkeys(family.model_types, family.name))
    return families


def unregister(name: str) -> None:
    """Forget a family (tests declare throwaway ones)."""
    FAMILIES.pop(name, None)
    for table in (ARCHITECTURES, MODEL_TYPES):
        for key in [k for k, v in table.items() if v == name]:
            del table[key]


def archs_of(hf: dict) -> list:
    """A config.json's `architectures`, a list even where it is one string or missing."""
    archs = hf.get("architectures") or []
    return [archs] if isinstance(archs, str) else list(archs)


def family_of(name: str) -> Family:
    if name not in FAMILIES:
        raise WeightsError(f"unknown family {name!r}; tfx reads {', '.join(FAMILIES)}")
    return FAMILIES[name]


# -- what the mappings share ---------------------------------------------------------------
@dataclass
class TensorMap:
    """A mapping's result being built: tfx name -> tensor and tfx name -> checkpoint name."""
    tensors: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)

    def put(self, ours: str, theirs: str, tensor) -> None:
        self.tensors[ours], self.sources[ours] = tensor, theirs

    def keep(self, key: str, tensor) -> None:
        """A tensor under its own name: one tfx does not expect is reported as unexpected."""
        self.put(key, key, tensor)

    def update(self, mapped: tuple[dict, dict]) -> None:
        """Add another mapping's (tensors, sources)."""
        self.tensors.update(mapped[0])
        self.sources.update(mapped[1])

    def result(self) -> tuple[dict, dict]:
        return self.tensors, self.sources


class Split:
    """A fused checkpoint tensor into the rule's tfx tensors, along `dim`: equal parts
    (GPT-2's c_attn: q, k, v), or the widths `sizes(cfg)` gives (Phi-3's q, k, v when
    k and v have fewer heads)."""

    def __init__(self, dim: int = 0, sizes: Callable[[Any], list[int]] | None = None):
        self.dim, self.sizes = dim, sizes

    def __call__(self, tensors: list, parts: int, cfg) -> list:
        (tensor,) = tensors
        if self.sizes is None:
            return list(tensor.chunk(parts, dim=self.dim))
        return list(tensor.split(self.sizes(cfg), dim=self.dim))


class Transpose:
    """A Conv1D weight, (in, out), as tfx's linear reads it, (out, in); a bias (or any
    vector) as it is."""

    def __call__(self, tensors: list, parts: int, cfg) -> list:
        return [t.t() if t.dim() == 2 else t for t in tensors]


class HeadByHead:
    """q, k and v fused with their rows head by head ([q_h, k_h, v_h] for each head h,
    GPT-NeoX's query_key_value) into the rule's parts, each its heads in order."""

    def __call__(self, tensors: list, parts: int, cfg) -> list:
        (tensor,) = tensors
        heads, rest = cfg.n_heads, tensor.shape[1:]
        per_head = tensor.reshape(heads, parts, cfg.head_dim, *rest)  # (H, part, D, ...)
        return [per_head[:, j].reshape(heads * cfg.head_dim, *rest) for j in range(parts)]


class Renames:
    """Rename rules: (pattern, tfx name, *converters), tried in order; the first whose
    pattern matches the whole checkpoint name gives tfx's name (`\\1`-style groups), or a
    tuple of names its tensor is converted into (`Split`), and None drops the tensor (a
    buffer, a table tfx computes). The converters run in order on the tensor (a list of
    one) and must leave one tensor per name. Written as a family's table of names, it
    reads like the checkpoint's layout beside tfx's."""

    def __init__(self, rules: Iterable[tuple]):
        self.rules = [(re.compile(pattern), target, tuple(convert))
                      for pattern, target, *convert in rules]

    def __call__(self, name: str) -> tuple[bool, tuple[str, ...]]:
        """(matched, the tfx names: none when the tensor is dropped)."""
        found = self._find(name)
        return (found is not None, () if found is None else found[1])

    def _find(self, name: str):
        for pattern, target, convert in self.rules:
            match = pattern.fullmatch(name)
            if match:
                names = () if target is None else tuple(
                    match.expand(t) for t in ((target,) if isinstance(target, str) else target))
                return match, names, convert
        return None

    def apply(self, out: TensorMap, name: str, key: str, tensor, cfg=None) -> bool:
        """Put `tensor` (checkpoint name `key`, read as `name`) under its tfx name(s),
        converted, when a rule matches; False when none does."""
        found = self._find(name)
        if found is None:
            return False
        _, names, convert = found
        tensors = [tensor]
        for step in convert:
            tensors = step(tensors, len(names), cfg)
        if names and len(tensors) != len(names):
            raise ValueError(f"{key}: {len(tensors)} tensors for {len(names)} names")
        for ours, part in zip(names, tensors):
            out.put(ours, key, part)
        return True

    def read(self, state: dict, cfg=None) -> TensorMap:
        """Every tensor of `state` through the rules; one no rule matches is kept under
        its own name (and reported as unexpected)."""
        out = TensorMap()
        for key, tensor in state.items():
            if not self.apply(out, key, key, tensor, cfg):
                out.keep(key, tensor)
        return out


__all__ = ["Family", "FAMILIES", "ARCHITECTURES", "MODEL_TYPES", "NO_HEAD", "register",
           "unregister", "archs_of", "family_of", "no_token_tables", "TensorMap", "Renames",
           "Split", "Transpose", "HeadByHead"]
