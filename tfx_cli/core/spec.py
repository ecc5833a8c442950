"""What the user asked for: a ModelSpec (a preset or config file with size overrides and a
seed, or a checkpoint), and the ModelConfig it names. Pure Python: `count-params` and
`configs` read specs without torch; a checkpoint's architecture is read from its header
(core/checkpoints), never its tensors."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from ..errors import ConfigError
from .config import ModelConfig, load_config_file
from .presets import DEFAULT_CONFIG, PRESETS


def resolve_config(name_or_path: str | None) -> ModelConfig:
    """A preset name, or a path to a JSON file with ModelConfig's field names, a
    HuggingFace config.json of a family tfx reads, or a GGUF file (its header)."""
    name = name_or_path or DEFAULT_CONFIG
    if name in PRESETS:
        return PRESETS[name]
    if name.endswith(".json") or Path(name).is_file():
        # a HuggingFace config.json or a GGUF file is read as its checkpoint's header is
        # (core/checkpoints: no tensors, no torch); a tfx config by its field names
        from .checkpoints.architecture import foreign_config

        return foreign_config(Path(name)) or load_config_file(Path(name))
    raise ConfigError(f"unknown config {name!r}; valid presets: {', '.join(PRESETS)} "
                      "(or a path to a .json config file: tfx's, or a HuggingFace "
                      "config.json; or a .gguf file)")


def with_overrides(cfg: ModelConfig, *, heads: int | None = None, layers: int | None = None,
                   d_model: int | None = None, context: int | None = None,
                   tie: bool | None = None, vocab_size: int | None = None) -> ModelConfig:
    """Apply the command-line size overrides (random-weight configs only)."""
    changes: dict = {}
    if (d_model is not None or heads is not None) and \
            cfg.head_dim * cfg.n_heads == cfg.d_model:
        changes["head_dim"] = None  # derived from d_model and heads: derive it again
    if d_model is not None:
        changes["d_model"] = d_model
        if d_model != cfg.d_model and cfg.d_ff == 4 * cfg.d_model:
            changes["d_ff"] = 4 * d_model
    if heads is not None:
        changes["n_heads"] = heads
        if cfg.n_kv_heads == cfg.n_heads:
            changes["n_kv_heads"] = heads
        elif heads % cfg.n_kv_heads:
            changes["n_kv_heads"] = heads
    if layers is not None:
        changes["n_layers"] = layers
        if cfg.is_encoder_decoder:  # N encoder and N decoder blocks
            changes["n_decoder_layers"] = layers
        for name in ("sliding_layers", "moe_layers"):  # the listed layers that remain
            if getattr(cfg, name) is not None:
                changes[name] = tuple(i for i in getattr(cfg, name) if i < layers)
    if context is not None:
        changes["context_length"] = context
    if tie is not None:
        changes["tie_embeddings"] = tie
    if vocab_size is not None:
        changes["vocab_size"] = vocab_size
    if not changes:
        return cfg
    try:
        return replace(cfg, **changes)
    except ConfigError as exc:
        raise ConfigError(f"{exc.message} (after overrides)") from None


# ---------- ------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """Which model a command runs: a preset or config file with size overrides and a
    seed (random weights), or a checkpoint (real weights), and the tokenizer to read
    text with. The command-line options and the API's keyword arguments fill it."""

    config: str | None = None
    weights: str | None = None
    seed: int = 123
    heads: int | None = None
    layers: int | None = None
    d_model: int | None = None
    context: int | None = None
    tokenizer: str | None = None
    corpus: Path | None = None
    no_cache_weights: bool = False
    force: bool = False  # build even when the weights may not fit in memory
    dtype: str = "float32"  # float32 | bfloat16 | float16 (core/memory.DTYPES)
    max_memory: str | None = None  # "300MB": what a run may hold; None: the free memory
    device: str = "cpu"  # cpu | cuda | cuda:N | mps

    @property
    def overrides(self) -> dict:
        return {"heads": self.heads, "layers": self.layers, "d_model": self.d_model,
                "context": self.context}


SPEC_FIELDS = tuple(f.name for f in fields(ModelSpec))
SPEC_DEFAULTS = {f.name: f.default for f in fields(ModelSpec)}


def spec_config(spec: ModelSpec, *, progress=None) -> ModelConfig:
    """The config a spec asks for: a preset or JSON file with the size overrides applied,
    or the architecture a checkpoint brings (read from its header, no tensors; `progress`
    shows the one-time join of a checkpoint shipped in parts, see weights.resolve)."""
    if spec.weights:
        if spec.config:
            raise ConfigError("--config and --weights both given; real weights bring their "
                              "own architecture, so drop --config")
        changed = [f"--{k.replace('_', '-')}" for k, v in spec.overrides.items() if v is not None]
        if changed:
            raise ConfigError(f"{', '.join(changed)} cannot change a checkpoint's shape; "
                              "drop it, or use --config for random weights")
        from .checkpoints import checkpoint_config  # torch-light until tensors are read

        return checkpoint_config(spec.weights, progress=progress)
    return with_overrides(resolve_config(spec.config), **spec.overrides)


__all__ = ["ModelSpec", "SPEC_FIELDS", "SPEC_DEFAULTS", "spec_config", "resolve_config",
           "with_overrides"]
