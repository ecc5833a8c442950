"""`tfx ffn TEXT`: one feed-forward sublayer, hidden to activation to output."""
from typing import Annotated

import typer

from ..options import (FullOpt, JsonOpt, PrecisionOpt, TextArg, TruncateOpt, model_command,
                       read_text)


@model_command
def ffn(
    text: TextArg = None,
    layer: Annotated[int, typer.Option("--layer", "-l", help="Block to look at.")] = 0,
    truncate: TruncateOpt = False,
    json_out: JsonOpt = False,
    precision: PrecisionOpt = 3,
    full: FullOpt = False,
    *,
    spec,
) -> None:
    """Show one feed-forward sublayer: its input, the hidden pre-activation (T, F), the
    activation (ReLU for toy, GELU-tanh for gpt124m, SiLU-gated for SwiGLU) and the
    output (T, C).

    Examples:

      tfx ffn "When you play game of thrones" --config toy

      tfx ffn "Hello, I am" --layer 3 --json | jq .result.fraction_positive
    """
    from ..core import stages
    from ..render.emit import emit

    text = read_text(text)
    emit(stages.ffn(spec, text, layer=layer, truncate=truncate), json=json_out,
         precision=precision, full=full)
