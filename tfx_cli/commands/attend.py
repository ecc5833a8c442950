"""`tfx attend TEXT`: one layer's attention, stage by stage."""
from enum import Enum
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..options import StackOpt, TargetOpt, TextArg, command, read_text, split_list, stack_value


class Mask(str, Enum):
    causal = "causal"
    none = "none"


@command("truncate", "ablations", "display", "plot", "force", "model")
def attend(
    text: TextArg = None,
    layer: Annotated[int, typer.Option("--layer", "-l", help="Block to look at.")] = 0,
    head: Annotated[Optional[int], typer.Option(
        "--head", show_default=False, help="One head (default: all).")] = None,
    mask: Annotated[Optional[Mask], typer.Option(
        "--mask", show_default=False,
        help="causal or none (default: the config's; none with --kv). Applies to every "
        "layer up to --layer.",
    )] = None,
    kv: Annotated[Optional[str], typer.Option(
        "--kv", show_default=False, metavar="TEXT",
        help="Cross-attention: keys and values from this text, queries from TEXT.")] = None,
    valid_lens: Annotated[Optional[int], typer.Option(
        "--valid-lens", show_default=False,
        help="Padding mask: only the first N keys are visible (1..key length).")] = None,
    show: Annotated[Optional[List[str]], typer.Option(
        "--show", show_default=False,
        help="Stages to print, comma-separated: q, k, v, scores, scaled, masked, pattern, "
        "context, concat, out (q_rot, k_rot for RoPE). Default: pattern and a table of "
        "shapes.")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Spell out one head and one query position with every number.")] = False,
    query_pos: Annotated[Optional[int], typer.Option(
        "--query-pos", show_default=False,
        help="Query position --explain spells out (default: the last).")] = None,
    inputs: Annotated[Optional[Path], typer.Option(
        "--inputs", show_default=False, metavar="FILE.json",
        help="Your own matrices instead of a model: JSON with x, w_q, w_k, w_v (optional "
        "w_o, scale, mask, tokens). See samples/seed000.json.")] = None,
    target: TargetOpt = None,
    stack: StackOpt = None,
    cross: Annotated[bool, typer.Option(
        "--cross", rich_help_panel="Encoder–decoder",
        help="The decoder's cross-attention (needs --target): queries from the target, keys "
             "and values from the encoder's output of TEXT.")] = False,
    *, truncate, ablations, display, plot, force, model, encoding,
) -> None:
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
    result = api.attend(text, layer=layer, head=head, mask=mask.value if mask else None,
                        kv=kv, valid_lens=valid_lens, show=split_list(show, "--show"), explain=explain,
                        query_pos=query_pos, inputs=inputs, truncate=truncate,
                        target=target, stack=stack_value(stack), cross=cross,
                        **ablations, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
