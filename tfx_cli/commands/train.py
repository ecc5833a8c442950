"""`tfx train`: teach a small model a few examples and write a checkpoint folder."""
from ..options import command


@command("force", "json")
def train(*, pairs, text, output, steps, lr, config, seed, heads, layers, d_model, context,
          tokenizer, force, json) -> None:
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
                       context=context, tokenizer=tokenizer,
                       force=force, progress=progress)
    emit(result, json=json)
