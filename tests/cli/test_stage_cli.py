"""The stage commands end to end: JSON envelopes, views at 80 columns, one-line errors."""
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.render import matrix
from tfx_cli.render.views import stages as view_stages
from tfx_cli.render.emit import emit
from tfx_cli.render.views import ViewOptions
from tfx_cli.render.views import render

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SENTENCE = "When you play game of thrones"
TOY = ["--config", "toy"]
SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 4)


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input, env={"COLUMNS": "80"})


def run_json(*args, input=None):
    result = invoke(*args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def shape_of(data):
    shape = []
    while isinstance(data, list):
        shape.append(len(data))
        data = data[0] if data else None
    return shape


def check_envelope(doc, command):
    assert doc["schema"] == "tfx/1" and doc["command"] == command
    for name, tensor in doc["tensors"].items():
        assert len(tensor["dims"]) == len(tensor["shape"]), name
        assert shape_of(tensor["data"]) == tensor["shape"], name


@pytest.mark.parametrize("args", [
    ["embed", SENTENCE, *TOY],
    ["posenc", SENTENCE, *TOY],
    ["posenc", "--length", 12, *SMALL],
    ["attend", SENTENCE, *TOY],
    ["layernorm", SENTENCE, *TOY],
    ["ffn", SENTENCE, *TOY],
    ["trace", SENTENCE, *TOY, "--select", "encoder.blocks.0.attn.*"],
])
def test_json_envelopes(args):
    doc = run_json(*args)
    check_envelope(doc, args[0])
    assert doc["tensors"]


def test_attend_json_records_one_layer_and_is_a_distribution():
    doc = run_json("attend", "Hello, I am a student", *SMALL, "--layer", 1)
    names = list(doc["tensors"])
    assert names and all(name.startswith("blocks.1.") for name in names)
    pattern = np.array(doc["tensors"]["blocks.1.attn.pattern"]["data"])
    assert np.abs(pattern.sum(-1) - 1).max() < 1e-6
    assert all((pattern[:, i, i + 1:] == 0).all() for i in range(pattern.shape[1]))
    masked = doc["tensors"]["blocks.1.attn.masked"]["data"]
    assert masked[0][0][1] is None  # -inf is written as null
    assert doc["result"]["layer"] == 1 and doc["result"]["heads"] == [0, 1, 2, 3]


def test_attend_show_head_explain_json():
    doc = run_json("attend", SENTENCE, *TOY, "--head", 1, "--show", "q,pattern", "--explain",
                   "--query-pos", 2)
    assert list(doc["tensors"]) == ["encoder.blocks.0.attn.q", "encoder.blocks.0.attn.pattern"]
    assert doc["tensors"]["encoder.blocks.0.attn.pattern"]["shape"] == [1, 6, 6]
    ex = doc["result"]["explain"]
    assert ex["head"] == 1 and ex["query_pos"] == 2 and ex["query_token"] == "play"
    row = np.array(doc["tensors"]["encoder.blocks.0.attn.pattern"]["data"])[0, 2]
    assert np.allclose([k["weight"] for k in ex["keys"]], row, atol=1e-6)


def test_attend_inputs_sample_and_stdin_text():
    doc = run_json("attend", "--inputs", ROOT / "samples" / "seed000.json", "--explain")
    assert doc["tensors"]["attn.q"]["data"][0] == [[1, 0, 2], [2, 2, 2], [2, 1, 3]]
    assert doc["model"] is None and doc["result"]["explain"]["query_pos"] == 2
    assert "explicit_attention" in doc["result"]["formula"]
    piped = run_json("embed", "-", *TOY, input=SENTENCE + "\n")
    assert piped["input"]["text"] == SENTENCE


def test_kv_cross_attention_cli():
    doc = run_json("attend", "you win or you die", "--kv", SENTENCE, *TOY)
    assert doc["tensors"]["encoder.blocks.0.attn.pattern"]["shape"] == [2, 5, 6]
    assert doc["input"]["kv"]["tokens"] == SENTENCE.split()
    assert doc["result"]["mask"] == "none"


@pytest.mark.slow
def test_trace_logits_match_the_reference_gpt():
    import importlib.util

    import torch

    where = ROOT / "tests" / "core" / "test_reference_gpt.py"
    spec = importlib.util.spec_from_file_location("reference_gpt", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    RefGPT = module.RefGPT

    doc = run_json("trace", "Hello, I am", "--config", "gpt124m", "--seed", 123,
                   "--select", "logits")
    assert list(doc["tensors"]) == ["logits"] and doc["input"]["ids"] == [15496, 11, 314, 716]
    logits = np.array(doc["tensors"]["logits"]["data"], dtype=np.float32)
    torch.manual_seed(123)
    ref = RefGPT({"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12,
                  "n_layers": 12, "drop_rate": 0.1, "qkv_bias": False}).eval()
    with torch.no_grad():
        expected = ref(torch.tensor([[15496, 11, 314, 716]]))[0].numpy()
    assert logits.shape == (4, 50257)
    assert np.abs(logits - expected).max() < 1e-4


# -- one object behind the JSON and the view --------------------------------------------
def drawn_arrays(result, monkeypatch, **opts):
    """Render `result` and return the (title, array) of every table the view drew."""
    seen = []
    for module, fn in ((matrix, "matrix_table"), (matrix, "vector_table"),
                       (view_stages, "matrix_table")):
        original = getattr(module, fn)

        def spy(array, *args, _original=original, **kw):
            seen.append((kw.get("title", ""), array))
            return _original(array, *args, **kw)

        monkeypatch.setattr(module, fn, spy)
    console = Console(file=io.StringIO(), width=80)
    render(result, console, ViewOptions(**opts))
    return seen, console.file.getvalue()


@pytest.mark.parametrize("make", [
    lambda: api.attend(SENTENCE, config="toy"),
    lambda: api.attend(SENTENCE, config="toy", head=1,
                       show=["q", "k", "v", "scores", "scaled", "masked", "pattern",
                             "context", "out"]),
    lambda: api.embed(SENTENCE, config="toy"),
    lambda: api.ffn(SENTENCE, config="toy"),
    lambda: api.layernorm(SENTENCE, config="toy"),
    lambda: api.posenc(SENTENCE, config="toy"),
])
def test_view_draws_the_json_tensors(make, monkeypatch, capsys):
    result = make()
    emit(result, json=True)
    doc = json.loads(capsys.readouterr().out)
    seen, _ = drawn_arrays(result, monkeypatch)
    checked = 0
    for title, array in seen:
        if not title:
            continue  # a table laid out only to count the columns that fit
        name = title.split()[0]
        if title.endswith(" per row"):  # embed's statistics come from result.rows
            rows = doc["result"]["rows"][name]
            assert np.allclose(array, np.column_stack([rows["norm"], rows["mean"],
                                                       rows["std"]]))
            continue
        if name not in doc["tensors"]:
            continue  # a derived table (per-token statistics, γ and β side by side)
        source = result.tensors.array(name)
        assert np.shares_memory(np.asarray(array), source), title  # the very same buffer
        data = np.array(doc["tensors"][name]["data"], dtype=np.float64)
        match = re.search(r"head (\d+)", title)
        if match:
            index = result.heads.index(int(match.group(1)))
            data = data[index]
        array = np.asarray(array, dtype=np.float64)
        if array.size == data.size:  # a vector is drawn as its (n, 1) column
            array = array.reshape(data.shape)
        assert np.allclose(array, data, equal_nan=True), title
        checked += 1
    assert checked


# -- terminal views -------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["embed", LONG, *SMALL],
    ["posenc", LONG, *SMALL],
    ["attend", LONG, *SMALL],
    ["attend", LONG, *SMALL, "--explain", "--show", "q,scores"],
    ["attend", "--inputs", ROOT / "samples" / "seed000.json", "--explain"],
    ["layernorm", LONG, *SMALL],
    ["ffn", LONG, *SMALL],
    ["trace", LONG, *SMALL, "--select", "blocks.0.attn.pattern", "--values"],
])
def test_views_fit_80_columns(args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "(--full shows all)" in result.stdout or args[1] == "--inputs"


def test_full_prints_everything():
    cut = invoke("ffn", SENTENCE, *SMALL)
    whole = invoke("ffn", SENTENCE, *SMALL, "--full")
    assert cut.exit_code == whole.exit_code == 0
    assert "…" in cut.stdout and "(--full shows all)" in cut.stdout
    hidden = whole.stdout.split("blocks.0.ffn.hidden")[1].split("blocks.0.ffn.act")[0]
    for col in (0, 100, 128, 255):
        assert re.search(rf"\b{col}\b", hidden)
    assert "(--full shows all)" not in whole.stdout


def test_attend_view_labels_and_explain_text():
    out = invoke("attend", SENTENCE, *TOY).stdout
    assert "blocks.0.attn.pattern head 0  (H, T, S) = (2, 6, 6)" in out
    assert "thrones" in out and "shapes of every stage" in out
    explain = invoke("attend", "--inputs", ROOT / "samples" / "seed000.json", "--explain",
                     "--query-pos", 0).stdout
    assert "q·k_0 = 1×0 + 0×1 + 2×1 = 2" in explain
    assert "context = [1.937, 6.683, 1.595]" in explain


# -- errors: one line on stderr, exit 2 ---------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["attend", SENTENCE, *TOY, "--layer", 1], "--layer 1 is out of range"),
    (["attend", SENTENCE, *TOY, "--head", 2], "--head 2 is out of range"),
    (["attend", SENTENCE, *TOY, "--heads", 4], "does not divide d_model"),
    (["attend", "you win", "--kv", SENTENCE, *TOY, "--mask", "causal"], "--mask none"),
    (["attend", SENTENCE, *TOY, "--valid-lens", 7], "--valid-lens 7"),
    (["attend", SENTENCE, *TOY, "--valid-lens", 0], "--valid-lens 0"),
    (["attend", SENTENCE, *TOY, "--explain", "--query-pos", 9], "--query-pos 9"),
    (["attend", SENTENCE, *TOY, "--show", "bogus"], "--show 'bogus'"),
    (["attend", SENTENCE, "--inputs", ROOT / "samples" / "seed000.json"], "not both"),
    (["attend", "--inputs", "no/such/file.json"], "no such file"),
    (["attend", "--inputs", ROOT / "samples" / "seed000.json", "--kv", "a"], "--kv does not"),
    (["layernorm", SENTENCE, *TOY, "--which", "ln_f"], "ln_f"),
    (["layernorm", SENTENCE, *TOY, "--layer", 3], "--layer 3"),
    (["ffn", SENTENCE, *TOY, "--layer", 1], "--layer 1"),
    (["posenc", *TOY], "--length"),
    (["posenc", *SMALL, "--length", 5000], "--length 5000"),
    (["trace", SENTENCE, *TOY, "--select", "blocks.7.*"], "valid names"),
    (["embed", "", *TOY], "empty"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("tfx: error:") and "\n" not in err and message in err
    assert "Traceback" not in result.output


@pytest.mark.parametrize("content, message", [
    ('{"x": [[1, 0]],\n "w_q": [1', "line 2, column"),
    ('{"x": [[1, 0], [1]], "w_q": [[1]], "w_k": [[1]], "w_v": [[1]]}', "ragged"),
    ('{"x": [[1, 0]], "w_q": [[1]], "w_k": [[1]], "w_v": [[1]]}', "needs 2 rows"),
    ('{"x": [[1, 0]], "w_q": [[1], [0]], "w_k": [[1], [true]], "w_v": [[1], [0]]}',
     "not a number"),
    ('{"x": [[1, 0]], "w_q": [[1], [0]]}', "missing key 'w_k'"),
])
def test_malformed_inputs_cli(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = invoke("attend", "--inputs", path)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("tfx: error:") and "\n" not in err and message in err
