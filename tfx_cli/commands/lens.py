"""`tfx lens TEXT`: the logit lens, every layer's best guess at the next token."""
from ..options import command, read_text


@command("truncate", "ablations", "display", "plot", "force", "model")
def lens(*, text, target, truncate, ablations, display, plot, force, model,
         encoding) -> None:
    """Logit lens: what each layer would predict if the model stopped there.

    For every layer the residual stream after the block (blocks.{i}.resid_out), and the
    embedding output (embed.out, row "embed"), goes through the model's own final
    normalisation and output head: ln_f, the final LayerNorm INCLUDING its learned scale
    and shift (RMSNorm with its learned scale for Llama-style models), then lm_head, then
    softmax. Nothing else is applied (no centring or unembedding bias), and the normalisation
    statistics are each row's own. The last layer's row is therefore exactly the model's
    real output.

    The table shows, per layer (rows) and position (columns), the most likely next token
    and its probability. Post-LN models (toy, vaswani) have no ln_f: each block already ends
    in a LayerNorm, so lm_head reads resid_out directly (the embed row is then
    unnormalised). Models without an output head (minilm) are refused. A masked language
    model's rows go through its MLM head (dense, activation, norm) before lm_head, and
    show the token each layer puts at each position (masks included).

    JSON: result.layers, result.top_ids / top_tokens / top_probs [layer][position],
    result.next_token_probs [layer][position] (the probability of the token that really
    comes next; one fewer position), result.norm (what was applied); a masked LM has
    result.token_probs [layer][position] (the probability of the position's own token,
    null at a mask) and result.mask_positions instead of next_token_probs.

    Examples:

      tfx lens "The capital of France is" --weights smollm2

      tfx lens "The capital of France is" -w smollm2 --json | jq -c '.result.top_tokens[][-1]'

    (Random weights, e.g. --config gpt2, give every layer the input token back: there is
    nothing learned to read.)
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    result = api.lens(read_text(text, encoding=encoding), truncate=truncate, target=target,
                      **ablations, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
