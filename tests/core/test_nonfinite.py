"""NaN and infinity stop the run where they arise (issue 25, items 1-4): the first trace
name that went bad is named, with the likely fix, exit 2, and nothing on stdout.

Fast cases use tiny random models whose weights the test blows up at a known place; the
real float16 overflow of gemma3-270m (item 1) is marked slow.
"""
import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core.model import finite
from tfx_cli.errors import NonFiniteError

# gpt124m's shape (an untied head) made tiny, reading bytes
TINY = dict(config="gpt124m", layers=2, d_model=16, heads=2, tokenizer="byte", context=32)
TINY_ARGS = ["-c", "gpt124m", "--layers", "2", "--d-model", "16", "--heads", "2", "-t", "byte",
             "--context", "32"]
ROOT = Path(__file__).resolve().parents[2]
ENV = {"TFX_QUIET": "1"}


def run(*args):
    return CliRunner().invoke(app, list(args), env=ENV)


def _blown(dtype="float16", where="blocks.1.ffn.fc2.weight", factor=1e5):
    """The tiny model with one weight multiplied (still finite itself) so that what it
    makes passes float16's range; returns the model, the weight and its saved value."""
    m = api.load(**TINY, dtype=dtype)
    param = m.module.get_parameter(where)
    saved = param.detach().clone()
    with torch.no_grad():
        param.mul_(factor)
    assert torch.isfinite(param).all()
    return m, param, saved


def _restore(param, saved):
    with torch.no_grad():
        param.copy_(saved)


@pytest.mark.parametrize("call", ["next", "trace", "lens", "attend", "generate",
                                  "attribute", "patch"])
def test_float16_overflow_is_named_where_it_arises(call):
    """fc2 of block 1 times 1e5 in float16: its output is the first value past 65,504."""
    m, param, saved = _blown()
    try:
        with pytest.raises(NonFiniteError) as caught:
            if call == "next":
                m.next("hello")
            elif call == "trace":
                m.trace("hello", select=["logits"])
            elif call == "lens":
                m.lens("hello")
            elif call == "attend":
                m.attend("hello", layer=1)
            elif call == "generate":
                m.generate("hello", max_new_tokens=2)
            elif call == "attribute":
                m.attribute("hello", answer="a")
            else:
                m.patch("hello", corrupt="jello", answer="a", wrong="b")
        message = caught.value.message
        # fc2's products pass 65,504 both ways: inf, -inf, and NaN where they meet
        assert re.match(r"blocks\.1\.ffn\.out became (NaN|inf|-inf)( and \S+)* in this "
                        r"float16 run", message), message
        assert "--dtype bfloat16" in message
    finally:
        _restore(param, saved)
    # the same model and text, restored, runs: the check does not fire on finite values
    assert np_finite(m.next("hello").candidates[0].prob)


def np_finite(x) -> bool:
    return x == x and abs(x) != float("inf")


def test_the_site_is_the_first_tap_with_a_non_finite_value():
    """Recorded by hand in float32 with the same blown weight, the first tap past float16's
    largest value is the one the error names."""
    m, param, saved = _blown(dtype="float32")  # the same weights, recorded in float32
    try:
        tr = m.trace("hello", select=["*"])
        first = next(name for name in tr.tensors.names() if not name.endswith(".masked")
                     and abs(tr.tensors[name]).max() > finite.FLOAT16_MAX)
    finally:
        _restore(param, saved)
    assert first == "blocks.1.ffn.out"


def test_nan_weights_name_the_table_and_suggest_checking_them():
    m, param, saved = _blown(dtype="float32", where="embed.tok_emb.weight", factor=1.0)
    try:
        with torch.no_grad():
            param[ord("h")] = float("nan")
        with pytest.raises(NonFiniteError) as caught:
            m.next("hello")
        assert caught.value.message.startswith("embed.tok became NaN in this float32 run")
        assert "check the weights" in caught.value.message
    finally:
        with torch.no_grad():
            param.copy_(saved)


def test_the_decoding_fast_path_checks_every_step():
    """A token whose embedding row overflows is only read once generated: the prompt's
    forward is finite, the one-token step (decoding.step, no taps) is not, and the error
    still names the first bad tap (the step is run again through the forward)."""
    m = api.load(**TINY)
    model = m.module
    table = model.embed.tok_emb.weight
    saved = table.detach().clone()
    head = model.lm_head.weight
    saved_head = head.detach().clone()
    x = ord("z")
    try:
        with torch.no_grad():
            head.zero_()
            head[x] = 1.0  # every text predicts "z" ...
            model.ln_f.shift.fill_(1.0)
            table[x] = 3e38  # ... whose embedding overflows the first norm's variance
        from tfx_cli.core.model import decoding

        assert decoding.supports(model)
        with pytest.raises(NonFiniteError) as caught:
            m.generate("hi", max_new_tokens=3)
        site = caught.value.message.split(" became ")[0]
        assert site.startswith(("embed.", "blocks.0.")), caught.value.message
    finally:
        with torch.no_grad():
            table.copy_(saved)
            head.copy_(saved_head)
            model.ln_f.shift.fill_(0.0)


