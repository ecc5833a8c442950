"""`tfx layernorm TEXT`: one normalisation, mean and variance to output."""
from ..options import command, read_text


@command("truncate", "display", "plot", "force", "model")
def layernorm(*, text, layer, which, target, stack, truncate, display, plot, force, model,
              encoding) -> None:
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

    result = api.layernorm(read_text(text, encoding=encoding), layer=layer, which=which,
                           truncate=truncate, target=target, stack=stack, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
