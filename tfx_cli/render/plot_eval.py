"""--plot for `tfx eval-sae`: the histogram of the features' densities (the fraction of
tokens each is active on, log10), dead features counted in the title. Registered with
render/plot.py's plotters when the eval-sae command imports it."""
from __future__ import annotations

import numpy as np

from .plot import describe, plotter, tex_safe


@plotter("eval-sae")
def plot_density(result, plt):
    density = np.asarray(result.tensors.array("eval.density"), dtype=np.float64)
    alive = density[density > 0]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    if alive.size:
        ax.hist(np.log10(alive), bins=min(60, max(10, alive.size // 4)), color="#4c72b0")
    ax.axvline(np.log10(result.dense_above), color="#c44e52", linestyle="--", linewidth=1,
               label=f"dense (> {result.dense_above:g})")
    ax.set_xlabel("log10 feature density (fraction of tokens active)")
    ax.set_ylabel("features")
    ax.legend(fontsize=8)
    ax.set_title(tex_safe(f"tfx eval-sae · {result.sae.site} · {result.tokens:,} tokens · "
                          f"{result.dead:,} dead, {result.dense:,} dense of "
                          f"{result.sae.d_sae:,}\n{describe(result)}"), fontsize=10)
    return fig
