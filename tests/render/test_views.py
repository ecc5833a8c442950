"""The view registry, the generic view and the shared helpers, on a colourless console."""
import io
import sys

import numpy as np
import pytest
from rich.console import Console

from dataclasses import dataclass, field
from typing import ClassVar

from tfx_cli.core.results import InputInfo, ModelInfo, Result, TokenizeResult
from tfx_cli.core.trace import Trace
from tfx_cli.registry import COMMANDS
from tfx_cli.render import views
from tfx_cli.render.emit import emit
from tfx_cli.render.views import ViewOptions
from tfx_cli.render.matrix import TensorView
from tfx_cli.render.views import (VIEWS, find_view, header, kv_table, register, render,
                                  scalars, shapes_table)

TOKENS = ["[CLS]", "When", "you", "play", "[SEP]"]


def console(width=80):
    return Console(width=width, file=io.StringIO(), color_system=None)


def output(c):
    return c.file.getvalue()


def widest(text):
    return max(len(line) for line in text.splitlines())


@dataclass(kw_only=True)
class Probe(Result):
    """A result no command has: it gets the generic view."""

    command: ClassVar[str] = "probe"
    n_params: int = 163009536
    loss: float = float("nan")
    per_token: list = field(default_factory=lambda: list(range(100)))
    top: list = field(default_factory=lambda: [1, 2])


def make_result(heads=8):
    rng = np.random.default_rng(0)
    trace = Trace()
    trace.add("tokens.ids", np.arange(5), "T")
    trace.add("embed.out", rng.normal(size=(5, 768)).astype(np.float32), "TC")
    pattern = np.tril(rng.random((heads, 5, 5)))
    trace.add("blocks.0.attn.pattern", pattern, "HTS")
    return Probe(model=ModelInfo(config="gpt124m", seed=123),
                 input=InputInfo(text="[CLS] When you play [SEP]", tokens=TOKENS,
                                 ids=list(range(5))),
                 tensors=trace)


def test_generic_view_shows_header_scalars_and_every_tensor():
    c = console()
    render(make_result(), c, ViewOptions())
    out = output(c)
    assert "tfx probe" in out and "gpt124m" in out and "seed 123" in out
    assert "'[CLS] When you play [SEP]'" in out  # markup-looking text prints literally
    assert "163,009,536" in out and "nan" in out and "[1, 2]" in out
    assert "per_token" not in out  # a long list is for --json
    assert "tokens.ids  (T) = (5,)" in out
    assert "embed.out  (T, C) = (5, 768)" in out
    assert "blocks.0.attn.pattern head 0  (H, T, S) = (8, 5, 5)" in out
    assert "[CLS]" in out.split("head 0")[1]  # token labels on the T and S axes
    assert widest(out) <= 80


def test_generic_view_shows_a_few_heads_unless_full():
    c = console()
    render(make_result(), c, ViewOptions())
    out = output(c)
    assert "head 2 " in out and "head 3 " not in out
    assert "5 more heads" in out and "--full" in out
    c = console()
    render(make_result(), c, ViewOptions(full=True))
    out = output(c)
    assert "head 7 " in out and "more heads" not in out


def test_registered_view_wins():
    calls = []

    @register("probe")
    def only(result, c, opts):
        calls.append(result.command)

    try:
        render(make_result(), console(), ViewOptions())
    finally:
        VIEWS.pop("probe")
    assert calls == ["probe"]
    assert find_view("probe") is None  # no command of that name: the generic view


def test_emit_draws_the_view_on_the_given_console():
    c = console()
    emit(make_result(), console=c, precision=1)
    out = output(c)
    assert "embed.out" in out
    assert "0.126" not in out  # precision 1: at most one decimal


def test_header_without_model():
    c = console()
    header(c, TokenizeResult(input=InputInfo(text="hi", tokens=["hi"]), tokenizer="byte",
                             vocab_size=256, n_tokens=1, decoded="hi", round_trip=True,
                             special_tokens=[]))
    assert output(c).splitlines() == ["tfx tokenize", "text: 'hi' (1 token)"]


def test_header_names_weights():
    c = console()
    header(c, Probe(model=ModelInfo(config="gpt2", weights="/m/[x]", seed=None)))
    assert "weights /m/[x]" in output(c) and "seed" not in output(c)


def test_kv_table_formats_values_literally():
    c = console()
    c.print(kv_table({"params": 124439808, "ratio": 0.123456, "name": "[b]x[/b]",
                      "flag": True, "dims": (1, 2)}, title="sizes", precision=2))
    out = output(c)
    assert "124,439,808" in out and "0.12" in out and "[b]x[/b]" in out
    assert "True" in out and "[1, 2]" in out and "sizes" in out


def test_shapes_table_lists_every_tensor():
    c = console()
    c.print(shapes_table(make_result().tensors))
    out = output(c)
    assert "tokens.ids" in out and "(5,)" in out
    assert "(H, T, S)" in out and "(8, 5, 5)" in out


def test_scalars_skip_big_and_nested():
    values = scalars({"a": 1, "b": list(range(50)), "c": [[1]], "d": {"x": [1]},
                      "e": {"x": 1}, "f": [0, 1, 2]})
    assert values == {"a": 1, "e": {"x": 1}, "f": [0, 1, 2]}


def test_scalar_and_higher_rank_tensors():
    trace = Trace()
    trace.add("loss", np.array(2.5), ())
    trace.add("x", np.zeros((2, 2, 4, 4)), "ABTS")
    c = console()
    render(Probe(tensors=trace), c, ViewOptions())
    out = output(c)
    assert "loss  () = 2.500" in out
    assert "x A=0, B=0" in out and "1 more slice of x" in out


def test_tensor_view_fits_the_console_it_is_drawn_on():
    # one renderable for every matrix: it reads the width from the console options
    array = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    for width in (60, 100, 140):
        c = console(width)
        c.print(TensorView("m", array, ("T", "C")))
        assert widest(output(c)) <= width
    wide, narrow = console(140), console(60)
    wide.print(TensorView("m", array, ("T", "C")))
    narrow.print(TensorView("m", array, ("T", "C")))
    assert widest(output(wide)) > widest(output(narrow))


def test_a_broken_view_module_is_not_hidden(monkeypatch):
    def broken(name):
        raise ModuleNotFoundError("No module named 'missing_dependency'",
                                  name="missing_dependency")

    monkeypatch.setattr(views.importlib, "import_module", broken)
    monkeypatch.setattr(views, "VIEWS", {})
    with pytest.raises(ModuleNotFoundError):
        find_view("attend")


def test_views_do_not_import_torch():
    import subprocess  # a fresh interpreter: other tests may have loaded torch already

    code = "import sys, tfx_cli.render.views; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_registry_names_the_module_of_every_view():
    for command in COMMANDS:
        view = find_view(command.name)
        if command.view is None:
            assert view is None, command.name
            continue
        assert view is not None, command.name
        assert view.__module__ == f"tfx_cli.render.views.{command.view}", command.name


def test_render_imports_only_the_module_it_needs():
    import subprocess

    code = ("import sys; from tfx_cli.render import views; "
            "views.find_view('count-params'); "
            "print(sorted(m for m in sys.modules if m.startswith('tfx_cli.render.views.')), "
            "'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "['tfx_cli.render.views.params'] False"
