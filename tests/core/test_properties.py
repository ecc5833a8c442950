"""Properties that hold for any small config and any input, drawn by hypothesis.

- attention patterns are distributions: every row sums to 1, and a causal (or padding)
  mask leaves exact zeros where keys are hidden;
- a LayerNorm's normalised rows have mean 0 and variance var/(var+eps) (≈ 1), an RMSNorm's
  mean square ms/(ms+eps);
- every command's --json parses and holds no NaN or Infinity;
- the same command with the same seed prints the same bytes, in one process and in two.

Tokenizer round trips on arbitrary Unicode (byte and GPT-2 BPE, plus the real
vocabularies) are properties too; they live in tests/core/test_tokenizers.py
(test_byte_round_trips_any_text, test_gpt2_round_trips_any_text).
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core import load as loading
from tfx_cli.core.config import ModelConfig
from tfx_cli.core.model import build_model

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 50


# -- random small configs -----------------------------------------------------------
@st.composite
def configs(draw) -> ModelConfig:
    head_dim = draw(st.sampled_from([2, 4, 6]))
    n_heads = draw(st.integers(1, 4))
    n_kv_heads = draw(st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0]))
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    return ModelConfig(
        vocab_size=VOCAB, context_length=draw(st.integers(8, 32)),
        d_model=head_dim * n_heads, n_heads=n_heads, n_kv_heads=n_kv_heads,
        n_layers=draw(st.integers(1, 2)), d_ff=draw(st.integers(1, 24)),
        qkv_bias=draw(st.booleans()), proj_bias=draw(st.booleans()), norm=norm,
        norm_position=draw(st.sampled_from(["pre", "post"])),
        ln_eps=draw(st.sampled_from([1e-5, 1e-6, 1e-12])),
        activation=draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "swiglu"])),
        positional=draw(st.sampled_from(["learned", "sinusoidal", "rope", "none"])),
        causal=draw(st.booleans()), tie_embeddings=draw(st.booleans()))


@st.composite
def model_inputs(draw):
    cfg = draw(configs())
    ids = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=cfg.context_length))
    valid_len = draw(st.none() | st.integers(1, len(ids)))
    return cfg, ids, valid_len, draw(st.integers(0, 2**32))


SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(model_inputs())
def test_patterns_are_distributions_with_exact_zeros_where_masked(drawn):
    cfg, ids, valid_len, seed = drawn
    model = build_model(cfg, seed)
    T = len(ids)
    keep = model.mask(T, T, valid_len=valid_len)  # None: every key visible
    with model.record(["blocks.*.attn.pattern"]) as trace, torch.inference_mode():
        model(torch.tensor([ids]), keep=keep)
    for layer in range(cfg.n_layers):
        pattern = trace.raw(f"blocks.{layer}.attn.pattern").double()  # (H, T, S)
        assert pattern.shape == (cfg.n_heads, T, T)
        assert torch.isfinite(pattern).all()
        # float32 rows: each of the T weights is rounded once, so the sum may miss 1 by a
        # few ulps per key (2.1e-7 seen at T = 8)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(cfg.n_heads, T,
                                                                dtype=torch.float64),
                                   rtol=0, atol=T * 2**-23)
        if keep is not None:
            assert (pattern[:, ~keep] == 0).all()  # hidden keys get exactly nothing
        if cfg.causal:
            assert (pattern.triu(diagonal=1) == 0).all()


@SETTINGS
@given(model_inputs())
def test_normed_rows_have_mean_zero_and_unit_variance(drawn):
    cfg, ids, _, seed = drawn
    model = build_model(cfg, seed)
    with model.record(["*.normed", "*.mean", "*.var", "*.in"]) as trace, torch.inference_mode():
        model(torch.tensor([ids]))
    names = [n for n in trace.names() if n.endswith(".normed")]
    assert names
    for name in names:
        prefix = name[:-len(".normed")]
        normed = trace.raw(name).double()  # (T, C)
        var = trace.raw(prefix + ".var").double()  # (T,): RMSNorm's is the mean square
        expected = var / (var + cfg.ln_eps)  # exactly 1 but for eps
        if cfg.norm == "layernorm":
            # float32 rounds x - mean by about one ulp of |x|, and dividing by the standard
            # deviation magnifies that: rows of nearly equal values (d_model 2, values
            # 6e-4 apart around 0.18) miss zero by 2.5e-5 for that reason alone
            x = trace.raw(prefix + ".in").double()
            slack = 8 * 2**-24 * x.abs().amax(-1) / (var + cfg.ln_eps).sqrt()
            assert (normed.mean(-1).abs() <= 1e-5 + slack).all()
            got = normed.var(-1, unbiased=False)
        else:
            got = normed.pow(2).mean(-1)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


# -- every command's JSON ---------------------------------------------------------------
def _no_constants(name):
    raise ValueError(f"{name} in JSON output")


LLAMA_LIKE = {"vocab_size": 256, "context_length": 64, "d_model": 8, "n_heads": 2,
              "n_kv_heads": 1, "n_layers": 1, "d_ff": 12, "norm": "rmsnorm",
              "positional": "rope", "activation": "swiglu", "proj_bias": False,
              "tie_embeddings": True, "tokenizer": "byte"}


@pytest.fixture(scope="module")
def llama_like(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "llama-like.json"
    path.write_text(json.dumps(LLAMA_LIKE))
    return str(path)


MODELS = {"toy": ["-c", "toy"],
          "gpt-byte": ["--d-model", "8", "--heads", "2", "--layers", "2", "-t", "byte",
                       "--context", "64"]}
TEXT_COMMANDS = [["embed"], ["posenc"], ["attend"], ["attend", "--explain"],
                 ["attend", "--valid-lens", "1"], ["layernorm"], ["layernorm", "--which", "ln2"],
                 ["ffn"], ["trace"], ["generate", "-n", "2", "--temperature", "0.7"],
                 ["next", "--top-p", "0.5"], ["lens"], ["tokenize"]]
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
               max_size=20).filter(lambda t: t.strip() and t != "-" and "\x00" not in t)


def run_json(args):
    # --json goes right after the command, so a trailing `-- TEXT` stays the last thing
    result = CliRunner().invoke(app, [args[0], "--json", *args[1:]], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout, parse_constant=_no_constants)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(TEXT_COMMANDS), model=st.sampled_from(["toy", "gpt-byte",
                                                                     "llama"]),
       text=TEXT)
def test_every_command_json_parses_without_nan(command, model, text, llama_like):
    model_args = ["-c", llama_like] if model == "llama" else MODELS[model]
    if command[0] == "tokenize":
        model_args = ["-t", "byte"]
    if model == "toy" and command[0] in ("generate", "next", "lens"):
        model_args = MODELS["gpt-byte"]  # toy is an encoder: no next token to show
    # a text that starts with '-' must follow `--`, or it reads as an option
    doc = run_json([*command, *model_args, "--", text] if text.startswith("-")
                   else [command[0], text, *command[1:], *model_args])
    assert doc["schema"] == "tfx/1" and doc["command"] == command[0]


@pytest.mark.parametrize("args", [
    ["configs"],
    ["count-params", "-c", "gpt2-xl", "--seq-len", "7"],
    ["posenc", "--length", "5", "-c", "smollm2-135m"],
    ["attend", "--inputs", str(ROOT / "samples" / "seed000.json"), "--explain"],
], ids=["configs", "count-params", "posenc-length", "attend-inputs"])
def test_commands_without_text_give_clean_json(args):
    run_json(args)


def test_masked_scores_are_null_not_infinity():
    doc = run_json(["attend", "a b c", "--d-model", "8", "--heads", "2", "--layers", "1",
                    "-t", "byte", "--show", "masked"])
    masked = doc["tensors"]["blocks.0.attn.masked"]["data"]
    assert masked[0][0][1] is None  # -inf above the diagonal of a causal mask
    assert all(v is not None and math.isfinite(v) for row in masked[0] for v in
               row[:1])


# -- same command, same bytes --------------------------------------------------------
SAME = [
    ["generate", "Hello, I am", "-n", "4", "--temperature", "0.9", "--top-k", "20",
     "--seed", "7", "--d-model", "16", "--heads", "2", "--layers", "2", "--json"],
    ["attend", "When you play game of thrones", "-c", "toy", "--explain"],
    ["trace", "Hello", "--d-model", "8", "--heads", "2", "--layers", "1", "-t", "byte",
     "--values", "--json"],
    ["next", "Hello", "--d-model", "8", "--heads", "2", "--layers", "1", "--seed", "3"],
    ["lens", "one two three", "--d-model", "8", "--heads", "2", "--layers", "3", "-t",
     "char"],
]


def _stdout(args) -> bytes:
    loading._CACHE.clear()  # rebuild the weights from the seed: they must come out the same
    result = CliRunner().invoke(app, args, env={"TFX_QUIET": "1", "COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    return result.stdout_bytes


@pytest.mark.parametrize("args", SAME, ids=[a[0] for a in SAME])
def test_same_seed_same_bytes_in_one_process(args):
    assert _stdout(args) == _stdout(args)


def test_same_seed_same_bytes_in_two_processes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFX_QUIET": "1", "COLUMNS": "100",
           "NO_COLOR": "1"}
    outputs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "tfx_cli", *SAME[0]], env=env,
                             capture_output=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1]
    doc = json.loads(outputs[0])
    assert doc["result"]["settings"]["decoding"] == "sample"


def test_same_plot_same_bytes(tmp_path):
    """SVG ids are salted at random unless tfx fixes the salt; PNGs carry no date."""
    files = []
    for name in ("a.svg", "b.svg", "a.png", "b.png"):
        path = tmp_path / name
        result = CliRunner().invoke(app, ["attend", "hi there", "-c", "toy", "--plot",
                                          str(path)], env={"TFX_QUIET": "1"})
        assert result.exit_code == 0, result.stderr
        files.append(path.read_bytes())
    assert files[0] == files[1] and files[2] == files[3]
