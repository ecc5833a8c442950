"""`tfx next TEXT`: the distribution over the next token, and what sampling does to it."""
from ..options import command
from .generate import read_prompt


@command("truncate", "edits", "transcoder_edits", "json", "precision", "model")
def next_token(*, text, temperature, top_k, top_p, candidates, target, truncate, edits,
               transcoder_edits, json, precision, model, encoding) -> None:
    """The model's distribution over the token after TEXT: the most likely tokens with
    their logits and probabilities (softmax of the logits).

    With --temperature, --top-k or --top-p it also shows what sampling would do, in the
    order generate applies them: the probability at temperature T (softmax(logits / T)),
    whether top-k (the K largest logits, ties kept) and top-p (the most likely tokens
    whose probability at T first reaches P) keep each token, and the final probability
    after the cut tokens are dropped and the rest renormalised. At --temperature 0 the
    cuts are judged at T = 1 and all probability goes to the argmax.

    On a masked language model (BERT, RoBERTa, ModernBERT; --weights antiberty) it
    fills in masks: the distribution at every mask token of TEXT (the tokenizer's own,
    [MASK] or <mask>), one table each, and the text with each mask filled. JSON adds
    result.mask_token, result.masks (per mask: position, entropy, greedy, kept_tokens,
    kept_mass, candidates) and result.filled; the other fields are the first mask's.

    A text longer than the context length is an error; with --truncate it is cropped to
    its last tokens, as generate's first step sees it. JSON: result.candidates (rank, id, token, logit, prob,
    tempered_prob, kept, final_prob), result.entropy (nats), result.greedy,
    result.kept_tokens and result.kept_mass (over the whole vocabulary).

    Examples:

      tfx next "Hello, I am"

      tfx next "Hello, I am" --temperature 0.7 --top-k 5 --top-p 0.9

      tfx next "When you play game of thrones" -c toy --target "you win or you"

      tfx next "The capital of France is" -w smollm2 --ablate blocks.20.ffn.out

      tfx next "EVQLVESGGGLVQPGGSLRLSCAAS[MASK]FTFSSYAMS" -w antiberty

      tfx next "The capital of France is" -w smollm2 --sae my-sae --ablate features.12
    """
    from .. import api
    from ..render.emit import emit

    emit(api.next(read_prompt(text, encoding), temperature=temperature, top_k=top_k,
                  top_p=top_p, candidates=candidates, truncate=truncate, target=target,
                  **edits, **transcoder_edits, **model),
         json=json, precision=precision)
