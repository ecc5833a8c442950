"""bench/peer_venv.py: the recording scripts' driver runs a script again under another
Python (here this one, standing in for a library's own venv), one folder at a time, and
hands back what its read() returned; that side sees no PYTHONPATH."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = '''"""A peer reader for the test."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, {bench!r})
from peer_venv import ask_peer, peer_python


def read(folder, x):
    return {{"files": sorted(p.name for p in Path(folder).iterdir()), "sum": sum(x),
             "pythonpath": os.environ.get("PYTHONPATH")}}


python = peer_python(__doc__, "--peer", "the peer's Python", "--peer is missing", read)
if python is not None:
    seen = ask_peer(python, __file__, {{"a": Path({a!r}), "b": Path({b!r})}}, [1, 2, 3])
    print(json.dumps(seen))
'''


def test_each_folder_is_read_under_the_peer_python(tmp_path):
    for name, files in (("a", ["x.txt"]), ("b", ["y.txt", "z.txt"])):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("")
    script = tmp_path / "reader.py"
    script.write_text(SCRIPT.format(bench=str(ROOT / "bench"),
                                    a=str(tmp_path / "a"), b=str(tmp_path / "b")))
    env = {"PYTHONPATH": "/nowhere", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(script), "--peer", sys.executable],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"a": {"files": ["x.txt"], "sum": 6, "pythonpath": None},
                    "b": {"files": ["y.txt", "z.txt"], "sum": 6, "pythonpath": None}}
    missing = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env=env, timeout=120)
    assert missing.returncode == 2 and "--peer is missing" in missing.stderr
