"""Terminal view of `tfx tokenize`: one row per token (position, visible token, id)."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import TokenizeResult
from ...core.tokenizers.base import visible
from ...words import counted
from ..common import head_tail
from . import header, kv_table, register

MAX_ROWS = 60  # tokens listed before "--full shows all" (the first 30 and the last 30)


@register("tokenize")
def tokenize_view(result: TokenizeResult, console: Console, opts=None) -> None:
    specials = set(result.special_tokens)
    header(console, result)
    title = Text(f"{result.tokenizer} · vocab {result.vocab_size:,} · "
                 f"{counted(result.n_tokens, 'token')}", style="bold")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("token", overflow="fold")
    table.add_column("id", justify="right", no_wrap=True)
    n = len(result.input.ids)
    full = opts is not None and opts.full
    rows, cut = head_tail(n, n if full else MAX_ROWS)
    for k, pos in enumerate(rows):
        if k == cut:
            table.add_row("⋮", Text(f"… {counted(n - len(rows), 'more token')} "
                                    "(--full shows all)", style="dim"), "⋮")
        piece, token_id = result.input.tokens[pos], result.input.ids[pos]
        # Text, never markup: a token such as "[CLS]" must print literally.
        style = "italic cyan" if piece in specials else ""
        table.add_row(str(pos), Text(visible(piece), style=style), str(token_id))
    console.print()
    console.print(title)  # above, not a table title: a narrow table would wrap it
    console.print(table)
    console.print()
    console.print(kv_table({"decoded": result.decoded,
                            "round trip": "exact" if result.round_trip else "differs"},
                           full=full))
