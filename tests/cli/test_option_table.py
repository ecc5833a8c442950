"""The shared options are declared once (tfx_cli/option_table.py): the command line's types,
the groups a command takes and the API's checks all come from that one table."""
import re

import pytest
import typer
from typer.testing import CliRunner

from tfx_cli import option_table, options
from tfx_cli.api._options import OPTION_KINDS, option_name, read_option
from tfx_cli.cli import app
from tfx_cli.errors import TfxError
from tfx_cli.option_table import GROUPS, OPTIONS, Option

RANGED = [o for o in OPTIONS.values() if o.minimum is not None or o.maximum is not None]


def _app(*names):
    """A one-command app that takes the declared `names` and returns what it was handed."""
    seen = {}
    handed = [*names, "encoding"] if "model" in names else list(names)
    scope = {"seen": seen}
    exec(f"def probe(*, {', '.join(handed)}):\n    seen.update(locals())", scope)
    probe = options.command(*names)(scope["probe"])

    one = typer.Typer()
    one.command()(probe)
    one.command("other")(lambda: None)  # two commands: `probe` is then a subcommand
    return one, seen


def _invoke(one, args):
    return CliRunner().invoke(one, ["probe", *args])


def test_every_group_and_option_is_declared_once_with_a_known_kind():
    for name, members in GROUPS.items():
        assert members and all(m in OPTIONS for m in members), name
    for option in OPTIONS.values():
        assert option.kind in option_table._BY_KIND or option.kind == "int", option
        assert option.help.strip(), option.name
        assert all(f.startswith("-") for f in option.flags), option.name


@pytest.mark.parametrize("option", RANGED, ids=[o.name for o in RANGED])
def test_the_cli_and_the_api_refuse_the_same_values_of_a_ranged_option(option):
    """One range, read by both layers: the value just outside is refused by each, the
    value at the edge is taken by each."""
    one, seen = _app(option.name)
    for edge, outside in ((option.minimum, -1), (option.maximum, +1)):
        if edge is None:
            continue
        flag = option.flags[0]
        assert _invoke(one, [flag, str(edge)]).exit_code == 0
        refused = _invoke(one, [flag, str(edge + outside)])
        assert refused.exit_code == 2 and re.search(r"not in the range|Invalid value",
                                                    refused.output), refused.output
        assert read_option(option.name, edge) == edge
        with pytest.raises(TfxError, match=re.escape(option_name(option.name))):
            read_option(option.name, edge + outside)
    assert seen  # the command ran, and was handed its options


def test_the_api_reads_each_declared_option_with_the_declarations_checker():
    for name, option in OPTIONS.items():
        probe = {"int": "7", "flag": True, "floats": ["2"]}.get(option.kind)
        if probe is not None:
            assert read_option(name, probe) == option_table.checker(option)(probe, name)
    assert OPTION_KINDS["heads"]("3", "--heads") == 3


def test_a_command_is_handed_one_dict_per_group_as_the_api_takes_them():
    one, seen = _app("edits", "dataset", "engine", "display", "plot")
    out = _invoke(one, ["--ablate", "blocks.0.attn.out", "--ablate-mode", "mean",
                        "--scale", "2", "--max-docs", "5", "--engine", "ray", "--json"])
    assert out.exit_code == 0, out.output
    assert seen["edits"] == dict(ablate=["blocks.0.attn.out"], ablate_mode="mean", steer=None,
                                 toward=None, away=None, scale=[2.0], sae=None,
                                 sae_site=None, steer_feature=None)
    assert seen["dataset"] == dict(field="text", max_docs=5, max_tokens=None, ctx=None,
                                   batch_size=8)
    assert seen["engine"] == dict(engine="ray", ray_address=None, workers=None,
                                  gpus_per_worker=None, verbose=False)
    assert seen["display"] == dict(json=True, precision=3, full=False)
    assert seen["plot"] is None


def test_the_model_group_hands_model_and_encoding_and_its_own_force():
    one, seen = _app("model")
    assert _invoke(one, ["--heads", "2", "--encoding", "latin-1", "--force"]).exit_code == 0
    model = seen["model"]
    assert model["heads"] == 2 and model["force"] is True and seen["encoding"] == "latin-1"
    assert callable(model["progress"]) and callable(model["notice"])
    assert "encoding" not in model and "force" not in seen


def test_a_new_option_in_a_group_is_one_declaration(monkeypatch):
    """Adding an option to every model command: one Option and its name in the group;
    the command's --help, what it is handed and the API's check follow."""
    new = Option("beam_width", ("--beam-width",), "int", minimum=1, panel="Model",
                 help="A new model option.")
    monkeypatch.setitem(OPTIONS, new.name, new)
    monkeypatch.setitem(GROUPS, "model", GROUPS["model"] + (new.name,))
    one, seen = _app("model")
    shown = CliRunner().invoke(one, ["probe", "--help"], env={"COLUMNS": "200"}).output
    assert "--beam-width" in shown and "A new model option." in shown
    assert _invoke(one, ["--beam-width", "4"]).exit_code == 0
    assert seen["model"]["beam_width"] == 4
    assert _invoke(one, ["--beam-width", "0"]).exit_code == 2
    with pytest.raises(TfxError, match="--beam-width"):
        option_table.checkers()["beam_width"](0, "--beam-width")


@pytest.mark.parametrize("command,group", [("trace", "edits"), ("lens", "ablations"),
                                           ("scan", "dataset"), ("top", "engine"),
                                           ("patch", "display"), ("generate", "model")])
def test_each_command_shows_its_groups_options_in_their_panels(command, group):
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    for name in GROUPS[group]:
        option = OPTIONS[name]
        assert option.flags[0] in shown, (command, option.flags[0])
        if option.panel:
            assert option.panel in shown, (command, option.panel)


def test_the_model_options_are_the_model_specs_fields_with_its_defaults():
    from tfx_cli.core.spec import SPEC_DEFAULTS

    declared = {name: OPTIONS[name].default for name in GROUPS["model"] if name != "encoding"}
    assert declared == {k: v for k, v in SPEC_DEFAULTS.items() if k != "force"}


def test_a_misspelt_group_is_refused_when_the_command_is_declared():
    with pytest.raises(ValueError, match="edit"):
        options.command("edit", "display")(lambda **kw: None)
