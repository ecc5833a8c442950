"""Result of `tfx features` (an SAE's features per token), the description of an SAE
that every result run with one carries, and the results of `tfx train-sae` and
`tfx eval-sae`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import Result, internal, optional
from .datasets import CorpusRun


@dataclass
class SAEInfo:
    """Which SAE ran, and where: its folder, format and architecture, its sizes, the
    site as its file names it (a TransformerLens hook name) and as tfx does."""

    path: str
    format: str  # saelens | gemma-scope | gemma-scope-2 | tfx | transcoder-layer
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


@dataclass(kw_only=True)
class TrainSAEResult(Result):
    """`tfx train-sae`: an SAE trained on a collect folder's site, written in SAELens's
    format to `output`; judged on the held-out last tokens (fvu, l0, dead)."""

    command: ClassVar[str] = "train-sae"
    collect: str  # the collect folder read
    site: str  # its site (a tfx trace name)
    hook_name: str  # the site as cfg.json names it (TransformerLens's hook)
    output: str  # SAE_DIR: cfg.json + sae_weights.safetensors
    architecture: str  # topk | standard (ReLU with an L1 penalty)
    d_in: int
    latents: int
    k: int | None = optional()
    l1: float | None = optional()
    lr: float
    batch_size: int
    steps: int
    epochs: float  # passes over the training tokens
    seed: int
    holdout: float
    b_dec_init: str
    dead_after: int  # tokens without firing that make a latent dead
    aux_k: int  # AuxK's dead latents per token (0: off)
    aux_coef: float | None = optional()
    train_tokens: int
    holdout_tokens: int
    skip_first: int | None = optional()  # each window's first positions left out
    scale: float  # the inputs were trained × this (√d_in / mean norm); folded out on saving
    resumed_from: int  # the step a checkpoint in SAE_DIR let this run start at
    fvu: float | None  # on the held-out tokens
    l0: float  # mean features firing per held-out token
    dead: int  # latents firing on no held-out token
    dead_fraction: float
    dead_in_training: int  # latents that had not fired in dead_after tokens at the end
    loss_first: float
    loss_last: float
    losses: list[float]  # the training loss, as means over up to 100 equal spans of steps
    # eval-sae's CE-loss score of the SAE written (its site replaced) on score_tokens of
    # the collect folder's last tokens; None with --score-tokens 0
    ce_loss_score: float | None = optional()
    # what zeroing the site adds to the mean loss (the score's denominator), and whether
    # that is under 5% of the clean loss, which makes the score noisy (it can pass 1)
    ce_ablation_delta: float | None = optional()
    ce_loss_score_noisy: bool | None = optional()
    score_tokens: int | None = optional()
    score_note: str | None = optional()  # why the score was left out (the folder's model)
    not_converged: str | None = optional()  # why training looks unfinished, and the fix
    seconds: float = internal(0.0)  # this run's training time (terminal only: not the same twice)
    tokens_per_s: float | None = internal(None)


@dataclass
class TranscoderSetInfo:
    """Which transcoder set ran: its folder, hooks (TransformerLens names in config.yaml)
    and the tfx site its features read, its sizes and activation."""

    path: str
    kind: str  # transcoder_set | cross_layer_transcoder
    feature_input_hook: str
    feature_output_hook: str
    site: str  # within each block: resid_mid, ln2.normed or ln2.out
    n_layers: int
    d_model: int
    width: int  # features per layer
    activation: str  # relu | jumprelu | topk
    skip: bool  # a linear skip path W_skip


@dataclass
class EvalLayer:
    """One layer of a transcoder set judged on the clean run's MLP input and output."""

    layer: int
    l0: float
    fvu: float | None  # of the MLP output
    explained_variance: float | None
    cosine: float | None
    dead: int
    dense: int


