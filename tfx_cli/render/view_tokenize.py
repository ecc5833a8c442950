"""Terminal view of `tfx tokenize`: one row per token (position, visible token, id)."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.tokenizers import visible
from ..core.trace import Result
from .views import header, kv_table, register


@register("tokenize")
def tokenize_view(result: Result, console: Console, opts=None) -> None:
    info = result.result
    ids = result.input["ids"]
    specials = set(info.get("special_tokens", ()))
    header(console, result)
    title = Text(f"{info['tokenizer']} · vocab {info['vocab_size']:,} · "
                 f"{info['n_tokens']} tokens", style="bold")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("token", overflow="fold")
    table.add_column("id", justify="right", no_wrap=True)
    for pos, (piece, token_id) in enumerate(zip(result.input["tokens"], ids)):
        # Text, never markup: a token such as "[CLS]" must print literally.
        style = "italic cyan" if piece in specials else ""
        table.add_row(str(pos), Text(visible(piece), style=style), str(token_id))
    console.print()
    console.print(title)  # above, not a table title: a narrow table would wrap it
    console.print(table)
    console.print()
    console.print(kv_table({"decoded": info["decoded"],
                            "round trip": "exact" if info["round_trip"] else "differs"}))
