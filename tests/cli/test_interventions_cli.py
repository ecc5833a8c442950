"""tfx patch, tfx attribute, --ablate and --steer through the CLI: the views say what was
changed and show the numbers the JSON holds; --plot draws them."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from needs import need
from tfx_cli.cli import app

SMALL = ["--layers", "2", "--d-model", "32", "--heads", "4"]
CAPITAL, OTHER = "The capital of France is", "The capital of Italy is"
PATCH = ["patch", CAPITAL, "--corrupt", OTHER, "--answer", " Paris", "--wrong", " Rome", *SMALL]
ATTRIBUTE = ["attribute", CAPITAL, "--answer", " Paris", "--wrong", " Rome", *SMALL]
ENV = {"TFX_QUIET": "1", "COLUMNS": "100", "NO_COLOR": "1"}


def run(args, env=ENV):
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_patch_view_is_a_labelled_heat_map_table():
    out = run(PATCH)
    doc = json.loads(run(PATCH + ["--json"]))
    assert "corrupt: 'The capital of Italy is' (5 tokens)" in out
    assert "·France*" in out and "* CORRUPT differs at 3: '·France' → '·Italy'" in out
    assert f"{doc['result']['m_clean']:.4f}" in out
    effect = doc["tensors"]["patch.effect"]
    assert effect["dims"] == ["L", "T"] and effect["shape"] == [2, 5]
    assert effect["data"][0][3] == pytest.approx(1.0, abs=1e-4)
    assert "2 layers × 5 positions in 2 forward passes of up to 5 rows" in out


def test_patch_heads_columns_are_head_numbers():
    doc = json.loads(run(PATCH + ["--site", "heads", "--json"]))
    assert doc["tensors"]["patch.effect"]["dims"] == ["L", "H"]
    assert doc["tensors"]["patch.effect"]["shape"] == [2, 4]
    assert doc["result"]["patched"] == "blocks.{i}.attn.context"


def test_attribute_view_lists_parts_and_their_sum():
    out = run(ATTRIBUTE)
    doc = json.loads(run(ATTRIBUTE + ["--json"]))
    parts = doc["result"]["parts"]
    assert [p["name"] for p in parts[:3]] == ["embed.tok", "embed.pos", "blocks.0.attn.out"]
    assert parts[-1]["name"] == "remainder"
    for part in parts:
        assert part["name"] in out
    assert "sum of parts" in out and "unexplained" in out
    assert "ln_f (LayerNorm) with its scale frozen" in out


def test_attribute_view_cuts_many_parts_to_the_largest():
    args = ["attribute", CAPITAL, "--answer", " Paris", "--per-head", "--layers", "4",
            "--d-model", "64", "--heads", "16"]
    out = run(args)
    assert "the 39 largest of 70 parts and the remainder" in out
    full = run(args + ["--full"])
    assert "blocks.3.attn.out:h=15" in full and "largest" not in full


@pytest.mark.parametrize("args", [
    ["next", "Hello, I am", *SMALL, "--ablate", "blocks.1.attn.out"],
    ["attend", "Hello, I am", *SMALL, "--layer", "1", "--ablate", "blocks.0.ffn.out",
     "--ablate-mode", "mean"],
    ["lens", "Hello, I am", *SMALL, "--ablate", "blocks.1.resid_pre:p=1"],
    ["trace", "Hello, I am", *SMALL, "-s", "logits", "--steer", "blocks.1.resid_pre",
     "--toward", " love", "--away", " hate", "--scale", "3"],
    ["generate", "Hello", *SMALL, "-n", "2", "--no-stream", "--ablate", "embed.pos"],
], ids=["next", "attend", "lens", "trace", "generate"])
def test_every_view_says_what_was_changed(args):
    out = run(args)
    line = next(line for line in out.splitlines() if line.startswith("changed: "))
    if "--steer" in args:
        assert line == "changed: blocks.1.resid_pre steered 3 × (' love' − ' hate')"
    else:
        site = args[args.index("--ablate") + 1]
        mode = "mean" if "--ablate-mode" in args else "zero"
        assert line == f"changed: {site} ablated ({mode})"
    doc = json.loads(run(args + ["--json"]))
    assert list(doc["result"])[-1] == "interventions"


def test_generate_with_an_edit_turns_the_cache_off():
    doc = json.loads(run(["generate", "Hello", *SMALL, "-n", "2", "--ablate", "embed.pos",
                          "--json"]))
    assert doc["result"]["settings"]["cache"] is False


@pytest.mark.parametrize("args, name", [(PATCH, "patch.png"), (ATTRIBUTE, "parts.svg"),
                                        (PATCH + ["--site", "heads"], "heads.png")])
def test_plots(tmp_path, args, name):
    need("matplotlib", "pip install 'tfx-cli[plot]'")
    path = tmp_path / name
    run(args + ["--plot", str(path)])
    assert path.stat().st_size > 1000


def test_report_page_says_what_was_changed(tmp_path):
    page = tmp_path / "r.html"
    post_ln = Path(__file__).resolve().parents[1] / "post_ln_words.json"
    run(["report", "When you play game of thrones", "-c", str(post_ln), "--ablate",
         "blocks.0.attn.context:h=1", "-o", str(page)])
    assert '<dd id="changed">blocks.0.attn.context:h=1 ablated (zero)</dd>' in page.read_text()
