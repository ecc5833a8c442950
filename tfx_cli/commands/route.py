"""`tfx route TEXT`: which experts a mixture-of-experts model sends each token to."""
from ..options import command, read_text


@command("truncate", "ablate", "ablate_mode", "display", "plot", "force", "model")
def route(*, text, truncate, ablate, ablate_mode, display, plot, force, model,
          encoding) -> None:
    """Show a mixture-of-experts model's router: for every MoE layer and token, the k
    experts it is routed to and their weights; each layer's load over the text and the
    router's entropy.

    Each layer's router scores every expert (blocks.{i}.moe.router_logits, then softmax,
    or DeepSeek-V3's sigmoid: router_probs), keeps the k best (moe.experts) and weighs
    their outputs (moe.expert_weights: renormalised to sum to 1 where the family does).
    The table has one row per token and one column per MoE layer, each expert in its
    own colour. The load table counts the tokens each expert took; balance is
    E · Σ share² (1: even, E: one expert takes all); entropy is the router's, in nats.

    JSON: tensors route.experts (L, T, k), route.weights (L, T, k), route.probs (L, T, E),
    route.load (L, E), route.entropy (L, T); result.routing per layer (load, unused,
    busiest, balance, entropy). --plot draws the load as a layers × experts heat map.

    Examples:

      tfx route "The capital of France is" -w DIR            (DIR: a Mixtral, Qwen-MoE,
                                                              OLMoE, gpt-oss or DeepSeek-V3
                                                              folder)

      tfx route "Hello, I am" -c samples/configs/tiny-moe.json --plot load.png

      tfx route "Hello, I am" -c samples/configs/tiny-moe.json --ablate blocks.1.moe.expert:e=3
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    result = api.route(read_text(text, encoding=encoding), truncate=truncate,
                       ablate=ablate, ablate_mode=ablate_mode, **model)
    if plot is not None:
        from ..render import plot_moe  # noqa: F401  registers the load heat map

    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
