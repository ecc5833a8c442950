"""`tfx tokenize TEXT`: the ids a model reads, one row per token.

No model is built and torch is never imported: this command only needs a tokenizer.
"""
from ..options import command, read_text


@command("json", "full")
def tokenize(*, text, tokenizer, corpus, config, weights, encoding, json, full) -> None:
    """Split TEXT into tokens and show each token's id.

    Whitespace in tokens is made visible: space ·, newline ↵, tab →, carriage
    return ␍; bytes that are not a whole character show as <0xNN>. HuggingFace
    tokenizers show their own pieces (WordPiece '##ing', byte-level 'Ġam').
    With --weights the checkpoint's own tokenizer is used (read from its files; no
    weights are loaded); otherwise --tokenizer, or the default of --config.

    Examples:

      tfx tokenize "Hello, I am"

      tfx tokenize "When you play game of thrones" -t word --corpus samples/corpus.txt

      tfx tokenize "Hello, I am a sentence." -w minilm --json | jq .input.ids
    """
    from .. import api
    from ..render.emit import emit

    emit(api.tokenize(read_text(text, encoding=encoding), tokenizer=tokenizer, corpus=corpus,
                      config=config, weights=weights), json=json, full=full)
