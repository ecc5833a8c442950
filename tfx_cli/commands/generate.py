"""`tfx generate PROMPT`: decode token by token and show every step's choice."""
from typing import Optional

from ..errors import InputTextError
from ..options import command, read_text, split_list

EMPTY_PROMPT = ("the prompt is empty; a GPT predicts each token from the ones before it, so "
                "it needs at least one token to start from, e.g. \"Hello\"")


def read_prompt(text: Optional[str], encoding: str) -> str:
    if text is not None and text != "-" and not text.strip():
        raise InputTextError(EMPTY_PROMPT)
    return read_text(text, encoding=encoding, what="prompt")


@command("truncate", "edits", "transcoder_edits", "display", "model")
def generate(*, prompt, max_new_tokens, temperature, top_k, top_p, stop, candidates,
             no_cache, select, no_stream, ignore_eos, target, truncate, edits,
             transcoder_edits, display, model, encoding) -> None:
    """Continue PROMPT token by token and show each step: the token chosen, its
    probability and the most likely alternatives.

    Greedy by default (--temperature 0), as LLMs-from-scratch's generate_text_simple; with
    --temperature above 0 it samples, from a generator seeded with --seed after the
    weights are built, so a seed repeats the same text exactly. Greedy output does not
    depend on --seed except through random weights.

    A KV cache is on by default: the prompt is read once, then each step reads only the
    new token and takes earlier keys and values from the cache (--no-cache recomputes the
    whole text; the tokens are the same). When the text outgrows the context length it is
    cropped to the last context-length tokens, as LLMs-from-scratch does; from then on positions
    shift every step, so those steps recompute the cropped window without the cache.
    A prompt that is already longer than the context is an error unless --truncate.
    With --ablate or --steer every step recomputes the whole text (no KV cache), so the
    change applies at every position of every step.

    The text streams to stderr while it is produced; stdout carries the step table, or
    with --json one document: result.ids (prompt and new ids), result.text (prompt plus
    continuation), result.completion, and result.steps[i] with position, id, token,
    prob (softmax of the logits), sample_prob (under the sampling settings), logit,
    entropy (nats, whole vocabulary) and candidates. --select adds per-step tensors to
    "tensors" keyed step.{i}.NAME; with the cache, steps after the first record only the
    new position (T = 1) while keys and values span every position so far.

    Examples:

      tfx generate "Hello, I am" --max-new-tokens 6

      tfx generate "Hello, I am" --temperature 0.8 --top-k 40 --seed 7 --json | jq .result.text

      tfx generate "Hi" -n 3 --layers 2 --d-model 64 --heads 4 --select 'blocks.0.attn.pattern'

      tfx generate "I think that you" -w smollm2 --steer blocks.10.resid_pre --toward " love" --away " hate" --scale 6
    """
    from .. import api
    from ..render.emit import emit

    text = read_prompt(prompt, encoding)
    stream = _echo(text, target, model, quiet=no_stream)
    try:
        result = api.generate(text, max_new_tokens=max_new_tokens, temperature=temperature,
                              top_k=top_k, top_p=top_p, stop=stop, candidates=candidates,
                              no_cache=no_cache, select=split_list(select, "--select"),
                              truncate=truncate, ignore_eos=ignore_eos,
                              on_text=stream.write if stream else None,
                              target=target, **edits, **transcoder_edits, **model)
    finally:  # end the streamed line, also on Ctrl-C, so an error starts a line of its own
        if stream:
            stream.close()
    emit(result, **display)


def _echo(text: str, target: Optional[str], model: dict, quiet: bool):
    """The text echoed to stderr while it is produced (None with --no-stream or
    TFX_QUIET); the model's progress bars then go below it, never over it."""
    import os
    import sys

    from .. import api
    from ..render.emit import progress
    from ..render.views.generate import TextStream

    # an encoder–decoder writes a target: the stream shows it, not the source
    seq2seq = api.model_config(**model).is_encoder_decoder  # (also checks the model first)
    if quiet or os.environ.get("TFX_QUIET"):
        return None
    stream = TextStream(sys.stderr, (target or "") if seq2seq else text, spaced=seq2seq,
                        before=progress)
    model["progress"] = stream.progress
    return stream
