"""Terminal view of `tfx train`: the loss falling, and what the model now says."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import TrainResult
from ..common import terminal_text
from . import header, kv_table, register


def _milestones(n: int, k: int = 8) -> list[int]:
    """Steps to show in the loss table: the first, the last and evenly spaced between."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


@register("train")
def train_view(result: TrainResult, console: Console, opts=None) -> None:
    header(console, result)
    console.print(kv_table({"data": result.data, "examples": result.examples,
                            "vocab_size": result.vocab_size, "params": f"{result.params:,}",
                            "steps": result.steps, "lr": result.lr, "seed": result.seed,
                            "written": result.output}))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("step", justify="right")
    table.add_column("cross-entropy loss", justify="right")
    for i in _milestones(len(result.losses)):
        table.add_row(str(i + 1), f"{result.losses[i]:.4f}")
    console.print()
    console.print(table)
    checks = Table(title=Text("what it says now (greedy)", style="bold"),
                   title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                   pad_edge=False)
    pairs = any(c.source is not None for c in result.checks)
    if pairs:
        checks.add_column("source", overflow="fold")
    checks.add_column("target", overflow="fold")
    checks.add_column("says", overflow="fold")
    checks.add_column("", no_wrap=True)
    for c in result.checks:
        row = [terminal_text(c.target), terminal_text(c.said),
               Text("exact", style="green") if c.exact else Text("differs", style="red")]
        checks.add_row(*([terminal_text(c.source)] if pairs else []), *row)
    console.print()
    console.print(checks)
    console.print(Text(f"load it with --weights {result.output}", style="dim"))
