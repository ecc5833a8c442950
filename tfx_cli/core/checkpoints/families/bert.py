"""BERT and RoBERTa (HF BertModel, BertFor*, RobertaModel, RobertaFor* folders): config
and tensor names.

Both are post-LN encoders with learned positions, segment embeddings and a LayerNorm of
the embedding sum. What a checkpoint's head is decides what tfx runs, as transformers 5's
modeling_bert.py and modeling_roberta.py build them:

  BertModel, RobertaModel      the encoder and its pooler (the pooler is counted, not run)
  BertForMaskedLM,             the encoder and the MLM head: dense, activation, LayerNorm
  RobertaForMaskedLM           (`mlm.*`), then the token table (tied) plus a bias per token
  BertForPreTraining           the same masked LM; its pooler and next-sentence head
                               (cls.seq_relationship) are set aside
  BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
  BertForMultipleChoice, BertForNextSentencePrediction, and RoBERTa's alike
                               the encoder (with the pooler where the class has one); the
                               task head (classifier, qa_outputs, cls.seq_relationship) is
                               set aside: tfx shows the encoder, and counts it alone

RoBERTa differs from BERT in its positions: row padding_idx + 1 + p of the table holds
position p (transformers numbers the positions after the padding index; a text has no
padding in tfx, so every position is counted), one segment row, and the MLM head's
exact GELU whatever hidden_act says. AntiBERTy (the `antiberty` package, a BERT masked LM
of antibody sequences) is BertForPreTraining's layout with three classifier heads of its
own (cls.species, cls.chain, cls.graft), set aside.
"""
from __future__ import annotations

from ....errors import WeightsError
from .common import activation, ln_leaf, unprefixed
from .registry import Family, TensorMap, archs_of, register
from .values import SIZE_KEYS

# architecture -> (masked LM head?, pooler?); transformers' classes build these
BERT_HEADS = {
    "BertModel": (False, True), "BertForMaskedLM": (True, False),
    "BertForPreTraining": (True, True), "BertForSequenceClassification": (False, True),
    "BertForMultipleChoice": (False, True), "BertForNextSentencePrediction": (False, True),
    "BertForTokenClassification": (False, False), "BertForQuestionAnswering": (False, False),
    "AntiBERTy": (True, True),
    "RobertaModel": (False, True), "RobertaForMaskedLM": (True, False),
    "RobertaForSequenceClassification": (False, False),
    "RobertaForTokenClassification": (False, False),
    "RobertaForQuestionAnswering": (False, False),
    "RobertaForMultipleChoice": (False, True),
}
# the task heads of those classes: set aside (shapes are not the encoder's business)
SET_ASIDE = ("cls.seq_relationship.", "classifier.", "qa_outputs.", "cls.species.",
             "cls.chain.", "cls.graft.")


def _head(hf: dict) -> tuple[bool, bool]:
    for arch in archs_of(hf):
        if arch in BERT_HEADS:
            return BERT_HEADS[arch]
    return False, True  # a config.json without architectures: the base model


