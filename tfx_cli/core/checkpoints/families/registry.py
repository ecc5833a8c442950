"""The registry of the families tfx reads, and what their tensor mappings share.

A family is one `Family` declaration in its own module: the config.json `architectures`
and `model_type` names it answers to, its config reader, its tensor mapping, the names
its token table may be saved under, and whether its stack is causal. The module calls
`register` on import, and the package's __init__ imports every family module, so the
tables below are filled once; `family_of` and the dispatch in __init__ read nothing else.

`TensorMap` is the accumulator each mapping writes into (tfx name -> tensor, tfx name ->
checkpoint name), and `Renames` a list of rename rules (a pattern of checkpoint names and
the tfx name it becomes, first match wins), for the one-to-one names of a family; tensors
that are split, stacked or reordered stay in the mapping's own code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ....errors import WeightsError

# what a base model without an output head (BartModel) changes in its family's config
NO_HEAD = {"lm_head": False, "logits_bias": False, "tie_embeddings": False}


def _no_tables(cfg) -> tuple[str, ...]:
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
    token_tables: Callable[[Any], tuple[str, ...]] = _no_tables
    causal: bool = False
    headless: tuple[str, ...] = ()
    size_keys: tuple[str, ...] = ()

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


class Renames:
    """Rename rules: (pattern, template) pairs, tried in order; the first whose pattern
    matches the whole checkpoint name gives tfx's name (`\\1`-style groups), a template of
    None drops the tensor (a buffer, a table tfx computes). Written as a family's table of
    names, it reads like the checkpoint's layout beside tfx's."""

    def __init__(self, rules: Iterable[tuple[str, str | None]]):
        self.rules = [(re.compile(pattern), template) for pattern, template in rules]

    def __call__(self, name: str) -> tuple[bool, str | None]:
        """(matched, tfx name or None when dropped)."""
        for pattern, template in self.rules:
            match = pattern.fullmatch(name)
            if match:
                return True, None if template is None else match.expand(template)
        return False, None

    def apply(self, out: TensorMap, name: str, key: str, tensor) -> bool:
        """Put `tensor` (checkpoint name `key`, read as `name`) under its tfx name when a
        rule matches; False when none does."""
        matched, ours = self(name)
        if matched and ours is not None:
            out.put(ours, key, tensor)
        return matched


__all__ = ["Family", "FAMILIES", "ARCHITECTURES", "MODEL_TYPES", "NO_HEAD", "register",
           "unregister", "archs_of", "family_of", "TensorMap", "Renames"]
