"""--help shows each command's text and its options' as they are written: Rich reads
help as markdown, where two `*` of globs (blocks.*.ln2.out ... blocks.*.ffn.out) or two
`_` would turn the text between them into emphasis and drop them."""
import re

import pytest
import typer
from typer.testing import CliRunner

from tfx_cli.cli import _as_written, app
from tfx_cli.registry import COMMANDS

_MARKED = re.compile(r"[^\s`'\"(),;:]*[*_][^\s`'\"(),;:]*")


def _click_command(name: str):
    group = typer.main.get_command(app)
    return group.get_command(group.context_class(group, info_name="tfx"), name)


def _marked_words(text: str) -> set:
    """The words of a help text holding a `*` or `_` (globs, trace names, keys)."""
    return {w.rstrip(".") for w in _MARKED.findall(text or "") if w.strip("*_.")}


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_help_loses_no_star_or_underscore_of_a_glob_or_a_name(command):
    """Every such word of the command's text and of its options' help is shown."""
    click_command = _click_command(command)
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
    words = _marked_words(click_command.help)
    for param in click_command.params:
        words |= _marked_words(getattr(param, "help", ""))
    missing = sorted(w for w in words if w not in shown)
    assert not missing, (command, missing)


def test_code_spans_keep_their_text_and_the_declarations_are_untouched():
    assert _as_written("`*` crosses dots; 'blocks.*.attn.*'") == \
        "`*` crosses dots; 'blocks.\\*.attn.\\*'"
    assert _as_written("W_enc and W_dec") == "W\\_enc and W\\_dec"
    command = _click_command("train-transcoder")
    command.get_help(typer.Context(command, info_name="train-transcoder"))  # drawn escaped
    assert "'blocks.*.ln2.out'" in command.help  # and kept as written: the site reads it
