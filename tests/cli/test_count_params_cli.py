"""`tfx count-params` and `tfx configs`: JSON numbers, overrides, errors, views, no torch."""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from needs import need
from tfx_cli.cli import app
from tfx_cli.core.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def run_json(*args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_default_is_gpt124m_total():
    doc = run_json("count-params")
    assert doc["schema"] == "tfx/1" and doc["command"] == "count-params"
    assert doc["model"]["config"] == "gpt124m" and doc["model"]["d_model"] == 768
    res = doc["result"]
    assert res["total"] == 163_009_536
    assert res["parts"]["head"] == 38_597_376
    assert res["per_block"]["total"] == 7_085_568
    assert res["per_block"]["all_blocks"] == 85_026_816
    assert res["memory_bytes"] == {"fp32": 4 * 163_009_536, "bf16": 2 * 163_009_536,
                                   "int8": 163_009_536}
    assert res["seq_len"] == 1024 and res["flops_per_token"] == 284_812_800
    assert "2 FLOPs" in res["flops_convention"]
    assert "verify" not in res


@pytest.mark.parametrize("name, total", [
    ("gpt2", 124_439_808), ("gpt2-medium", 354_823_168), ("gpt2-large", 774_030_080),
    ("gpt2-xl", 1_557_611_200), ("minilm", 22_713_216), ("smollm2-135m", 134_515_008)])
def test_presets(name, total):
    assert run_json("count-params", "-c", name)["result"]["total"] == total


def test_tie_no_tie_and_overrides():
    tied = run_json("count-params", "--tie")["result"]
    assert tied["total"] == 124_412_160 and tied["tied"] and tied["shared"] == 38_597_376
    head = [r for r in tied["breakdown"] if r["name"] == "lm_head.weight"][0]
    assert head["count"] == 0 and "counted once" in head["note"]
    assert run_json("count-params", "-c", "gpt2", "--no-tie")["result"]["total"] == \
        124_439_808 + 50257 * 768
    doc = run_json("count-params", "--heads", "8", "--layers", "2", "--d-model", "256",
                   "--context", "128")
    m = doc["model"]
    assert (m["n_heads"], m["n_layers"], m["d_model"], m["d_ff"], m["context_length"]) == \
        (8, 2, 256, 1024, 128)
    assert doc["result"]["seq_len"] == 128


def test_seq_len():
    res = run_json("count-params", "--seq-len", "6")["result"]
    assert res["seq_len"] == 6 and res["flops"]["per_sequence"] == 6 * res["flops_per_token"]
    result = runner.invoke(app, ["count-params", "--seq-len", "4096"])
    assert result.exit_code == 2
    assert "context length" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_config_file(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"d_model": 64, "n_heads": 4, "n_layers": 2,
                                "vocab_size": 100, "context_length": 32}))
    doc = run_json("count-params", "-c", str(path))
    assert doc["model"]["config"] == "small"
    C, F = 64, 256
    block = 2 * 2 * C + 4 * C * C + C + 2 * C * F + F + C
    assert doc["result"]["total"] == 100 * C + 32 * C + 2 * block + 2 * C + 100 * C


def test_unknown_preset_one_line_exit_2():
    result = runner.invoke(app, ["count-params", "--config", "nope"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error:")
    assert all(name in lines[0] for name in PRESETS)
    assert result.stdout == ""


def test_heads_that_do_not_divide_d_model(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"d_model": 768, "n_heads": 7}))
    result = runner.invoke(app, ["count-params", "-c", str(path)])
    assert result.exit_code == 2
    assert "n_heads=7 does not divide d_model=768" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = runner.invoke(app, ["count-params", "--heads", "7"])
    assert result.exit_code == 2 and "after overrides" in result.stderr


def test_bad_option_values_exit_2():
    for args in (["--layers", "0"], ["--seq-len", "0"], ["--heads", "x"]):
        result = runner.invoke(app, ["count-params", *args])
        assert result.exit_code == 2, args


