"""Results of the commands that need no model: configs and count-params."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from . import Result, optional, to_json

if TYPE_CHECKING:
    from ..config import ModelConfig
    from ..params import Row
    from .moe import MoeCount


@dataclass
class Preset:
    cfg: ModelConfig
    params: int

    def to_json(self) -> dict:
        return {**to_json(self.cfg.to_dict()), "name": self.cfg.name, "params": self.params}


@dataclass(kw_only=True)
class ConfigsResult(Result):
    command: ClassVar[str] = "configs"
    default: str
    presets: list[Preset]


@dataclass
class BlockCount:
    rows: list[Row]
    total: int
    parts: dict[str, int]
    n_layers: int
    all_blocks: int


@dataclass
class FlopSummary:
    seq_len: int
    per_token: int
    per_block: int
    without_attention: int
    per_sequence: int
    causal_skip_per_token: int | None
    rows: list[Row]
    block: list[Row]


@dataclass
class ParamCheck:
    """count-params --verify: the model built on the meta device against the count."""

    verified: bool
    model_params: int
    expected: int
    analytic_total: int
    modules: int
    modules_with_parameters: int
    parameter_tensors: int
    mismatched: list[str]
    notes: list[str]
    built_on: str


@dataclass(kw_only=True)
class CountParamsResult(Result):
    command: ClassVar[str] = "count-params"
    total: int
    non_embedding: int
    tied: bool
    shared: int
    parts: dict[str, int]
    breakdown: list[Row]
    per_block: BlockCount
    shape_convention: str
    memory_bytes: dict[str, int]
    seq_len: int
    flops_per_token: int
    flops_convention: str
    flops: FlopSummary
    # an encoder–decoder's decoder block (per_block is then an encoder block)
    decoder_per_block: BlockCount | None = optional()
    verify: ParamCheck | None = optional()
    # a mixture of experts: what one token uses of it (results/moe.py)
    moe: MoeCount | None = optional()
