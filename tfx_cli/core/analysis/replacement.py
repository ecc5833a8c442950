"""Where a transcoder set meets a model: the models the local replacement model is
written for (pre-norm, decoder-only blocks held in memory), and the set read against
the model's layer count and width. `tfx graph`, next/generate --transcoders and eval-sae
--transcoders open their set here; the set itself is core/features/transcoder_set.py's."""
from __future__ import annotations

from ...errors import UsageError
from ..features.transcoder_set import TranscoderSet, read_transcoders


def check_model(loaded, command: str = "tfx graph") -> None:
    """Refuse, by name, the models whose blocks are not the pre-norm attention-then-FFN
    blocks the replacement model is written for."""
    cfg, model = loaded.cfg, loaded.model
    why = None
    if cfg.is_encoder_decoder:
        why = "an encoder–decoder"
    elif model.residency.streamed:
        why = "streamed from disk (its weights do not fit in --max-memory)"
    elif not cfg.causal or not cfg.lm_head or cfg.mlm_head:
        why = "not a causal language model"
    elif cfg.norm_position != "pre" or not cfg.pre_norms or not cfg.first_block_norm:
        why = "not pre-norm"
    elif cfg.parallel_residual or cfg.sandwich_norm:
        why = "built with parallel or sandwich blocks"
    elif cfg.is_mla or any(cfg.is_moe_layer(i) for i in range(cfg.n_layers)):
        why = "built with latent attention or experts"
    elif cfg.embed_norm or cfg.token_types or cfg.positional == "relative":
        why = "built with an embedding norm, token types or relative positions"
    if why:
        raise UsageError(f"{command} needs a pre-norm decoder-only model; {cfg.name} is {why}; "
                         "use a GPT-2- or Llama-style model held in memory (a larger "
                         "--max-memory, where it is streamed)")


def open_transcoders(loaded, folder, command: str = "tfx graph") -> TranscoderSet:
    """The set in `folder` for the loaded model: the model checked first, then the set
    read against its layers and d_model (each refused by name)."""
    check_model(loaded, command)
    return read_transcoders(str(folder), n_layers=loaded.cfg.n_layers,
                            d_model=loaded.cfg.d_model)


__all__ = ["check_model", "open_transcoders"]
