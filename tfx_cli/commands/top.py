"""`tfx top CORPUS --site SITE`: each unit's highest activations over a corpus."""
from typing import Annotated, Optional

import typer

from ..options import command, need_corpus


@command("dataset", "engine", "display", "force", "model")
def top(
    *, source, site, units,
    sae: Annotated[Optional[str], typer.Option(
        "--sae", metavar="DIR", show_default=False, rich_help_panel="Features",
        help="An SAE folder (SAELens, Gemma Scope, tfx-sae.json, tfx train-sae's output): "
             "the units are its features, their activations on the site's rows.")] = None,
    sae_site, k, around, html, output, dataset, engine, display, force, model, encoding,
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
