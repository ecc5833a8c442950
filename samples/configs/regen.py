"""Write one JSON file per preset, straight from tfx_cli.core.config.PRESETS.

    python samples/configs/regen.py

tests/core/test_params.py checks the files still equal the presets.
"""
import json
from pathlib import Path

from tfx_cli.core.presets import PRESETS

HERE = Path(__file__).resolve().parent


def preset_files() -> dict[str, str]:
    return {f"{name}.json": json.dumps(cfg.to_dict(), indent=2) + "\n"
            for name, cfg in PRESETS.items()}


if __name__ == "__main__":
    for filename, text in preset_files().items():
        (HERE / filename).write_text(text, encoding="utf-8")
        print(HERE / filename)
