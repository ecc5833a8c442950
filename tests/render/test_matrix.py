"""Matrix and vector tables as a plain (colourless) 80-column terminal shows them."""
import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from tfx_cli.render.matrix import (finite_range, format_number, head_tail, heat_scale,
                                   matrix_table, vector_table)

TOKENS = ["[CLS]", "When", "you", "play", "game", "of", "thrones", "[SEP]"]


def draw(renderable, width=80, color_system=None):
    console = Console(width=width, file=io.StringIO(), color_system=color_system,
                      force_terminal=color_system is not None)
    console.print(renderable)
    return console.file.getvalue()


def widest(text):
    return max(len(line) for line in text.splitlines())


def test_format_number():
    assert format_number(0.5, 3) == "0.500"
    assert format_number(-1.23456, 2) == "-1.23"
    assert format_number(float("-inf"), 3) == "-inf"
    assert format_number(float("inf"), 3) == "inf"
    assert format_number(float("nan"), 3) == "nan"
    assert format_number(-0.0001, 3) == "0.000"  # no "-0.000"
    assert format_number(np.int64(15496), 3) == "15496"
    assert format_number(np.float32(2.0), 0) == "2"
    assert format_number(123456.0, 2, sci=True) == "1.23e+05"


def test_head_tail():
    assert head_tail(5, 12) == ([0, 1, 2, 3, 4], None)
    assert head_tail(100, 4) == ([0, 1, 98, 99], 2)
    assert head_tail(100, 5) == ([0, 1, 2, 98, 99], 3)


def test_small_matrix_shows_every_cell_and_labels():
    array = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    out = draw(matrix_table(array, title="pattern", row_labels=TOKENS, col_labels=TOKENS))
    assert "pattern" in out and "(8, 8)" in out
    for value in array.ravel():
        assert format_number(value, 3) in out
    assert "…" not in out and "⋮" not in out
    assert widest(out) <= 80


def test_labels_with_brackets_print_literally():
    labels = ["[CLS]", "[bold]x[/bold]", "[/]", "[SEP]"]
    out = draw(matrix_table(np.eye(4), title="[red]title[/red]", row_labels=labels,
                            col_labels=labels))
    assert "[CLS]" in out and "[SEP]" in out and "[/]" in out
    assert "[bold]x[/bo" in out  # cut to the label width, but not swallowed as markup
    assert "[red]title[/red]" in out


def test_control_characters_in_labels_are_made_visible():
    out = draw(matrix_table(np.eye(2), title="t", row_labels=["a\nb", "\t"],
                            col_labels=["x", "y"]))
    assert "a\\nb" in out and "\\t" in out
    assert len(out.splitlines()) == 5  # title, header, rule, two rows: nothing broke a line


def test_truncation_keeps_head_and_tail_with_ellipsis_and_full_shape():
    array = np.arange(100 * 768, dtype=np.float64).reshape(100, 768) / 1000
    out = draw(matrix_table(array, title="embed.out", dims=("T", "C")))
    assert "(T, C) = (100, 768)" in out
    assert "⋮" in out and "…" in out
    lines = out.splitlines()
    first, last = format_number(array[0, 0], 3), format_number(array[99, 767], 3)
    assert any(first in line for line in lines)
    assert any(last in line for line in lines)
    assert format_number(array[50, 0], 3) not in out  # a middle row is cut
    rows = [line for line in lines if line.startswith(" ") and line.split()[0].isdigit()]
    assert len(rows) == 12
    assert "--full" in out
    assert widest(out) <= 80


def test_full_shows_every_row():
    array = np.arange(40, dtype=np.float64).reshape(40, 1)
    cut = draw(matrix_table(array, title="x"))
    full = draw(matrix_table(array, title="x", full=True))
    assert "⋮" in cut and "⋮" not in full
    for value in array.ravel():
        assert f" {value:.3f} " in full


def test_full_wide_matrix_stacks_column_blocks_within_the_width():
    array = np.arange(3 * 40, dtype=np.float64).reshape(3, 40)
    out = draw(matrix_table(array, title="wide", full=True))
    assert widest(out) <= 80
    for value in array.ravel():
        assert f" {value:.3f} " in out
    assert "columns 0-" in out and "of 40" in out


def test_masked_minus_inf_and_nan_print():
    array = np.array([[0.5, -np.inf], [np.nan, 0.25]])
    out = draw(matrix_table(array, title="masked"))
    assert "-inf" in out and "nan" in out and "0.500" in out


