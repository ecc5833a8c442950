import json

import pytest

from tfx_cli.core.config import (PRESETS, ModelConfig, config_from_dict, load_config_file,
                                 resolve_config, with_overrides)
from tfx_cli.errors import ConfigError


def test_presets_validate_and_default_is_gpt124m():
    assert resolve_config(None).name == "gpt124m"
    for name, cfg in PRESETS.items():
        assert cfg.name == name
        assert cfg.d_model % cfg.n_heads == 0


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ConfigError) as err:
        resolve_config("nope")
    assert "gpt124m" in err.value.message and "toy" in err.value.message


@pytest.mark.parametrize("fields, words", [
    ({"d_model": 768, "n_heads": 7}, "does not divide"),
    ({"d_model": 0}, "must be positive"),
    ({"n_layers": -1}, "must be positive"),
    ({"norm": "batchnorm"}, "layernorm, rmsnorm"),
    ({"activation": "tanh"}, "relu"),
    ({"n_heads": 12, "n_kv_heads": 5}, "must divide"),
    ({"n_layers": 10**7}, "limit"),
])
def test_invalid_configs_say_why(fields, words):
    with pytest.raises(ConfigError) as err:
        ModelConfig(**fields)
    assert words in err.value.message


def test_config_file_unknown_keys_and_types(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"d_model": 64, "n_heads": 4, "colour": "red"}))
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert "colour" in err.value.message and "valid keys" in err.value.message
    with pytest.raises(ConfigError, match="whole number"):
        config_from_dict({"d_model": "64"})
    path.write_text('{"d_model": 64,\n "n_heads": }')
    with pytest.raises(ConfigError, match="line 2, column"):
        load_config_file(path)


def test_config_file_roundtrip(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"d_model": 64, "n_heads": 4, "n_layers": 2}))
    cfg = resolve_config(str(path))
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.name) == (64, 4, 2, 256, "small")


def test_overrides_keep_ffn_ratio_and_kv_heads():
    cfg = with_overrides(PRESETS["gpt124m"], heads=8, d_model=512, layers=2, context=128)
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_ff, cfg.n_layers,
            cfg.context_length) == (8, 8, 512, 2048, 2, 128)
    with pytest.raises(ConfigError, match="after overrides"):
        with_overrides(PRESETS["gpt124m"], heads=7)
