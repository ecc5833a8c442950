"""`tfx layernorm TEXT`: one normalisation, mean and variance to output."""
from enum import Enum
from typing import Annotated

import typer

from ..options import StackOpt, TargetOpt, TextArg, command, read_text, stack_value


class Which(str, Enum):
    ln1 = "ln1"
    ln2 = "ln2"
    ln3 = "ln3"
    ln_f = "ln_f"
    embed = "embed"


@command("truncate", "display", "plot", "force", "model")
def layernorm(
    text: TextArg = None,
    layer: Annotated[int, typer.Option("--layer", "-l", help="Block to look at.")] = 0,
    which: Annotated[Which, typer.Option(
        "--which", help="ln1 (before/after attention), ln2 (feed-forward; in a decoder "
        "block, cross-attention), ln3 (a decoder block's feed-forward), ln_f (final), "
        "embed (BERT's embedding norm).")] = Which.ln1,
    target: TargetOpt = None,
    stack: StackOpt = None,
    *, truncate, display, plot, force, model, encoding,
) -> None:
    """Show one LayerNorm (or RMSNorm): per-token mean and variance, the normalised rows
    (mean ≈ 0, variance ≈ 1), γ (scale), β (shift) and the output.

    Pre-LN configs (GPT) normalise the block input; post-LN configs (toy, the original
    encoder, BERT) first form the residual sum x + Sublayer(x) (ln1.in) and normalise it.

    Examples:

      tfx layernorm "When you play game of thrones" --config toy

      tfx layernorm "Hello, I am" --which ln_f --json | jq .result.normed_var
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)

    result = api.layernorm(read_text(text, encoding=encoding), layer=layer, which=which.value,
                           truncate=truncate, target=target, stack=stack_value(stack),
                           **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
