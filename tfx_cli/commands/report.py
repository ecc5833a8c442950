"""`tfx report TEXT -o FILE.html`: tokens, attention, layer norms and next tokens in one
self-contained HTML page (no network, works from file://).

One forward pass records every shown layer's attention pattern, the input of every norm
(the page takes its mean and variance, so the norms keep their fused kernel) and the
logits; the page is built from that Result by render/report.py.
"""
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from ..options import ForceOpt, ModelSpec, TextArg, TruncateOpt, model_command, read_text

OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="The HTML file to write (.html).", show_default=False,
    metavar="FILE.html")]
ShowLayersOpt = Annotated[Optional[str], typer.Option(
    "--show-layers", metavar="LIST",
    help="Layers to show in the attention views: '0,1,5', '0-3' or 'all' (default: all). "
         "(--layers changes the model's layer count.)", show_default=False)]
TopKOpt = Annotated[int, typer.Option(
    "--top-k", min=0, max=50, help="Next-token predictions per position (causal models "
    "with an output head; 0 leaves them out).")]

NORM_IN_RX = r"(embed\.ln|blocks\.\d+\.ln[12]|ln_f)\.in"  # norm statistics come from these
LARGE_BYTES = 50_000_000  # past this the page gets slow to open: say so


def parse_layers(value: Optional[str], n_layers: int) -> list[int]:
    """'0,1,5' / '2-4' / 'all' -> sorted layer indices, each checked against the model."""
    from ..core.stages import check_range

    if value is None or value.strip().lower() == "all":
        return list(range(n_layers))
    layers: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        try:
            if "-" in part.lstrip("-"):
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                chosen = range(lo, hi + 1)
            else:
                chosen = [int(part)]
        except ValueError:
            raise UsageError(f"--show-layers {value!r}: expected layer numbers like "
                             "'0,1,5', a range like '0-3', or 'all'") from None
        for layer in chosen:
            check_range("layer", layer, n_layers, "--show-layers")
            layers.add(layer)
    return sorted(layers)


@model_command
def report(text: TextArg = None, output: OutputOpt = None, show_layers: ShowLayersOpt = None,
           top_k: TopKOpt = 5, truncate: TruncateOpt = False, force: ForceOpt = False,
           spec: ModelSpec = None) -> None:
    """Write one self-contained HTML page: tokens, a layers × heads grid of attention
    maps, a clickable head view with hover values, layer-norm statistics, and the
    next-token top-k.

    The page loads nothing from the network (CSS and JavaScript inline), so it opens from
    file:// anywhere. Attention weights are stored to 4 decimals.

    Examples:

      tfx report "When you play game of thrones" -o thrones.html

      tfx report "Hello, I am" --show-layers 0,11 -o hello.html

      tfx report "The cat sat on the mat." --weights minilm -o cat.html
    """
    import re

    from ..render.emit import info, warn
    from ..render.plot import atomic_output, check_output_path

    if output is None:
        raise UsageError("no output file given; pass --output FILE.html (-o FILE.html)")
    text = read_text(text)
    path = check_output_path(output, force, suffixes=(".html", ".htm"), option="--output")
    started = time.perf_counter()

    from ..core import stages
    from ..render.report import build_html

    loaded = stages.load(spec, text=text)
    ids = stages.encode(loaded, text, truncate=truncate)
    layers = parse_layers(show_layers, loaded.cfg.n_layers)
    names = loaded.model.tap_names()
    select = [f"blocks.{layer}.attn.pattern" for layer in layers]
    select += [n for n in names if re.fullmatch(NORM_IN_RX, n)]
    if loaded.cfg.causal and loaded.cfg.lm_head and top_k > 0 and "logits" in names:
        select.append("logits")
    pattern_bytes = 2 * len(layers) * loaded.cfg.n_heads * len(ids) ** 2
    if pattern_bytes > LARGE_BYTES:
        warn(f"the page will hold {pattern_bytes * 4 / 3 / 1e6:.0f} MB of attention weights; "
             "--show-layers picks fewer layers")
    trace = stages.run(loaded, ids, select)  # the one forward pass
    result = stages.result("report", loaded, text, ids, trace,
                           {"layers": layers, "output": str(path)})
    page = build_html(result, pieces=loaded.tokenizer.pieces, top_k=top_k)
    with atomic_output(path, force) as tmp:
        tmp.write_text(page, encoding="utf-8")
    seconds = time.perf_counter() - started
    info(f"wrote {path} ({len(page.encode('utf-8')) / 1e6:.2f} MB, {len(layers)} layers × "
         f"{loaded.cfg.n_heads} heads, {len(ids)} tokens, {seconds:.1f} s)")
