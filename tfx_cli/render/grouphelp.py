"""`tfx --help`: the command list, drawn without Rich.

Typer's Rich help imports Rich's console, Markdown and traceback machinery (~0.15 s)
before it draws anything; the top-level help is the first thing a new user runs, so it is
drawn here from plain strings in the same panel layout. ANSI styles are always written;
click's `echo` strips them when stdout is not a terminal, and NO_COLOR turns them off.
Each command's own `--help` is still Typer's Rich help.
"""
import os
import shutil
import textwrap

STYLES = {
    "usage": "33",          # yellow
    "bold": "1",
    "option": "1;36",       # bold cyan
    "short": "1;32",        # bold green
    "command": "1;36",
    "border": "2",          # dim
}


def _style(text: str, name: str) -> str:
    if not text or not name or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{STYLES[name]}m{text}\x1b[0m"


def width() -> int:
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _panel(title: str, rows: list[list[tuple[str, str]]], widths: list[int],
           total: int) -> list[str]:
    """A rounded box titled `title`; each row is cells of (text, style); the last column
    wraps to the box."""
    inner = total - 4  # "│ " + text + " │"
    top = "╭─ " + title + " " + "─" * max(0, total - len(title) - 5) + "╮"
    lines = [_style(top[:3], "border") + _style(title, "bold") + _style(top[3 + len(title):],
                                                                        "border")]
    fixed = sum(w + 1 for w in widths[:-1])
    wrap_at = max(10, inner - fixed)
    for cells in rows:
        text, style = cells[-1]
        wrapped = textwrap.wrap(text, wrap_at) or [""]
        for k, part in enumerate(wrapped):
            head = ""
            plain = ""
            for (cell, cell_style), w in zip(cells[:-1], widths[:-1]):
                shown = cell if k == 0 else ""
                head += _style(shown, cell_style) + " " * (w + 1 - len(shown))
                plain += " " * (w + 1)
            pad = " " * max(0, inner - len(plain) - len(part))
            lines.append(_style("│", "border") + " " + head + _style(part, style) + pad + " "
                         + _style("│", "border"))
    lines.append(_style("╰" + "─" * (total - 2) + "╯", "border"))
    return lines


def group_help(prog: str, description: str, options: list[tuple[str, str, str]],
               panels: list[tuple[str, list[tuple[str, str]]]]) -> str:
    """The whole page: usage, the description (blank-line separated paragraphs; lines
    that start with spaces are examples, kept as they are), the Options panel, then one
    panel per group of commands. `options` are (long names, short names, help); `panels`
    (title, [(name, summary), ...]) in the order shown; the names line up across panels."""
    total = width()
    out = ["", " " + _style("Usage:", "usage") + " " + _style(prog, "bold")
           + " [OPTIONS] COMMAND [ARGS]...", ""]
    for para in description.strip().split("\n\n"):
        if para.startswith("  "):
            out.extend(" " + line.strip() for line in para.splitlines())
        else:
            out.extend(" " + line for line in textwrap.wrap(" ".join(para.split()), total - 2))
        out.append("")
    long_w = max(len(o[0]) for o in options)
    short_w = max(len(o[1]) for o in options)
    rows = [[(lo, "option"), (sh, "short"), (text, "")] for lo, sh, text in options]
    out.extend(_panel("Options", rows, [long_w + 4, short_w + 4, 0], total))
    name_w = max(len(name) for _, commands in panels for name, _ in commands)
    for title, commands in panels:
        rows = [[(name, "command"), (text, "")] for name, text in commands]
        out.extend(_panel(title, rows, [name_w + 1, 0], total))
    return "\n".join(out) + "\n"
