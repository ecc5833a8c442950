"""The examples of README.md and docs/*.md, found and run (tests/test_docs_examples.py).

A page's examples are its fenced `bash`, `console` and `python` blocks. In a `bash` block
each `tfx ...` line runs (in-process through the Typer app, or through bash with a `tfx`
on PATH when it pipes into another program), and each `pip install` line is checked
against what is installed. A `console` block's `$ ` lines run and the lines after them are
their output. A `python` block runs in one namespace per page. What a page says an
example prints is compared: a `text` block right after a `bash` block (the last command's
stdout), a `# → VALUE` comment (in Python the value of that line's expression, printed by
repr; in shell numbers and quoted strings that the output holds), numbers within
`REL_TOL` plus one unit of their last shown digit, never to a CPU's last bit.

A comment just before a block changes how it runs:
`<!-- example: not run, REASON -->`, `<!-- example: held by tests/FILE.py, REASON -->` (the
same run is a test of its own there), `<!-- example: run with ARGS -->` (ARGS appended to
each tfx command, the last value of an option winning; its output is then not compared).
"""
from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Optional

REL_TOL = 0.01
ARROW = "→"
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
TOKEN = re.compile(rf"'[^']*'|\"[^\"]*\"|{NUMBER}|[^\s\d'\"]+|\S")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    expected: Optional[str] = None  # a following ```text block
    marker: Optional[str] = None  # the <!-- example: ... --> before it


def blocks(path: Path, name: str) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    marker, i = None, 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^<!-- example: (.*?) -->$", line.strip())
        if m:
            marker = m.group(1)
        if line.startswith("```"):
            lang, start = line[3:].strip(), i
            end = lines.index("```", i + 1)
            code = "\n".join(lines[i + 1:end])
            if lang == "text" and found and found[-1].expected is None \
                    and all(not x.strip() for x in lines[found[-1].end + 1:start]):
                found[-1].expected = code
            elif lang in ("bash", "console", "python"):
                b = Block(name, start + 1, lang, code, None, marker)
                b.end = end
                found.append(b)
            marker, i = None, end + 1
            continue
        if line.strip() and not m:
            marker = None if not line.startswith("<!--") else marker
        i += 1
    return found


# -- comparing what a page shows with what ran -------------------------------------------
def close(shown: str, got: str) -> bool:
    a, b = shown.replace(",", ""), got.replace(",", "")
    try:
        x, y = float(a), float(b)
    except ValueError:
        return shown == got
    if "." not in a and "e" not in a.lower():
        return x == y  # a count: exact
    unit = 10.0 ** -len(a.split(".")[1].lower().split("e")[0]) if "." in a else 0.0
    return abs(x - y) <= REL_TOL * abs(x) + unit


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def same_tokens(shown: str, got: str) -> bool:
    a, b = tokens(shown), tokens(got)
    return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))


def lines_shown(expected: str, output: str) -> Optional[str]:
    """None when each line of `expected` is a line of `output`, in order (a line ending in
    … matches by its start); else the first line that is not."""
    got = [line for line in output.splitlines() if line.strip()]
    k = 0
    for want in (w for w in expected.splitlines() if w.strip()):
        prefix = want.split("…")[0] if "…" in want else None
        while k < len(got) and not (
                same_tokens(want, got[k]) if prefix is None
                else " ".join(got[k].split()).startswith(" ".join(prefix.split()))):
            k += 1
        if k == len(got):
            return want
        k += 1
    return None


def values_in(expected: str, output: str) -> Optional[str]:
    """None when every number and quoted string of `expected` is in `output`."""
    numbers = re.findall(NUMBER, output.replace("\\n", " "))
    for tok in tokens(expected):
        if tok[0] in "'\"":
            if tok[1:-1].strip() not in output:
                return tok
        elif re.fullmatch(NUMBER, tok):
            if not any(close(tok, n) for n in numbers):
                return tok
    return None


# -- shell lines -------------------------------------------------------------------------
def split_comment(line: str) -> tuple[str, str]:
    """`cmd  # comment` -> (cmd, comment), a # inside quotes being part of the command."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def split_pipe(command: str) -> tuple[str, str]:
    """`tfx ... | jq ...` -> ("tfx ...", "jq ..."); ("tfx ...", "") without a pipe."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            return command[:i].rstrip(), command[i + 1:].strip()
    return command, ""


def logical_lines(code: str) -> list[tuple[int, str]]:
    out, buf, first = [], "", 0
    for n, line in enumerate(code.split("\n")):
        if not buf:
            first = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((first, buf + line))
        buf = ""
    return [(n, line) for n, line in out if line.strip()]


def with_args(command: str, extra: str) -> str:
    """`extra` after the tfx part of a command (before any pipe)."""
    if not extra:
        return command
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            return command[:i].rstrip() + " " + extra + " " + command[i:]
    return command + " " + extra


def pip_missing(command: str) -> list[str]:
    """The packages a `pip install` line names that are not installed (at that version)."""
    missing = []
    for arg in shlex.split(command)[2:]:
        if arg.startswith("-") or arg.startswith(".") or "&&" in arg:
            continue
        name, _, version = arg.partition("==")
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(arg)
            continue
        if version and have.split("+")[0] != version:
            missing.append(f"{arg} (have {have})")
    return missing


# -- python blocks -----------------------------------------------------------------------
def python_checks(code: str) -> list[tuple[ast.stmt, Optional[str]]]:
    """Each top-level statement with the value its `# → VALUE` comment gives (on its last
    line, or alone on the next line)."""
    lines = code.split("\n")
    tree = ast.parse(code)
    out = []
    for stmt in tree.body:
        want = None
        last = lines[stmt.end_lineno - 1]
        nxt = lines[stmt.end_lineno] if stmt.end_lineno < len(lines) else ""
        for text in (split_comment(last)[1], nxt.strip()[1:] if nxt.strip().startswith("#") else ""):
            if ARROW in text:
                want = text.split(ARROW, 1)[1].strip()
        out.append((stmt, want))
    return out
