"""A checkpoint's architecture as a ModelConfig, read from its config.json, its GGUF header
or its pickled model_args: no tensor is read and torch is not imported (a nanoGPT .pt
needs torch to be unpickled at all)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ...errors import ConfigError, WeightsError
from ..config import ModelConfig, config_from_dict
from .cache import cache_read_json
from .families import decoder_config, hf_config, hf_family, nanogpt_config, text_config
from .gguf import gguf_reader
from .gguf_arch import hf_settings
from .locate import Checkpoint, resolve
from .torchfiles import torch_checkpoint


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
            cfg = _cached_config(ckpt) or _gguf_config(ckpt, gguf_reader(ckpt.path))
        else:
            cfg = ModelConfig(**nanogpt_config(torch_checkpoint(ckpt.path)["model_args"]))
    except (ConfigError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        # ModelConfig.validate, or a field of the wrong type in the checkpoint's metadata
        msg = getattr(exc, "message", None) or str(exc)
        raise WeightsError(f"{ckpt.path}: the checkpoint's architecture is not valid: "
                           f"{msg}") from None
    return replace(cfg, name=ckpt.name)


# -- a config file of another tool: --config config.json (HF) or --config FILE.gguf ----------
def foreign_config(path: Path) -> ModelConfig | None:
    """The ModelConfig of a --config file that is not tfx's own: a HuggingFace
    config.json of any family tfx reads (it names its `architectures` or `model_type`,
    keys no tfx config has), read as that family's checkpoint folder reads it; or a GGUF
    file's header. None for anything else (a tfx config, or a file for load_config_file
    to refuse). No tensor is read; a config of an architecture tfx cannot read is a
    ConfigError naming it and the families tfx reads."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError:
        return None
    if magic == b"GGUF" or path.suffix.lower() == ".gguf":
        try:
            return checkpoint_config(str(path))
        except WeightsError as exc:
            raise ConfigError(exc.message) from None
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # load_config_file says what is wrong with it
    if not isinstance(hf, dict) or not ("architectures" in hf or "model_type" in hf):
        return None
    where = str(path)
    name = path.parent.resolve().name if path.name == "config.json" else path.stem
    tokenizer = path.parent / "tokenizer.json"  # the folder's, when the config sits in one
    try:
        kw = hf_config(hf_family(hf, where), hf, where)
        kw.setdefault("tokenizer", str(tokenizer) if tokenizer.is_file() else "gpt2")
        cfg = ModelConfig(**kw, name=name)
    except WeightsError as exc:
        raise ConfigError(exc.message) from None
    except (ConfigError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        msg = getattr(exc, "message", None) or str(exc)
        raise ConfigError(f"{where}: the config's architecture is not valid: {msg}") from None
    return replace(cfg, eos_ids=eos_ids(text_config(hf).get("eos_token_id"),
                                        cfg.vocab_size)) if cfg.lm_head else cfg


def _tfx_config(ckpt: Checkpoint) -> ModelConfig:
    """A folder `tfx train` wrote: tfx-model.json holds the ModelConfig itself; its
    vocabulary file sits beside it."""
    doc = read_json(ckpt.path / "tfx-model.json")
    if doc.get("format") != "tfx-model/1" or not isinstance(doc.get("config"), dict):
        raise WeightsError(f"{ckpt.path / 'tfx-model.json'} is not a tfx model (format "
                           "tfx-model/1 with a config); train it again with tfx train")
    config = dict(doc["config"])
    vocab = config.get("tokenizer")
    if isinstance(vocab, str) and "/" not in vocab and vocab.endswith(".json"):
        if not (ckpt.path / vocab).is_file():  # the folder lost what tfx train wrote
            raise WeightsError(f"{ckpt.path} has no {vocab}, the vocabulary tfx train writes "
                               "beside the weights, so its ids cannot be read as text; copy "
                               "the whole folder, or train it again")
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
    data = cache_read_json(ckpt, "config.json")
    try:
        cfg = ModelConfig(**data) if data else None
    except (ConfigError, TypeError):
        return None  # a stale or damaged entry: read the source instead
    # the entry may have been written under another name for the same file (alias/path)
    return cfg and replace(cfg, tokenizer=ckpt.alias or str(ckpt.path))


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WeightsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightsError(f"{path} is not valid JSON ({exc}); the checkpoint is "
                           "corrupted") from None
    except RecursionError:
        raise WeightsError(f"{path} is nested too deeply to be a config; the checkpoint "
                           "is corrupted") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path} is not a JSON object; the checkpoint is corrupted")
    return data


def eos_ids(value, vocab_size: int) -> tuple[int, ...]:
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
        ids = eos_ids(read_json(gen).get("eos_token_id"), vocab)
        if ids:
            return ids
    return eos_ids(hf.get("eos_token_id"), vocab)


def _hf_config(ckpt: Checkpoint) -> ModelConfig:
    cfg = _hf_architecture(ckpt)
    hf = text_config(read_json(ckpt.path / "config.json"))
    if cfg.is_encoder_decoder:  # generate starts where generation_config.json says
        gen = ckpt.path / "generation_config.json"
        start = read_json(gen).get("decoder_start_token_id") if gen.is_file() else None
        if isinstance(start, int) and not isinstance(start, bool) and \
                0 <= start < cfg.vocab_size:
            cfg = replace(cfg, decoder_start_id=start)
    return replace(cfg, eos_ids=_hf_eos(ckpt, hf)) if cfg.lm_head else cfg


def _hf_architecture(ckpt: Checkpoint) -> ModelConfig:
    hf = read_json(ckpt.path / "config.json")
    where = str(ckpt.path / "config.json")
    family = hf_family(hf, where)
    tok_file = ckpt.path / "tokenizer.json"
    tokenizer = ckpt.alias or str(tok_file)
    if family == "gpt2" and not (tok_file.is_file() or ckpt.alias):
        tokenizer = "gpt2"  # a GPT-2 folder without its tokenizer.json reads GPT-2's BPE
    return ModelConfig(**hf_config(family, hf, where), tokenizer=tokenizer)


def _gguf_config(ckpt: Checkpoint, reader) -> ModelConfig:
    """The architecture a GGUF's keys describe, read as its HF family's config.json would
    be (core/gguf_arch.py says what each llama.cpp architecture stores)."""
    family, hf = hf_settings(reader, str(ckpt.path))
    cfg = decoder_config(family, hf, str(ckpt.path))
    return ModelConfig(**cfg, causal=True, tokenizer=ckpt.alias or str(ckpt.path),
                       eos_ids=eos_ids(reader.get("tokenizer.ggml.eos_token_id"),
                                        cfg["vocab_size"]))