def test_steering_past_float32_is_refused_with_a_smaller_scale():
    """Item 3: --scale 1e30 is finite, but the steered stream's variance is not."""
    out = run("next", "Hello, I am", *TINY_ARGS, "--steer", "blocks.1.resid_pre",
              "--toward", "love", "--away", "hate", "--scale", "1e30", "--json")
    assert out.exit_code == 2 and out.stdout == "", out.stderr
    line = out.stderr.strip()
    assert line.startswith("tfx: error: blocks.1.") and "became" in line
    assert "use a smaller --scale (now 1e+30)" in line
    ok = run("next", "Hello, I am", *TINY_ARGS, "--steer", "blocks.1.resid_pre",
             "--toward", "love", "--away", "hate", "--scale", "4", "--json")
    assert ok.exit_code == 0


def test_attribute_with_an_overflow_prints_nothing():
    """Item 2: no header on stdout, then an internal error; one line, exit 2."""
    m, param, saved = _blown()
    try:
        out = run("attribute", "hello", *TINY_ARGS, "--dtype", "float16", "--answer", "a")
    finally:
        _restore(param, saved)
    assert out.exit_code == 2 and out.stdout == "", out.stderr
    assert "internal error" not in out.stderr and "blocks.1.ffn.out became" in out.stderr


def test_train_stops_at_the_first_non_finite_value_and_writes_nothing(tmp_path):
    """Item 4: --lr 1e6 diverges; nothing is written, the message says lower --lr."""
    out = run("train", "-c", "toy", "--pairs", str(ROOT / "samples" / "seed001.tsv"), "-o",
              str(tmp_path / "out"), "--lr", "1e6", "--steps", "60")
    assert out.exit_code == 2, out.stderr
    line = out.stderr.strip()
    assert line.startswith("tfx: error: training diverged at step ") and \
        "lower --lr (now 1e+06), e.g. --lr 0.01" in line, line
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one


def test_no_check_fires_on_a_finite_run_and_outputs_equal_the_unchecked_ones(monkeypatch):
    """The check only reads: the logits of a run with it equal those without it, bit for
    bit."""
    m = api.load(**TINY)
    with torch.inference_mode():
        ids = torch.tensor([list(b"hello there")])
        with_check = m.module(ids)
        monkeypatch.setattr(finite, "check", lambda *a, **k: None)
        monkeypatch.setattr(type(m.module), "check_finite", lambda *a, **k: None)
        without = m.module(ids)
    assert torch.equal(with_check, without)


@pytest.mark.slow
def test_gemma3_float16_is_refused_before_loading_and_stopped_with_force():
    """Item 1 on the real weights: refused up front (Gemma overflows float16); with --force
    every command stops at blocks.7.resid_out (54,688 after block 6, inf in block 7)."""
    text = "The capital of France is"
    refused = run("next", text, "-w", "gemma3-270m", "--dtype", "float16")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "is a Gemma model" in refused.stderr and "--dtype bfloat16" in refused.stderr
    assert refused.stderr.count("\n") == 1
    for args in (["next", text], ["generate", text, "-n", "3"], ["lens", text],
                 ["attribute", text, "--answer", " Paris"],
                 ["patch", text, "--corrupt", "The capital of Italy is", "--answer", " Paris",
                  "--wrong", " Rome"]):
        out = run(*args, "-w", "gemma3-270m", "--dtype", "float16", "--force", "--json")
        assert out.exit_code == 2 and out.stdout == "", (args, out.stderr)
        assert out.stderr.startswith("tfx: error: blocks.7.resid_out became inf in this "
                                     "float16 run"), (args, out.stderr)
    fine = run("next", text, "-w", "gemma3-270m", "--dtype", "bfloat16", "--json")
    assert fine.exit_code == 0  # the fix the message names runs
    assert 0 < json.loads(fine.stdout)["result"]["greedy"]["prob"] <= 1


def _scaled(m, prefix: str, words: tuple, factor: float):
    """Multiply the parameters under `prefix` whose names hold one of `words`; returns
    what to restore."""
    saved = []
    with torch.no_grad():
        for name, p in m.module.named_parameters():
            if name.startswith(prefix) and any(w in name for w in words):
                saved.append((p, p.detach().clone()))
                p.mul_(factor)
    return saved


def test_a_mixture_of_experts_block_is_checked_and_named():
    """The check sits on every block's output, whatever the block holds: a tiny-moe
    block whose experts overflow float32 is named at its routed output."""
    m = api.load(config="tiny-moe")
    saved = _scaled(m, "blocks.1.moe.expert.", ("gate_proj", "fc1"), 1e20)
    try:
        with pytest.raises(NonFiniteError) as caught:
            m.next("hello")
    finally:
        for p, value in saved:
            _restore(p, value)
    assert caught.value.message.startswith("blocks.1.moe."), caught.value.message
    assert np_finite(m.next("hello").candidates[0].prob)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_both_stacks_of_an_encoder_decoder_are_checked(stack):
    """toy's encoder steered past float32, or its decoder's FFN blown up: the error
    names the stack's own tap."""
    text = "When you play game of thrones"
    if stack == "encoder":
        with pytest.raises(NonFiniteError) as caught:
            api.next(text, config="toy", steer="encoder.blocks.0.resid_pre", toward="you",
                     away="win", scale=1e30)
        assert "use a smaller --scale" in caught.value.message
    else:
        m = api.load(config="toy")
        saved = _scaled(m, "decoder.blocks.0.ffn.", ("weight",), 1e30)
        try:
            with pytest.raises(NonFiniteError) as caught:
                m.next(text, target="you")
        finally:
            for p, value in saved:
                _restore(p, value)
    assert caught.value.message.startswith(f"{stack}.blocks.0."), caught.value.message
