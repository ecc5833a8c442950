"""The layout holds: import-linter's contracts (pyproject.toml) pass, they fail when code
crosses a layer, no module grows past one concern's length and no function past one
screen's."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 700
MAX_FUNCTION_LINES = 80
# the folders whose functions are held to MAX_FUNCTION_LINES (the command modules join
# once their options come in groups)
SHORT_FUNCTION_FOLDERS = ["tfx_cli"]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """`lint-imports` as the README's test command installs it, run in `cwd` (its
    pyproject.toml and tfx_cli/ are what it checks)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, "
            "no_logo=True))")
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "BROKEN" not in out.stdout


def test_the_contracts_break_when_code_crosses_a_layer(tmp_path):
    """Each kind of contract catches its violation: a copy of the package with a circle,
    a checkpoint reader that builds a model, torch in a view, rich in the core."""
    shutil.copytree(ROOT / "tfx_cli", tmp_path / "tfx_cli",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")

    def append(rel: str, line: str) -> None:
        path = tmp_path / "tfx_cli" / rel
        path.write_text(path.read_text() + "\n\ndef _crossing():\n    " + line + "\n")

    append("core/config.py", "from .presets import PRESETS")  # presets imports config
    append("core/checkpoints/plan.py", "from ..model import build_model")
    append("render/matrix.py", "import torch")
    append("core/trace.py", "import rich")
    out = lint_imports(tmp_path)
    assert out.returncode != 0
    report = out.stdout
    section = report[report.index("Broken contracts"):]
    for broken in ("No import circles", "Inside the core", "Checkpoints read files",
                   "Views compute nothing", "The core never draws"):
        assert broken in section, report
    assert "- .presets -> .config" in section  # the circle, with the import that closes it
    assert "5 broken" in report, report


def test_no_module_is_longer_than_one_concern():
    """Measured as `wc -l` does: a module past 700 lines holds more than one concern."""
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "tfx_cli").rglob("*.py")
            if (n := p.read_bytes().count(b"\n")) > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Each function (or method, or nested function) of `source` longer than `limit`
    lines, counted by the AST from its first decorator to its last line, the signature
    and docstring included: qualified name -> lines."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    if (n := child.end_lineno - first + 1) > limit:
                        found[name] = n
                name += "."
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_no_function_is_longer_than_one_screen():
    """A function past 80 lines does several steps that want names of their own."""
    long = {}
    for folder in SHORT_FUNCTION_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name, n in long_functions(path.read_text(encoding="utf-8")).items():
                long[f"{path.relative_to(ROOT)}::{name}"] = n
    assert not long, "split these into named steps: " + ", ".join(
        f"{name} ({n} lines)" for name, n in sorted(long.items(), key=lambda kv: -kv[1]))


def test_function_length_counts_decorators_signature_and_nested_functions():
    body = "".join(f"    x{i} = {i}\n" for i in range(77))
    too_long = f"@decorated\ndef f(\n    a,\n):\n{body}"  # 1 + 3 + 77 = 81 lines
    assert long_functions(too_long) == {"f": 81}
    assert long_functions(too_long, limit=81) == {}
    inner = "        def g():\n" + "".join(f"            y{i} = {i}\n" for i in range(81))
    nested = "class C:\n    def m(self):\n" + inner  # g: 82 lines, m: 83
    assert long_functions(nested) == {"C.m": 83, "C.m.g": 82}


def test_every_folder_says_what_lives_there_and_what_it_may_import():
    for init in (ROOT / "tfx_cli").rglob("__init__.py"):
        if init.parent.name in ("tfx_cli",):
            continue
        text = init.read_text()
        doc = text.split('"""')[1] if text.startswith('"""') else ""
        assert len(doc.split()) >= 20, f"{init.relative_to(ROOT)} has no paragraph"
        if init.parent.parent.name == "core" or init.parent.name == "core":
            assert "import" in doc, f"{init.relative_to(ROOT)} does not say what it may import"
