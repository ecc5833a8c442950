import json

import pytest

from tfx_cli.core.presets import PRESETS
from tfx_cli.core.config import ModelConfig, config_from_dict, load_config_file
from tfx_cli.core.spec import resolve_config, with_overrides
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


LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 4.0],
            "original_max_position_embeddings": 16, "factor": 4.0}


def test_longrope_config_round_trips_through_json(tmp_path):
    cfg = ModelConfig(d_model=16, n_heads=4, positional="rope", rope_scaling=LONGROPE)
    assert cfg.rope["long_factor"] == (2.0, 4.0)  # hashable, so the config still is
    hash(cfg)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert resolve_config(str(path)).rope == cfg.rope


@pytest.mark.parametrize("change, words", [
    ({"long_factor": [2.0]}, "long_factor: 2 positive numbers"),
    ({"short_factor": [1.0, -1.0]}, "short_factor: 2 positive numbers"),
    ({"original_max_position_embeddings": None}, "original_max_position_embeddings"),
])
def test_longrope_needs_its_factors(change, words):
    scaling = {k: v for k, v in {**LONGROPE, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        ModelConfig(d_model=16, n_heads=4, positional="rope", rope_scaling=scaling)
    assert words in err.value.message


def test_phi3_su_and_trained_context_read_as_longrope():
    """Phi-3's first long-context configs: type "su", the trained context beside
    max_position_embeddings, and no factor (their ratio, as transformers computes it)."""
    from tfx_cli.core.checkpoints.families.decoders import rope_settings

    hf = {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
          "rope_theta": 10000.0,
          "rope_scaling": {"type": "su", "short_factor": [1.0], "long_factor": [2.0]}}
    theta, scaling = rope_settings(hf, "config.json")
    assert theta == 10000.0
    assert scaling == {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
                       "original_max_position_embeddings": 4096, "factor": 32.0}
