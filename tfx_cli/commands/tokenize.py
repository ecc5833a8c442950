"""`tfx tokenize TEXT`: the ids a model reads, one row per token.

No model is built and torch is never imported: this command only needs a tokenizer.
"""
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..options import EncodingOpt, JsonOpt, TextArg, read_text

TokenizerOpt = Annotated[Optional[str], typer.Option(
    "--tokenizer", "-t", show_default=False,
    help="word, char, byte, gpt2, minilm, smollm2, or a tokenizer.json path (or a folder "
         "holding one). Default: the config's tokenizer.")]
CorpusOpt = Annotated[Optional[Path], typer.Option(
    "--corpus", show_default=False,
    help="Text file whose words (or characters) form the word (char) vocabulary. "
         "Default: the input text itself.")]
ConfigOpt = Annotated[Optional[str], typer.Option(
    "--config", "-c", show_default=False,
    help="Preset or JSON config whose default tokenizer to use (gpt124m: gpt2, toy: word, "
         "minilm: minilm).")]
WeightsOpt = Annotated[Optional[str], typer.Option(
    "--weights", "-w", show_default=False,
    help="Use the tokenizer that ships with these weights (minilm, smollm2, a .gguf file, "
         "an HF folder with tokenizer.json). No weights are loaded.")]


def tokenize(text: TextArg = None, tokenizer: TokenizerOpt = None, corpus: CorpusOpt = None,
             config: ConfigOpt = None, weights: WeightsOpt = None,
             encoding: EncodingOpt = "utf-8", json_out: JsonOpt = False) -> None:
    """Split TEXT into tokens and show each token's id.

    Whitespace in tokens is made visible: space ·, newline ↵, tab →, carriage
    return ␍; bytes that are not a whole character show as <0xNN>. HuggingFace
    tokenizers show their own pieces (WordPiece '##ing', byte-level 'Ġam').

    Examples:

      tfx tokenize "Hello, I am"

      tfx tokenize "When you play game of thrones" -t word --corpus samples/corpus.txt

      tfx tokenize "Hello, I am a sentence." -t minilm --json | jq .input.ids
    """
    from ..core.config import resolve_config
    from ..core.tokenizers import get_tokenizer
    from ..core.trace import Result
    from ..render.emit import emit

    text = read_text(text, encoding=encoding)
    cfg = resolve_config(config)
    if weights:  # a path that is not there must not fall back to the default tokenizer
        from ..core.weights import resolve

        resolve(weights)  # reads no tensors and imports no torch
    tok = get_tokenizer(tokenizer, default=cfg.tokenizer, corpus_text=text,
                        corpus_path=corpus, weights=weights)
    ids = tok.encode(text)
    decoded = tok.decode(ids)
    result = Result(
        command="tokenize",
        # which preset's default tokenizer applied (none when the weights chose it)
        model={"config": None if weights and not config else cfg.name, "weights": weights},
        input={"text": text, "tokens": tok.pieces(ids), "ids": ids},
        result={"tokenizer": tok.name, "vocab_size": tok.vocab_size, "n_tokens": len(ids),
                "decoded": decoded, "round_trip": decoded == text,
                "special_tokens": tok.added_specials(ids)},
    )
    emit(result, json=json_out)
