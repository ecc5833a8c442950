"""`tfx configs`: the presets, their shapes and parameter counts. No torch."""
from ..options import JsonOpt


def configs(json_out: JsonOpt = False) -> None:
    """List the presets: sizes, switches and parameter counts.

    Use a name with --config (`tfx attend "Hello" --config toy`), or copy
    samples/configs/NAME.json, edit it and pass its path instead.

    Examples:

      tfx configs

      tfx configs --json | jq '.result.presets[] | {name, params}'
    """
    from .. import api
    from ..render.emit import emit

    emit(api.configs(), json=json_out)
