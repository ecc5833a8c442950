"""The site's generated pages and pictures (docs/generate.py, docs/make_pictures.py): each
is written from the code, so each test checks the page against the code it was written
from, and that something added to the code shows up without being written twice."""
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from needs import need, need_import
from parity import LOGITS, TESTS

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load("generate")


def _sections(page: str, level: str) -> dict[str, str]:
    """heading text -> the text under it, for headings of `level` ('##', '###')."""
    parts = re.split(rf"^{level} (.+)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_cli_reference_has_every_command_under_its_panel_with_every_option():
    import typer

    from tfx_cli.cli import app
    from tfx_cli.registry import COMMANDS, PANELS

    page = generate.cli_reference()
    panels = _sections(page, "##")
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="tfx")
    for c in COMMANDS:
        section = _sections(panels[PANELS[c.panel]], "###")[f"tfx {c.name}"]
        command = group.get_command(ctx, c.name)
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                for name in param.opts:
                    assert f"`{name}`" in section, (c.name, name)
            if getattr(param, "rich_help_panel", None):
                assert f"**{param.rich_help_panel}**" in section, (c.name, param.name)
        assert generate._prose(c.summary) in section  # the docstring's first paragraph
    assert "```console\n$ tfx attend " in page  # the docstrings' examples, as shell blocks
    assert "&lt;0xNN&gt;" in page and "<0xNN>" not in page  # help is not read as HTML


def test_a_command_added_to_the_registry_appears_in_the_reference(monkeypatch):
    from tfx_cli import registry

    extra = registry.Command("tokens-again", "tokenize", "tokenize", None, "Again.",
                             panel="circuits")
    monkeypatch.setattr(registry, "COMMANDS", registry.COMMANDS + (extra,))
    monkeypatch.setitem(registry.BY_NAME, extra.name, extra)
    circuits = _sections(generate.cli_reference(), "##")["Circuits"]
    assert "### tfx tokens-again" in circuits and "`--encoding`" in circuits


def test_api_reference_names_every_public_function_once():
    import tfx_cli.api as api

    page = generate.api_reference()
    shown = re.findall(r"^::: tfx_cli\.api\.(\w+)$", page, flags=re.M)
    public = {name for name in dir(api) if not name.startswith("_")
              and callable(getattr(api, name))
              and getattr(api, name).__module__.startswith("tfx_cli.api")}
    assert sorted(shown) == sorted(public)
    assert "attend" in _sections(page, "##")["Stages"]
    assert "train_sae" in _sections(page, "##")["Features"]


def test_trace_names_are_the_presets_own_taps():
    from tfx_cli import api

    found = generate.taps()
    page = generate.trace_names(found)
    rows = {(name, dims.strip()) for name, dims in
            re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", page, flags=re.M)}
    model = api.load(config="gpt2", layers=3, heads=2, d_model=16, tokenizer="word", seed=1)
    for name, tensor in model.trace("x y").to_dict()["tensors"].items():
        pattern = re.sub(r"blocks\.\d+\.", "blocks.{i}.", name)
        assert (pattern, " ".join(tensor["dims"])) in rows, name
    assert ("blocks.{i}.attn.pattern", "H T S") in rows
    assert ("blocks.{i}.moe.router_logits", "T E") in rows  # from the MoE presets
    assert ("decoder.blocks.{i}.cross.pattern", "H T S") in rows  # the decoders ran


def test_trace_names_table_groups_blocks_and_names_who_records_them():
    found = {"a": [("tokens.ids", ("T",)), ("blocks.0.x", ("T", "C")),
                   ("blocks.1.x", ("T", "C"))],
             "b": [("tokens.ids", ("T",)), ("blocks.0.y", ("T",))],
             "c": [("tokens.ids", ("T",)), ("blocks.0.x", ("T", "C"))]}
    page = generate.trace_names(found)
    assert "| `tokens.ids` | T | every preset |" in page
    assert "| `blocks.{i}.x` | T C | every preset but b |" in page
    assert "| `blocks.{i}.y` | T | b |" in page
    assert page.count("blocks.{i}.x") == 1


def test_family_table_lists_every_family_with_the_bound_its_test_asserts():
    from tfx_cli.core.checkpoints.families import FAMILIES

    missing = sorted(set(FAMILIES) - set(TESTS))
    assert not missing, (f"families without a parity test in tests/parity.py TESTS: "
                         f"{', '.join(missing)}")
    rows = {line.split(" | ")[0][2:]: line for line in generate.families().splitlines()
            if line.startswith("| ") and not line.startswith("| family")}
    assert set(rows) - {"---|---|---|---|---|---|"} >= set(FAMILIES)
    for name, family in FAMILIES.items():
        for arch in family.architectures:
            assert f"`{arch}`" in rows[name], (name, arch)
        bound = LOGITS[TESTS[name]]
        assert f"≤ {generate._bound(bound)} |" in rows[name]
        assert (ROOT / "tests" / "core" / TESTS[name]).is_file()
        assert float(generate._bound(bound)) == bound  # the figure printed is the bound


def test_a_registered_family_appears_in_the_table(monkeypatch):
    from tfx_cli.core.checkpoints.families import registry

    import parity

    family = registry.Family("tiny_test", ("TinyTestForCausalLM",), config=lambda hf, w: {},
                             mapping=lambda s, c: ({}, {}), model_types=("tiny_test",),
                             causal=True)
    registry.register(family)
    try:
        with pytest.raises(LookupError, match="tiny_test: add each to TESTS in tests/parity"):
            generate.families()
        monkeypatch.setitem(parity.TESTS, "tiny_test", "test_parity_llama.py")
        monkeypatch.setattr(generate, "_parity", lambda: parity)
        assert "| tiny_test | `TinyTestForCausalLM` | `tiny_test` | decoder | ≤ 1e-4 |" \
            in generate.families()
    finally:
        registry.unregister("tiny_test")


def test_pictures_are_drawn_by_the_commands_the_page_shows(tmp_path):
    need_import("matplotlib", "pip install 'tfx-cli[plot]'")
    pictures = _load("make_pictures")
    made = pictures.make(tmp_path)
    assert [p.name for p in made] == [p.file for p in pictures.PICTURES]
    for path in made:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, path.name
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert report.lstrip().lower().startswith("<!doctype html") and "When" in report
    assert not re.search(r'(src|href)="https?://', report)  # self-contained
    page = pictures.page(made)
    for picture in pictures.PICTURES:
        shown = picture.command.format(out=picture.file, dir=".", samples="samples")
        block = page.split(f"## {picture.title}\n")[1].split("```console\n$ ")[1]
        typed = block.split("\n```")[0].replace(" \\\n", " ")
        assert shlex.split(typed) == shlex.split(shown)  # the folded line is the command
        assert all(len(line) <= 88 for line in block.split("\n```")[0].splitlines())
        assert f"img/generated/{picture.file}" in page
    assert "/tmp" not in page and str(tmp_path) not in page


def test_the_site_declares_the_hook_and_every_generated_page():
    need("yaml", "pip install 'tfx-cli[docs]'")
    import yaml

    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    assert "docs/generate.py" in config["hooks"]
    nav = str(config["nav"])
    for uri in [*generate.PAGES, "pictures.md", "sample-notebook.ipynb"]:
        assert uri in nav, uri
    assert (ROOT / "docs" / "sample-notebook.ipynb").resolve() == ROOT / "samples" / "notebook.ipynb"
