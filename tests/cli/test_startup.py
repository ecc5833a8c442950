"""Start-up must stay cheap: importing the CLI or asking for help never loads torch."""
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
