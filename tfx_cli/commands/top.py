"""`tfx top CORPUS --site SITE`: each unit's highest activations over a corpus."""
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..options import CorpusArg, SaeSiteOpt, StateDirOpt, command, need_corpus


@command("dataset", "engine", "display", "force", "model")
def top(
    source: CorpusArg = None,
    site: Annotated[Optional[str], typer.Option(
        "--site", metavar="SITE", show_default=False,
        help="A site with one row per token: blocks.3.ffn.act (neurons), "
             "blocks.3.resid_out (residual dimensions), blocks.3.attn.context (heads × "
             "head dim) ... With --sae: the SAE's site (default: the one its folder names).")] = None,
    units: Annotated[Optional[str], typer.Option(
        "--units", metavar="LIST", show_default=False,
        help="Units of the site: 0,5,9 or 0:64 (default: all); with --sae, feature "
             "indices.")] = None,
    sae: Annotated[Optional[str], typer.Option(
        "--sae", metavar="DIR", show_default=False, rich_help_panel="Features",
        help="An SAE folder (SAELens, Gemma Scope, tfx-sae.json, tfx train-sae's output): "
             "the units are its features, their activations on the site's rows.")] = None,
    sae_site: SaeSiteOpt = None,
    k: Annotated[int, typer.Option("-k", "--k", help="Examples per unit.")] = 10,
    around: Annotated[int, typer.Option(
        "--around", metavar="C",
        help="Tokens of context shown either side of each example (--context is the "
             "model's context length).")] = 8,
    html: Annotated[Optional[Path], typer.Option(
        "--html", metavar="FILE", show_default=False,
        help="Also write a self-contained HTML page with a card per unit.")] = None,
    output: StateDirOpt = None,
    *, dataset, engine, display, force, model, encoding,
) -> None:
    """Each unit's highest activations over a corpus (max-activating examples).

    For every unit of --site, the K highest values in the corpus with their document,
    position, token and C tokens of context either side (within the window the model
    read). Ties go to the earlier document and position. The terminal shows each example
    as a strip of tokens, the activating one highlighted and the others shaded by the
    unit's value there.

    With --sae DIR the units are the SAE's features: each token's activation of
    feature i, as `tfx features` computes it (for a TopK SAE, 0 unless the feature is
    among the token's k), at the SAE's site.

    JSON: result.units = [{unit, examples: [{value, doc, position, token, context:
    {tokens, values, at}}]}]; with --sae, result.sae describes the SAE.

    Examples:

      tfx top python-docs -w smollm2 --site blocks.3.ffn.act --units 0:4 -k 5 --around 6

      tfx top corpus.txt -c gpt2 --site blocks.5.resid_out --units 7 --html neuron7.html

      tfx top python-docs -w smollm2 --sae my-sae --units 12,40 -k 10
    """
    from .. import api
    from ..render.emit import emit

    result = api.top(need_corpus(source), site=site, units=units, k=k, around=around,
                     html=html, output=output, sae=sae, sae_site=sae_site,
                     **dataset, **engine, **model)
    emit(result, **display)
