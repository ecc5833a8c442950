"""Every example of README.md and docs/*.md runs, and says what it prints (the collector is
tests/docs_examples.py). A page's examples run in order in one scratch folder with
samples/ beside them, so a later example may read what an earlier one wrote."""
import ast
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import docs_examples as dx

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
ENV = {"TFX_QUIET": "1", "COLUMNS": "100", "NO_COLOR": "1"}


def all_blocks():
    return [b for page in PAGES for b in dx.blocks(ROOT / page, page)]


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> dict:
    """A PATH whose `tfx` is this checkout's, for examples that pipe into jq."""
    bin_dir = tmp_path_factory.mktemp("bin")
    tfx = bin_dir / "tfx"
    tfx.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tfx_cli "$@"\n')
    tfx.chmod(0o755)
    return {**os.environ, **ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT)}


def run_tfx(command: str, env: dict, cwd: Path) -> tuple[int, str, str]:
    """The tfx part runs in this process (no second start-up of Python and torch); what it
    pipes into (`| jq ...`) runs in bash, with this checkout's tfx on PATH."""
    from tfx_cli.cli import app

    tfx, rest = dx.split_pipe(command)
    started = time.monotonic()
    result = CliRunner().invoke(app, shlex.split(tfx)[1:], env=ENV)
    if time.monotonic() - started > 2:
        print(f"  {time.monotonic() - started:5.1f} s  {tfx}")
    if not rest or result.exit_code:
        return result.exit_code, result.stdout, result.stderr
    out = subprocess.run(["bash", "-o", "pipefail", "-c", rest], cwd=cwd, env=env,
                         input=result.stdout, capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout, result.stderr + out.stderr


def run_shell(block: dx.Block, env: dict, cwd: Path) -> int:
    extra = ""
    if block.marker and block.marker.startswith("run with "):
        extra = block.marker[len("run with "):]
    ran, last = 0, ""
    lines = dx.logical_lines(block.code)
    for k, (n, line) in enumerate(lines):
        where = f"{block.page}:{block.line + n + 1}"
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            command = line[2:]
            shown = []
            for _, after in lines[k + 1:]:
                if after.startswith("$ "):
                    break
                shown.append(after)
            code, out, err = run_tfx(command, env, cwd)
            missing = dx.lines_shown("\n".join(shown), out + err)
            assert missing is None, f"{where}: {command!r} did not print {missing!r}:\n{out}{err}"
            ran += 1
            continue
        command, comment = dx.split_comment(line)
        if not command:
            continue
        if command.startswith("pip install"):
            assert not dx.pip_missing(command), f"{where}: not installed: {dx.pip_missing(command)}"
            continue
        assert command.startswith("tfx "), \
            f"{where}: no way to run {command!r}; mark the block <!-- example: not run, why -->"
        code, out, err = run_tfx(dx.with_args(command, extra), env, cwd)
        assert code == 0, f"{where}: {command!r} exited {code}: {err[-2000:]}"
        if dx.ARROW in comment and not extra:
            bad = dx.values_in(comment.split(dx.ARROW, 1)[1], out)
            assert bad is None, f"{where}: {command!r} does not print {bad}:\n{out[-3000:]}"
        ran, last = ran + 1, out
    if block.expected is not None and not extra:
        missing = dx.lines_shown(block.expected, last)
        assert missing is None, f"{block.page}:{block.line}: the output shown differs at " \
                                f"{missing!r}; the run printed:\n{last[-4000:]}"
    return ran


def run_python(block: dx.Block, namespace: dict) -> int:
    filename = f"{block.page}:{block.line}"
    for stmt, want in dx.python_checks(block.code):
        module = ast.Module(body=[stmt], type_ignores=[])
        if want is None:
            exec(compile(module, filename, "exec"), namespace)
            continue
        assert isinstance(stmt, ast.Expr), f"{filename}: → after a statement that has no value"
        value = eval(compile(ast.Expression(stmt.value), filename, "eval"), namespace)
        assert dx.same_tokens(want, repr(value)), \
            f"{filename}+{stmt.lineno}: shows {want}, gives {value!r}"
    return 1


def tfx_commands(block: dx.Block) -> list[str]:
    return [dx.split_comment(line)[0] for _, line in dx.logical_lines(block.code)
            if line.startswith("tfx ")]


def check_held(block: dx.Block, held_by: str) -> None:
    """A block the suite does not run here is run elsewhere: each of its tfx lines is run
    as written by an example of another block, or its command is what the named test
    file runs."""
    assert (ROOT / held_by).is_file(), f"{block.page}:{block.line}: no {held_by}"
    source = (ROOT / held_by).read_text(encoding="utf-8")
    run_elsewhere = {c for b in all_blocks() if not b.marker for c in tfx_commands(b)}
    for command in tfx_commands(block):
        word = shlex.split(command)[1]
        assert command in run_elsewhere or re.search(rf"\b{word}\b", source), \
            f"{block.page}:{block.line}: neither an example nor {held_by} runs {command!r}"


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of(page, shim, tmp_path, monkeypatch):
    blocks = dx.blocks(ROOT / page, page)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the circuits page's tiny model
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    started, ran, held = time.monotonic(), 0, 0
    for block in blocks:
        marker = block.marker or ""
        if marker.startswith("not run, "):
            continue
        if marker.startswith("held by "):
            check_held(block, marker[len("held by "):].split(",")[0].strip())
            held += 1
            continue
        assert not marker or marker.startswith("run with "), f"{page}:{block.line}: {marker}"
        if block.lang == "python":
            ran += run_python(block, namespace)
        else:
            ran += run_shell(block, shim, tmp_path)
    print(f"{page}: {ran} examples run, {held} held by other tests, "
          f"{time.monotonic() - started:.1f} s")


def test_every_example_that_is_not_run_says_why():
    blocks = all_blocks()
    assert len(blocks) >= 40
    for b in blocks:
        if b.marker and b.marker.startswith("not run"):
            assert len(b.marker) > len("not run, ") + 10, f"{b.page}:{b.line}"
    skipped = [b for b in blocks if b.marker and b.marker.startswith("not run")]
    # each one a run of minutes to an hour on a real model (the SmolLM2 worked example's
    # hour of training among them): keep them few
    assert len(skipped) <= 7, [f"{b.page}:{b.line}" for b in skipped]


# -- the comparisons can fail ------------------------------------------------------------
def test_a_number_off_by_more_than_the_tolerance_fails():
    assert dx.same_tokens("p 0.773", "p 0.7725") and dx.same_tokens("p 0.773", "p 0.779")
    assert not dx.same_tokens("p 0.773", "p 0.790")
    assert not dx.same_tokens("63,082,496", "63,082,497")  # counts are exact
    assert dx.lines_shown("a 1.00\nb 2.00", "x\na 1.001\ny\nb 2.0\n") is None
    assert dx.lines_shown("b 2.00\na 1.00", "a 1.00\nb 2.00") == "a 1.00"  # order counts
    assert dx.values_in('" Paris" 0.773', "·Paris 0.141") == "0.773"
