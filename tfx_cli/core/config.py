"""Model configuration: one dataclass that switches the shared core, plus the presets.

Pure Python on purpose: `tfx count-params` and `tfx configs` read configs without
paying for a torch import.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..errors import ConfigError
from .config_moe import moe_features, validate_moe

NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")
# ModernBERT's GLU gates with the exact (erf) GELU, not GeGLU's tanh form
ACTIVATIONS += ("geglu_exact",)
MLM_ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")  # of a masked LM's head
SINUSOIDAL_LAYOUTS = ("interleaved", "halves")
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")
POSITIONALS = ("learned", "sinusoidal", "rope", "none", "relative")


@dataclass(frozen=True)
class ModelConfig:
    """Every switch the core understands. Field names are the JSON config keys."""

    vocab_size: int = 50257
    context_length: int = 1024
    d_model: int = 768
    n_heads: int = 12
    n_kv_heads: int | None = None  # None: same as n_heads (plain multi-head attention)
    n_layers: int = 12
    d_ff: int | None = None  # None: 4 * d_model
    dropout: float = 0.0  # kept for fidelity with the seeds; tfx always runs in eval mode
    qkv_bias: bool = False
    proj_bias: bool = True  # bias on the attention output and feed-forward projections
    norm: str = "layernorm"
    norm_position: str = "pre"
    ln_eps: float = 1e-5
    activation: str = "gelu_tanh"
    positional: str = "learned"
    rope_theta: float = 10000.0
    causal: bool = True
    tie_embeddings: bool = False
    token_types: int = 0  # BERT's segment embeddings (0: none)
    # Beyond DESIGN.md's list, needed by the real families:
    embed_norm: bool = False  # BERT normalises the embedding sum
    lm_head: bool = True  # BertModel has no output head
    pooler: bool = False  # BERT's pooler (counted, not run by the stage commands)
    tokenizer: str = "gpt2"  # default tokenizer for this config
    eos_ids: tuple[int, ...] = ()  # end-of-sequence tokens: generate stops at them
    # The switches of the newer decoder families (Qwen, Gemma, Mistral, Phi, GPT-NeoX);
    # each default is what GPT-2 and Llama do.
    head_dim: int | None = None  # None: d_model // n_heads (Gemma 3 and Qwen3 set their own)
    qk_norm: bool = False  # Qwen3: RMSNorm of each head's q and k before the rotation
    norm_plus_one: bool = False  # Gemma: RMSNorm scales by (1 + weight)
    sandwich_norm: bool = False  # Gemma 2/3: a norm after attention and after the FFN too
    parallel_residual: bool = False  # GPT-NeoX: x + attn(ln1(x)) + ffn(ln2(x))
    embed_scale: bool = False  # Gemma: token embeddings times sqrt(d_model)
    attn_scalar: float | None = None  # Gemma: scores divided by sqrt(this), not sqrt(head_dim)
    attn_softcap: float | None = None  # Gemma 2: scores = cap * tanh(scores / cap)
    final_softcap: float | None = None  # Gemma 2: logits = cap * tanh(logits / cap)
    sliding_window: int | None = None  # a query sees this many latest keys (itself included)
    sliding_layers: tuple[int, ...] | None = None  # the layers that slide; None: all of them
    rope_local_theta: float | None = None  # Gemma 3: the rotary base of the sliding layers
    rotary_dim: int | None = None  # GPT-NeoX: rotate only the first rotary_dim dims of a head
    rope_scaling: tuple = ()  # (("factor", 8.0), ("rope_type", "llama3"), ...): longer contexts
    # Encoder-decoder models (seed 001, the paper, Marian, BART): n_layers encoder blocks
    # and this many decoder blocks (masked self-attention, cross-attention, feed-forward);
    # 0 keeps the single stack of every other model.
    n_decoder_layers: int = 0
    decoder_start_id: int | None = None  # the id the decoder starts from (<start>; None: 0)
    sinusoidal_layout: str = "interleaved"  # "halves": sin in the first half (Marian)
    pos_offset: int = 0  # BART: learned position p reads row p + 2 of its table
    logits_bias: bool = False  # Marian, BART: a fixed bias added to the logits
    # Masked language models (BERT's, RoBERTa's and ModernBERT's heads), ModernBERT's
    # encoder and OLMo 2's norms; each default is what the families above do. A model
    # with an MLM head (one stack, not causal) is a masked LM: `next` fills its masks.
    mlm_head: bool = False  # dense -> activation -> norm between the stream and the head
    mlm_activation: str = "gelu"  # that head's activation
    head_bias: bool = False  # a learned bias per vocabulary entry on the logits (MLM decoders)
    norm_bias: bool = True  # LayerNorms with a shift (ModernBERT's have none)
    pre_norms: bool = True  # False: no norm before attention or the FFN (OLMo 2 norms after)
    first_block_norm: bool = True  # False: block 0 has no ln1 (ModernBERT: the embedding
    # norm serves)
    qk_norm_full: bool = False  # OLMo 2: q and k RMS-normed over all heads, before the split
    # T5, mT5, UMT5 (positional "relative"): no position rows; a learned bias per head and
    # bucket of query-key distance is added to every self-attention score (one table per
    # stack, read by all its layers; UMT5: one per layer). Cross-attention has none.
    relative_buckets: int = 32  # distances binned: exact up to a quarter, then log-spaced
    relative_max_distance: int = 128  # distances from here on share the last bucket
    relative_per_layer: bool = False  # UMT5: each layer's self-attention its own table
    unembed_scale: bool = False  # T5 with a tied head: the stream × d_model^-0.5 before it
    # -- Mixture of experts, attention sinks, latent attention (Mixtral, Qwen2-MoE,
    # Qwen3-MoE, OLMoE, gpt-oss, DeepSeek-V3). Each default keeps the model dense and its
    # attention as above; config_moe.py checks them and names them in features().
    n_experts: int = 0  # routed experts of an MoE layer (0: every layer is dense)
    experts_per_token: int = 0  # k: the experts each token is routed to
    expert_d_ff: int | None = None  # one expert's FFN width (None: d_ff)
    moe_layers: tuple[int, ...] | None = None  # the MoE layers (None: all); the rest dense
    router: str = "softmax"  # how logits become scores: softmax | softmax_topk | sigmoid
    router_norm: bool = True  # the k chosen scores renormalised to sum to 1
    router_bias: bool = False  # gpt-oss: a bias on the router's logits
    router_groups: int = 1  # DeepSeek-V3: experts in groups, a token picks ...
    router_topk_groups: int = 1  # ... this many groups, then its k experts inside them
    router_correction: bool = False  # DeepSeek-V3: a bias on the scores, for choosing only
    router_scale: float = 1.0  # DeepSeek-V3: the chosen weights times routed_scaling_factor
    shared_d_ff: int = 0  # a shared expert every token goes through (its width; 0: none)
    shared_gate: bool = False  # Qwen2-MoE: the shared expert scaled by sigmoid(x W_gate)
    expert_bias: bool = False  # gpt-oss: biases on the experts' projections
    swiglu_limit: float | None = None  # gpt-oss: gate <= limit, |up| <= limit, (up + 1)
    swiglu_alpha: float = 1.702  # gpt-oss: the gate's SiLU is g * sigmoid(alpha * g)
    attn_sinks: bool = False  # gpt-oss: a learned logit per head joins every softmax
    q_lora_rank: int = 0  # DeepSeek-V3 (MLA): queries through a latent this wide (0: none)
    kv_lora_rank: int = 0  # MLA: keys and values through a latent this wide (0: no MLA)
    qk_rope_dim: int = 0  # MLA: the rotated dims at the end of each q and k head
    v_head_dim: int | None = None  # MLA: a value head's width (None: head_dim)
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        for key in ("eos_ids", "sliding_layers", "moe_layers"):  # lists from a JSON config file
            if isinstance(getattr(self, key), list):
                object.__setattr__(self, key, tuple(getattr(self, key)))
        if isinstance(self.rope_scaling, dict):  # lists (longrope's factors) become tuples
            object.__setattr__(self, "rope_scaling", tuple(sorted(
                (k, tuple(v) if isinstance(v, list) else v)
                for k, v in self.rope_scaling.items())))
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        derived_head_dim = self.head_dim is None
        if derived_head_dim and _number(self.n_heads) and self.n_heads > 0:
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        self.validate(derived_head_dim)

    # -- derived sizes ----------------------------------------------------------------
    @property
    def attn_dim(self) -> int:
        """The width of the heads joined (n_heads * head_dim), d_model unless head_dim is
        set apart from it."""
        return self.n_heads * self.head_dim

    @property
    def is_encoder_decoder(self) -> bool:
        return self.n_decoder_layers > 0

    @property
    def start_id(self) -> int:
        """The decoder's first input id."""
        return self.decoder_start_id if self.decoder_start_id is not None else 0

    @property
    def rope(self) -> dict:
        """rope_scaling as a dict (empty: the plain rotation)."""
        return dict(self.rope_scaling)

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_window is not None and (
            self.sliding_layers is None or layer in self.sliding_layers)

    def features(self) -> list[str]:
        """The family switches that are on, in a few words each (configs, count-params)."""
        out = []
        if self.head_dim * self.n_heads != self.d_model:
            out.append(f"head_dim {self.head_dim}")
        for flag, words in (("qk_norm", "q/k norm"), ("norm_plus_one", "norm (1 + w)"),
                            ("sandwich_norm", "sandwich norms"),
                            ("parallel_residual", "parallel residual"),
                            ("embed_scale", "embed × √d")):
            if getattr(self, flag):
                out.append(words)
        if self.attn_scalar is not None:  # T5: 1, its scores are not scaled
            out.append("unscaled scores" if self.attn_scalar == 1 else
                       f"÷√{self.attn_scalar:g}")
        if self.attn_softcap is not None:
            out.append(f"softcap {self.attn_softcap:g}")
        if self.final_softcap is not None:
            out.append(f"logit cap {self.final_softcap:g}")
        if self.sliding_window is not None:
            which = "" if self.sliding_layers is None else \
                f" on {len(self.sliding_layers)}/{self.n_layers} layers"
            out.append(f"window {self.sliding_window}{which}")
        if self.rotary_dim is not None:
            out.append(f"rotary {self.rotary_dim}/{self.head_dim}")
        if self.rope_scaling:
            out.append(f"rope {self.rope.get('rope_type', 'default')}")
        if self.is_encoder_decoder:
            out.append("encoder–decoder")
        out += self._mlm_features()
        out += self._relative_features()
        out += moe_features(self)
        return out

    # -- mixture of experts (config_moe.py) ----------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        """Does block `layer` route its tokens to experts (else a dense FFN)?"""
        return self.n_experts > 0 and (self.moe_layers is None or layer in self.moe_layers)

    @property
    def moe_layer_list(self) -> list[int]:
        return [i for i in range(self.n_layers) if self.is_moe_layer(i)]

    @property
    def v_dim(self) -> int:
        """A value head's width: head_dim, or MLA's v_head_dim."""
        return self.v_head_dim or self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_masked_lm(self) -> bool:
        """Predicts the tokens hidden behind a mask, reading the whole text (BERT,
        RoBERTa, ModernBERT): one stack, not causal, an output head after an MLM head. (A
        hand-made encoder with a plain head still reads as predicting after the text.)"""
        return self.lm_head and self.mlm_head and not self.causal and \
            not self.is_encoder_decoder

    def _mlm_features(self) -> list[str]:
        out = []
        for flag, words in (("mlm_head", f"MLM head ({self.mlm_activation})"),
                            ("head_bias", "logits bias"), ("qk_norm_full", "q/k norm (all heads)")):
            if getattr(self, flag):
                out.append(words)
        for flag, words in (("norm_bias", "norms without shift" if self.norm == "layernorm"
                             else ""),
                            ("pre_norms", "no pre-norms"),
                            ("first_block_norm", "no ln1 in block 0")):
            if not getattr(self, flag) and words:
                out.append(words)
        return out

    def _relative_features(self) -> list[str]:
        """T5's switches, in features()' words."""
        if self.positional != "relative":
            return ["logits × d^-0.5"] if self.unembed_scale else []
        out = [f"relative bias ({self.relative_buckets} buckets"
               + (", per layer)" if self.relative_per_layer else ")")]
        return out + (["logits × d^-0.5"] if self.unembed_scale else [])

    @property
    def has_final_norm(self) -> bool:
        # Pre-LN stacks need a last norm before the head; post-LN blocks end normalised.
        return self.norm_position == "pre"

    def validate(self, derived_head_dim: bool = True) -> None:
        for name in ("vocab_size", "context_length", "d_model", "n_heads", "n_kv_heads",
                     "n_layers", "d_ff", "head_dim"):
            value = getattr(self, name)
            _refuse_too_large(f"config field {name}", name, value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"config field {name} must be a whole number, got {value!r}")
            if value <= 0:
                raise ConfigError(f"config field {name} must be positive, got {value}")
        for name, limit in _LIMITS.items():
            if getattr(self, name) > limit:
                raise ConfigError(f"config field {name}={getattr(self, name)} is beyond tfx's "
                                  f"limit of {limit:,}; choose a smaller value")
        if derived_head_dim and self.d_model % self.n_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}; "
                f"choose a head count among {_divisors(self.d_model)}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                "(each key/value head serves an equal group of query heads)")
        if self.positional == "rope" and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head dimension, got {self.head_dim}")
        self._validate_family()
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        for name, allowed in (("norm", NORMS), ("norm_position", NORM_POSITIONS),
                              ("activation", ACTIVATIONS), ("positional", POSITIONALS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"config field {name}={getattr(self, name)!r} is not one of "
                                  f"{', '.join(allowed)}")
        if not _number(self.dropout) or not 0 <= self.dropout < 1:
            raise ConfigError(f"config field dropout must be in [0, 1), got {self.dropout!r}")
        # a zero, negative or infinite eps or rotary base makes every pattern NaN
        for name in ("ln_eps", "rope_theta"):
            value = getattr(self, name)
            if not _number(value) or not 0 < value < float("inf"):
                raise ConfigError(f"config field {name} must be a positive, finite number, "
                                  f"got {value!r}")
        ids = self.eos_ids
        if not isinstance(ids, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.vocab_size
                for i in ids):
            raise ConfigError(f"config field eos_ids must list token ids below vocab_size "
                              f"{self.vocab_size}, got {list(ids) if isinstance(ids, tuple) else ids!r}")
        if not isinstance(self.token_types, int) or self.token_types < 0:
            raise ConfigError(f"config field token_types must be >= 0, got {self.token_types!r}")
        if self.tie_embeddings and not self.lm_head:
            raise ConfigError("tie_embeddings needs lm_head: there is no head to tie")
        self._validate_seq2seq()
        self._validate_mlm()
        self._validate_relative()
        validate_moe(self)

    def _validate_mlm(self) -> None:
        if self.mlm_activation not in MLM_ACTIVATIONS:
            raise ConfigError(f"config field mlm_activation={self.mlm_activation!r} is not one "
                              f"of {', '.join(MLM_ACTIVATIONS)}")
        if (self.mlm_head or self.head_bias or self.logits_bias) and not self.lm_head:
            raise ConfigError("mlm_head, head_bias and logits_bias need lm_head: there is no "
                              "head to put them on")
        if self.qk_norm_full and self.qk_norm:
            raise ConfigError("qk_norm (per head) and qk_norm_full (all heads at once) are "
                              "two ways to norm q and k; set one of them")
        if self.mlm_head and self.causal:
            raise ConfigError("mlm_head is a masked LM's head, and a masked LM reads the "
                              "whole text: set causal to false")
        if self.is_encoder_decoder and (self.mlm_head or self.head_bias or not (
                self.pre_norms and self.first_block_norm)):
            raise ConfigError("mlm_head, head_bias, and pre_norms or first_block_norm false "
                              "are not supported in encoder–decoder models")

    def _validate_seq2seq(self) -> None:
        n = self.n_decoder_layers
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= _LIMITS["n_layers"]:
            raise ConfigError(f"config field n_decoder_layers must be a whole number from 0 "
                              f"to {_LIMITS['n_layers']:,}, got {n!r}")
        for name in ("pos_offset",):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"config field {name} must be a whole number >= 0, got "
                                  f"{value!r}")
        start = self.decoder_start_id
        if start is not None and (isinstance(start, bool) or not isinstance(start, int)
                                  or not 0 <= start < self.vocab_size):
            raise ConfigError(f"config field decoder_start_id must be a token id below "
                              f"vocab_size {self.vocab_size}, got {start!r}")
        if self.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ConfigError(f"config field sinusoidal_layout={self.sinusoidal_layout!r} is "
                              f"not one of {', '.join(SINUSOIDAL_LAYOUTS)}")
        if not n:
            return
        if self.causal:
            raise ConfigError("an encoder–decoder model's encoder reads the whole source: set "
                              "causal to false (the decoder is always causal)")
        if self.positional == "rope" or self.token_types or self.sliding_window is not None:
            raise ConfigError("rotary positions, token types and sliding windows are not "
                              "supported in encoder–decoder models")

    def _validate_relative(self) -> None:
        """T5's relative position bias: half the buckets (a quarter, bidirectional) count
        distances one by one, the rest spread logarithmically up to max_distance."""
        for name in ("relative_buckets", "relative_max_distance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"config field {name} must be a positive whole number, got "
                                  f"{value!r}")
        if self.positional != "relative":
            return
        if self.relative_buckets < 4 or self.relative_max_distance <= self.relative_buckets // 2:
            raise ConfigError(f"config field relative_buckets={self.relative_buckets} needs at "
                              "least 4 buckets and relative_max_distance above half of them, "
                              f"got {self.relative_max_distance}")

    def _validate_family(self) -> None:
        for name in ("attn_scalar", "attn_softcap", "final_softcap", "rope_local_theta"):
            value = getattr(self, name)
            if value is not None and (not _number(value) or not 0 < value < float("inf")):
                raise ConfigError(f"config field {name} must be a positive, finite number or "
                                  f"null, got {value!r}")
        for name in ("sliding_window", "rotary_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value <= 0):
                raise ConfigError(f"config field {name} must be a positive whole number or "
                                  f"null, got {value!r}")
        if self.rotary_dim is not None and (self.rotary_dim > self.head_dim or
                                            self.rotary_dim % 2):
            raise ConfigError(f"config field rotary_dim={self.rotary_dim} must be even and at "
                              f"most head_dim={self.head_dim}")
        layers = self.sliding_layers
        if layers is not None and (not isinstance(layers, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.n_layers
                for i in layers)):
            raise ConfigError(f"config field sliding_layers must list layers 0 to "
                              f"{self.n_layers - 1}, got {list(layers) if isinstance(layers, tuple) else layers!r}")
        rope = self.rope
        kind = rope.get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise ConfigError(f"rope scaling type {kind!r} is not supported; tfx computes "
                              f"{', '.join(ROPE_TYPES)}")
        if kind != "default" and not (_number(rope.get("factor")) and rope["factor"] > 0):
            raise ConfigError(f"rope scaling {kind} needs a positive factor, got "
                              f"{rope.get('factor')!r}")
        if kind == "longrope":
            pairs = (self.rotary_dim or self.head_dim) // 2
            for key in ("short_factor", "long_factor"):
                value = rope.get(key)
                if not (isinstance(value, tuple) and len(value) == pairs and
                        all(_number(v) and v > 0 for v in value)):
                    raise ConfigError(f"rope scaling longrope needs {key}: {pairs} positive "
                                      f"numbers, one per rotated pair")
            old = rope.get("original_max_position_embeddings")
            if not (isinstance(old, int) and not isinstance(old, bool) and old > 0):
                raise ConfigError("rope scaling longrope needs original_max_position_"
                                  "embeddings, the context it was trained on")

    def to_dict(self) -> dict:
        """The JSON config: a file holding it reads back as this config. head_dim is null
        where it is d_model / n_heads, so an edited d_model or head count derives it again."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if f.name == "rope_scaling" else \
                list(value) if isinstance(value, tuple) else value
        if self.head_dim * self.n_heads == self.d_model:
            out["head_dim"] = None
        for name in QUIET_AT_DEFAULT:  # written only where a family switches them
            if out[name] == _DEFAULTS[name]:
                del out[name]
        for kind, names in POSITIONAL_ONLY.items():
            if self.positional != kind:
                for name in names:
                    del out[name]
        return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _divisors(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(map(str, divs[:12])) + (" ..." if len(divs) > 12 else "")


# Far beyond any real checkpoint, but small enough that a typo fails fast instead of
# building a million modules or asking for terabytes.
_LIMITS = {"vocab_size": 10_000_000, "context_length": 1_048_576, "d_model": 65_536,
           "n_heads": 4096, "n_layers": 1024, "d_ff": 262_144}


def _refuse_too_large(what: str, name: str, value) -> None:
    """A number far past any size tfx builds (1e30 layers; JSON writes it as a float) is
    out of range, whatever its spelling: said so, rather than asking for a whole number."""
    limit = _LIMITS.get(name, max(_LIMITS.values()))
    if isinstance(value, float) and value > limit:  # inf too; NaN compares false
        raise ConfigError(f"{what} is {value:g}: out of range, past tfx's limit of "
                          f"{limit:,}; choose a smaller value")


FIELD_NAMES = tuple(f.name for f in fields(ModelConfig))
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}
# The masked-LM, OLMo 2, T5 head, mixture-of-experts, sink and latent-attention
# switches are left out of the JSON config (and every --json
# "model" object) where they keep their defaults: the configs of every other family read
# and print as they did before the switches existed.
MOE_FIELDS = ("n_experts", "experts_per_token", "expert_d_ff", "moe_layers", "router",
              "router_norm", "router_bias", "router_groups", "router_topk_groups",
              "router_correction", "router_scale", "shared_d_ff", "shared_gate",
              "expert_bias", "swiglu_limit", "swiglu_alpha", "attn_sinks",
              "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim")
QUIET_AT_DEFAULT = ("mlm_head", "mlm_activation", "head_bias", "norm_bias", "pre_norms",
                    "first_block_norm", "qk_norm_full", "unembed_scale", *MOE_FIELDS)
# fields that mean something only with one kind of positions: written with it, left out
# of every other config (each family's JSON then holds its own switches)
POSITIONAL_ONLY = {"relative": ("relative_buckets", "relative_max_distance",
                                "relative_per_layer")}




def config_from_dict(data: dict, *, source: str = "config") -> ModelConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object of config fields")
    unknown = sorted(set(data) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"{source}: unknown config key(s) {', '.join(unknown)}; "
                          f"valid keys: {', '.join(FIELD_NAMES)}")
    types = {f.name: f.type for f in fields(ModelConfig)}
    for key, value in data.items():
        _check_type(source, key, types[key], value)
    return ModelConfig(**data)


def _check_type(source: str, key: str, annotation: str, value) -> None:
    ann = str(annotation)
    if value is None and "None" in ann:
        return
    if key == "rope_scaling":
        def simple(v) -> bool:
            return isinstance(v, (int, float, str)) and not isinstance(v, bool)
        ok = isinstance(value, dict) and all(
            simple(v) or (isinstance(v, list) and all(simple(x) and not isinstance(x, str)
                                                      for x in v))
            for v in value.values())
        want = "an object of numbers and names, e.g. {\"rope_type\": \"linear\", \"factor\": 2}"
    elif ann.startswith("tuple"):
        ok = isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
        want = "a list of whole numbers"
    elif ann.startswith("int"):
        _refuse_too_large(f"{source}: config key {key}", key, value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "a whole number"
    elif ann.startswith("float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        want = "a number"
    elif ann.startswith("bool"):
        ok = isinstance(value, bool)
        want = "true or false"
    else:
        ok = isinstance(value, str)
        want = "a string"
    if not ok:
        import json

        raise ConfigError(f"{source}: config key {key} must be {want}, got {json.dumps(value)}")


def load_config_file(path: Path) -> ModelConfig:
    import json

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc.msg} at line "
                          f"{exc.lineno}, column {exc.colno}") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise ConfigError(f"config file {path} is nested too deeply to be a config; give "
                          "a JSON object of config fields") from None
    cfg = config_from_dict(data, source=str(path))
    if cfg.name == "custom":
        cfg = replace(cfg, name=path.stem)
    return cfg


def split_stack(name: str) -> tuple[str, str]:
    """An encoder–decoder's names carry their stack ("decoder.blocks.0.cross.q"):
    (stack, the rest), the stack "" for a single-stack model's names."""
    for stack in ("encoder", "decoder"):
        if name.startswith(stack + "."):
            return stack, name[len(stack) + 1:]
    return "", name


def tied_parameters(cfg: ModelConfig) -> dict[str, str]:
    """A model's parameters that are another one (name -> the name they share): an
    encoder–decoder's decoder token table is the encoder's, and a tied head is the token
    table."""
    table = "encoder.embed.tok_emb.weight" if cfg.is_encoder_decoder else \
        "embed.tok_emb.weight"
    out = {}
    if cfg.is_encoder_decoder:
        out["decoder.embed.tok_emb.weight"] = table
    if cfg.lm_head and cfg.tie_embeddings:
        out["lm_head.weight"] = table
    return out


def part_of(name: str) -> str:
    """The part of the model a parameter belongs to: "embed", "blocks.{i}" or "head" (the
    final norm and the output head); an encoder–decoder's stacks prefix their embedding and
    blocks ("encoder.blocks.0"), the encoder's final norm is "encoder.ln_f" and the
    decoder's is in "head". Streaming reads and lets go of the weights part by part."""
    stack, name = split_stack(name)
    prefix = stack + "." if stack else ""
    if name.startswith("blocks."):
        return prefix + ".".join(name.split(".")[:2])
    if name.startswith("embed."):
        return prefix + "embed"
    return "encoder.ln_f" if stack == "encoder" else "head"


__all__ = ["ModelConfig", "FIELD_NAMES", "config_from_dict", "load_config_file",
           "split_stack", "tied_parameters", "part_of"]
