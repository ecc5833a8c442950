"""Feature labels from `tfx top --sae ... -o DIR` folders: a feature's strongest examples
over a corpus (DIR/result.json, the tfx/1 envelope of a top run). The folder must be of
the set's own features: its manifest records the SAE top ran (`options.sae`, and the
content of its files, `options.sae_sha256`), which must be a layer of the set, the layer
its site (`blocks.{i}.…`) is in; its units are then that layer's feature indices."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ...errors import UsageError
from ..features.transcoder_set import TranscoderSet

_LAYER = re.compile(r"^blocks\.(\d+)\.")


def read_labels(folders: list[str], tc: TranscoderSet, *,
                n_examples: int = 3) -> dict[tuple[int, int], str]:
    """(layer, feature) -> its top examples: the example tokens, each with the token
    before it, strongest first."""
    labels: dict[tuple[int, int], str] = {}
    for folder in folders:
        result = _top_result(folder)
        layer = _layer_of(folder, str(result["site"]), tc)
        for unit in result["units"]:
            try:
                shown = [_example(e) for e in unit.get("examples", [])[:n_examples]]
                if shown:
                    labels[(layer, int(unit["unit"]))] = " · ".join(shown)
            except (AttributeError, KeyError, TypeError, ValueError):
                raise UsageError(f"--labels {folder}: its result.json lists a unit that is "
                                 "not tfx top's ({unit, examples}); make the folder again "
                                 "with tfx top") from None
    return labels


def _top_result(folder: str) -> dict:
    path = Path(folder) / "result.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        result = doc["result"]
        if not isinstance(result["units"], list):
            raise TypeError
        result["site"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--labels {folder} has no readable result.json of tfx top; "
                         "give the folder `tfx top --sae DIR -o FOLDER` wrote") from None
    if doc.get("command") != "top":
        raise UsageError(f"--labels {folder} holds a tfx {doc.get('command')} result, not "
                         "tfx top's; give the folder `tfx top --sae DIR -o FOLDER` wrote")
    return result


def _layer_of(folder: str, site: str, tc: TranscoderSet) -> int:
    """The layer of `tc` whose features the folder labels: the block of its site, whose
    file is the SAE the folder's manifest says top ran (by content)."""
    match = _LAYER.match(site)
    layer = int(match.group(1)) if match else None
    if layer is None or not 0 <= layer < tc.n_layers:
        raise UsageError(f"--labels {folder} ran on site {site}, not one of the {tc.n_layers} "
                         f"blocks of --transcoders {tc.folder}; run tfx top on a layer's "
                         "transcoder (blocks.I.…)")
    files = tc.files[layer]
    own = files[0] if len(files) == 1 else files[0].parent
    again = (f"make its labels with tfx top CORPUS --sae {own} -o FOLDER (the model's "
             "options as for graph)")
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
        options = manifest["options"]
        sae, sha = options.get("sae"), options.get("sae_sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(f"--labels {folder} has no readable manifest.json saying which "
                         f"features it labels; {again}") from None
    if sae is None:
        raise UsageError(f"--labels {folder} holds the top examples of {site}'s own units "
                         f"(tfx top without --sae), not of layer {layer}'s transcoder "
                         f"features; {again}")
    if sha != tc.sha256(layer):
        raise UsageError(f"--labels {folder} labels the features of {sae}, which is not "
                         f"layer {layer}'s transcoder of --transcoders {tc.folder} (its "
                         f"files' content differs); {again}")
    return layer


def _example(example: dict) -> str:
    context = example.get("context") or {}
    tokens, at = context.get("tokens") or [], context.get("at")
    token = str(example.get("token", ""))
    if isinstance(at, int) and 0 < at < len(tokens):
        return f"{tokens[at - 1]}[{token}]"
    return f"[{token}]"
