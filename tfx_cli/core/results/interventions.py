"""Results of the intervention commands (patch, attribute) and the record of what a run
changed (ablations and steering), which every result that ran with them carries as
`result.interventions`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import InputInfo, Result, optional


@dataclass
class Intervention:
    """One change made to a run: an ablation, a steering vector or a transcoder feature
    set, at one site."""

    kind: str  # "ablate", "steer" or "set"
    site: str  # as given: blocks.0.attn.context:h=1
    name: str  # the trace name it edits (blocks.{i}.resid_pre is blocks.{i-1}.resid_out)
    head: int | None = None
    position: int | None = None  # None: every position
    mode: str | None = optional()  # ablate: zero | mean
    toward: str | None = optional()  # steer: the two texts, K and the difference's size
    away: str | None = optional()
    toward_tokens: list[str] | None = optional()
    away_tokens: list[str] | None = optional()
    scale: float | None = optional()
    vector_norm: float | None = optional()  # L2 norm of activation(toward) - activation(away)
    # a feature of an SAE (--ablate features.{k} with --sae, --steer-feature DIR:IDX): the
    # SAE's folder and the feature's index; `name` is the site the SAE reconstructs
    sae: str | None = optional()
    feature: int | None = optional()
    # a transcoder feature set (--set-feature LAYER:POS:FEATURE=VALUE with --transcoders
    # DIR, kind "set"): the set's folder, the feature's layer, the value it was given and
    # the activation that value replaced at `position`; `name` is the FFN output it writes
    transcoders: str | None = optional()
    layer: int | None = optional()
    value: float | None = optional()
    activation: float | None = optional()


@dataclass
class TokenRef:
    id: int
    token: str


@dataclass
class PatchTable:
    """One table of an encoder–decoder's sweep: the cells of one stack, or of the
    decoder's cross-attention (tensors patch.{part}.effect and patch.{part}.metric)."""

    part: str  # encoder | decoder | cross
    patched: str  # the trace names patched, e.g. encoder.blocks.{i}.attn.out
    cells: str  # what a column is: source (positions), target (positions) or heads


@dataclass(kw_only=True)
class PatchResult(Result):
    """Activation patching: CORRUPT's run with one cell of CLEAN's activations put in.

    tensors: patch.effect (L, T) or (L, H) = (m_patched - m_corrupt) / (m_clean -
    m_corrupt), and patch.metric, m_patched itself, in the same cells."""

    command: ClassVar[str] = "patch"
    corrupt: InputInfo
    site: str  # resid_pre | attn_out | ffn_out | heads
    patched: str  # the trace names patched, e.g. blocks.{i}.attn.out
    answer: TokenRef
    wrong: TokenRef
    metric: str
    m_clean: float
    m_corrupt: float
    effect: str  # the formula
    differing_positions: list[int]
    n_cells: int
    batch: int  # cells per forward pass
    batched_runs: int  # forward passes the sweep made, each from its layer's input
    # an encoder–decoder: the sweep's tables, both stacks' (and cross-attention's)
    tables: list[PatchTable] | None = optional()
    # --site features: the SAE (results/features.SAEInfo) and the features patched, one
    # row of patch.effect each (positions across)
    sae: object | None = optional()
    features: list[int] | None = optional()


@dataclass
class Part:
    name: str
    value: float


@dataclass(kw_only=True)
class AttributeResult(Result):
    """Direct logit attribution at the last position: the parts of the final residual
    stream, each through the frozen final norm and the unembedding."""

    command: ClassVar[str] = "attribute"
    answer: TokenRef
    wrong: TokenRef | None = optional()
    position: int
    direction: str  # what each part is projected on
    logit_diff: float  # the model's own logit(answer) [- logit(wrong)]
    parts: list[Part]
    sum_of_parts: float
    unexplained: float  # logit_diff - sum_of_parts: float rounding only
    per_head: bool
    norm: str  # how the norms were frozen
    remainder: str  # what the remainder part holds
    # an encoder–decoder: the sum of the cross-attention parts, what the decoder reads
    # from the source directly into its last stream
    through_cross: float | None = optional()
    # with an SAE (--sae): the SAE (results/features.SAEInfo); its site's share of the
    # stream is split into features.{k}, features.bias and features.error parts
    sae: object | None = optional()
