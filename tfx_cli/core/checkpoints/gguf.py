"""GGUF files: the header and tensor table (gguf_file.py), what each llama.cpp
architecture stores (gguf_arch.py), and the tensors dequantised to float32 by the `gguf`
package, named as tfx names them."""
from __future__ import annotations

from pathlib import Path

from ...errors import WeightsError
from .gguf_file import TYPES as _GGUF_TYPE_TABLE
from .locate import Checkpoint
from .torchfiles import file_id

# GGUF tensor types tfx dequantises (what the gguf package implements, by name)
GGUF_TYPES = tuple(name for name, _, _ in _GGUF_TYPE_TABLE.values())

_GGUF_MEMO: dict = {}


def gguf_reader(path: Path):
    """The file's header and tensor table (gguf_file.GGUFFile), kept per process: the
    config and the tensors both read it."""
    key = file_id(path)
    if key in _GGUF_MEMO:
        return _GGUF_MEMO[key]
    from .gguf_file import GGUFFormatError, read_gguf

    try:
        reader = read_gguf(path)
    except GGUFFormatError as exc:
        # the reader's message names the file and what is wrong with it; said once
        raise WeightsError(f"cannot read GGUF file: {exc}; download it again, or give "
                           "another .gguf") from None
    except OSError as exc:
        raise WeightsError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None
    _GGUF_MEMO.clear()
    _GGUF_MEMO[key] = reader
    return reader


def gguf_source(ckpt: Checkpoint, reader):
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
        except GGUFFormatError as exc:  # names the file, the tensor and the fault
            raise WeightsError(f"cannot read GGUF file: {exc}; download it again, or give "
                               "another .gguf") from None
        except (ValueError, IndexError) as exc:
            raise WeightsError(f"{ckpt.path}: tensor {info.name} is truncated or corrupted "
                               f"({exc})") from None

    def mapper(state: dict, cfg) -> tuple[dict, dict]:
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


def forget() -> None:
    """Let go of the GGUF file read last (a loaded model holds its own tensors)."""
    _GGUF_MEMO.clear()
