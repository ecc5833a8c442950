"""Every option of every command is declared once (tfx_cli/option_table.py): the command
line's parameters, the groups a command takes, each command's own block and the API's
checks all come from that one table."""
import importlib
import inspect
import math
import re

import pytest
import typer
from typer.testing import CliRunner

from tfx_cli import api, option_table, options
from tfx_cli.api._options import option_kinds, option_name, read_option
from tfx_cli.cli import app
from tfx_cli.errors import TfxError
from tfx_cli.option_table import BLOCKS, GROUPS, MODEL_FORCE, OPTIONS, Option, options_of
from tfx_cli.registry import COMMANDS

DECLARED = list({id(o): o for o in (*OPTIONS.values(), MODEL_FORCE, *(
    o for block in BLOCKS.values() for o in block.values()))}.values())
RANGED = [o for o in DECLARED if o.ranged]
# Parameters still written out in their command's module (an Annotated type of their
# own); each is to become a declaration in its command's block.
WRITTEN_OUT = {
    "eval-sae": {"transcoders"},
    "top": {"sae"},
    "train-transcoder": {"collect", "layer", "output", "input_site", "skip", "jumprelu"},
}


def _click_command(name: str):
    group = typer.main.get_command(app)
    return group.get_command(group.context_class(group, info_name="tfx"), name)


def _click_param(option: Option):
    """The Click parameter the declaration makes, in a one-command app of its own."""
    def probe(**kwargs):
        return kwargs

    param = inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY,
                              annotation=options.cli_type(option), default=option.default)
    probe.__signature__ = inspect.Signature([param])
    probe.__annotations__ = {option.name: param.annotation}
    one = typer.Typer()
    one.command()(probe)
    return typer.main.get_command(one).params[0]


def _shape(param) -> dict:
    """What a reader of a Click parameter sees of it (its type by name and bounds)."""
    kind = param.type
    return dict(opts=param.opts, secondary=param.secondary_opts, kind=param.param_type_name,
                type=type(kind).__name__, choices=list(getattr(kind, "choices", ()) or ()),
                bounds=(getattr(kind, "min", None), getattr(kind, "max", None)),
                default=getattr(param.default, "value", param.default), help=param.help,
                metavar=param.metavar, panel=getattr(param, "rich_help_panel", None),
                show_default=param.show_default, multiple=param.multiple,
                required=param.required)


def _declarations(command: str, name: str) -> list:
    """The declarations a parameter of `command` named `name` may come from."""
    found = [BLOCKS.get(command, {}).get(name), OPTIONS.get(name)]
    return [o for o in found + ([MODEL_FORCE] if name == "force" else []) if o]


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_every_parameter_of_every_command_comes_from_the_table(command):
    written = set()
    for param in _click_command(command).params:
        shape = _shape(param)
        if not any(shape == _shape(_click_param(o)) for o in _declarations(command, param.name)):
            written.add(param.name)
    assert written == WRITTEN_OUT.get(command, set()), command


def test_every_declaration_is_whole_and_of_a_known_kind():
    for name, members in GROUPS.items():
        assert members and all(m in OPTIONS for m in members), name
    kinds = {*option_table._BY_KIND, "int", "float", "floats", "flag", "choice"}
    for option in DECLARED:
        assert option.kind in kinds, option
        assert option.help.strip(), option.name
        assert all(f.startswith("-") for f in option.flags), option.name
        assert (option.kind == "choice") == bool(option.choices), option.name
        assert not option.ranged or option.kind in ("int", "float", "floats"), option.name


def test_a_block_redeclares_a_shared_name_only_to_mean_something_else():
    """`next --candidates` and `report --candidates` are two declarations; a block never
    repeats a shared option as it is (that would be two declarations of one thing)."""
    for command, block in BLOCKS.items():
        assert command in {c.name for c in COMMANDS}, command
        for name, option in block.items():
            assert option != OPTIONS.get(name), (command, name)


def _outside(option: Option) -> list:
    """The values just past each end of the declared range."""
    step = 1 if option.kind == "int" else 0.5
    low, high = option.minimum, option.maximum
    return [v for v in (
        None if low is None else low if option.min_open else low - step,
        None if high is None else high if option.max_open else high + step) if v is not None]


def _first_taker(option: Option) -> tuple[str, str]:
    """A command that takes `option`, and its flag there."""
    for command in COMMANDS:
        if command.name in WRITTEN_OUT and option.name in WRITTEN_OUT[command.name]:
            continue
        for param in _click_command(command.name).params:
            if param.name == option.name and option in _declarations(command.name, param.name) \
                    and _shape(param) == _shape(_click_param(option)):
                return command.name, param.opts[0]
    raise LookupError(option.name)


def _cases():
    """(command, flag, keyword, value) for each end of each declared range, each
    declaration once, from the command that takes it first."""
    seen, cases = [], []
    for option in RANGED:
        if option in seen or not option.flags:
            continue
        seen.append(option)
        try:
            command, flag = _first_taker(option)
        except LookupError:  # declared for the API alone (train-transcoder's)
            continue
        cases += [(command, flag, option.name, value) for value in _outside(option)]
    return cases


CASES = _cases()


@pytest.mark.parametrize("command, flag, keyword, value", CASES,
                         ids=[f"{c}{f}={v}" for c, f, _, v in CASES])
