"""`api.route`: a mixture-of-experts model's router on a text (tfx route)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..core.spec import spec_config
from ._model import _model
from ._options import _check_edits, _spec, _text, checked

if TYPE_CHECKING:
    from ..core.results import RouteResult


@checked
def route(text: str, *, truncate: bool = False, ablate: Sequence[str] | None = None,
          ablate_mode: str | None = None, **model: Any) -> RouteResult:
    """For every MoE layer and token of `text`, the experts chosen and their weights;
    each layer's load and the router's entropy. A dense model is refused before it is
    built or loaded. `ablate` takes any site, `blocks.{i}.moe.expert:e=E` among them
    (the router never chooses expert E in layer i)."""
    from ..core.analysis.route import need_experts, route as route_stage

    _check_edits(ablate=ablate, ablate_mode=ablate_mode)
    spec, hooks = _spec(model)
    need_experts(spec_config(spec, progress=hooks.progress))
    m = _model(model, blocks=None)
    return m._edited(lambda _: route_stage(m._loaded, _text(text), truncate=truncate),
                     ablate=ablate, ablate_mode=ablate_mode)
