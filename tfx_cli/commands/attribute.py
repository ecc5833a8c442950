"""`tfx attribute TEXT --answer TOKEN`: direct logit attribution."""
from ..options import command, read_text


@command("truncate", "target", "sae", "sae_site", "display", "plot", "force", "model")
def attribute(*, text, answer, wrong, per_head, truncate, target, sae, sae_site, display,
              plot, force, model, encoding) -> None:
    """Direct logit attribution: which parts of the model write the answer's logit at
    the last position.

    The final residual stream is a sum: the embedding's terms, every layer's attention
    output (every head's, with --per-head) and every FFN output. Each part goes through
    the final norm with its scale frozen at the real run's value (LayerNorm: the part
    centred, divided by the real sqrt(var + eps), times γ; RMSNorm: divided by the real
    root mean square, times γ) and onto W_U[answer] − W_U[wrong]. The norm's shift β
    (and, with --per-head, the attention output biases) form the remainder, so the parts
    add up to the logit difference exactly, up to float rounding (result.unexplained).

    Post-LN models (toy, vaswani) have no final norm but a LayerNorm after every
    sublayer: there each part is carried through every later norm, each with its frozen
    scale, and every norm's shift joins the remainder.

    On an encoder–decoder the logit is the decoder's, after --target: the parts are the
    decoder's embedding and every decoder layer's self-attention, cross-attention and FFN
    outputs. The encoder reaches the decoder's stream only through cross-attention, so
    the cross-attention parts are the source's contribution (result.through_cross).

    JSON: result.parts (name, value) in forward order, result.logit_diff,
    result.sum_of_parts, result.unexplained.

    Examples:

      tfx attribute "The capital of France is" --answer " Paris" --wrong " Rome" -w smollm2

      tfx attribute "Hello, I am" --answer " a" --per-head --plot parts.png

      tfx attribute "When you play game of thrones" -c toy --target "you win or you" --answer die --wrong win
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    if answer is None:
        raise UsageError("--answer is missing; tfx attribute TEXT --answer TOKEN "
                         "[--wrong TOKEN]")
    result = api.attribute(read_text(text, encoding=encoding), answer=answer, wrong=wrong,
                           per_head=per_head, truncate=truncate, target=target, sae=sae,
                           sae_site=sae_site, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
