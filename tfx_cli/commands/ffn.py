"""`tfx ffn TEXT`: one feed-forward sublayer, hidden to activation to output."""
from ..options import command, read_text


@command("truncate", "display", "plot", "force", "model")
def ffn(*, text, layer, target, stack, truncate, display, plot, force, model,
        encoding) -> None:
    """Show one feed-forward sublayer: its input, the hidden pre-activation (T, F), the
    activation (ReLU for toy, GELU-tanh for gpt124m, SiLU-gated for SwiGLU) and the
    output (T, C).

    Examples:

      tfx ffn "When you play game of thrones" --config toy

      tfx ffn "Hello, I am" --layer 3 --json | jq .result.fraction_positive

      tfx ffn "Hello, I am" --plot ffn.png
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    result = api.ffn(read_text(text, encoding=encoding), layer=layer, truncate=truncate,
                     target=target, stack=stack, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
