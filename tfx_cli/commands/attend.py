"""`tfx attend TEXT`: one layer's attention, stage by stage."""
from ..options import command, read_text, split_list


@command("truncate", "ablations", "display", "plot", "force", "model")
def attend(*, text, layer, head, mask, kv, valid_lens, show, explain, query_pos, inputs,
           target, stack, cross, truncate, ablations, display, plot, force, model,
           encoding) -> None:
    """Show one layer's attention: Q, K, V, the raw scores QKᵀ, scaled (÷√d_k), masked,
    the pattern (softmax, rows sum to 1), the context (pattern·V), the heads joined and
    the output projection W_O.

    Only blocks 0..--layer run and only that layer's attention is recorded. --explain
    spells out one head (--head, default 0) at one query position: each q·k, ÷√d_k, the
    mask, exp and the softmax sum, each weight × value row and their sum.

    Examples:

      tfx attend "When you play game of thrones" --config toy --heads 2

      tfx attend "Hello, I am" --layer 3 --head 5 --show scores,pattern

      tfx attend --inputs samples/seed000.json --explain --query-pos 0

      tfx attend "you win or you die" --kv "When you play game of thrones" --config toy --mask none

      tfx attend "Hello, I am" --layer 1 --ablate blocks.0.attn.context:h=3

      tfx attend "When you play game of thrones" -c toy --target "you win or you die" --cross
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    if inputs is None:
        text = read_text(text, encoding=encoding)
        if kv is not None:
            kv = read_text(kv, encoding=encoding, what="--kv text")
    else:
        model.pop("force")  # with --inputs no model is built: --force is --plot's alone
    result = api.attend(text, layer=layer, head=head, mask=mask, kv=kv,
                        valid_lens=valid_lens, show=split_list(show, "--show"),
                        explain=explain, query_pos=query_pos, inputs=inputs,
                        truncate=truncate, target=target, stack=stack, cross=cross,
                        **ablations, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
