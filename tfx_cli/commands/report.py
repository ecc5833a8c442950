"""`tfx report TEXT -o FILE.html`: tokens, attention, layer norms and next tokens in one
self-contained HTML page (no network, works from file://).

One forward pass records every shown layer's attention pattern, the statistics entering
every norm and the next-token top-k (core/analysis/report.py); render/report.py lays that
result out as the page, and --json prints the same result.
"""
import time
from pathlib import Path

from ..errors import UsageError
from ..options import command, read_text


@command("truncate", "ablations", "json", "force", "model")
def report(*, text, output, show_layers, candidates, target, truncate, ablations, json,
           force, model, encoding) -> None:
    """Write one self-contained HTML page: tokens, a layers × heads grid of attention
    maps, a clickable head view with hover values, layer-norm statistics, and the
    next-token top-k.

    The page loads nothing from the network (CSS and JavaScript inline), so it opens from
    file:// anywhere. Attention weights are stored to 4 decimals. --json prints what the
    page shows (patterns, norm statistics, next tokens) as one tfx/1 document, with or
    without the page.

    Examples:

      tfx report "When you play game of thrones" -o thrones.html

      tfx report "Hello, I am" --show-layers 0,11 -o hello.html

      tfx report "The cat sat on the mat." --weights minilm -o cat.html
    """
    from .. import api
    from ..render.emit import emit, info
    from ..render.plot import check_output_path

    if output is None and not json:
        raise UsageError("no output file given; pass --output FILE.html (-o FILE.html), "
                         "or --json for what the page would show")
    text = read_text(text, encoding=encoding)
    edits = ablations
    if any(edits.values()):
        from ..core.analysis.feature_sites import check_options

        check_options(**edits)
    path = None if output is None else check_output_path(
        output, force, suffixes=(".html", ".htm"), option="--output")
    started = time.perf_counter()
    m = api.load(**model)
    # the page's size is estimated, and refused past the output limit, before the work
    result = m.report(text, show_layers=show_layers, candidates=candidates, truncate=truncate,
                      target=target, output=path, force=force, **edits)
    if path is not None:
        size = Path(path).stat().st_size
        seconds = time.perf_counter() - started
        info(f"wrote {path} ({size / 1e6:.2f} MB, {len(result.layers)} layers × "
             f"{result.n_heads} heads, {len(result.tokens)} tokens, {seconds:.1f} s)")
    if json:
        emit(result, json=True)
