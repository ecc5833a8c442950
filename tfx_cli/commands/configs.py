"""`tfx configs`: the presets, their shapes and parameter counts. No torch."""
from ..options import command


@command("json")
def configs(*, json) -> None:
    """List the presets: sizes, switches and parameter counts.

    Use a name with --config (`tfx attend "Hello" --config toy`), or copy
    samples/configs/NAME.json, edit it and pass its path instead.

    Examples:

      tfx configs

      tfx configs --json | jq '.result.presets[] | {name, params}'
    """
    from .. import api
    from ..render.emit import emit

    emit(api.configs(), json=json)
