"""The site's generated pages, written from the code each time the site is built.

mkdocs runs this file as a hook (mkdocs.yml `hooks:`): `on_files` adds the pages below to
the site as files that exist only in the build, so none of them is committed and none can
go stale. A new command, option, preset, trace name or family appears in the site without
anyone writing it twice:

- reference/cli.md: every command of the Typer app (loaded through the same lazy group
  `tfx` runs), under its `tfx --help` panel, with its help and every argument and option;
- reference/api.md: mkdocstrings' rendering of every public member of `tfx_cli.api`;
- reference/trace-names.md: the names each preset's model records, taken from its taps by
  tracing a shrunken copy of it (a few layers 16 wide, random weights);
- reference/families.md: the family registry (architectures, model types, what is read)
  with the parity bound each family's test holds it to (tests/parity.py);
- pictures.md and img/generated/*: what docs/make_pictures.py draws (heat maps, the
  report, the route and scan plots);

The notebook page is docs/sample-notebook.ipynb, a link to samples/notebook.ipynb that
mkdocs-jupyter runs and renders (the plugin reads a notebook from disk).

`python docs/generate.py DIR` writes the pages into DIR instead (to read them without
building the site).
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs runs from the repository root, a test from anywhere
    sys.path.insert(0, str(ROOT))


def _prose(text: object) -> str:
    """Help text as markdown prose: one line, nothing in it read as markup (`<0xNN>`,
    `blocks.*.attn`)."""
    text = " ".join(str(text).split())
    for char, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("*", "\\*"),
                            ("[", "\\["), ("]", "\\]")):
        text = text.replace(char, escaped)
    return text


def _cell(text: object) -> str:
    """Text for one markdown table cell: prose, pipes escaped."""
    return _prose(text).replace("|", "\\|")


def _bound(value: float) -> str:
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


# -- the CLI reference -------------------------------------------------------------------
def _help_markdown(text: str) -> str:
    """A command's docstring as markdown: a paragraph whose lines are indented (the
    examples) becomes a console block; the rest stays prose."""
    out: list = []
    for para in (text or "").strip().split("\n\n"):
        lines = para.splitlines()
        if lines and all(line.startswith("  ") for line in lines):
            shell = ["$ " + line.strip() for line in lines]
            if out and isinstance(out[-1], list):  # examples in a row: one block
                out[-1] += shell
            else:
                out.append(shell)
        else:
            out.append(_prose(para))
    return "\n\n".join("```console\n" + "\n".join(p) + "\n```" if isinstance(p, list)
                       else p for p in out)


def _param_row(param, ctx) -> str:
    if param.param_type_name == "argument":
        names = _code(param.make_metavar(ctx))
    else:
        names = ", ".join(_code(n) for n in [*param.opts, *param.secondary_opts])
    kind = "flag" if getattr(param, "is_flag", False) else param.type.name
    default = param.default
    shown = ""
    if default not in (None, False, ()) and not callable(default):
        shown = _code(repr(default) if isinstance(default, str) else str(default))
    required = " (required)" if param.required else ""
    return f"| {names} | {_cell(kind)}{required} | {shown} | {_cell(param.help or '')} |"


def _command_markdown(group, ctx, name: str) -> str:
    command = group.get_command(ctx, name)
    sub = type(ctx)(command, info_name=name, parent=ctx)
    usage = " ".join(command.collect_usage_pieces(sub))
    lines = [f"### tfx {name}", "", "```text", f"tfx {name} {usage}", "```", "",
             _help_markdown(command.help), ""]
    panels: dict[str, list] = {"Arguments": [], "Options": []}  # first, as in --help
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        title = ("Arguments" if param.param_type_name == "argument"
                 else getattr(param, "rich_help_panel", None) or "Options")
        panels.setdefault(title, []).append(_param_row(param, sub))
    for title, rows in panels.items():
        if not rows:
            continue
        lines += [f"**{title}**", "", "| name | type | default | help |",
                  "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


def cli_reference() -> str:
    """Every command, grouped by its `tfx --help` panel, from the Typer app itself."""
    import typer

    from tfx_cli.cli import app
    from tfx_cli.registry import COMMANDS, PANELS

    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="tfx")
    out = ["# Command-line reference", "",
           "Generated from the commands themselves each time the site is built: the "
           "same help `tfx COMMAND --help` prints, every argument and option.", ""]
    for key, title in PANELS.items():
        names = [c.name for c in COMMANDS if c.panel == key]
        if not names:
            continue
        out += [f"## {title}", ""]
        out += [_command_markdown(group, ctx, name) for name in names]
    rest = [c.name for c in COMMANDS if c.panel not in PANELS]
    if rest:
        out += ["## Other commands", ""] + [_command_markdown(group, ctx, n) for n in rest]
    return "\n".join(out) + "\n"


# -- the Python API -----------------------------------------------------------------------
def api_reference() -> str:
    """mkdocstrings directives for every public member of tfx_cli.api, grouped as the
    commands are (a function that runs a command sits under that command's panel)."""
    import tfx_cli.api as api
    from tfx_cli.registry import BY_NAME, PANELS

    members = [name for name in api.__all__  # the public API (some imported on first use)
               if str(getattr(getattr(api, name), "__module__", "")).startswith("tfx_cli.api")]
    groups: dict[str, list[str]] = {"Loading a model": [m for m in ("load", "Model")
                                                        if m in members]}
    for key, title in PANELS.items():
        groups[title] = [m for m in members
                         if getattr(BY_NAME.get(m.replace("_", "-")), "panel", None) == key]
    placed = {m for names in groups.values() for m in names}
    groups["More"] = [m for m in members if m not in placed]
    out = ["# Python API", "",
           "Generated from the docstrings of `tfx_cli.api` when the site is built.", "",
           "::: tfx_cli.api", "    options:", "      members: false",
           "      show_root_heading: false", ""]
    for title, names in groups.items():
        if names:
            out += [f"## {title}", ""] + [f"::: tfx_cli.api.{name}\n" for name in names]
    return "\n".join(out)


# -- trace names ---------------------------------------------------------------------------
def _pattern(name: str) -> str:
    return re.sub(r"(blocks)\.\d+\.", r"\1.{i}.", name)


def taps() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Preset name -> (trace name, dims) in forward order, from a shrunken copy of the
    preset (2 layers, 2 heads, 16 wide, random weights, a word tokenizer). An
    encoder–decoder is given a target, so its decoder runs too."""
    from tfx_cli import api
    from tfx_cli.core.presets import PRESETS

    out = {}
    for preset in PRESETS:
        model = api.load(config=preset, layers=2, heads=2, d_model=16, tokenizer="word",
                         seed=0)
        target = "b a" if model.config.n_decoder_layers else None
        tensors = model.trace("a b c", target=target).to_dict()["tensors"]
        out[preset] = [(name, tuple(t["dims"])) for name, t in tensors.items()]
    return out


def trace_names(found: dict | None = None) -> str:
    """One row per trace name (blocks numbered {i}) and dims, with the presets whose
    model records it."""
    found = taps() if found is None else found
    # decoder-only presets first: their names are the ones a reader meets first
    found = dict(sorted(found.items(), key=lambda kv: kv[1][0][0].startswith("encoder.")))
    rows: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for preset, names in found.items():
        for name, dims in names:
            holders = rows.setdefault((_pattern(name), dims), [])
            if preset not in holders:
                holders.append(preset)
    out = ["# Trace names", "",
           "Every name a model records, as `--select`, `--json`'s `tensors` and the "
           "Python API spell it, with its dims (T query positions, S key positions, C "
           "d_model, H heads, D head dim, A heads × head dim, F FFN width, V vocabulary, "
           "E experts, k experts per token). Generated from each preset's own taps when "
           "the site is built: a shrunken copy of every preset (`tfx configs`) traces "
           "a three-word text. Families read from checkpoints add the names their "
           "switches record (see [Model families](families.md)).", "",
           "| name | dims | recorded by |", "|---|---|---|"]
    for (name, dims), holders in rows.items():
        who = ", ".join(holders)
        if len(holders) == len(found):
            who = "every preset"
        elif len(holders) > len(found) / 2:
            who = "every preset but " + ", ".join(p for p in found if p not in holders)
        out.append(f"| `{name}` | {' '.join(dims)} | {_cell(who)} |")
    return "\n".join(out) + "\n"


# -- model families ------------------------------------------------------------------------
def _parity():
    spec = importlib.util.spec_from_file_location("tfx_parity", ROOT / "tests" / "parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def families() -> str:
    """The family registry as a table, with each family's parity bound."""
    from tfx_cli.core.checkpoints.families import FAMILIES

    parity = _parity()
    untested = [name for name in FAMILIES if name not in parity.TESTS]
    if untested:
        raise LookupError(f"no parity test named for {', '.join(untested)}: add each to "
                          "TESTS in tests/parity.py")
    out = ["# Model families", "",
           "Generated from the family registry (`tfx_cli/core/checkpoints/families/`) when "
           "the site is built. `--weights` reads a Hugging Face folder (`config.json`, "
           "`*.safetensors` or `pytorch_model.bin`, `tokenizer.json`) whose `architectures` "
           "or `model_type` names one of these families. *Parity*: the largest difference "
           "from transformers' eager forward its test allows in the logits, on a tiny "
           "random model of the family (attention patterns within "
           f"{_bound(parity.PATTERNS)} everywhere).", "",
           "| family | architectures | model_type | stack | parity (logits) | test |",
           "|---|---|---|---|---|---|"]
    for family in FAMILIES.values():
        archs = ", ".join(_code(a) for a in family.architectures)
        if family.headless:
            archs += " (without a head: " + ", ".join(_code(a) for a in family.headless) + ")"
        bound, test = parity.of_family(family.name)
        out.append(f"| {family.name} | {archs} | "
                   f"{', '.join(_code(t) for t in family.model_types)} | {family.stack} | "
                   f"≤ {_bound(bound)} | `{test}` |")
    return "\n".join(out) + "\n"


# -- pictures ------------------------------------------------------------------------------
def _pictures_module():
    spec = importlib.util.spec_from_file_location("tfx_make_pictures",
                                                  ROOT / "docs" / "make_pictures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGES = {"reference/cli.md": cli_reference, "reference/api.md": api_reference,
         "reference/trace-names.md": trace_names,
         "reference/families.md": families}


def on_files(files, config):
    """mkdocs: add the generated pages, the pictures and the notebook to the site."""
    import tempfile

    from mkdocs.structure.files import File

    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    pictures = _pictures_module()
    with tempfile.TemporaryDirectory() as tmp:
        made = pictures.make(Path(tmp))
        for path in made:
            files.append(File.generated(config, f"img/generated/{path.name}",
                                        content=path.read_bytes()))
    files.append(File.generated(config, "pictures.md", content=pictures.page(made)))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for uri, make in PAGES.items():
        (out / uri).parent.mkdir(parents=True, exist_ok=True)
        (out / uri).write_text(make(), encoding="utf-8")
