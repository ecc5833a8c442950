"""Terminal view of `tfx graph`: the scores, then from each logit target its strongest
inputs as a tree, back towards the tokens. Reads the typed result only."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from ...core.results.circuits import GraphNode, GraphResult
from ...words import counted
from ..common import terminal_text
from . import ViewOptions, header, register


def node_text(node: GraphNode, tokens: list[str]) -> str:
    at = f"“{terminal_text(tokens[node.pos])}”@{node.pos}" if node.pos < len(tokens) else ""
    if node.kind == "feature":
        label = f" → {terminal_text(node.label)}" if node.label else ""
        return (f"feature L{node.layer} #{node.feature} {at} "
                f"(act {_shown(node.activation, '.3g')}){label}")
    if node.kind == "error":
        return f"error L{node.layer} {at}"
    if node.kind == "embedding":
        return f"token {at}"
    # a graph file whose logit clerp is not `Output "TOKEN" (p=…)` leaves only the id
    text = terminal_text(repr(node.text)) if node.text is not None else f"#{node.token}"
    return f"logit {text} (p = {_shown(node.probability, '.3g')})"


def _grow(tree: Tree, step, nodes: list[GraphNode], tokens: list[str], precision: int):
    for child in step.inputs:
        style = "green" if child.weight > 0 else "red"
        label = Text(f"{child.weight:+.{precision}g} ", style=style)
        label.append(node_text(nodes[child.node], tokens))
        _grow(tree.add(label), child, nodes, tokens, precision)


def _shown(value, fmt: str = "") -> str:
    return "—" if value is None else format(value, fmt)


def _made(result: GraphResult) -> str:
    """How the graph was made: its transcoders and feature counts, as far as known."""
    if result.transcoders is None and result.n_active_features is None:
        return "transcoders and feature counts: not in the file"
    return (f"transcoders {terminal_text(_shown(result.transcoders))} "
            f"({_shown(result.feature_input_hook)} → {_shown(result.feature_output_hook)}) · "
            f"{_shown(result.n_active_features)} active features, "
            f"{_shown(result.n_selected_features)} with rows")


@register("graph")
def graph_view(result: GraphResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    if result.opened:
        console.print(Text(f"opened from {terminal_text(result.opened)}", style="dim"))
    if result.truncated:
        console.print(Text(f"cropped: --truncate left out the text's first "
                           f"{counted(result.truncated, 'token')} to fit the context",
                           style="yellow"))
    kinds = {}
    for n in result.nodes:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    console.print(Text(_made(result), style="dim"))
    if result.replacement_score is None and result.completeness_score is None:
        scores = "replacement and completeness scores: not in the file"
    else:
        scores = (f"replacement score {_shown(result.replacement_score, '.3f')} · "
                  f"completeness score {_shown(result.completeness_score, '.3f')}")
    when = "" if result.opened else f" · {result.seconds:.1f} s"
    console.print(f"{scores} · kept " + ", ".join(f"{v} {k}" for k, v in kinds.items())
                  + f", {result.n_edges} edges (node threshold {_shown(result.node_threshold)}, "
                  f"edge threshold {_shown(result.edge_threshold)}){when}")
    tokens = list(result.input.tokens) if result.input else []
    for step in result.paths or []:
        tree = Tree(Text(node_text(result.nodes[step.node], tokens), style="bold"))
        _grow(tree, step, result.nodes, tokens, max(2, opts.precision))
        console.print(tree)
    if result.saved:
        console.print(Text(f"unpruned graph saved to {terminal_text(result.saved)}", style="dim"))
