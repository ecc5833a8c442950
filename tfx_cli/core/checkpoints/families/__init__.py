"""The model families tfx reads, one module each: what a HuggingFace config.json says, as
ModelConfig switches, and the checkpoint's tensor names, as tfx's parameter names.

Each family module gives `*_config(hf, where) -> dict` (ModelConfig keyword arguments) and
`map_*(state, cfg) -> (tfx name -> tensor, tfx name -> checkpoint name)`; a mapping works
on meta tensors as well as real ones, so a load is planned before any tensor is read.
This package names the families by `architectures` / `model_type` and dispatches to them.
It imports nothing of tfx but errors (and torch, lazily, where a mapping makes a tensor).
"""
from __future__ import annotations

from typing import Callable

from ....errors import WeightsError
from .bert import BERT_HEADS, bert_config, map_bert, roberta_config
from .decoders import DECODERS, decoder_config, map_decoder, text_config
from .gpt2 import gpt2_config, map_gpt2, map_nanogpt, nanogpt_config
from .modernbert import MODERNBERT, map_modernbert, modernbert_config
from .olmo import olmo2_config
from .deepseek import deepseek_config, map_deepseek
from .gptoss import gptoss_config, map_gptoss
from .moe import MOE, map_moe, moe_config
from .seq2seq import SEQ2SEQ, TOKEN_TABLES, check_tables, map_seq2seq, seq2seq_config
from .values import check_values
from .t5 import T5_ARCHITECTURES, T5_FAMILIES, T5_MODEL_TYPES, T5_TOKEN_TABLES, map_t5, t5_config

# config.json `architectures` entry (or `model_type`) -> family
ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2", "BertModel": "bert",
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
    "Phi3ForCausalLM": "phi3", "GPTNeoXForCausalLM": "gpt_neox",
    # Gemma 3 4B and up: images and text; tfx runs the text model and leaves the vision
    # tower and its projector unread
    "Gemma3ForConditionalGeneration": "gemma3",
    # encoder–decoders (translation, summarisation)
    "MarianMTModel": "marian", "BartForConditionalGeneration": "bart",
    "MBartForConditionalGeneration": "mbart",
    # T5, mT5, UMT5: with the head, both stacks alone, the encoder alone
    **T5_ARCHITECTURES,
}
# -- masked LMs and the newer encoders (bert.py, modernbert.py), OLMo 2 (olmo.py), and
# BART's base model: every BERT and RoBERTa class tfx reads (bert.BERT_HEADS says which
# head each has), ModernBERT's, and architectures with no head at all
ARCHITECTURES.update({arch: "roberta" if arch.startswith("Roberta") else "bert"
                      for arch in BERT_HEADS})
ARCHITECTURES.update({arch: "modernbert" for arch in MODERNBERT})
ARCHITECTURES.update({"Olmo2ForCausalLM": "olmo2", "BartModel": "bart"})
HEADLESS = ("BartModel",)  # an encoder–decoder whose output is the decoder's last stream
MODEL_TYPES = {"gpt2": "gpt2", "bert": "bert", "llama": "llama", "mistral": "mistral",
               "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3_text": "gemma3",
               "phi3": "phi3", "gpt_neox": "gpt_neox", "marian": "marian", "bart": "bart",
               "mbart": "mbart", "roberta": "roberta", "modernbert": "modernbert",
               "olmo2": "olmo2", **T5_MODEL_TYPES}
# -- mixtures of experts (moe.py): Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE
ARCHITECTURES.update({"MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe",
                      "Qwen3MoeForCausalLM": "qwen3_moe", "OlmoeForCausalLM": "olmoe"})
MODEL_TYPES.update({family: family for family in MOE})
# gpt-oss (gptoss.py): sinks, alternating windows, MXFP4 experts
ARCHITECTURES["GptOssForCausalLM"] = MODEL_TYPES["gpt_oss"] = "gpt_oss"
# DeepSeek-V3 (deepseek.py): latent attention, grouped sigmoid routing, FP8 weights
ARCHITECTURES["DeepseekV3ForCausalLM"] = MODEL_TYPES["deepseek_v3"] = "deepseek_v3"
# Architectures tfx has decided not to read, with the reason its one attention cannot
# run them (said in the unknown-architecture message); T5 was one until its relative
# position bias became a switch of the model
REFUSED: dict[str, str] = {}


