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
    from ..core.config import DEFAULT_CONFIG, PRESETS
    from ..core.params import total_params
    from ..core.trace import Result
    from ..render.emit import emit

    presets = [{**cfg.to_dict(), "name": name, "params": total_params(cfg)}
               for name, cfg in PRESETS.items()]
    emit(Result(command="configs", result={"default": DEFAULT_CONFIG, "presets": presets}),
         json=json_out)
