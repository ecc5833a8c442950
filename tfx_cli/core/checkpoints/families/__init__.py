"""The model families tfx reads, one module each: what a HuggingFace config.json says, as
ModelConfig switches, and the checkpoint's tensor names, as tfx's parameter names.

Each family module declares its families once, as `registry.Family` values it registers
on import: the `architectures` and `model_type` names, the config reader
(`(hf, where) -> ModelConfig keyword arguments`), the tensor mapping (`(state, cfg) ->
(tfx name -> tensor, tfx name -> checkpoint name)`; it works on meta tensors as well as
real ones, so a load is planned before any tensor is read) and the token tables. This
package imports them all, and names a config.json's family and dispatches to it by the
registry alone. It imports nothing of tfx but errors (and torch, lazily, where a mapping
makes a tensor).
"""
from __future__ import annotations

from typing import Callable

from ....errors import WeightsError
# each family module registers its families as it is imported (the order is the order
# families_read lists them in)
from . import gpt2, bert, decoders, seq2seq, t5  # noqa: F401
from . import modernbert, olmo, moe, gptoss, deepseek  # noqa: F401
from .decoders import DECODERS, decoder_config, text_config
from .gpt2 import map_nanogpt, nanogpt_config
from .registry import ARCHITECTURES, FAMILIES, MODEL_TYPES, archs_of, family_of
from .seq2seq import SEQ2SEQ, TOKEN_TABLES, check_tables
from .t5 import T5_FAMILIES, T5_TOKEN_TABLES
from .values import check_values


def hf_family(hf: dict, where: str) -> str:
    """The family of a config.json, from its `architectures` (or, in older and
    hand-written configs without them, its `model_type`); a one-line refusal naming the
    architecture otherwise. `where`: the config file, for the message."""
    archs = archs_of(hf)
    for arch in archs:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    if not archs and hf.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[hf["model_type"]]
    named = ", ".join(map(str, archs)) or f"model_type {hf.get('model_type')!r}"
    raise WeightsError(f"{where}: unknown architecture {named}; tfx reads the families "
                       f"{families_read()}")


def families_read() -> str:
    """The families tfx reads, each with its HF architectures: "gpt2 (GPT2LMHeadModel,
    GPT2Model), bert (BertModel), ..." (for the unknown-architecture message)."""
    by_family: dict[str, list[str]] = {}
    for arch, family in ARCHITECTURES.items():
        by_family.setdefault(family, []).append(arch)
    return ", ".join(f"{family} ({', '.join(archs)})" for family, archs in by_family.items())


def hf_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments (all but the tokenizer) of a family's config.json,
    its values checked first (values.py)."""
    declared = family_of(family)
    check_values(family, text_config(hf), where, declared.size_keys)
    return declared.read(hf, where)


def token_tables(family: str, cfg) -> tuple[str, ...]:
    """The names under which a family's encoder–decoder checkpoints may save their one
    token table (a tied head's too): every copy saved must be the same tensor."""
    return family_of(family).token_tables(cfg)


def hf_map(family: str) -> Callable:
    """The family's tensor-name mapping: (state, cfg) -> (tfx state, tfx name -> theirs)."""
    return family_of(family).mapping


__all__ = ["ARCHITECTURES", "MODEL_TYPES", "FAMILIES", "DECODERS", "SEQ2SEQ", "TOKEN_TABLES",
           "T5_FAMILIES", "T5_TOKEN_TABLES", "token_tables", "families_read",
           "hf_family", "hf_config", "hf_map", "check_tables", "decoder_config", "text_config",
           "nanogpt_config", "map_nanogpt"]
