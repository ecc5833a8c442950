"""The driver the recording scripts share (saelens_reads.py, circuit_tracer_loads.py): a
library that cannot live in tfx's environment (its pins clash) reads what tfx made in its
own venv. The script runs itself again under that venv's Python with the hidden
`--read REQUEST ANSWER`, one folder at a time: REQUEST names the folder and the input
rows, ANSWER is what the script's `read(folder, input)` returned, as JSON. That side
imports the library and never tfx (PYTHONPATH is dropped for it)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable


def peer_python(doc: str, flag: str, help: str, missing: str,
                read: Callable[[Path, list], dict]) -> str | None:
    """The command line read. Under the peer's Python (--read REQUEST ANSWER): the request
    answered with `read` and None returned, the script's work done. Otherwise the peer's
    Python named by `flag`, a usage error saying `missing` where it is not given."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument(flag, dest="peer_python", metavar="PYTHON", help=help)
    parser.add_argument("--read", nargs=2, metavar=("REQUEST", "ANSWER"),
                        help=argparse.SUPPRESS)  # the part run under the peer's Python
    args = parser.parse_args()
    if args.read:
        request = json.loads(Path(args.read[0]).read_text())
        answer = read(Path(request["folder"]), request["input"])
        Path(args.read[1]).write_text(json.dumps(answer))
        return None
    if not args.peer_python:
        parser.error(missing)
    return args.peer_python


def ask_peer(python: str, script: str | Path, folders: dict, inputs) -> dict:
    """name -> what `script` run under `python` read of that folder, with `inputs`."""
    seen = {}
    with tempfile.TemporaryDirectory() as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no tfx there
        for name, folder in folders.items():
            request.write_text(json.dumps({"folder": str(folder), "input": inputs}))
            subprocess.run([python, str(script), "--read", str(request), str(answer)],
                           check=True, env=env, cwd=tmp)
            seen[name] = json.loads(answer.read_text())
    return seen
