"""Terminal view of `tfx graph`: the scores, then from each logit target its strongest
inputs as a tree, back towards the tokens. Reads the typed result only."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from ...core.results.circuits import GraphNode, GraphResult
from ..common import terminal_text
from . import ViewOptions, header, register


def node_text(node: GraphNode, tokens: list[str]) -> str:
    at = f"“{terminal_text(tokens[node.pos])}”@{node.pos}" if node.pos < len(tokens) else ""
    if node.kind == "feature":
        label = f" → {terminal_text(node.label)}" if node.label else ""
        return f"feature L{node.layer} #{node.feature} {at} (act {node.activation:.3g}){label}"
    if node.kind == "error":
        return f"error L{node.layer} {at}"
    if node.kind == "embedding":
        return f"token {at}"
    return f"logit {terminal_text(repr(node.text))} (p = {node.probability:.3g})"


def _grow(tree: Tree, step, nodes: list[GraphNode], tokens: list[str], precision: int):
    for child in step.inputs:
        style = "green" if child.weight > 0 else "red"
        label = Text(f"{child.weight:+.{precision}g} ", style=style)
        label.append(node_text(nodes[child.node], tokens))
        _grow(tree.add(label), child, nodes, tokens, precision)


@register("graph")
def graph_view(result: GraphResult, console: Console, opts: ViewOptions) -> None:
    header(console, result)
    kinds = {}
    for n in result.nodes:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    console.print(Text(
        f"transcoders {terminal_text(result.transcoders)} ({result.feature_input_hook} → "
        f"{result.feature_output_hook}) · {result.n_active_features} active features, "
        f"{result.n_selected_features} with rows", style="dim"))
    console.print(f"replacement score {result.replacement_score:.3f} · completeness score "
                  f"{result.completeness_score:.3f} · kept "
                  + ", ".join(f"{v} {k}" for k, v in kinds.items())
                  + f", {result.n_edges} edges (node threshold {result.node_threshold}, "
                  f"edge threshold {result.edge_threshold}) · {result.seconds:.1f} s")
    tokens = list(result.input.tokens) if result.input else []
    for step in result.paths or []:
        tree = Tree(Text(node_text(result.nodes[step.node], tokens), style="bold"))
        _grow(tree, step, result.nodes, tokens, max(2, opts.precision))
        console.print(tree)
    if result.saved:
        console.print(Text(f"unpruned graph saved to {terminal_text(result.saved)}", style="dim"))