def bert_config(hf: dict, where: str, *, roberta: bool = False) -> dict:
    """ModelConfig keyword arguments of a BERT or RoBERTa config.json: post-LN, learned
    positions, segment embeddings, a LayerNorm of the embedding sum; the MLM head of the
    masked-LM classes, else no output head."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise WeightsError(f"{where}: position_embedding_type "
                           f"{hf['position_embedding_type']!r} is not supported")
    if hf.get("is_decoder"):
        raise WeightsError(f"{where}: is_decoder is true (a causal BERT); tfx reads BERT and "
                           "RoBERTa as the encoders they are trained as")
    mlm, pooler = _head(hf)
    act = activation(where, hf.get("hidden_act", "gelu"))
    positions = hf.get("max_position_embeddings", 514 if roberta else 512)
    offset = 0
    if roberta:  # rows 0..padding_idx are never a position of an unpadded text
        offset = hf.get("pad_token_id", 1) + 1
        if positions <= offset:
            raise WeightsError(f"{where}: max_position_embeddings {positions} leaves no "
                               f"position after the padding index {offset - 1}")
    out = dict(
        vocab_size=hf.get("vocab_size", 50265 if roberta else 30522),
        context_length=positions - offset, pos_offset=offset,
        d_model=hf.get("hidden_size", 768), n_heads=hf.get("num_attention_heads", 12),
        n_layers=hf.get("num_hidden_layers", 12), d_ff=hf.get("intermediate_size", 3072),
        qkv_bias=True, proj_bias=True, norm_position="post",
        ln_eps=hf.get("layer_norm_eps", 1e-12), activation=act, positional="learned",
        causal=False, token_types=hf.get("type_vocab_size", 1 if roberta else 2),
        embed_norm=True, lm_head=mlm, pooler=pooler)
    if mlm:
        if not hf.get("tie_word_embeddings", True):
            raise WeightsError(f"{where}: tie_word_embeddings is false; tfx reads the masked "
                               "LM head as the token table (tied), as BERT and RoBERTa "
                               "train it")
        out.update(mlm_head=True, head_bias=True, tie_embeddings=True,
                   # RobertaLMHead applies gelu itself; BERT's transform hidden_act
                   mlm_activation="gelu" if roberta else
                   {"gelu_tanh": "gelu_tanh", "relu": "relu", "swiglu": "silu"}.get(act, "gelu"))
    return out


def roberta_config(hf: dict, where: str) -> dict:
    return bert_config(hf, where, roberta=True)


_NAMES = {"attention.self.query": "attn.W_query", "attention.self.key": "attn.W_key",
          "attention.self.value": "attn.W_value", "attention.output.dense": "attn.out_proj",
          "attention.output.LayerNorm": "ln1", "intermediate.dense": "ffn.fc1",
          "output.dense": "ffn.fc2", "output.LayerNorm": "ln2"}
_EMBEDS = {"word_embeddings": "embed.tok_emb", "position_embeddings": "embed.pos_emb",
           "token_type_embeddings": "embed.type_emb"}
# the MLM head's tensors, BERT's (cls.predictions.*) and RoBERTa's (lm_head.*)
_MLM = {"cls.predictions.transform.dense": "mlm.dense",
        "cls.predictions.transform.LayerNorm": "mlm.ln",
        "cls.predictions.decoder": "lm_head", "lm_head.dense": "mlm.dense",
        "lm_head.layer_norm": "mlm.ln", "lm_head.decoder": "lm_head"}
_BIASES = ("cls.predictions.bias", "lm_head.bias")  # the head's own bias parameter


def map_bert(state: dict, cfg) -> tuple[dict, dict]:
    """A BERT or RoBERTa checkpoint's tensors -> (tfx name -> tensor, tfx name ->
    checkpoint name). The head's bias is saved as cls.predictions.bias (lm_head.bias) and,
    by older versions, as the decoder's bias too: transformers ties the two, so the first
    one is read and the other set aside."""
    out = TensorMap()
    bias = next((k for k in _BIASES if k in state), None)
    for key, t in state.items():
        if key.startswith(SET_ASIDE) or (key.startswith(("bert.pooler.", "roberta.pooler.",
                                                         "pooler.")) and not cfg.pooler):
            continue  # a task head (or a pooler the config does not count): set aside
        if key in _BIASES or key.endswith("predictions.decoder.bias") or \
                key == "lm_head.decoder.bias":
            if key == bias or (bias is None and cfg.head_bias):
                out.put("lm_head.bias", key, t)
                bias = key
            continue
        module, _, leaf = key.rpartition(".")
        if module in _MLM and cfg.mlm_head:
            ours = _MLM[module]
            leaf = ln_leaf(leaf) if ours == "mlm.ln" else leaf
            out.put(f"{ours}.{leaf}", key, t)
            continue
        ours = _encoder_name(unprefixed(key, ("bert.", "roberta.")), cfg)
        if ours is not None:  # None: buffers (position ids, token type ids)
            out.put(ours, key, t)
    return out.result()


def _encoder_name(key: str, cfg) -> str | None:
    parts = key.split(".")
    if key in ("embeddings.position_ids", "embeddings.token_type_ids"):
        return None  # buffers of 0..P-1 and zeros, not parameters
    if parts[0] == "embeddings" and len(parts) == 3:
        if parts[1] == "LayerNorm":
            return f"embed.ln.{ln_leaf(parts[2])}"
        if parts[1] in _EMBEDS:
            return f"{_EMBEDS[parts[1]]}.{parts[2]}"
    elif parts[:2] == ["encoder", "layer"] and len(parts) >= 5:
        inner, leaf = ".".join(parts[3:-1]), parts[-1]
        if inner in _NAMES:
            mod = _NAMES[inner]
            leaf = ln_leaf(leaf) if mod in ("ln1", "ln2") else leaf
            return f"blocks.{parts[2]}.{mod}.{leaf}"
    return key  # the pooler (counted, checked, set aside) or unexpected


BERT, ROBERTA = register(
    Family("bert", tuple(a for a in BERT_HEADS if not a.startswith("Roberta")), bert_config,
           map_bert, model_types=("bert",), size_keys=SIZE_KEYS),
    Family("roberta", tuple(a for a in BERT_HEADS if a.startswith("Roberta")),
           roberta_config, map_bert, model_types=("roberta",), size_keys=SIZE_KEYS))
