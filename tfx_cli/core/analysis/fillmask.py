"""Fill-mask: what a masked language model (BERT, RoBERTa, ModernBERT, AntiBERTy)
predicts behind each mask token of a text, as `tfx next` shows it; and the checks that
keep a masked LM and a causal model each to the question it answers.

A masked LM reads the whole text at once (no causal mask) and predicts, at every
position, the token that belongs there; at a mask token that is the prediction asked for.
The mask is the tokenizer's own ([MASK] for BERT, <mask> for RoBERTa).
"""
from __future__ import annotations

import torch

from ...errors import ConfigError, InputTextError, TokenizerError
from ..results import Greedy, MaskPrediction, NextCandidate, NextResult, NextSettings
from .common import check_run, encode, input_info
from .sampling import Sampling, check_sampling, describe, filter_logits, tempered_probs

LITERAL_MASKS = ("[MASK]", "<mask>")  # BERT's and RoBERTa's spellings
MASKED_LMS = ("--weights antiberty, or a folder of BertForMaskedLM, RobertaForMaskedLM or "
              "ModernBertForMaskedLM")


def check_mask_text(cfg, text: str) -> None:
    """A causal model asked to fill a mask: refused from its config, before any weights
    load (an encoder–decoder's source may hold one: BART was trained to fill them)."""
    if cfg.causal and not cfg.is_encoder_decoder and isinstance(text, str):
        found = next((m for m in LITERAL_MASKS if m in text), None)
        if found is not None:
            raise InputTextError(
                f"the text holds {found}, but {cfg.name} is a causal model: it predicts the "
                f"token after the text, not one inside it; end the text where the prediction "
                f"goes (e.g. \"Paris is the\"), or use a masked language model "
                f"({MASKED_LMS})")


def need_causal(cfg, command: str) -> None:
    """Refuse, before loading, a masked LM for a command that reads the prediction of
    the token after the text."""
    if cfg.is_masked_lm:
        raise ConfigError(
            f"{cfg.name} is a masked language model: it predicts the tokens behind a mask, "
            f"not the token after the text, which `tfx {command}` needs; fill in masks with "
            f"`tfx next \"Paris is the [MASK] of France.\"` (the model's own mask token), "
            f"or use a causal model")


def mask_id(loaded) -> int:
    tok = loaded.tokenizer
    if tok.mask_id is None:
        raise TokenizerError(
            f"{loaded.cfg.name} is a masked language model, but the {tok.name} tokenizer has "
            f"no mask token ({' or '.join(LITERAL_MASKS)}) to mark the position it "
            f"predicts; use the tokenizer that belongs to the model")
    return tok.mask_id


def mask_positions(loaded, ids: list[int], *, required: bool = True) -> list[int]:
    """Where the text's mask tokens are; none is an error when `required`."""
    mask = mask_id(loaded)
    found = [i for i, t in enumerate(ids) if t == mask]
    if required and not found:
        token = loaded.tokenizer.mask_token
        raise InputTextError(
            f"{loaded.cfg.name} is a masked language model: it predicts the tokens behind "
            f"its mask token {token}, and the text has none; write {token} where the "
            f"prediction goes, e.g. \"Paris is the {token} of France.\"")
    return found


def fill_mask(loaded, text: str, *, sampling: Sampling = Sampling(temperature=1.0),
              n_candidates: int = 10, truncate: bool = False) -> NextResult:
    """`tfx next` on a masked LM: the distribution at every mask token, with what the
    sampling filters keep; the result's own fields are the first mask's."""
    check_sampling(sampling, loaded.cfg.vocab_size)
    ids = encode(loaded, text, truncate=truncate)
    masks = mask_positions(loaded, ids)
    check_run(loaded, len(ids), logits_rows=len(ids))
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ids]))[0]  # (T, V)
        rows = logits[masks].to("cpu", torch.float64)  # (M, V)
    tok = loaded.tokenizer
    predictions = []
    for position, row in zip(masks, rows):
        entropy, top, probs = describe(row, n_candidates)
        tempered = tempered_probs(row, sampling.temperature)
        final, kept = filter_logits(row, sampling)
        pieces = tok.pieces([i for i, _, _ in top])
        greedy = int(row.argmax())
        predictions.append(MaskPrediction(
            position=position, entropy=entropy,
            greedy=Greedy(id=greedy, token=tok.pieces([greedy])[0],
                          prob=float(probs[greedy])),
            kept_tokens=int(kept.sum()), kept_mass=float(tempered[kept].sum()),
            candidates=[NextCandidate(rank=r + 1, id=i, token=piece, logit=v, prob=p,
                                      tempered_prob=float(tempered[i]), kept=bool(kept[i]),
                                      final_prob=float(final[i]))
                        for r, ((i, p, v), piece) in enumerate(zip(top, pieces))]))
    filled = list(ids)
    for prediction in predictions:
        filled[prediction.position] = prediction.greedy.id
    first = predictions[0]
    return NextResult(
        model=loaded.info, input=input_info(loaded, text, ids), position=first.position,
        context=len(ids), entropy=first.entropy, greedy=first.greedy,
        kept_tokens=first.kept_tokens, kept_mass=first.kept_mass,
        settings=NextSettings(temperature=sampling.temperature, top_k=sampling.top_k,
                              top_p=sampling.top_p, candidates=n_candidates),
        candidates=first.candidates, mask_token=tok.mask_token, masks=predictions,
        filled=tok.decode(filled))


def own_token_probs(probs: torch.Tensor, ids: list[int], masks: list[int]) -> list:
    """A lens row of a masked LM: each position's probability of the token it holds
    (what a masked LM predicts at an unmasked position), None at a mask."""
    own = probs[torch.arange(len(ids)), ids].tolist()
    return [None if i in masks else p for i, p in enumerate(own)]


__all__ = ["fill_mask", "check_mask_text", "need_causal", "mask_positions", "own_token_probs",
           "LITERAL_MASKS"]
