"""Start-up must stay cheap: importing the CLI or asking for help never loads torch."""
import os
import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_cli_does_not_import_torch():
    assert "torch" not in _modules_after("import tfx_cli.cli")


def test_help_does_not_import_torch():
    code = ("import sys\nfrom tfx_cli.cli import app\nfrom typer.testing import CliRunner\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output")
    assert "torch" not in _modules_after(code)


def _run_main(args: list[str]) -> str:
    # the real entry point in a fresh interpreter; prints the modules loaded at exit
    return ("import sys, atexit\n"
            "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sys.modules)))\n"
            f"sys.argv = ['tfx'] + {args!r}\n"
            "from tfx_cli.cli import main\nmain()\n")


def _main_output(args: list[str]) -> tuple[int, str, set[str]]:
    out = subprocess.run([sys.executable, "-c", _run_main(args)], capture_output=True,
                         text=True)
    head, _, mods = out.stderr.rpartition("MODULES ")
    return out.returncode, out.stdout, set(mods.split())


def test_top_level_help_loads_no_command_and_no_rich_console():
    code, out, mods = _main_output(["--help"])
    assert code == 0
    assert not {m for m in mods if m.startswith("tfx_cli.commands.")}
    assert not {"rich.console", "numpy", "torch", "pydantic", "click"} & mods
    from tfx_cli.registry import COMMANDS

    for command in COMMANDS:  # every command is listed, by name, at the start of a row
        assert f"│ {command.name} " in out
    assert "\x1b[" not in out  # no styles when stdout is not a terminal


def test_shell_completion_script_and_completions():
    code, out, mods = _main_output(["--show-completion", "bash"])
    assert code == 0 and "_tfx_completion()" in out and "complete" in out
    assert not {m for m in mods if m.startswith("tfx_cli.commands.")} and "torch" not in mods
    env = {**os.environ, "_TFX_COMPLETE": "complete_bash", "COMP_CWORD": "2"}
    run = subprocess.run([sys.executable, "-c", "from tfx_cli.cli import main; main()"],
                         env={**env, "COMP_WORDS": "tfx attend --hea"}, capture_output=True,
                         text=True)
    assert run.stdout.split() == ["--head", "--heads"]  # options of a command loaded on demand
    env["COMP_CWORD"] = "1"
    run = subprocess.run([sys.executable, "-c", "from tfx_cli.cli import main; main()"],
                         env={**env, "COMP_WORDS": "tfx co"}, capture_output=True, text=True)
    assert run.stdout.split() == ["configs", "count-params", "collect"]  # in registry order


def test_a_command_loads_only_its_own_module():
    code, out, mods = _main_output(["count-params", "--config", "toy", "--json"])
    assert code == 0 and '"command": "count-params"' in out
    assert {m for m in mods if m.startswith("tfx_cli.commands.")} == {
        "tfx_cli.commands.count_params"}
    assert not {"numpy", "torch", "pydantic", "click"} & mods


def test_no_arguments_prints_the_help_and_exits_2():
    code, out, _ = _main_output([])
    assert code == 2 and "Usage: tfx [OPTIONS] COMMAND" in out and "│ report " in out


def test_registry_summaries_are_the_docstrings_first_paragraphs():
    import importlib
    import inspect

    from tfx_cli.registry import COMMANDS

    for c in COMMANDS:
        func = getattr(importlib.import_module(f"tfx_cli.commands.{c.module}"), c.func)
        first = inspect.getdoc(func).split("\n\n")[0]
        assert c.summary == " ".join(first.split()), c.name


def test_group_help_panel_fits_the_width_and_wraps_long_summaries(monkeypatch):
    from tfx_cli.render import grouphelp

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "60")
    page = grouphelp.group_help("tfx", "About.\n\n  tfx x --y", [("--help", "-h", "Help.")],
                                [("First", [("short", "One line.")]),
                                 ("Second", [("long", "word " * 30)])])
    lines = page.splitlines()
    assert all(len(line) <= 60 for line in lines)
    boxed = [line for line in lines if line.startswith("│")]
    assert all(len(line) == 60 and line.endswith("│") for line in boxed)
    assert sum(1 for line in boxed if "word" in line) > 1  # wrapped, not cut
    assert " tfx x --y" in lines


def test_every_command_has_a_panel():
    from tfx_cli.registry import COMMANDS, PANELS

    for c in COMMANDS:
        assert c.panel in PANELS, (
            f"command {c.name!r} has no panel in `tfx --help` and the site: add "
            f"panel=\"...\" to its Command in tfx_cli/registry.py, one of "
            f"{', '.join(PANELS)}" + (f" (not {c.panel!r})" if c.panel else ""))


def test_help_groups_the_commands_in_panels_in_the_learners_order():
    from tfx_cli.registry import COMMANDS, PANELS

    code, out, _ = _main_output(["--help"])
    assert code == 0
    lines = out.splitlines()
    tops = {line[3:].split(" ─")[0]: k for k, line in enumerate(lines) if line.startswith("╭─ ")}
    used = [title for key, title in PANELS.items() if any(c.panel == key for c in COMMANDS)]
    assert list(tops) == ["Options"] + used  # no panel for a group without commands
    starts = sorted(tops.values())
    for c in COMMANDS:
        row = next(k for k, line in enumerate(lines) if line.startswith(f"│ {c.name} "))
        top = tops[PANELS[c.panel]]
        assert top < row and not any(top < s < row for s in starts), (c.name, c.panel)
    assert out.index("│ tokenize ") < out.index("│ attend ") < out.index("│ next ")


def test_misspelt_command_is_suggested():
    out = subprocess.run([sys.executable, "-m", "tfx_cli", "atend", "hi"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "No such command 'atend'. Did you mean 'attend'?" in out.stderr