def test_verify_smollm2_gqa():
    need("torch", "pip install torch")
    res = run_json("count-params", "-c", "smollm2-135m", "--verify")["result"]
    check = res["verify"]
    assert check["verified"] is True and check["mismatched"] == []
    assert check["model_params"] == res["total"] == 134_515_008
    assert check["parameter_tensors"] == 1 + 30 * 9 + 1  # embedding, 9 per block, ln_f
    assert check["modules"] > check["modules_with_parameters"] > 0


def test_verify_minilm_notes_the_pooler():
    need("torch", "pip install torch")
    res = run_json("count-params", "-c", "minilm", "--verify")["result"]
    check = res["verify"]
    assert check["verified"] is True
    assert check["model_params"] == check["expected"] == res["total"] - (384 * 384 + 384)
    assert any("pooler" in note for note in check["notes"])


def test_verify_tied_gpt2():
    need("torch", "pip install torch")
    check = run_json("count-params", "-c", "gpt2", "--verify")["result"]["verify"]
    assert check["verified"] and check["model_params"] == 124_439_808


def test_terminal_view():
    result = runner.invoke(app, ["count-params", "--tie", "--seq-len", "64"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("38,597,376", "124,412,160", "7,085,568", "counted once", "fp32", "bf16",
                 "int8", "FLOPs per token at T = 64", "2 FLOPs", "torchinfo"):
        assert text in out, text


def test_views_fit_80_columns():
    from tfx_cli.core.spec import resolve_config
    from tfx_cli.core.params import analyse
    from tfx_cli.core.results import ModelInfo
    from tfx_cli.render.views.params import count_params_view

    cfg = resolve_config("gpt2-xl")
    buf = io.StringIO()
    console = Console(width=80, file=buf, no_color=True)
    count_params_view(analyse(cfg, 64, model=ModelInfo(config="gpt2-xl", cfg=cfg)), console)
    out = buf.getvalue()
    assert "1,557,611,200" in out and "blocks.{i} × 48" in out
    assert "attn.W_query.weight" in out  # names are never folded
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80


def test_configs_json_and_view():
    doc = run_json("configs")
    presets = {p["name"]: p for p in doc["result"]["presets"]}
    assert list(presets) == list(PRESETS)
    assert presets["gpt124m"]["params"] == 163_009_536
    assert presets["smollm2-135m"]["n_kv_heads"] == 3
    assert doc["result"]["default"] == "gpt124m"
    result = runner.invoke(app, ["configs"])
    assert result.exit_code == 0
    for text in ("smollm2-135m", "9 (3)", "1,557,611,200", "rmsnorm", "swiglu", "sinusoidal"):
        assert text in result.stdout, text


def _modules_after(args):
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom tfx_cli.cli import app\n"
            f"r = CliRunner().invoke(app, {args!r})\nassert r.exit_code == 0, r.output\n"
            "print(' '.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return set(out.stdout.split())


@pytest.mark.parametrize("args", [["count-params"], ["count-params", "-c", "minilm", "--json"],
                                  ["configs"], ["configs", "--json"]])
def test_no_torch_import(args):
    assert "torch" not in _modules_after(args)


def test_verify_mismatch_is_reported_and_exits_1(monkeypatch):
    need("torch", "pip install torch")
    import tfx_cli.core.params as params

    real = params.block_rows
    monkeypatch.setattr(params, "block_rows",
                        lambda cfg, **kw: real(cfg, **kw)[1:])  # lose ln1.scale
    result = runner.invoke(app, ["count-params", "-c", "toy", "--verify", "--json"])
    assert result.exit_code == 1
    check = json.loads(result.stdout)["result"]["verify"]
    assert check["verified"] is False and "encoder.blocks.0.ln1.scale" in check["mismatched"]
    assert "decoder.blocks.0.ln1.scale" in check["mismatched"]
    assert "analytic count" in result.stderr and len(result.stderr.strip().splitlines()) == 1
