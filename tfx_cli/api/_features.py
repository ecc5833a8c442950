"""Features of sparse autoencoders from Python: `api.features(text, sae=DIR)`.

The SAE options of the other commands are keywords of theirs: `sae` and `sae_site` with
`ablate=["features.12"]` on attend, trace, next, generate, lens, report and patch;
`steer_feature="DIR:12"` with `scale` on next, generate and trace; `site="features"`
with `sae` on patch; `sae` on attribute (README "Features").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._model import _model

if TYPE_CHECKING:
    from ..core.results import FeaturesResult


def features(text: str, *, sae: str, sae_site: str | None = None, per_token: int = 5,
             truncate: bool = False, **model: Any) -> FeaturesResult:
    """The SAE in folder `sae` (SAELens, Gemma Scope, Gemma Scope 2 or tfx's format) run on
    `text`: per token the `per_token` most active features, L0 and how well the SAE
    reconstructs its site (FVU, cosine, error norm). `sae_site` names the site when the
    folder does not (a tfx trace name or a TransformerLens hook name).
    tensors["features.acts"] (T, F), ["features.recon"], ["features.error"]."""
    from ..core.analysis.feature_sites import check_feature_options
    from ..errors import UsageError

    if sae is None or (isinstance(sae, str) and not sae.strip()):
        raise UsageError("--sae is missing; tfx features TEXT --sae DIR (an SAE folder: "
                         "SAELens's cfg.json + sae_weights.safetensors, params.npz, ...)")
    check_feature_options(sae=sae, sae_site=sae_site, sae_used=True)
    return _model(model).features(text, sae=sae, sae_site=sae_site, per_token=per_token,
                                  truncate=truncate)