def hf_family(hf: dict, where: str) -> str:
    """The family of a config.json, from its `architectures` (or, in older and
    hand-written configs without them, its `model_type`); a one-line refusal naming the
    architecture otherwise. `where`: the config file, for the message."""
    archs = hf.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    for arch in archs:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    if not archs and hf.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[hf["model_type"]]
    for name in [*archs, hf.get("model_type")]:
        if isinstance(name, str) and name in REFUSED:
            raise WeightsError(f"{where}: {name} is not supported: it {REFUSED[name]}")
    named = ", ".join(map(str, archs)) or f"model_type {hf.get('model_type')!r}"
    raise WeightsError(f"{where}: unknown architecture {named}; tfx reads the families "
                       f"{families_read()}")


def families_read() -> str:
    """The families tfx reads, each with its HF architectures: "gpt2 (GPT2LMHeadModel,
    GPT2Model), bert (BertModel), ..." (for the unknown-architecture message)."""
    by_family: dict[str, list[str]] = {}
    for arch, family in ARCHITECTURES.items():
        by_family.setdefault(family, []).append(arch)
    return ", ".join(f"{family} ({', '.join(archs)})" for family, archs in by_family.items())


def hf_config(family: str, hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments (all but the tokenizer) of a family's config.json,
    its values checked first (values.py)."""
    check_values(family, text_config(hf), where)
    if family == "gpt2":
        return gpt2_config(hf, where)
    if family == "bert":
        return bert_config(hf, where)
    if family in ("roberta", "modernbert", "olmo2"):
        return {"roberta": roberta_config, "modernbert": modernbert_config,
                "olmo2": olmo2_config}[family](hf, where)
    if family in SEQ2SEQ:  # Marian, BART, mBART
        out = seq2seq_config(family, hf, where)
        archs = hf.get("architectures") or []
        if any(arch in HEADLESS for arch in ([archs] if isinstance(archs, str) else archs)):
            out.update(lm_head=False, logits_bias=False, tie_embeddings=False)
        return out
    if family in T5_FAMILIES:  # T5, mT5, UMT5
        return t5_config(family, hf, where)
    if family in MOE:  # mixtures of experts
        return {**moe_config(family, hf, where), "causal": True}
    if family == "gpt_oss":
        return gptoss_config(hf, where)
    if family == "deepseek_v3":
        return deepseek_config(hf, where)
    # the decoder families: Llama and its descendants, GPT-NeoX
    return {**decoder_config(family, hf, where), "causal": True}


def token_tables(family: str, cfg) -> tuple[str, ...]:
    """The names under which a family's encoder–decoder checkpoints may save their one
    token table (a tied head's too): every copy saved must be the same tensor."""
    if family in SEQ2SEQ:
        return TOKEN_TABLES
    if family in T5_FAMILIES:
        return T5_TOKEN_TABLES + (("lm_head.weight",) if cfg.tie_embeddings else ())
    return ()


def hf_map(family: str) -> Callable:
    """The family's tensor-name mapping: (state, cfg) -> (tfx state, tfx name -> theirs)."""
    if family in DECODERS or family == "olmo2":
        return lambda state, cfg: map_decoder(family, state, cfg)
    if family in SEQ2SEQ:
        return lambda state, cfg: map_seq2seq(family, state, cfg)
    if family in MOE:
        return lambda state, cfg: map_moe(family, state, cfg)
    if family == "gpt_oss":
        return map_gptoss
    if family == "deepseek_v3":
        return map_deepseek
    if family in T5_FAMILIES:
        return map_t5
    return {"gpt2": map_gpt2, "bert": map_bert, "roberta": map_bert,
            "modernbert": map_modernbert}[family]


__all__ = ["ARCHITECTURES", "MODEL_TYPES", "REFUSED", "DECODERS", "SEQ2SEQ", "TOKEN_TABLES",
           "T5_FAMILIES", "T5_TOKEN_TABLES", "token_tables", "families_read",
           "hf_family", "hf_config", "hf_map", "check_tables", "decoder_config", "text_config",
           "nanogpt_config", "map_nanogpt"]
