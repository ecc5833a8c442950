"""--plot for `tfx route`: each MoE layer's load as a layers × experts heat map, the
tokens each expert took written in its cell. Registered with render/plot.py's plotters
when the route command imports it."""
from __future__ import annotations

import math

import numpy as np

from .plot import MAX_LABELS, describe, plotter, tex_safe


@plotter("route")
def plot_route(result, plt):
    load = np.asarray(result.tensors.array("route.load"), dtype=np.float64)  # (L, E)
    n_layers, E = load.shape
    fig, ax = plt.subplots(figsize=(min(30, 2.5 + 0.4 * E), min(30, 1.8 + 0.3 * n_layers)),
                           layout="constrained")
    image = ax.imshow(load, cmap="viridis", vmin=0, aspect="auto", interpolation="nearest")
    if E * n_layers <= 900:
        peak = load.max() or 1.0
        for i in range(n_layers):
            for e in range(E):
                ax.text(e, i, f"{load[i, e]:.0f}", ha="center", va="center",
                        fontsize=7 if E <= 32 else 5,
                        color="black" if load[i, e] > 0.6 * peak else "white")
    step = max(1, math.ceil(n_layers / MAX_LABELS))
    ax.set_yticks(range(0, n_layers, step), [str(result.layers[i])
                                             for i in range(0, n_layers, step)], fontsize=7)
    ax.set_ylabel("layer")
    step = max(1, math.ceil(E / MAX_LABELS))
    ax.set_xticks(range(0, E, step), [str(e) for e in range(0, E, step)], fontsize=7)
    ax.set_xlabel("expert")
    T = len(result.tokens)
    fig.colorbar(image, ax=ax, label=f"tokens routed (of {T}, {result.experts_per_token} "
                                     "experts each)", shrink=0.9)
    ax.set_title(tex_safe(f"expert load · {result.experts_per_token} of {E} experts per "
                          f"token\n{describe(result)}"), fontsize=10)
    return fig
