"""--plot: output-file rules, one drawing per command from the Result, no second run."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from needs import need
from tfx_cli.cli import app
from tfx_cli.core import outputs
from tfx_cli.core.results import (AttendResult, InputInfo, LayerNormResult, LensResult,
                                  ModelInfo, PosencResult, TraceResult)
from tfx_cli.core.trace import Trace
from tfx_cli.errors import MissingPackageError, OutputFileError, SelectError, UsageError
from tfx_cli.render import plot
from tfx_cli.render.plot import check_output_path, grid_shape, plot_result

need("matplotlib", "pip install 'tfx-cli[plot]'")

TOKENS = ["When", " you", " play", " game", " of", " th", "rones", " $x$"]
SMALL = ["--layers", "2", "--heads", "8", "--d-model", "64"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


FIELDS = {  # the fields each result type needs beside its tensors (values the plot ignores)
    "attend": dict(layer=0, heads=[], n_heads=8, n_kv_heads=8, head_dim=8, scale=1.0,
                   mask="causal", valid_lens=None, cross_attention=False, shown=["pattern"]),
    "posenc": dict(positional="sinusoidal", n_positions=16, d_model=32, formula=""),
    "layernorm": dict(which="ln1", layer=0, norm="layernorm", position="pre", eps=1e-5,
                      normed_mean=[], normed_var=[], formula="", prefix="blocks.0.ln1"),
    "lens": dict(layers=[], sources=[], norm="", top_ids=[], top_tokens=[], top_probs=[],
                 next_token_probs=[], output_top_ids=[]),
    "trace": dict(selected=[], n_selected=0),
}
TYPES = {"attend": AttendResult, "posenc": PosencResult, "layernorm": LayerNormResult,
         "lens": LensResult, "trace": TraceResult}


def make_result(command: str, tensors: dict, fields: dict | None = None, tokens=TOKENS):
    trace = Trace()
    for name, (value, dims) in tensors.items():
        trace.add(name, np.asarray(value, dtype=np.float32), dims)
    data = None if tokens is None else InputInfo(text="".join(tokens), tokens=tokens,
                                                 ids=list(range(len(tokens))))
    return TYPES[command](model=ModelInfo(config="gpt124m", seed=123), input=data,
                          tensors=trace, **{**FIELDS[command], **(fields or {})})


def softmax_rows(rng, H, T):
    x = rng.normal(size=(H, T, T))
    x = np.where(np.tril(np.ones((T, T), bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def attention_result():
    rng = np.random.default_rng(0)
    return make_result("attend", {"blocks.0.attn.pattern": (softmax_rows(rng, 8, 8), "HTS")},
                       {"heads": list(range(8))})


def pyplot():
    return plot.require_matplotlib()


def images(fig):
    return [ax for ax in fig.axes if ax.get_images()]


# ---------------------------------------------------------------- output files

def test_check_output_path_rules(tmp_path):
    assert check_output_path(tmp_path / "a.png") == tmp_path / "a.png"
    assert check_output_path(tmp_path / "a.SVG").name == "a.SVG"
    existing = tmp_path / "b.png"
    existing.write_bytes(b"mine")
    with pytest.raises(OutputFileError, match="already exists.*--force"):
        check_output_path(existing)
    assert check_output_path(existing, force=True) == existing
    with pytest.raises(UsageError, match="unsupported file type") as info:
        check_output_path(tmp_path / "a.pdf")
    assert type(info.value) is UsageError  # a usage error, not a file error
    with pytest.raises(UsageError, match="no extension"):
        check_output_path(tmp_path / "plot")
    with pytest.raises(OutputFileError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "a.png")
    with pytest.raises(OutputFileError, match="is a file, not a folder"):
        check_output_path(existing / "a.png")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(OutputFileError, match="is a folder"):
        check_output_path(tmp_path / "dir.png", force=True)


def test_unwritable_folder(tmp_path, monkeypatch):
    # root may write anywhere, so ask os.access the way a normal user's folder answers
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: False)
    with pytest.raises(OutputFileError, match="not writable"):
        check_output_path(tmp_path / "a.png")


def test_never_overwrites_without_force(tmp_path, attention_result):
    path = tmp_path / "attn.png"
    path.write_bytes(b"mine")
    with pytest.raises(OutputFileError):
        plot_result(attention_result, path)
    assert path.read_bytes() == b"mine"
    plot_result(attention_result, path, force=True)
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_failed_draw_leaves_nothing_behind(tmp_path, attention_result, monkeypatch):
    import matplotlib.figure

    def broken(self, *args, **kwargs):
        Path(args[0]).write_bytes(b"half")
        raise OutputFileError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken)
    with pytest.raises(OutputFileError):
        plot_result(attention_result, tmp_path / "attn.png")
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one


def test_png_and_svg(tmp_path, attention_result):
    png = plot_result(attention_result, tmp_path / "attn.png")
    assert png.read_bytes().startswith(PNG_MAGIC)
    svg = plot_result(attention_result, tmp_path / "attn.svg")
    text = svg.read_text()
    assert "<svg" in text and "head 7" in text
    assert oct(png.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_missing_matplotlib(monkeypatch, tmp_path, attention_result):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    with pytest.raises(MissingPackageError, match=r"pip install 'tfx-cli\[plot\]'"):
        plot_result(attention_result, tmp_path / "a.png")
    assert not (tmp_path / "a.png").exists()


def test_importing_plot_does_not_import_matplotlib():
    code = "import tfx_cli.render.plot, tfx_cli.cli, sys; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- drawings

def test_grid_shape():
    assert grid_shape(1) == (1, 1)
    assert grid_shape(8) == (2, 4)
    assert grid_shape(12) == (3, 4)
    assert grid_shape(9) == (3, 3)
    rows, cols = grid_shape(25)
    assert rows * cols >= 25


def test_attention_one_labelled_map_per_head(attention_result):
    fig = plot.PLOTTERS["attend"](attention_result, pyplot())
    axes = images(fig)
    assert len(axes) == 8
    assert [ax.get_title() for ax in axes] == [f"layer 0 · head {h}" for h in range(8)]
    ylabels = [t.get_text() for t in axes[0].get_yticklabels()]
    xlabels = [t.get_text() for t in axes[0].get_xticklabels()]
    assert ylabels == xlabels == ["When", "·you", "·play", "·game", "·of", "·th", "rones",
                                  r"·\$x\$"]  # whitespace visible, $ not read as maths
    assert any(ax.get_ylabel() == "attention weight" for ax in fig.axes)  # the colour bar
    pyplot().close(fig)


def test_attention_one_head_keeps_its_number():
    rng = np.random.default_rng(1)
    res = make_result("attend", {"blocks.3.attn.pattern": (softmax_rows(rng, 1, 8), "HTS")},
                      {"heads": [5]})
    fig = plot.PLOTTERS["attend"](res, pyplot())
    assert [ax.get_title() for ax in images(fig)] == ["layer 3 · head 5"]
    pyplot().close(fig)


def test_posenc_stripes():
    pos = np.arange(16)[:, None] / 10000 ** (np.arange(0, 32, 2) / 32)
    table = np.zeros((16, 32))
    table[:, 0::2], table[:, 1::2] = np.sin(pos), np.cos(pos)
    res = make_result("posenc", {"posenc.angle": (pos, "PR"), "posenc.table": (table, "PC")},
                      tokens=None)
    fig = plot.PLOTTERS["posenc"](res, pyplot())
    (ax,) = images(fig)
    assert ax.get_ylabel() == "position" and ax.get_xlabel() == "dimension"
    assert ax.get_images()[0].get_array().shape == (16, 32)
    pyplot().close(fig)


def test_layernorm_bars_before_and_after():
    rng = np.random.default_rng(2)
    x = rng.normal(3.0, 2.0, size=(8, 16))
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    res = make_result("layernorm", {"blocks.0.ln1.in": (x, "TC"),
                                    "blocks.0.ln1.mean": (x.mean(-1), "T"),
                                    "blocks.0.ln1.var": (x.var(-1), "T"),
                                    "blocks.0.ln1.normed": (normed, "TC"),
                                    "blocks.0.ln1.out": (normed, "TC")},
                      {"normed_mean": normed.mean(-1).tolist(),
                       "normed_var": normed.var(-1).tolist()})
    stats = plot.norm_stats(res)  # read from the result: the plot computes nothing
    np.testing.assert_allclose(stats["mean before"], x.mean(-1), rtol=1e-5)
    np.testing.assert_allclose(stats["mean after"], 0, atol=1e-5)
    np.testing.assert_allclose(stats["var after"], 1, atol=1e-3)
    fig = plot.PLOTTERS["layernorm"](res, pyplot())
    mean_ax, var_ax = fig.axes[:2]
    assert len(mean_ax.patches) == 16 and len(var_ax.patches) == 16  # 8 tokens x before/after
    assert "variance" in var_ax.get_title()
    pyplot().close(fig)


def test_lens_heat_map_with_token_text():
    probs = np.linspace(0.05, 0.95, 3 * 8).reshape(3, 8)
    tops = [[f"t{i}{j}" for j in range(8)] for i in range(3)]
    res = make_result("lens", {}, {"layers": ["embed", "0", "1"], "top_probs": probs.tolist(),
                                   "top_tokens": tops})
    fig = plot.PLOTTERS["lens"](res, pyplot())
    ax = images(fig)[0]
    assert ax.get_images()[0].get_array().shape == (3, 8)
    assert {t.get_text() for t in ax.texts} >= {"t00", "t27"}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["embed", "0", "1"]
    pyplot().close(fig)


def test_trace_rules(tmp_path):
    rng = np.random.default_rng(3)
    two = make_result("trace", {"embed.out": (rng.normal(size=(8, 4)), "TC")})
    fig = plot.plot_trace(two, pyplot())
    assert len(images(fig)) == 1
    pyplot().close(fig)
    heads = make_result("trace", {"blocks.0.attn.scores": (rng.normal(size=(3, 8, 8)), "HTS")})
    fig = plot.plot_trace(heads, pyplot())
    assert len(images(fig)) == 3
    pyplot().close(fig)
    vector = make_result("trace", {"blocks.0.ln1.var": (rng.random(8), "T")})
    fig = plot.plot_trace(vector, pyplot())
    assert len(fig.axes[0].patches) == 8
    pyplot().close(fig)
    cube = make_result("trace", {"x": (rng.normal(size=(2, 3, 4)), "TCD")})
    with pytest.raises(UsageError, match="1-D and 2-D"):
        plot_result(cube, tmp_path / "x.png")
    many = make_result("trace", {"embed.tok": (rng.normal(size=(8, 4)), "TC"),
                                 "embed.out": (rng.normal(size=(8, 4)), "TC")})
    with pytest.raises(SelectError, match="one tensor but 2"):
        plot_result(many, tmp_path / "y.png")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- through the CLI

def run(*args):
    return CliRunner().invoke(app, list(args))


def test_attend_plot_cli(tmp_path):
    path = tmp_path / "attn.png"
    result = run("attend", "When you play game of thrones", *SMALL, "--plot", str(path))
    assert result.exit_code == 0, result.output
    assert path.read_bytes().startswith(PNG_MAGIC)
    again = run("attend", "When you play game of thrones", *SMALL, "--plot", str(path))
    assert again.exit_code == 2 and "--force" in again.stderr
    forced = run("attend", "When you play game of thrones", *SMALL, "--plot", str(path),
                 "--force")
    assert forced.exit_code == 0, forced.output


def test_plot_errors_come_before_the_model_runs(tmp_path, monkeypatch):
    from tfx_cli.core import load as loading

    def never(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(loading, "load", never)
    bad = run("attend", "Hello", "--plot", str(tmp_path / "a.pdf"))
    assert bad.exit_code == 2 and "unsupported file type" in bad.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    missing = run("embed", "Hello", "--plot", str(tmp_path / "a.png"))
    assert missing.exit_code == 2 and "pip install 'tfx-cli[plot]'" in missing.stderr


def test_plot_json_stdout_stays_json(tmp_path):
    import json

    path = tmp_path / "ln.svg"
    result = run("layernorm", "When you play game of thrones", *SMALL, "--json", "--plot",
                 str(path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["command"] == "layernorm"
    assert path.read_text().lstrip().startswith("<?xml")


def test_plot_reuses_the_result(tmp_path, monkeypatch):
    """One forward pass: the plot draws what the view shows, not a second computation."""
    from tfx_cli.core.analysis import stages

    calls = []
    real_run = stages.run
    monkeypatch.setattr(stages, "run", lambda *a, **k: calls.append(1) or real_run(*a, **k))
    path = tmp_path / "t.png"
    result = run("trace", "When you play", *SMALL, "--select", "blocks.1.attn.pattern",
                 "--plot", str(path))
    assert result.exit_code == 0, result.output
    assert calls == [1] and path.exists()


def test_trace_plot_needs_one_tensor(tmp_path):
    result = run("trace", "When you play", *SMALL, "--select", "blocks.*.attn.pattern",
                 "--plot", str(tmp_path / "t.png"))
    assert result.exit_code == 2
    assert "one tensor" in result.stderr and not (tmp_path / "t.png").exists()


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_scan_plot_writes_a_real_image(tmp_path, suffix):
    """scan --plot draws one layers x heads map per attention metric into a file an image
    reader opens (the drawing once returned no figure and scan ended in an internal error)."""
    import xml.etree.ElementTree as ElementTree

    import matplotlib.image

    path = tmp_path / f"scan{suffix}"
    result = run("scan", "python-docs", "-c", "gpt124m", "--layers", "2", "--d-model", "16",
                 "--heads", "2", "--max-docs", "3", "--plot", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"wrote {path}" in result.stderr
    if suffix == ".png":
        assert path.read_bytes().startswith(PNG_MAGIC)
        pixels = matplotlib.image.imread(path)
        assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert pixels[..., :3].std() > 0  # something is drawn, not a blank canvas
    else:
        root = ElementTree.parse(path).getroot()
        assert root.tag.endswith("svg")
        text = path.read_text()
        for title in ("entropy", "sink", "prev token", "induction"):
            assert title in text, title


def test_scan_plot_ticks_are_whole_layers_and_heads():
    """A 2-layer scan's axes are ticked 0 and 1, not 0.25, 0.5, … between the layers."""
    from tfx_cli import api

    result = api.scan("python-docs", config="gpt124m", layers=2, d_model=16, heads=4,
                      max_docs=2)
    fig = plot.PLOTTERS["scan"](result, pyplot())
    maps = [ax for ax in fig.axes if ax.get_xlabel() == "head"]
    assert maps
    for ax in maps:
        assert list(ax.get_yticks()) == [0, 1] and list(ax.get_xticks()) == [0, 1, 2, 3]
    pyplot().close(fig)
