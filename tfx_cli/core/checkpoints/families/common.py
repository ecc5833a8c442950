"""What the families' readers share: checkpoint prefixes, norm leaves, activation names."""
from __future__ import annotations

from ....errors import WeightsError

# HF activation names -> tfx's (GPT-2 and BERT configs; the decoder families have theirs)
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "gelu": "gelu", "relu": "relu", "silu": "swiglu"}


def activation(where: str, name) -> str:
    if name not in ACTIVATIONS:
        raise WeightsError(f"{where}: activation {name!r} is not supported; "
                           f"tfx runs {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


def strip_prefix(state: dict, prefixes: tuple[str, ...]) -> dict:
    out = {}
    for key, value in state.items():
        for prefix in prefixes:
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        out[key] = value
    return out


LN = {"weight": "scale", "bias": "shift", "gamma": "scale", "beta": "shift"}


def ln_leaf(leaf: str) -> str:
    return LN.get(leaf, leaf)  # an unknown leaf keeps its name and is reported unexpected