def test_the_api_refuses_a_value_out_of_range_with_the_clis_message(command, flag, keyword,
                                                                    value):
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    cli = CliRunner().invoke(app, [command, flag, shown])
    assert cli.exit_code == 2, cli.output
    with pytest.raises(TfxError) as caught:
        getattr(api, command.replace("-", "_"))(**{keyword: value})
    assert caught.value.exit_code == 2
    line = cli.stderr.strip()
    assert line.startswith("tfx: error: ") and caught.value.message in line, (line, caught)


def test_the_cases_cover_every_range_a_command_takes():
    covered = {(c, k) for c, _, k, _ in CASES}
    assert ("next", "candidates") in covered and ("report", "candidates") in covered
    assert ("generate", "temperature") in covered and ("train", "steps") in covered
    assert len({k for _, _, k, _ in CASES}) >= 15


@pytest.mark.parametrize("option", [o for o in DECLARED if o.kind in ("int", "float", "floats")
                                    and (o.ranged or o.kind != "int")],
                         ids=lambda o: o.name)
def test_every_example_an_error_gives_lies_in_the_options_range(option):
    example = option.example
    assert option.holds(example) and math.isfinite(example)
    if option.kind == "int":
        return
    with pytest.raises(TfxError) as caught:
        option_table.checker(option)(float("nan"), option.spelled)
    assert caught.value.message.endswith(f"must be a finite number, e.g. {example:g}")
    if option.ranged:
        outside = _outside(option)[0]
        with pytest.raises(TfxError) as caught:
            option_table.checker(option)(outside, option.spelled)
        suggested = float(caught.value.message.rsplit("e.g. ", 1)[1])
        assert option.holds(suggested), caught.value.message


@pytest.mark.parametrize("option", [o for o in DECLARED if o.kind in ("float", "floats")],
                         ids=lambda o: o.name)
def test_a_float_that_is_not_finite_is_refused_by_both_layers_in_one_line(option):
    command, flag = _first_taker(option)
    cli = CliRunner().invoke(app, [command, flag, "nan"])
    assert cli.exit_code == 2
    with pytest.raises(TfxError) as caught:
        getattr(api, command.replace("-", "_"))(**{option.name: float("nan")})
    assert cli.stderr.strip() == f"tfx: error: {caught.value.message}"
    assert f"e.g. {option.example:g}" in cli.stderr


def test_next_candidates_zero_is_refused_by_the_api_as_by_the_cli():
    """Declared once in next's block: the API no longer lists zero candidates."""
    with pytest.raises(TfxError, match=r"'--candidates': 0 is not in the range x>=1"):
        api.next("hi", candidates=0)
    assert "x>=1" in CliRunner().invoke(app, ["next", "hi", "--candidates", "0"]).stderr
    assert option_kinds("generate")["candidates"](0, "--candidates") == 0  # generate's: 0 ok
    with pytest.raises(TfxError, match="0<=x<=50"):
        api.report("hi", candidates=51)


def test_a_keyword_is_read_as_its_command_reads_it():
    assert read_option("candidates", 0, command="generate") == 0
    with pytest.raises(TfxError):
        read_option("candidates", 0, command="next")
    assert read_option("site", "heads", command="patch") == "heads"
    with pytest.raises(TfxError, match="is not one of 'resid_pre'"):
        read_option("site", "neurons", command="patch")
    assert read_option("site", "blocks.3.ffn.act", command="top") == "blocks.3.ffn.act"
    assert option_name("prompt", "generate") == "PROMPT"
    assert option_name("collect", "train-sae") == "COLLECT_DIR"
    assert option_name("tie", "count-params") == "--tie"
    assert option_kinds()["heads"]("3", "--heads") == 3


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


def test_a_bare_parameter_is_its_declaration_and_arrives_as_the_api_takes_it():
    """attend's own `mask` (a choice) and `show` (names) come from its block, as text and
    None; an undeclared bare parameter is refused when the command is declared."""
    module = importlib.import_module("tfx_cli.commands.attend")
    shown = CliRunner().invoke(app, ["attend", "--help"], env={"COLUMNS": "200"}).output
    assert BLOCKS["attend"]["mask"].help[:40] in " ".join(shown.split())
    assert "mask" in inspect.signature(module.attend).parameters

    def stray(*, text, not_an_option):
        return text

    stray.__module__ = "tfx_cli.commands.attend"
    with pytest.raises(ValueError, match="not_an_option"):
        options.command("display")(stray)


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


def test_a_new_commands_option_is_one_line_in_its_block(monkeypatch):
    """Both layers read a block's declaration: the range is the CLI's and the API's."""
    wide = Option("candidates", ("--candidates",), "int", default=10, minimum=3,
                  help="How many of the most likely tokens to list.")
    monkeypatch.setitem(BLOCKS["next"], "candidates", wide)
    assert "x>=3" in CliRunner().invoke(app, ["next", "hi", "--candidates", "2"]).stderr
    with pytest.raises(TfxError, match="x>=3"):
        api.next("hi", candidates=2)
    assert options_of("next")["candidates"] is wide


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


def test_the_apis_defaults_are_the_declarations():
    """A default is written in the table; an API function's own default for the same
    keyword is that one (or None, "not given")."""
    for command in COMMANDS:
        fn = getattr(api, command.name.replace("-", "_"), None)
        if fn is None:
            continue
        for name, param in inspect.signature(fn).parameters.items():
            option = options_of(command.name).get(name)
            if option is None or param.default in (inspect.Parameter.empty, None):
                continue
            if name not in WRITTEN_OUT.get(command.name, ()):
                assert param.default == option.default, (command.name, name)


def test_a_misspelt_group_is_refused_when_the_command_is_declared():
    with pytest.raises(ValueError, match="edit"):
        options.command("edit", "display")(lambda **kw: None)
