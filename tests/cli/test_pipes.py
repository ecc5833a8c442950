"""Real processes: a reader that stops early, and Ctrl-C.

These need the operating system's pipes and signals, so they run `tfx` as a child process
(the errors page's bad-input rows stdout-closed, ctrl-c-generate and ctrl-c-report).

Timing: the child announces on stderr that the command has started (after Python's own
start-up, which Ctrl-C may interrupt in any program), and the tests wait for that or for
streamed text rather than for a fixed time, so a slow machine only makes them slower.
"""
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "100"}
ENV.pop("TFX_QUIET", None)
ENV.pop("TFX_DEBUG", None)

# Run tfx's real entry point, saying "started" once Python and the CLI module are loaded.
# Ctrl-C is first given back its usual meaning: a suite started in the background by a
# shell without job control (`bash script &`, as CI runners may) passes SIGINT on as
# ignored, and a program keeps a signal its parent ignored, as tfx rightly does.
STARTED = "tfx-test: started"
LAUNCH = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
          "import sys; from tfx_cli.cli import main; "
          f"sys.stderr.write({STARTED + chr(10)!r}); sys.stderr.flush(); main()")
TFX = [sys.executable, "-c", LAUNCH]
SENTENCE = "When you play game of thrones"
BIG_JSON = ["trace", " ".join([SENTENCE] * 4), "--d-model", "16", "--heads", "2",
            "--layers", "1", "--json"]  # logits (T, 50257): megabytes of JSON


def stderr_lines(text: str) -> list:
    return [line for line in text.splitlines() if line and line != STARTED]


def wait_for(path: Path, needle: str, proc: subprocess.Popen, timeout: float = 120) -> str:
    """Poll a file the child writes until it holds `needle` (or the child ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(encoding="utf-8", errors="replace")
        if needle in text:
            return text
        if proc.poll() is not None:
            pytest.fail(f"tfx ended early ({proc.returncode}): {text}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {needle!r} on stderr after {timeout} s")


# -- a reader that goes away -------------------------------------------------------------
@pytest.mark.parametrize("reader", ["head -c 100", "head -n 1"])
def test_closed_stdout_exits_quietly(tmp_path, reader):
    """`tfx trace ... --json | head -c 100`: exit 0, nothing on stderr, no BrokenPipeError."""
    args = BIG_JSON if "-c" in reader else BIG_JSON[:-1] + ["--values", "--full"]
    script = (f'"$PY" -c "$LAUNCH" {shlex.join(args)} 2> err.txt | {reader} > out.txt; '
              'echo "${PIPESTATUS[0]}" > rc.txt')
    subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, timeout=300,
                   env={**ENV, "PY": sys.executable, "LAUNCH": LAUNCH})
    assert (tmp_path / "rc.txt").read_text().strip() == "0"
    assert stderr_lines((tmp_path / "err.txt").read_text()) == []
    out = (tmp_path / "out.txt").read_bytes()
    assert 0 < len(out) <= 100 if "-c" in reader else out.count(b"\n") == 1


def test_closed_stdout_before_any_output(tmp_path):
    """The reader is gone before tfx writes a byte: still exit 0 and silence."""
    with open(tmp_path / "err.txt", "wb") as err:
        proc = subprocess.Popen(TFX + BIG_JSON, stdout=subprocess.PIPE, stderr=err, env=ENV,
                                cwd=tmp_path)
        proc.stdout.close()
        assert proc.wait(timeout=300) == 0
    assert stderr_lines((tmp_path / "err.txt").read_text()) == []


@pytest.mark.parametrize("args", [["--help"], ["attend", "--help"]])
def test_help_to_a_closed_reader_exits_quietly(args):
    """The help goes to a reader that is already gone: exit 0 and silence, for the
    top-level help (click's echo) and a command's (Rich)."""
    proc = subprocess.Popen(TFX + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert stderr_lines(err) == []


# -- Ctrl-C ----------------------------------------------------------------------------
def interrupt(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("tfx did not stop on Ctrl-C")


def test_ctrl_c_during_generate(tmp_path):
    """Interrupted while decoding: exit 130, no JSON at all, one error line after the
    streamed text (which ends its own line)."""
    err_path = tmp_path / "err.txt"
    with open(tmp_path / "out.txt", "wb") as out, open(err_path, "wb") as err:
        # a one-layer GPT reading words: its stream echoes the prompt once decoding has
        # begun, and 100,000 tokens keep it busy long past the interrupt
        proc = subprocess.Popen(TFX + ["generate", "Hello", "-c", "gpt2", "--layers", "1",
                                       "--d-model", "8", "--heads", "2", "-t", "word",
                                       "-n", "100000", "--json"], stdout=out, stderr=err,
                                env=ENV, cwd=tmp_path)
        wait_for(err_path, "Hello", proc)
        time.sleep(0.2)
        code = interrupt(proc)
    assert code == 130
    assert (tmp_path / "out.txt").read_bytes() == b""
    lines = stderr_lines(err_path.read_text())
    assert lines[-1] == "tfx: error: interrupted", lines
    assert "Traceback" not in err_path.read_text()


@pytest.mark.parametrize("delay", [0.3, 1.5])
def test_ctrl_c_during_report_leaves_no_file(tmp_path, delay):
    """Interrupted while torch loads or gpt124m is built: exit 130 and no page, no
    temporary file. (A machine fast enough to finish first must then leave a whole page.)"""
    text = " ".join([SENTENCE] * 140)  # 980 tokens, within the context: seconds of work
    err_path = tmp_path / "err.txt"
    with open(tmp_path / "out.txt", "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(TFX + ["report", text, "-o", "page.html"], stdout=out,
                                stderr=err, env=ENV, cwd=tmp_path)
        wait_for(err_path, STARTED, proc)
        time.sleep(delay)
        code = interrupt(proc)
    left = sorted(p.name for p in tmp_path.iterdir())
    if code == 0:  # finished before the signal: the page is whole
        assert "</html>" in (tmp_path / "page.html").read_text()
        return
    assert code == 130, err_path.read_text()
    assert left == ["err.txt", "out.txt"], left
    assert stderr_lines(err_path.read_text()) == ["tfx: error: interrupted"]


# A Ctrl-C while torch is being imported (the first command that needs it): the import
# finishes first, then the command stops as from any other Ctrl-C. A finder poking
# SIGINT when torch asks for torch.nn puts the signal deterministically inside that import.
POKED_LAUNCH = """
import atexit, importlib.abc, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class Poke(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch.nn" and "poked" not in sys.modules:
            sys.modules["poked"] = sys  # once
            signal.raise_signal(signal.SIGINT)
        return None
def report():
    torch = sys.modules.get("torch")
    done = torch is not None and not torch.__spec__._initializing and hasattr(torch, "nn")
    sys.stdout.write(f"poked={'poked' in sys.modules} torch-imported={done}\\n")
atexit.register(report)
sys.meta_path.insert(0, Poke())
from tfx_cli.cli import main
main()
"""


def test_ctrl_c_inside_the_torch_import_waits_for_it(tmp_path):
    proc = subprocess.run([sys.executable, "-c", POKED_LAUNCH, "embed", SENTENCE],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.stdout.strip() == "poked=True torch-imported=True", proc.stdout
    assert proc.returncode == 130, proc.stderr
    assert stderr_lines(proc.stderr) == ["tfx: error: interrupted"]
