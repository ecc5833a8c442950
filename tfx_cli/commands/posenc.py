"""`tfx posenc [TEXT | --length N]`: the positional encoding the config uses."""
from ..options import command, read_text


@command("truncate", "display", "plot", "force", "model")
def posenc(*, text, length, truncate, display, plot, force, model, encoding) -> None:
    """Show the positional encoding for TEXT's positions, or for --length N positions.

    Sinusoidal configs (toy, vaswani): PE(pos, 2i) = sin(pos / 10000^(2i/d)) and
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), with the angles. Learned (GPT): the rows of
    the position-embedding table. RoPE (smollm2-135m): each position's rotation angles and
    the cos/sin tables applied to q and k.

    Examples:

      tfx posenc "When you play game of thrones" --config toy

      tfx posenc --length 8 --config smollm2-135m
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)

    if text is not None:
        text = read_text(text, encoding=encoding)
    result = api.posenc(text, length=length, truncate=truncate, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
