"""Results of the dataset commands: scan, top, collect and patch --pairs. Each says which
corpus it read (source, kind, sha256, documents) and how much (tokens, windows)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from . import Result, optional


@dataclass(kw_only=True)
class CorpusRun:
    """Fields every corpus command carries."""

    corpus: dict  # source, kind, field, documents, sha256, max_docs
    documents: int = 0
    windows: int = 0
    tokens: int = 0  # (a field: it hides Result.tokens, the pieces of one text)
    ctx: int
    batch_size: int
    engine: str = "local"
    output: str | None = optional()  # -o DIR


@dataclass(kw_only=True)
class ScanResult(CorpusRun, Result):
    """tensors: scan.<metric> (L, H) for entropy, sink, prev_token, duplicate_token and
    induction; scan.resid_norm_mean and scan.resid_norm_max (L); scan.ffn_active (L, F),
    the fraction of tokens on which each neuron's activation is above 0."""

    command: ClassVar[str] = "scan"
    metrics: list[str]
    queries: dict  # metric -> the qualifying queries averaged over
    strongest: dict  # metric -> [{layer, head, value}], the 5 strongest heads
    dead_neurons: list[int]  # per layer: neurons never above 0
    ffn_width: int


@dataclass
class TopContext:
    tokens: list[str]  # the window's pieces around the example
    values: list[float | None]  # the unit's value at each (None outside the window)
    at: int  # index of the example's own token in tokens


@dataclass
class TopExample:
    value: float
    doc: int
    position: int  # in the document
    token: str
    context: TopContext


@dataclass
class TopUnit:
    unit: int
    examples: list[TopExample]


@dataclass(kw_only=True)
class TopResult(CorpusRun, Result):
    command: ClassVar[str] = "top"
    site: str
    k: int
    context: int
    units: list[TopUnit]  # with --sae: unit = the feature's index
    html: str | None = optional()
    sae: object | None = optional()  # --sae: features.SAEInfo of the SAE whose features ran


@dataclass
class SiteInfo:
    name: str
    dims: list[str]  # the trace's dims; rows are T, columns the others flattened
    shape: list[int]  # [tokens, width]
    dtype: str


@dataclass
class ShardInfo:
    file: str
    first_token: int
    tokens: int
    sha256: str


@dataclass(kw_only=True)
class CollectResult(CorpusRun, Result):
    command: ClassVar[str] = "collect"
    sites: list[SiteInfo]
    dtype: str
    shard_tokens: int
    shards: list[ShardInfo]
    resumed_shards: int  # shards found complete in DIR and kept
    manifest: str


@dataclass
class PairInfo:
    clean: str
    corrupt: str
    answer: str
    wrong: str
    m_clean: float
    m_corrupt: float


@dataclass(kw_only=True)
class PatchPairsResult(Result):
    """`tfx patch --pairs FILE`: tensors patch.effect (the mean over pairs of each cell's
    effect), patch.effect_std (its standard deviation over pairs) and patch.metric (the
    mean m of the patched runs)."""

    command: ClassVar[str] = "patch"
    pairs_file: str
    n_pairs: int
    site: str
    patched: str
    metric: str
    effect: str
    m_clean: float  # means over pairs
    m_corrupt: float
    pairs: list[PairInfo] = field(default_factory=list)
    batch: int
    batched_runs: int
    engine: str = "local"
