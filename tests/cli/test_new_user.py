"""What a new user met: answers that were wrong with exit 0, options that meant different
things, output that ran away or could drive the terminal. One test per finding (the
bad-input rows of the errors page's table are in test_bad_inputs.py)."""
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from needs import need
from tfx_cli import api
from tfx_cli.cli import app

SMALL = ["--layers", "2", "--d-model", "16", "--heads", "2"]


def run(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input,
                              env={"TFX_QUIET": "1", "COLUMNS": "80", "NO_COLOR": "1"})


def ok(*args, input=None):
    result = run(*args, input=input)
    assert result.exit_code == 0, result.stderr
    return result


# -- weights never depend on the text they read ----------------------------------------
def test_toy_gives_a_word_the_same_row_whatever_the_text():
    short = api.embed("the cat", config="toy")
    longer = api.embed("the cat sat on the mat", config="toy")
    assert np.array_equal(short.tensors["encoder.embed.tok"][0],
                          longer.tensors["encoder.embed.tok"][0])
    assert short.model.cfg.vocab_size == longer.model.cfg.vocab_size == 64
    configs = json.loads(ok("configs", "--json").stdout)["result"]["presets"]
    assert next(p for p in configs if p["name"] == "toy")["vocab_size"] == 64
    assert json.loads(ok("embed", "the cat", "-c", "toy", "--json").stdout)[
        "model"]["vocab_size"] == 64
    assert api.tokenize("winter", config="toy").tokens == ["winter"]  # a word of the seeds
    assert api.tokenize("zebra", config="toy").tokens == ["<unk>"]


# -- generate stops at the model's end of sequence ---------------------------------------
def test_generate_stops_at_the_end_of_sequence_token(tmp_path):
    plain = api.generate("When you play", config="gpt124m", max_new_tokens=5, **dict(
        layers=1, d_model=16, heads=2))
    end = plain.new_ids[2]  # make the third new token the model's end of sequence
    cfg = tmp_path / "eos.json"
    cfg.write_text(json.dumps({"vocab_size": 50257, "context_length": 1024, "d_model": 16,
                               "n_heads": 2, "n_layers": 1, "dropout": 0.1, "qkv_bias": False,
                               "eos_ids": [end]}))
    assert api.generate("When you play", config=str(cfg), max_new_tokens=5,
                        ignore_eos=True).new_ids == plain.new_ids  # the same weights
    doc = json.loads(ok("generate", "When you play", "-c", cfg, "-n", 5, "--json").stdout)
    r = doc["result"]
    assert r["stopped"] == "eos" and r["new_ids"] == plain.new_ids[:3]
    assert r["settings"]["eos_ids"] == [end] and r["settings"]["ignore_eos"] is False
    # the end-of-sequence token stays in the ids but is not part of the text
    from tfx_cli.core.tokenizers import get_tokenizer

    assert r["completion"] == get_tokenizer("gpt2").decode(plain.new_ids[:2])
    assert r["text"] == "When you play" + r["completion"]
    on = json.loads(ok("generate", "When you play", "-c", cfg, "-n", 5, "--ignore-eos",
                       "--json").stdout)["result"]
    assert on["stopped"] == "max_new_tokens" and on["new_ids"] == plain.new_ids
    view = ok("generate", "When you play", "-c", cfg, "-n", 5).stdout
    assert "eos: the model ended its text" in view


# -- one meaning per option --------------------------------------------------------------
def test_candidates_and_top_k_mean_one_thing_everywhere():
    for command in ("next", "generate", "report"):
        help_text = ok(command, "--help").stdout
        assert "--candidates" in help_text, command
        assert not re.search(r"(^|\s)-k\b", help_text), command  # no short -k anywhere
    assert "--top-k" not in ok("report", "--help").stdout  # top-k is sampling's filter
    r = api.next("Hello", candidates=3, top_k=2, layers=1, d_model=16, heads=2)
    assert len(r.candidates) == 3 and r.kept_tokens == 2


