"""`tfx graph TEXT --transcoders DIR`: the attribution graph of the next token."""
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..options import command, read_text

# This command's own options, declared once here.
TranscodersOpt = Annotated[Optional[str], typer.Option(
    "--transcoders", metavar="DIR", show_default=False,
    help="A transcoder set in circuit-tracer's layout: config.yaml (feature_input_hook, "
    "feature_output_hook, transcoders: one safetensors file per layer).")]
MaxLogitsOpt = Annotated[int, typer.Option(
    "--max-logits", min=1, help="At most this many logit targets.")]
LogitProbOpt = Annotated[float, typer.Option(
    "--logit-prob", help="Take the most likely tokens until their probabilities add up to "
    "this (0 < p ≤ 1).")]
GraphTargetOpt = Annotated[Optional[List[str]], typer.Option(
    "--target", metavar="TOKEN", show_default=False,
    help="A logit target of your own (one token; repeatable) instead of the likeliest.")]
MaxFeaturesOpt = Annotated[int, typer.Option(
    "--max-features", min=1, help="Rows for at most this many active features, the most "
    "influential first (circuit-tracer's ranking).")]
NodeThresholdOpt = Annotated[float, typer.Option(
    "--node-threshold", help="Keep the nodes carrying this share of the influence on the "
    "logits (0 < t ≤ 1).")]
EdgeThresholdOpt = Annotated[float, typer.Option(
    "--edge-threshold", help="Keep the edges carrying this share of the influence (0 < t ≤ 1).")]
SaveOpt = Annotated[Optional[Path], typer.Option(
    "--save", metavar="FILE.safetensors", show_default=False,
    help="Write the unpruned graph (adjacency, active features, targets) for notebooks.")]
GraphJsonOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", metavar="FILE.json", show_default=False,
    help="Write graph.json, the file circuit-tracer's frontend and Neuronpedia open.")]
LabelsOpt = Annotated[Optional[List[str]], typer.Option(
    "--labels", metavar="DIR", show_default=False,
    help="A `tfx top --sae ... -o DIR` folder (repeatable, one per layer): label the "
    "features by their top examples instead of their strongest output tokens.")]
OpenOpt = Annotated[Optional[Path], typer.Option(
    "--open", metavar="FILE.json", show_default=False,
    help="Show a saved graph again, without the model: the graph.json `tfx graph -o` or "
    "circuit-tracer wrote (no TEXT, no model or transcoder options).")]
HtmlOpt = Annotated[Optional[Path], typer.Option(
    "--html", metavar="FILE", show_default=False,
    help="Write one self-contained offline page drawing the pruned graph.")]
MaxLinksOpt = Annotated[int, typer.Option(
    "--max-links", min=0, metavar="N",
    help="At most N edges in graph.json and the --html page, the strongest by "
    "circuit-tracer's edge score (a viewer chokes on millions); 0 keeps every pruned edge.")]


@command("truncate", "display", "force", "model")
def graph(
    ctx: typer.Context,
    text,
    transcoders: TranscodersOpt = None,
    max_logits: MaxLogitsOpt = 10,
    logit_prob: LogitProbOpt = 0.95,
    target: GraphTargetOpt = None,
    max_features: MaxFeaturesOpt = 7500,
    node_threshold: NodeThresholdOpt = 0.8,
    edge_threshold: EdgeThresholdOpt = 0.98,
    save: SaveOpt = None,
    labels: LabelsOpt = None,
    output: GraphJsonOpt = None,
    html: HtmlOpt = None,
    max_links: MaxLinksOpt = 60_000,
    open: OpenOpt = None,
    *, truncate, display, force, model, encoding,
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

      tfx graph --open graph.json --html graph.html
    """
    from .. import api
    from ..errors import OutputFileError, UsageError
    from ..render.emit import emit

    if open is None and transcoders is None:
        raise UsageError("--transcoders is missing; tfx graph TEXT --transcoders DIR")
    for path in (save, output, html):
        if path is not None and path.exists() and not force:
            raise OutputFileError(f"{path} exists; pass --force to overwrite it or choose "
                                  "another name")
    if open is not None:
        _check_open(ctx, open, text)
        result = api.open_graph(open)
    else:
        result = api.graph(read_text(text, encoding=encoding), transcoders=transcoders,
                           max_logits=max_logits, logit_prob=logit_prob, targets=target,
                           max_features=max_features, node_threshold=node_threshold,
                           edge_threshold=edge_threshold, save=save, truncate=truncate,
                           labels=labels, **model)
    if output is not None or html is not None:
        _write_views(result, output, html, force, max_links or None)
    emit(result, **display)


# What makes a graph, which a saved one already is: refused with --open, named as typed.
_MAKING = ("transcoders", "max_logits", "logit_prob", "target", "max_features",
           "node_threshold", "edge_threshold", "save", "labels", "truncate")


def _check_open(ctx: typer.Context, path: Path, text) -> None:
    """--open reads a graph that is made and pruned: TEXT, the model and what makes or
    prunes a graph (--node-threshold too: the file holds no unpruned graph to cut again)
    are refused, naming the first one given."""
    from ..errors import UsageError
    from ..option_table import GROUPS

    if text is not None:
        raise UsageError(f"--open {path} shows a saved graph, so it takes no TEXT; drop "
                         f"{text!r:.40}, or drop --open to compute the text's graph")
    for name in (*_MAKING, *GROUPS["model"]):
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            flag = next((p.opts[0] for p in ctx.command.params if p.name == name),
                        "--" + name.replace("_", "-"))
            raise UsageError(f"--open {path} shows a saved graph, already made and pruned, "
                             f"so {flag} does not apply; drop {flag}, or drop --open to "
                             "compute a graph")


def _write_views(result, output, html, force: bool, max_links: int | None) -> None:
    """graph.json and the HTML page, from the one mapping both writers read, with at
    most `max_links` edges (a note on stderr when some are left out)."""
    from ..core.circuits.neuronpedia import strongest_links
    from ..core.results.circuits import graph_payload
    from ..render.emit import info

    payload, total = strongest_links(graph_payload(result), max_links)
    if max_links is not None and total > max_links:
        info(f"graph.json/--html: the {max_links:,} strongest of the pruned graph's "
             f"{total:,} edges kept (--max-links 0 keeps all)")
    if output is not None:
        from ..core.circuits.neuronpedia import write_graph_json

        write_graph_json(payload, output, force=force)
    if html is not None:
        from ..core.outputs import atomic_file
        from ..render.graph_page import graph_html

        page = graph_html(payload)
        with atomic_file(html, force=force, mode="umask") as tmp:
            Path(tmp).write_text(page, encoding="utf-8")
