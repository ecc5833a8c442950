"""`tfx embed TEXT`: token embedding rows, positional rows and their sum."""
from ..options import command, read_text


@command("truncate", "display", "plot", "force", "model")
def embed(*, text, target, stack, truncate, display, plot, force, model, encoding) -> None:
    """Show each token's embedding row, its positional row and their sum (T, C).

    The model's input is embed.out = embed.tok + embed.pos (the hand-worked encoder tutorial, steps 4-6); the
    view adds each row's norm, mean and standard deviation. RoPE models add no position
    here (it rotates q and k inside attention; see `tfx posenc`).

    Examples:

      tfx embed "When you play game of thrones" --config toy

      tfx embed "Hello, I am" --json | jq '.tensors["embed.out"].shape'
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)

    result = api.embed(read_text(text, encoding=encoding), truncate=truncate, target=target,
                       stack=stack, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
