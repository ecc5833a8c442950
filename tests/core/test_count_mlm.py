"""count-params of the masked LMs: tfx's count from a config.json equals transformers'
(the model built on the meta device), for the real configs of BERT-base and
ModernBERT-base, and equals the presets bert-base and modernbert-base.

The config facts are those of the published config.json files of
google-bert/bert-base-uncased and answerdotai/ModernBERT-base (transformers 4 keys, as
they are on the Hub).
"""
import json
from dataclasses import replace

import pytest
from checkpoint_makers import need

BERT_BASE_UNCASED = {  # google-bert/bert-base-uncased config.json
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
    "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522}
MODERNBERT_BASE = {  # answerdotai/ModernBERT-base config.json
    "architectures": ["ModernBertForMaskedLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 50281, "classifier_activation": "gelu",
    "classifier_bias": False, "classifier_pooling": "mean", "cls_token_id": 50281,
    "decoder_bias": True, "eos_token_id": 50282, "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0, "hidden_activation": "gelu", "hidden_size": 768,
    "intermediate_size": 1152, "local_attention": 128, "local_rope_theta": 10000.0,
    "max_position_embeddings": 8192, "mlp_bias": False, "model_type": "modernbert",
    "norm_bias": False, "norm_eps": 1e-05, "num_attention_heads": 12,
    "num_hidden_layers": 22, "pad_token_id": 50283, "sep_token_id": 50282,
    "tie_word_embeddings": True, "vocab_size": 50368}


def _folder(tmp_path, config: dict):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _transformers_count(config: dict) -> int:
    need("transformers", "pip install transformers")
    import torch
    import transformers

    model_type = {"bert": "BertConfig", "modernbert": "ModernBertConfig"}[config["model_type"]]
    settings = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = getattr(transformers, config["architectures"][0])(
            getattr(transformers, model_type)(**settings))
    return sum(p.numel() for p in model.parameters())


def test_bert_base_with_its_mlm_head_is_transformers_count(tmp_path):
    from tfx_cli import api

    counted = api.count_params(weights=_folder(tmp_path, BERT_BASE_UNCASED)).total
    assert counted == 109_514_298 == _transformers_count(BERT_BASE_UNCASED)
    assert api.count_params(config="bert-base").total == 109_514_298


def test_modernbert_base_is_transformers_count_and_the_preset(tmp_path):
    from tfx_cli import api
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.presets import PRESETS

    folder = _folder(tmp_path, MODERNBERT_BASE)
    counted = api.count_params(weights=folder).total
    assert counted == 149_655_232 == _transformers_count(MODERNBERT_BASE)
    cfg = checkpoint_config(folder)
    assert replace(cfg, name="modernbert-base", tokenizer="gpt2", eos_ids=()) == \
        PRESETS["modernbert-base"]
    assert cfg.sliding_window == 65 and cfg.sliding_layers == tuple(
        i for i in range(22) if i % 3)


@pytest.mark.parametrize("preset", ["bert-base", "modernbert-base"])
def test_the_built_model_has_the_counted_parameters(preset):
    """count-params --verify: the model built on the meta device (ModernBERT's block 0
    without ln1 included) has exactly the counted tensors."""
    from tfx_cli import api

    result = api.count_params(config=preset, verify=True)
    check = result.verify
    assert check.verified and not check.mismatched, check
    assert check.model_params == check.expected == result.total
