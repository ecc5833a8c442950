"""`tfx train`: teach a small model a few examples and write a checkpoint folder."""
from enum import Enum
from typing import Annotated, Optional

import typer

from ..options import (ConfigOpt, ContextOpt, DModelOpt, ForceOpt, HeadsOpt, JsonOpt,
                       LayersOpt, SeedOpt)


class Vocab(str, Enum):
    word = "word"
    char = "char"


def train(
    pairs: Annotated[Optional[str], typer.Option(
        "--pairs", metavar="FILE.tsv", show_default=False,
        help="Lines of source, a tab, then target, for an encoder–decoder (toy, vaswani), e.g. "
             "samples/seed001.tsv.")] = None,
    text: Annotated[Optional[str], typer.Option(
        "--text", metavar="FILE", show_default=False,
        help="A text whose next tokens a decoder-only model learns.")] = None,
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", metavar="DIR", show_default=False,
        help="The checkpoint folder to write (then --weights DIR in every command).")] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, max=100_000,
                                       help="Adam updates, each over every example.")] = 200,
    lr: Annotated[float, typer.Option("--lr", help="Adam's learning rate.")] = 0.01,
    config: ConfigOpt = None,
    seed: SeedOpt = 123,
    heads: HeadsOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    context: ContextOpt = None,
    tokenizer: Annotated[Optional[Vocab], typer.Option(
        "--tokenizer", "-t", show_default=False, rich_help_panel="Model",
        help="word or char: the vocabulary is built from the data (default: the config's "
             "if it is one of them, else word).")] = None,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Train a model from random weights on a few examples, as seed 001 describes it: the
    model sees the target, errs, is corrected (cross-entropy) and its weights are updated
    (Adam), until it answers right.

    An encoder–decoder learns --pairs with teacher forcing: the decoder reads `<start>` and
    the target and must predict each next word, then `<end>`. A decoder-only config learns
    --text's next tokens. The vocabulary is the data's words (or characters). The folder
    holds tfx-model.json (the architecture), model.safetensors and vocab.json; the same
    seed, data and options write the same bytes.

    Examples:

      tfx train --config toy --pairs samples/seed001.tsv -o toy-trained

      tfx generate "When you play game of thrones" --weights toy-trained

      tfx attend "When you play game of thrones" -w toy-trained --target "you win or you die" --cross

      tfx train -c gpt2 --layers 2 --d-model 64 --heads 4 --text notes.txt -o tiny-gpt
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit, progress

    if output is None:
        raise UsageError("no output folder given; pass --output DIR (-o DIR)")
    result = api.train(output=output, pairs=pairs, text=text, steps=steps, lr=lr,
                       config=config, seed=seed, heads=heads, layers=layers, d_model=d_model,
                       context=context, tokenizer=tokenizer.value if tokenizer else None,
                       force=force, progress=progress)
    emit(result, json=json_out)
