"""Result of `tfx features` (an SAE's features per token), and the description of an SAE
that every result run with one carries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import Result, optional


@dataclass
class SAEInfo:
    """Which SAE ran, and where: its folder, format and architecture, its sizes, the
    site as its file names it (a TransformerLens hook name) and as tfx does."""

    path: str
    format: str  # saelens | gemma-scope | gemma-scope-2 | tfx
    architecture: str  # standard, topk, jumprelu, gated, transcoder, ...
    d_in: int
    d_sae: int
    site: str  # as given or read (blocks.3.resid_pre)
    name: str  # the trace name it reads (blocks.2.resid_out)
    hook: str | None = optional()  # the file's own name of the site
    k: int | None = optional()  # TopK
    apply_b_dec_to_input: bool = True
    normalize: str = "none"
    site_out: str | None = optional()  # a transcoder's output site
    notes: list[str] | None = optional()


@dataclass
class FeatureAct:
    index: int
    activation: float


@dataclass
class TokenFeatures:
    """One position: its most active features, how many fire (L0), and how well the SAE
    reconstructs the site there."""

    position: int
    token: str
    l0: int  # features with a nonzero activation
    norm: float  # |x|, the site's value
    error_norm: float  # |x - x̂|
    cosine: float | None  # cos(x, x̂); None where either is zero
    top: list[FeatureAct]


@dataclass
class FeatureSummary:
    """One feature over the whole text: its largest activation, where, and on how many
    tokens it fires."""

    index: int
    max_activation: float
    position: int
    tokens: int


@dataclass(kw_only=True)
class FeaturesResult(Result):
    """An SAE's features on a text.

    tensors: features.acts (T, F) every feature's activation, dense; features.recon
    (T, d) the reconstruction of the site; features.error (T, d) = site − recon."""

    command: ClassVar[str] = "features"
    sae: SAEInfo
    per_token: int  # features listed per token
    positions: list[TokenFeatures]
    l0_mean: float
    fvu: float | None  # Σ|x - x̂|² / Σ|x - mean x|² over the text; None for one token
    cosine_mean: float | None
    error_norm_mean: float
    top_features: list[FeatureSummary]  # the features with the largest activations
    dead: int  # features that fire on no token of the text
