"""`tfx report`: one self-contained page from one forward pass, exact hover values."""
import base64
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.render.report import SCALE, quantise

TEXT = "When you play game of thrones you win or you die"
SMALL = ["--layers", "3", "--heads", "4", "--d-model", "64", "--seed", "5"]


def run(*args):
    return CliRunner().invoke(app, list(args))


def page_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="tfx-data">(.*?)</script>', html, re.S)
    return json.loads(match.group(1))


def patterns(data: dict) -> dict[int, np.ndarray]:
    shape = (data["heads"], data["T"], data["S"])
    return {int(layer): np.frombuffer(base64.b64decode(b64), dtype="<u2").reshape(shape)
            for layer, b64 in data["patterns"].items()}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "r.html"
    result = run("report", TEXT, "-o", str(path), *SMALL)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the page goes to the file; a one-line note to stderr
    assert "wrote" in result.stderr
    return path.read_text(encoding="utf-8")


def test_self_contained(page):
    # nothing that could make the browser fetch: no URLs, no external scripts or styles
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", page)
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|@import|url\(", page)
    assert "default-src 'none'" in page  # and the CSP forbids it anyway
    assert page.count("<script") == 2  # the data block and the inline script


def test_states_model_seed_and_input(page):
    assert 'id="seed">5<' in page
    assert f'id="input-text">{TEXT}<' in page
    assert "gpt124m" in page and "random weights, seed 5" in page
    assert "3 layers · 4 heads" in page


def test_model_view_grid(page):
    data = page_data(page)
    assert data["layers"] == [0, 1, 2] and data["heads"] == 4
    assert page.count('class="thumb"') == 3 * 4
    assert len(data["tokens"]) == data["T"] == data["S"] == 12
    assert data["tokens"][1] == "·you"  # whitespace made visible, as in the terminal


def test_stored_weights_equal_trace_json_to_four_decimals(page):
    """What a hover shows is the stored integer / 10^4: it must equal the JSON value of
    `tfx trace --select blocks.L.attn.pattern --json` rounded to 4 decimals."""
    stored = patterns(page_data(page))
    # all patterns recorded: the same attention path as the report, so exactly equal
    doc = json.loads(run("trace", TEXT, "--select", "blocks.*.attn.pattern", "--json",
                         *SMALL).stdout)
    for layer in range(3):
        truth = doc["tensors"][f"blocks.{layer}.attn.pattern"]["data"]
        expected = [[[f"{w:.4f}" for w in row] for row in head] for head in truth]
        shown = [[[f"{q // SCALE}.{q % SCALE:04d}" for q in row] for row in head]
                 for head in stored[layer].tolist()]
        assert shown == expected
    # layer 0 alone runs the same arithmetic too
    alone = json.loads(run("trace", TEXT, "--select", "blocks.0.attn.pattern", "--json",
                           *SMALL).stdout)["tensors"]["blocks.0.attn.pattern"]["data"]
    np.testing.assert_array_equal(quantise(np.array(alone, dtype=np.float32)), stored[0])


def test_quantise_rounds_like_python():
    values = np.array([0.00005, 0.00015, 0.12345, 0.99995, 1.0, 0.0, 1 / 3], dtype=np.float32)
    ints = quantise(values).tolist()
    assert [f"{q // SCALE}.{q % SCALE:04d}" for q in ints] == [f"{float(v):.4f}" for v in values]


def test_layernorm_and_next_tokens(page):
    assert 'id="layernorm"' in page
    for name in ("blocks.0.ln1", "blocks.2.ln2", "ln_f"):
        assert f"<th class='norm'>{name}</th>" in page
    assert 'id="next-tokens"' in page and "Next-token top-5" in page
    rows = re.findall(r"<tr><td class='pos'>(\d+)</td>", page)
    assert rows == [str(i) for i in range(12)]


def test_show_layers(tmp_path):
    path = tmp_path / "r.html"
    result = run("report", TEXT, "-o", str(path), *SMALL, "--show-layers", "0,2", "--candidates", "0")
    assert result.exit_code == 0, result.output
    html = path.read_text()
    data = page_data(html)
    assert data["layers"] == [0, 2]
    assert html.count('class="thumb"') == 2 * 4
    assert 'id="next-tokens"' not in html
    assert "blocks.1.ln1" in html  # norm statistics still cover every layer


@pytest.mark.parametrize("value, message", [
    ("3", "--show-layers 3 is out of range: this model has 3 layers (0 to 2)"),
    ("0,x", "expected layer numbers"),
    ("2-1", "expected layer numbers"),
])
def test_show_layers_errors(tmp_path, value, message):
    result = run("report", TEXT, "-o", str(tmp_path / "r.html"), *SMALL, "--show-layers", value)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_one_forward_pass(tmp_path, monkeypatch):
    from tfx_cli.core.analysis import report as stages

    calls = []
    real_run = stages.run
    monkeypatch.setattr(stages, "run", lambda *a, **k: calls.append(a[2]) or real_run(*a, **k))
    result = run("report", TEXT, "-o", str(tmp_path / "r.html"), *SMALL)
    assert result.exit_code == 0, result.output
    (select,) = calls
    # every norm's statistics come from its own taps, computed when read (the norms keep
    # their fused kernel)
    assert "blocks.1.attn.pattern" in select and "logits" in select and "blocks.*.ln*.var" in select


def test_output_file_rules(tmp_path):
    path = tmp_path / "r.html"
    path.write_text("mine")
    result = run("report", TEXT, "-o", str(path), *SMALL)
    assert result.exit_code == 2 and "already exists" in result.stderr
    assert path.read_text() == "mine"
    result = run("report", TEXT, "-o", str(path), *SMALL, "--force")
    assert result.exit_code == 0 and path.read_text().startswith("<!doctype html>")
    wrong = run("report", TEXT, "-o", str(tmp_path / "r.png"), *SMALL)
    assert wrong.exit_code == 2 and "unsupported file type" in wrong.stderr
    nowhere = run("report", TEXT, "-o", str(tmp_path / "no" / "r.html"), *SMALL)
    assert nowhere.exit_code == 2 and "does not exist" in nowhere.stderr
    missing = run("report", TEXT, *SMALL)
    assert missing.exit_code == 2 and "--output" in missing.stderr


def test_text_is_escaped(tmp_path):
    path = tmp_path / "r.html"
    text = "a </script><script>alert(1)</script> & b"
    result = run("report", text, "-o", str(path), *SMALL)
    assert result.exit_code == 0, result.output
    html = path.read_text()
    assert "<script>alert" not in html and html.count("</script>") == 2
    assert "&lt;/script&gt;" in html
    assert page_data(html)["tokens"]  # the data block still parses


def test_encoder_without_next_tokens(tmp_path):
    path = tmp_path / "toy.html"
    result = run("report", "When you play game of thrones", "--config", "toy", "-o", str(path))
    assert result.exit_code == 0, result.output
    html = path.read_text()
    assert 'id="next-tokens"' not in html  # not causal: no next-token table
    assert html.count('class="thumb"') == 1 * 2
    assert "<th class='norm'>encoder.blocks.0.ln1</th>" in html


def test_real_weights_show_no_seed(tmp_path):
    """The header said "seed None" for real weights: they have no seed, so it shows —."""
    path = tmp_path / "r.html"
    result = run("report", "Hello there", "-w", "minilm", "-o", str(path))
    assert result.exit_code == 0, result.output
    page = path.read_text(encoding="utf-8")
    assert '<dd id="seed">—</dd>' in page and "None" not in page.split("<main>")[0]
