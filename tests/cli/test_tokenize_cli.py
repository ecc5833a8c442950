"""`tfx tokenize`: JSON shape, the config's default tokenizer, errors, and no torch."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tfx_cli.cli import app

CORPUS = Path(__file__).resolve().parents[2] / "samples" / "corpus.txt"


def run(*args, input=None):
    return CliRunner().invoke(app, ["tokenize", *args], input=input)


def run_json(*args, input=None):
    result = run(*args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_envelope_shape():
    doc = run_json("Hello, I am")
    assert doc["schema"] == "tfx/1" and doc["command"] == "tokenize"
    assert doc["input"] == {"text": "Hello, I am", "tokens": ["Hello", ",", " I", " am"],
                            "ids": [15496, 11, 314, 716]}
    assert doc["tensors"] == {}
    assert doc["result"] == {"tokenizer": "gpt2", "vocab_size": 50257, "n_tokens": 4,
                             "decoded": "Hello, I am", "round_trip": True,
                             "special_tokens": []}
    assert doc["model"]["config"] == "gpt124m"


def test_minilm_adds_cls_and_sep():
    doc = run_json("Hello, I am a sentence.", "-t", "minilm")
    assert doc["input"]["ids"] == [101, 7592, 1010, 1045, 2572, 1037, 6251, 1012, 102]
    assert doc["result"]["special_tokens"] == ["[CLS]", "[SEP]"]
    assert doc["result"]["round_trip"] is False  # uncased: "hello, i am a sentence."


@pytest.mark.parametrize("config, tokenizer", [("toy", "word"), ("minilm", "minilm"),
                                               ("gpt2", "gpt2")])
def test_config_picks_the_default_tokenizer(config, tokenizer):
    assert run_json("When you play game of thrones", "--config", config)["result"][
        "tokenizer"] == tokenizer


def test_word_tokenizer_with_a_corpus_file():
    doc = run_json("When you play chess", "-t", "word", "--corpus", str(CORPUS))
    assert doc["input"]["ids"] == [4, 5, 6, 0]  # after <unk> <start> <end> <pad>
    assert doc["input"]["tokens"] == ["When", "you", "play", "<unk>"]
    assert doc["result"]["special_tokens"] == ["<unk>"]
    assert doc["result"]["round_trip"] is False


def test_weights_bring_their_tokenizer():
    assert run_json("hi", "--weights", "minilm")["result"]["tokenizer"] == "minilm"


def test_stdin():
    doc = run_json("-", "-t", "byte", input="a é\n")
    assert doc["input"]["text"] == "a é"
    assert doc["input"]["ids"] == [97, 32, 195, 169]


def test_terminal_view_shows_visible_tokens_and_ids():
    result = run("Hello, I am")
    assert result.exit_code == 0, result.output
    for expected in ("15496", "·am", "vocab 50,257", "round trip", "exact"):
        assert expected in result.stdout


def test_terminal_view_prints_brackets_literally():
    result = run("Hello", "-t", "minilm")
    assert result.exit_code == 0, result.output
    assert "[CLS]" in result.stdout and "[SEP]" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["x", "-t", "nope"], "unknown tokenizer 'nope'"),
    (["x", "-t", "word", "--corpus", "/no/such/corpus.txt"], "corpus file"),
    (["x", "--config", "nope"], "unknown config"),
    (["   "], "empty"),
    ([], "no text given"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: ")
    assert message in lines[0]
    assert result.stdout == ""


def test_tokenize_never_imports_torch():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom tfx_cli.cli import app\n"
            "r = CliRunner().invoke(app, ['tokenize', 'Hello, I am', '--json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(app, ['tokenize', 'Hello', '-t', 'minilm'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
