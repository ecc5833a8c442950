"""Feature labels from `tfx top --sae ... -o DIR` folders: a feature's strongest examples
over a corpus (DIR/result.json, the tfx/1 envelope of a top run). The folder's site
(`blocks.{i}.…`) says which layer's transcoder it ran; its units are feature indices."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ...errors import UsageError

_LAYER = re.compile(r"^blocks\.(\d+)\.")


def read_labels(folders: list[str], *, n_examples: int = 3) -> dict[tuple[int, int], str]:
    """(layer, feature) -> its top examples: the example tokens, each with the token
    before it, strongest first."""
    labels: dict[tuple[int, int], str] = {}
    for folder in folders:
        path = Path(folder) / "result.json"
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            result = doc["result"]
            site, units = result["site"], result["units"]
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(f"--labels {folder} has no readable result.json of tfx top; "
                             "give the folder `tfx top --sae DIR -o FOLDER` wrote") from None
        if doc.get("command") != "top":
            raise UsageError(f"--labels {folder} holds a tfx {doc.get('command')} result, not "
                             "tfx top's; give the folder `tfx top --sae DIR -o FOLDER` wrote")
        match = _LAYER.match(str(site))
        if match is None:
            raise UsageError(f"--labels {folder} ran on site {site}, not a block's; run tfx "
                             "top on the layer's transcoder site (blocks.I.…)")
        layer = int(match.group(1))
        for unit in units:
            shown = [_example(e) for e in unit.get("examples", [])[:n_examples]]
            if shown:
                labels[(layer, int(unit["unit"]))] = " · ".join(shown)
    return labels


def _example(example: dict) -> str:
    context = example.get("context") or {}
    tokens, at = context.get("tokens") or [], context.get("at")
    token = str(example.get("token", ""))
    if isinstance(at, int) and 0 < at < len(tokens):
        return f"{tokens[at - 1]}[{token}]"
    return f"[{token}]"