def test_report_json_ffn_plot_and_count_params_of_a_checkpoint(tmp_path):
    need("matplotlib", "pip install 'tfx-cli[plot]'")  # the ffn --plot line
    doc = json.loads(ok("report", "Hello there", *SMALL, "--json").stdout)
    assert doc["command"] == "report" and "blocks.1.attn.pattern" in doc["tensors"]
    assert doc["result"]["norms"][0]["name"] == "blocks.0.ln1"
    assert len(doc["result"]["next_tokens"][0]) == 5
    ok("ffn", "Hello there", *SMALL, "--plot", tmp_path / "ffn.png")
    assert (tmp_path / "ffn.png").read_bytes()[:4] == b"\x89PNG"
    counted = json.loads(ok("count-params", "-w", "minilm", "--json").stdout)
    assert counted["result"]["total"] == 22_713_216 and counted["model"]["weights"] == "minilm"


# -- output that ran away or drove the terminal --------------------------------------------
def test_long_tokenize_output_is_cut_unless_full():
    text = "the quick brown fox jumps over the lazy dog " * 200
    out = ok("tokenize", text).stdout
    assert len(out.splitlines()) < 100 and "--full shows all" in out
    assert len(ok("tokenize", text, "--full").stdout.splitlines()) > 1800


def test_many_heads_are_cut():
    out = ok("attend", "hi", "--heads", "32", "--d-model", "64", "--layers", "1").stdout
    assert "head 15 " in out and "head 16 " not in out and "16 more heads" in out


@pytest.mark.parametrize("text", ["a\x1b[31mRED", "evil\u202etxt", "bell\x07"])
def test_user_text_never_reaches_the_terminal_raw(text):
    for args in (["tokenize", "-"], ["generate", "-", *SMALL, "-n", "2", "-t", "byte"],
                 ["next", "-", *SMALL, "-t", "byte"]):
        result = ok(*args, input=text.encode())
        out = result.stdout + result.stderr
        assert not set("\x1b\u202e\x07") & set(out), args  # escaped, written out or quoted
    decoded = ok("tokenize", "-", input=text.encode()).stdout
    assert "<0x1B>" in decoded or "<U+202E>" in decoded or "<0x07>" in decoded
    bad = run("embed", "x", "-c", "\x1b[31mred")
    assert bad.exit_code == 2 and "\x1b" not in bad.stderr and "x1b" in bad.stderr


def test_generate_select_labels_each_step_with_its_tokens():
    out = ok("generate", "Hello", *SMALL, "-n", "2", "--select", "blocks.0.attn.pattern").stdout
    step1 = out.split("step.1.blocks.0.attn.pattern head 0")[1]
    first = api.generate("Hello", max_new_tokens=2, layers=2, d_model=16, heads=2)
    new = first.steps[0].token.replace(" ", "·")
    assert f" {new} " in step1.splitlines()[3]  # the row is the new token, spaces shown


def test_small_things():
    # "1 tensor", not "1 tensors"
    assert "1 tensor\n" in ok("trace", "hi", "-c", "gpt2", "--layers", "1", "-s",
                              "logits").stdout
    # a Windows line ending read from stdin leaves no \r token
    assert api.tokenize("hi").input.ids == json.loads(
        ok("tokenize", "-", "--json", input=b"hi\r\n").stdout)["input"]["ids"]
    # RMSNorm has no shift: the title says so
    out = ok("layernorm", "hi", "-c", "smollm2-135m", "--layers", "1", "-t", "byte").stdout
    assert ".scale  (C,)" in out and ".shift" not in out
    # a value below the precision shows in scientific notation, not as 0.000
    out = ok("ffn", "hi", "-c", "toy", "--precision", "1").stdout
    assert "fraction_positive" in out
    from tfx_cli.render.views import format_value
    assert format_value(0.00004, 3) == "4.000e-05" and format_value(0.25, 3) == "0.250"
    # help text is wrapped, not cut
    assert "concat, out" in ok("attend", "--help").stdout
    # lens teaches with real weights in its examples
    assert "--weights smollm2" in ok("lens", "--help").stdout


def test_hidden_and_activation_tables_cut_the_same_columns():
    out = ok("ffn", "When you play game of thrones", *SMALL).stdout
    headers = [line for line in out.splitlines() if line.lstrip().startswith("T\\F")]
    assert len(headers) == 2 and headers[0].split() == headers[1].split()


def test_a_config_with_only_model_type(tmp_path):
    from tfx_cli.core.checkpoints import checkpoint_config

    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_layer": 1, "n_embd": 8, '
                                          '"n_head": 2}')
    cfg = checkpoint_config(str(tmp_path))
    assert cfg.n_layers == 1 and cfg.d_model == 8 and cfg.tokenizer == "gpt2"
