"""The one transformer, as a reader sees it: every family is this model with config
switches on, never a second model class.

Read in forward order: `taps.py` (the identity modules every intermediate passes through,
so it can be recorded or edited by its trace name), `norms.py`, `positions.py` (sinusoidal,
learned and rotary positions; the embedding), `attention.py` (the KV cache and the one
attention formula; `mla.py`, LatentAttention: DeepSeek's attention, the same formula on
latent projections), `feedforward.py`
(`moe.py`: the router and experts of a mixture-of-experts layer), then `transformer.py`
(blocks, stacks, the model and `build_model`). Beside them: `decoding.py`, the same arithmetic arranged for one cached
token at a time (held bit-equal to the forward by tests), and `streaming.py`, which keeps a
checkpoint larger than memory on disk and reads one part at a time through a plan that
core/checkpoints makes. `finite.py` is the check every forward makes: a NaN or infinity
stops the run where it arises, named (NonFiniteError).

May import: torch, core.config, core.trace and errors. Never checkpoints, tokenizers or anything
above them: core/load.py puts a checkpoint's tensors into a model.
"""
from .attention import KVCache, explicit_attention
from .positions import apply_rope, rope_angles, rope_frequencies, rope_tables, sinusoidal_table
from .taps import Tap
from .transformer import InMemory, Stack, Transformer, build_model, tap_names

__all__ = ["Transformer", "Stack", "build_model", "tap_names", "KVCache", "Tap", "InMemory",
           "sinusoidal_table", "rope_angles", "rope_frequencies", "rope_tables", "apply_rope",
           "explicit_attention"]
