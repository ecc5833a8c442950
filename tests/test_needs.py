"""tests/needs.py, the one rule for a missing optional dependency: a skip that names the
install locally, a failure under CI=true; and no test file keeps a rule of its own."""
import re
from pathlib import Path

import pytest

from needs import in_ci, need, need_import, need_program

TESTS = Path(__file__).resolve().parent
ABSENT = "tfx_no_such_module_anywhere"


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_a_missing_package_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match=f"{ABSENT} is not installed "
                                                     r"\(pip install it\); CI installs"):
        need(ABSENT, "pip install it")
    with pytest.raises(pytest.fail.Exception, match=f"{ABSENT} is not installed"):
        need_import(ABSENT, "pip install it")
    with pytest.raises(pytest.fail.Exception, match="tfx-no-such-program"):
        need_program(("tfx-no-such-program",), "apt-get install it")


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_a_missing_package_skips_elsewhere_naming_the_install(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match=r"is not installed \(pip install it\)"):
        need(ABSENT, "pip install it")
    with pytest.raises(pytest.skip.Exception, match=r"is not installed \(pip install it\)"):
        need_import(ABSENT, "pip install it")
    with pytest.raises(pytest.skip.Exception, match=r"\(apt-get install it\)"):
        need_program(("tfx-no-such-program",), "apt-get install it")


def test_a_present_dependency_is_returned(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    assert need("json", "-") is None
    assert need_import("json", "-").dumps([1]) == "[1]"
    program = tmp_path / "prog"
    program.write_text("")
    monkeypatch.setenv("TFX_TEST_PROGRAM", str(program))
    assert need_program(("tfx-no-such-program",), "-", env="TFX_TEST_PROGRAM") == str(program)


def test_no_test_decides_its_own_skips():
    """importorskip skips in CI too, and a CI check of a file's own can disagree with
    needs.py's; every missing-dependency decision goes through needs.py."""
    own = re.compile(r"importorskip|environ(?:\.get)?\(\s*[\"']CI[\"']|environ\[[\"']CI[\"']\]")
    offenders = [f"{p.relative_to(TESTS)}:{i}" for p in sorted(TESTS.rglob("*.py"))
                 if p.name not in ("needs.py", "test_needs.py")
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if own.search(line)]
    assert not offenders, offenders


def test_ci_sets_ci_true():
    """.ci/run installs every optional dependency, so it runs the tests under CI=true."""
    ci = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "export CI=true" in [line.strip() for line in ci]
