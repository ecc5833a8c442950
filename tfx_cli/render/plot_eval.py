"""--plot for `tfx eval-sae`: the histogram of the features' densities (the fraction of
tokens each is active on, log10; a transcoder set's features of every layer together),
dead features counted in the title. Registered with
render/plot.py's plotters when the eval-sae command imports it."""
from __future__ import annotations

import numpy as np

from .plot import describe, plotter, tex_safe


@plotter("eval-sae")
def plot_density(result, plt):
    density = np.asarray(result.tensors.array("eval.density"), dtype=np.float64).ravel()
    alive = density[density > 0]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    if alive.size:
        ax.hist(np.log10(alive), bins=min(60, max(10, alive.size // 4)), color="#4c72b0")
    ax.axvline(np.log10(result.dense_above), color="#c44e52", linestyle="--", linewidth=1,
               label=f"dense (> {result.dense_above:g})")
    ax.set_xlabel("log10 feature density (fraction of tokens active)")
    ax.set_ylabel("features")
    ax.legend(fontsize=8)
    if result.transcoders is not None:
        tc = result.transcoders
        what, total = f"{tc.n_layers} transcoders", tc.n_layers * tc.width
    else:
        what, total = result.sae.site, result.sae.d_sae
    ax.set_title(tex_safe(f"tfx eval-sae · {what} · {result.tokens:,} tokens · "
                          f"{result.dead:,} dead, {result.dense:,} dense of "
                          f"{total:,}\n{describe(result)}"), fontsize=10)
    return fig
