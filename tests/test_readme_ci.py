"""The README's quick start is what CI runs: the two stay the same text."""
from pathlib import Path

from needs import need

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands(page: str = "README.md") -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```bash\n")[1:]
    return [line.strip() for block in blocks for line in block.split("```", 1)[0].splitlines()]


def test_quick_start_has_exactly_two_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert commands[0].startswith("pip install torch==2.13.0")


def test_getting_started_gives_the_readme_commands():
    assert _quick_start_commands("docs/getting-started.md") == _quick_start_commands()


def test_the_test_command_installs_the_docs_extra():
    assert ",docs]'" in _quick_start_commands()[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_command = _quick_start_commands()[1]
    assert test_command in [line.strip() for line in ci]


def test_ci_installs_torch_first_and_pinned():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("torch==2.13.0") < ci.index("pip install -q -e .")


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
