"""`tfx graph TEXT --transcoders DIR`: the attribution graph of the next token."""
import typer

from ..options import command, read_text


@command("transcoders", "truncate", "display", "force", "model")
def graph(
    ctx: typer.Context,
    *, text, max_logits, logit_prob, targets, max_features, node_threshold,
    edge_threshold, save, labels, output, html, max_links, open, transcoders, truncate,
    display, force, model, encoding,
) -> None:
    """The attribution graph of TEXT's next token: which transcoder features, through
    which paths, write the most likely logits.

    Each MLP is replaced by its transcoder plus an error term (the real output minus the
    reconstruction), attention patterns and norm divisors are frozen at the real run's,
    and an edge is a node's direct effect on another's input in that linear model
    (circuit-tracer 0.5.0's definitions). The graph is pruned to the nodes and edges that
    carry --node-threshold and --edge-threshold of the influence on the logits.

    JSON: result.nodes (kind, layer, pos, feature, token, text, activation, influence),
    result.replacement_score, result.completeness_score, tensor graph.adjacency
    (targets × sources in result.nodes order).

    Examples:

      tfx graph "The capital of France is" --transcoders tc/ -w smollm2

      tfx graph "1 + 1 =" --transcoders tc/ -c gpt124m --layers 2 --save g.safetensors

      tfx graph --open g.safetensors --node-threshold 0.6 --html graph.html
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit

    own = dict(max_logits=max_logits, logit_prob=logit_prob, targets=targets,
               max_features=max_features, node_threshold=node_threshold,
               edge_threshold=edge_threshold, save=save, labels=labels, output=output,
               html=html, max_links=max_links, open=open, transcoders=transcoders,
               truncate=truncate)
    # only what was typed goes on: api.graph takes each option's declared default for
    # the rest, and refuses, by name, what does not apply to a saved graph (--open)
    hooks = {name: model.pop(name) for name in ("progress", "notice", "force")}
    asked = {name: value for name, value in {**own, **model}.items() if _typed(ctx, name)}
    if open is None:
        text = read_text(text, encoding=encoding)
    elif _typed(ctx, "encoding"):
        raise UsageError(f"--open {open} shows a saved graph, so --encoding (of a TEXT "
                         "read from stdin) does not apply; drop it")
    emit(api.graph(text, **asked, **hooks), **display)


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether the option `name` was given on the command line (or in the environment)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
