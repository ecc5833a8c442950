"""Pickled torch files (nanoGPT's ckpt.pt, HF's older pytorch_model.bin), read with
torch.load(weights_only=True): tensors and plain containers only, never code."""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import WeightsError

_TORCH_MEMO: dict = {}


def file_id(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def torch_checkpoint(path: Path) -> dict:
    """A nanoGPT checkpoint (a dict with model_args and model), read safely and mapped
    (its tensors are read when used)."""
    key = file_id(path)
    if key in _TORCH_MEMO:
        return _TORCH_MEMO[key]
    obj = torch_load(path, mmap=True)
    if not (isinstance(obj, dict) and isinstance(obj.get("model_args"), dict)
            and isinstance(obj.get("model"), dict)):
        raise WeightsError(f"{path} is not a nanoGPT checkpoint (a dict with 'model_args' and "
                           "'model'); pass an HF folder or a .gguf instead")
    _TORCH_MEMO.clear()
    _TORCH_MEMO[key] = obj
    return obj


def torch_load(path: Path, mmap: bool = False):
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


def is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def bin_state(path: Path) -> dict:
    obj = torch_load(path, mmap=True)
    if not isinstance(obj, dict):
        raise WeightsError(f"{path} is not a state dict (it holds a {type(obj).__name__}); "
                           "save the model with save_pretrained")
    return obj


def forget() -> None:
    """Let go of the file a nanoGPT checkpoint was read from (a loaded model holds its own
    tensors)."""
    _TORCH_MEMO.clear()
