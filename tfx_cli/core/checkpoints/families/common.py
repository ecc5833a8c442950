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


def unprefixed(key: str, prefixes: tuple[str, ...]) -> str:
    """`key` without the first of `prefixes` it starts with."""
    for prefix in prefixes:
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def strip_prefix(state: dict, prefixes: tuple[str, ...]) -> dict:
    return {unprefixed(key, prefixes): value for key, value in state.items()}


LN = {"weight": "scale", "bias": "shift", "gamma": "scale", "beta": "shift"}
# the same leaves as patterns, for registry.Renames rules
SCALE, SHIFT = "(?:weight|gamma)", "(?:bias|beta)"


def norm_rules(theirs: str, ours: str) -> list[tuple[str, str]]:
    """Rename rules for a norm's scale and shift: `theirs` a pattern of the checkpoint's
    module, `ours` tfx's (groups of the one usable in the other)."""
    return [(rf"{theirs}\.{SCALE}", f"{ours}.scale"), (rf"{theirs}\.{SHIFT}", f"{ours}.shift")]


def ln_leaf(leaf: str) -> str:
    return LN.get(leaf, leaf)  # an unknown leaf keeps its name and is reported unexpected
