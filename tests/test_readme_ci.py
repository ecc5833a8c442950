"""The README's quick start is what CI runs: the two stay the same text."""
from pathlib import Path

from needs import need

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_quick_start_has_exactly_two_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert commands[0].startswith("pip install torch==2.13.0")


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_command = _quick_start_commands()[1]
    assert test_command in [line.strip() for line in ci]


def test_ci_installs_torch_first_and_pinned():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("torch==2.13.0") < ci.index("pip install -q -e .")


def test_the_from_python_example_runs_and_says_what_it_prints():
    """README "From Python": the block runs as written, and the values its comments quote
    are the ones it gives."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md (From Python)", "exec"), namespace)
    r, m = namespace["r"], namespace["m"]
    assert r.tensors["encoder.blocks.0.attn.pattern"].shape == (2, 6, 6)
    assert namespace["c"].tensors["decoder.blocks.0.cross.pattern"].shape == (2, 3, 6)
    assert r.explain.query_pos == 5 and r.explain.keys[2].token == "play"
    assert r.to_dict()["result"]["mask"] == "none"
    ids = m.generate("Hello, I am", max_new_tokens=6).ids
    assert ids == [15496, 11, 314, 716, 27018, 24086, 47843, 30961, 42348, 7267]
    assert "# " + str(ids) in block
    small = namespace["small"]  # a checkpoint larger than its budget, streamed
    assert small.module.residency.streamed
    assert small.next("The capital of France is").greedy.token == " Paris"


def test_every_command_of_samples_seed001_runs(tmp_path):
    """samples/seed001.md: each `tfx ...` line of its code blocks runs, in order, in an
    empty folder with samples/ beside it (the training step makes the folder later lines
    load)."""
    import shlex
    import shutil

    from typer.testing import CliRunner

    from tfx_cli.cli import app

    doc = (ROOT / "samples" / "seed001.md").read_text(encoding="utf-8")
    blocks = doc.split("```\n")[1::2]
    commands = [line for block in blocks for line in block.splitlines()
                if line.startswith("tfx ")]
    assert len(commands) >= 20
    if any(a.endswith(".png") for line in commands for a in shlex.split(line)):
        need("matplotlib", "pip install 'tfx-cli[plot]'")  # before any line runs
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    runner = CliRunner()
    import os

    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line in commands:
            args = shlex.split(line)[1:]
            result = runner.invoke(app, args, env={"TFX_QUIET": "1"})
            assert result.exit_code == 0, (line, result.stderr)
            if line.startswith("tfx generate") and "toy-trained" in line:
                assert "you win or you die" in result.stdout
    finally:
        os.chdir(old)