@pytest.mark.parametrize("shape", [(6, 6), (8, 8), (12, 768), (6, 50257), (200, 3), (1, 1)])
@pytest.mark.parametrize("precision", [0, 3, 6])
def test_fits_80_columns(shape, precision):
    rng = np.random.default_rng(0)
    array = rng.normal(scale=30, size=shape)
    labels = [f"token_{i}_with_a_long_name" for i in range(shape[0])]
    out = draw(matrix_table(array, title="blocks.11.attn.scores head 11 " * 3,
                            row_labels=labels, precision=precision, dims=("T", "S")))
    assert widest(out) <= 80


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 30), cols=st.integers(1, 60), width=st.integers(40, 160),
       scale=st.sampled_from([1e-6, 1.0, 1e3, 1e9]), precision=st.integers(0, 8))
def test_fits_any_width(rows, cols, width, scale, precision):
    array = np.random.default_rng(rows * cols).normal(scale=scale, size=(rows, cols))
    out = draw(matrix_table(array, title="x", precision=precision, width=width), width=width)
    assert widest(out) <= width


def test_max_cols_caps_the_columns():
    out = draw(matrix_table(np.zeros((2, 20)), title="x", max_cols=4))
    header = out.splitlines()[1].split()
    assert header == ["0", "1", "…", "18", "19"]


def test_width_argument_fits_a_wide_console():
    array = np.zeros((2, 15))
    narrow = draw(matrix_table(array, title="x"), width=200)
    wide = draw(matrix_table(array, title="x", width=200), width=200)
    assert "…" in narrow and "…" not in wide


def test_vector_table():
    out = draw(vector_table(np.array([1.0, -2.0, np.inf]), title="ln1.mean",
                            labels=["a", "[b]", "c"], dims=("T",)))
    assert "(T) = (3,)" in out
    assert "[b]" in out and "-2.000" in out and "inf" in out


def test_integer_and_boolean_arrays_are_plain():
    out = draw(matrix_table(np.array([[15496, 11]]), title="ids"))
    assert "15496" in out and "15496.000" not in out
    out = draw(matrix_table(np.array([[True, False]]), title="mask"))
    assert " 1 " in out and " 0 " in out


def test_empty_matrix():
    out = draw(matrix_table(np.zeros((0, 3)), title="empty"))
    assert "(0, 3)" in out


def test_heat_scales():
    assert heat_scale(np.array([0.0, 0.3, 1.0])).center is None  # pattern: sequential 0..1
    scale = heat_scale(np.array([-2.0, 1.0]))
    assert scale.center == 0.0 and (scale.lo, scale.hi) == (-2.0, 2.0)  # signed: diverging
    assert heat_scale(np.array([2.0, 5.0])).center is None
    assert heat_scale(np.array([1, 2])) is None  # integers carry no heat
    assert heat_scale(np.array([-np.inf, np.nan])) is None
    assert finite_range(np.array([-np.inf, 2.0, -1.0, np.nan])) == (-1.0, 2.0)
    assert finite_range(np.zeros((0, 3))) is None


def test_colour_only_on_a_colour_console():
    array = np.array([[0.0, 0.5], [1.0, -np.inf]])
    plain = draw(matrix_table(array, title="p"))
    coloured = draw(matrix_table(array, title="p"), color_system="truecolor")
    assert "\x1b[" not in plain
    assert "48;2;" in coloured  # a background shade per cell
    no_heat = draw(matrix_table(array, title="p", heat=False), color_system="truecolor")
    assert "48;2;" not in no_heat


def test_no_color_environment(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    console = Console(width=80, file=io.StringIO(), force_terminal=True)
    console.print(matrix_table(np.array([[0.1, 0.9]]), title="p"))
    out = console.file.getvalue()
    assert "48;2;" not in out and "0.100" in out and "0.900" in out


def test_rejects_wrong_rank():
    with pytest.raises(ValueError):
        matrix_table(np.zeros(3), title="x")
    with pytest.raises(ValueError):
        vector_table(np.zeros((2, 2)), title="x")


def test_numbers_are_not_rounded_away():
    out = draw(matrix_table(np.array([[1e-9, 2e-9]]), title="tiny"))
    assert "1.000e-09" in out
    out = draw(matrix_table(np.array([[math.pi * 1e7]]), title="big"))
    assert "3.142e+07" in out