@dataclass(kw_only=True)
class EvalSAEResult(CorpusRun, Result):
    """`tfx eval-sae`: SAEBench's core scores of an SAE (or of a transcoder set, every MLP
    replaced at once) over a corpus (every real token; CE and KL over the positions with
    a next token in their window).

    tensors: eval.density (F) the fraction of tokens each feature is active on; (L, F)
    for a transcoder set."""

    command: ClassVar[str] = "eval-sae"
    sae: SAEInfo | None = optional()  # --sae
    transcoders: TranscoderSetInfo | None = optional()  # --transcoders
    layers: list[EvalLayer] | None = optional()  # --transcoders: per layer
    l0: float  # features active per token (a set: the mean of its layers')
    fvu: float | None  # Σ|x − x̂|² / Σ|x − mean x|² (a set: pooled over its layers)
    explained_variance: float | None  # 1 − fvu
    cosine: float | None  # mean cos(x, x̂)
    ce_clean: float | None  # mean next-token cross-entropy, the plain model
    ce_ablation: float | None  # ... with the site set to zeros
    ce_replaced: float | None  # ... with the site set to the SAE's reconstruction
    ce_loss_score: float | None  # (ce_ablation − ce_replaced) / (ce_ablation − ce_clean)
    kl_ablation: float | None  # mean KL(clean ‖ zero-ablated)
    kl_replaced: float | None  # mean KL(clean ‖ replaced)
    kl_score: float | None  # (kl_ablation − kl_replaced) / kl_ablation
    # ce_ablation − ce_clean (the score's denominator), and whether it is under 5% of the
    # clean loss, which makes the score noisy (it can land far above 1 or below 0)
    ce_ablation_delta: float | None = optional()
    ce_loss_score_noisy: bool | None = optional()
    dead: int  # features active on no token
    dense: int  # features active on more than dense_above of the tokens
    dense_above: float
    predicted: int  # positions CE and KL are averaged over


@dataclass
class TranscoderLayer:
    """One layer's transcoder of `tfx train-transcoder`, judged on the held-out tokens."""

    layer: int
    file: str  # DIR/layer_{i}.safetensors
    fvu: float | None  # of the MLP's output
    l0: float
    dead: int  # latents firing on no held-out token
    dead_in_training: int
    loss_first: float
    loss_last: float
    losses: list[float]
    resumed_from: int  # the step a checkpoint let this run start at (steps: already done)
    train_tokens: int
    holdout_tokens: int
    steps: int
    epochs: float
    ce_loss_score: float | None = optional()  # this layer's MLP alone replaced
    # what zeroing this MLP adds to the mean loss, and whether that is under 5% of the
    # clean loss (the score then noisy: its denominator is small)
    ce_ablation_delta: float | None = optional()
    ce_loss_score_noisy: bool | None = optional()


@dataclass(kw_only=True)
class TrainTranscoderResult(Result):
    """`tfx train-transcoder`: per-layer transcoders (an MLP's input -> its output) trained
    on a collect folder's pairs and written in circuit-tracer's layout to `output`."""

    command: ClassVar[str] = "train-transcoder"
    collect: str
    output: str
    input_site: str  # within each block: ln2.out or resid_mid
    feature_input_hook: str  # its TransformerLens name in config.yaml
    feature_output_hook: str
    architecture: str  # topk | standard (ReLU with an L1 penalty) | jumprelu
    d_in: int
    latents: int
    k: int | None = optional()
    l1: float | None = optional()
    jumprelu: float | None = optional()  # JumpReLU's L0 coefficient
    skip: bool
    lr: float
    batch_size: int
    seed: int
    holdout: float
    layers: list[TranscoderLayer]
    n_layers: int  # the model's
    config: str | None  # DIR/config.yaml once every layer has its file
    missing: list[int]  # layers with no file yet
    # the whole set's CE-loss score, every MLP replaced at once (once config.yaml exists)
    ce_loss_score: float | None = optional()
    score_tokens: int | None = optional()  # the collect folder's last tokens scored on
    score_note: str | None = optional()  # why the score was left out (the folder's model)
    not_converged: str | None = optional()  # why training looks unfinished, and the fix
    seconds: float = internal(0.0)
    tokens_per_s: float | None = internal(None)
