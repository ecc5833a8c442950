"""`tfx graph --open FILE.json` and api.open_graph: a graph written with `tfx graph -o`
shows again without the model (the same tree, --json nodes and adjacency as the run that
wrote it), and the graph.json circuit-tracer 0.5.0 wrote for its recorded gpt2 graph
opens too, with the edges tfx computes for the same prompt."""
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from circuit_makers import write_transcoders  # noqa: E402

CASE = Path(__file__).resolve().parents[1] / "recordings" / "circuit_tracer" / "gpt2"
# a small random GPT-2 shape whose random transcoders put features on the strongest paths
SMALL = ["-c", "gpt124m", "--layers", "2", "--d-model", "64", "--heads", "4"]
TEXT = "The capital of France is Paris"
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TFX_QUIET": "1"}


def _tfx(*args) -> str:
    out = CliRunner().invoke(app, [str(a) for a in args], env=ENV)
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The run's --json, its terminal output at --precision 4 and at the default 3, the
    file it wrote, and the model options (with the transcoders)."""
    folder = tmp_path_factory.mktemp("graph")
    model = [*SMALL, "--transcoders", write_transcoders(folder / "tc", 2, 64, 96, skip=True)]
    path = folder / "capital.json"
    run = json.loads(_tfx("graph", TEXT, *model, "-o", path, "--json"))
    shown = _tfx("graph", TEXT, *model, "--precision", "4")
    shown3 = _tfx("graph", TEXT, *model)
    return run, shown, shown3, path, model


def _tree(text: str) -> list[str]:
    """The tree: the lines from the first logit on (the header lines say how the graph
    was made or opened)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("logit "))
    return lines[first:]


def test_the_same_nodes_and_adjacency_as_the_run(written):
    run, _, _, path, _ = written
    opened = json.loads(_tfx("graph", "--open", path, "--json"))
    ran, back = run["result"]["nodes"], opened["result"]["nodes"]
    assert {n["kind"] for n in ran} == {"feature", "error", "embedding", "logit"}
    assert len(back) == len(ran)
    for a, b in zip(ran, back):
        for key in ("kind", "layer", "pos", "feature", "token", "text", "label"):
            assert a.get(key) == b.get(key), (key, a, b)
        for key in ("activation", "influence", "probability"):
            if a["kind"] == "logit" and key == "influence":
                assert b[key] is None  # graph.json keeps no influence for a logit
            elif a.get(key) is None:
                assert b.get(key) is None
            else:  # written to 6 significant digits
                assert b[key] == pytest.approx(a[key], rel=1e-5), (key, a)
    for key in ("replacement_score", "completeness_score"):
        assert opened["result"][key] == pytest.approx(run["result"][key], rel=1e-5)
    for key in ("node_threshold", "edge_threshold", "n_active_features",
                "n_selected_features", "n_edges", "n_layers", "transcoders"):
        assert opened["result"][key] == run["result"][key], key
    assert opened["result"]["opened"] == str(path)
    assert opened["input"]["tokens"] == run["input"]["tokens"]
    assert opened["input"]["ids"] == run["input"]["ids"]
    A = np.asarray(run["tensors"]["graph.adjacency"]["data"], dtype=np.float32)
    B = np.asarray(opened["tensors"]["graph.adjacency"]["data"], dtype=np.float32)
    assert opened["tensors"]["graph.adjacency"]["dtype"] == "float32"
    assert ((A != 0) == (B != 0)).all() and (A != 0).sum() > 100
    assert (np.abs(B - A) <= 5e-4 * np.abs(A)).all()
    # and B is exactly the weights the file lists
    doc = json.loads(path.read_text(encoding="utf-8"))
    ids = [n["node_id"] for n in doc["nodes"]]
    listed = np.zeros_like(B)
    for link in doc["links"]:
        listed[ids.index(link["target"]), ids.index(link["source"])] = link["weight"]
    assert np.array_equal(listed, B)


def test_the_same_tree_as_the_run(written):
    """At the file's 4 significant digits the tree is the run's, character for character.
    At the default 3 the paths are the same and each weight is the file's 4-digit value
    shown to 3: where that value ends in a 5 it can round the other way than the run's
    unrounded weight did (the file cannot say which way), one unit in the last place."""
    run, shown, shown3, path, _ = written
    opened = _tfx("graph", "--open", path, "--precision", "4")
    assert _tree(opened) == _tree(shown)
    assert sum("feature L" in line for line in _tree(shown)) >= 3  # features with labels
    assert "opened from" in opened and "replacement score" in opened
    opened3 = _tfx("graph", "--open", path)
    number = re.compile(r"^([^+-]*)([+-][0-9.e+-]+) ")
    for a, b in zip(_tree(shown3), _tree(opened3), strict=True):
        ma, mb = number.match(a), number.match(b)
        if ma is None:
            assert a == b
            continue
        assert ma.group(1) == mb.group(1) and a[ma.end():] == b[mb.end():]
        x, y = float(ma.group(2)), float(mb.group(2))
        ulp = 10 ** (np.floor(np.log10(abs(x))) - 2)
        assert abs(x - y) <= 1.0001 * ulp, (a, b)


def test_a_graph_opened_writes_the_same_graph_json_and_page(written, tmp_path):
    """-o from an opened graph gives the file back (its slug is the new name); --html
    draws the same nodes and edges as the run's page."""
    _, _, _, path, model = written
    _tfx("graph", "--open", path, "-o", tmp_path / "again.json", "--html", tmp_path / "a.html")
    first = json.loads(path.read_text(encoding="utf-8"))
    again = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))
    assert again["metadata"].pop("slug") == "again" and first["metadata"].pop("slug")
    assert again == first
    _tfx("graph", TEXT, *model, "--html", tmp_path / "b.html")
    ids = re.compile(r'"id": ?"([^"]+)"')
    page_a = (tmp_path / "a.html").read_text(encoding="utf-8")
    page_b = (tmp_path / "b.html").read_text(encoding="utf-8")
    assert ids.findall(page_a) == ids.findall(page_b) and len(ids.findall(page_a)) > 20


def test_circuit_tracers_own_file_opens_with_tfxs_edges():
    """circuit-tracer 0.5.0's create_graph_files output for the gpt2 case's first prompt
    (pruned at 0.8 / 0.98, full-precision weights, no scores): its nodes are the ones tfx
    keeps for the same prompt and its edges tfx's within 1e-4 of the largest."""
    opened = api.open_graph(CASE / "graph_files" / "gpt2-prompt0.json")
    assert opened.replacement_score is None and opened.completeness_score is None
    assert opened.edge_threshold is None and opened.node_threshold == 0.8
    assert opened.n_layers == 3 and opened.input.ids[0] == 0
    ours = api.graph("The capital of France is", weights=str(CASE / "model"),
                     transcoders=str(CASE / "transcoders"))
    key = [(n.kind, n.layer, n.pos, n.token) for n in ours.nodes]
    assert [(n.kind, n.layer, n.pos, n.token) for n in opened.nodes] == key
    A, B = ours.tensors["graph.adjacency"], opened.tensors["graph.adjacency"]
    assert np.abs(A - B).max() <= 1e-4 * np.abs(A).max()
    assert opened.n_edges == ours.n_edges == 83
    shown = _tfx("graph", "--open", CASE / "graph_files" / "gpt2-prompt0.json")
    assert "replacement and completeness scores: not in the file" in shown
    assert "transcoders and feature counts: not in the file" in shown
    doc = json.loads(_tfx("graph", "--open", CASE / "graph_files" / "gpt2-prompt0.json",
                          "--json"))
    assert doc["result"]["replacement_score"] is None
    assert doc["result"]["completeness_score"] is None
    page = opened._repr_html_()  # draws itself in a notebook, as api.graph's result does
    assert "not in the file" in page and "<li>" in page


def test_a_feature_found_by_its_cantor_number_when_its_name_says_nothing(tmp_path):
    """A file whose feature node has another name form still gives the feature's index,
    from the Cantor pairing of (layer, index) that its `feature` field holds."""
    doc = json.loads((CASE / "graph_files" / "gpt2-prompt0.json").read_text())
    layer, index, pos = 1, 69, 5
    paired = (layer + index) * (layer + index + 1) // 2 + index
    doc["nodes"].insert(0, {"node_id": "feat-a", "feature": paired, "layer": "1",
                            "ctx_idx": pos, "feature_type": "cross layer transcoder",
                            "jsNodeId": "x", "clerp": "says Paris", "influence": 0.5,
                            "activation": 2.5})
    first = next(n for n in doc["nodes"] if n["feature_type"] == "logit")
    logit, first["clerp"] = first["node_id"], ""  # a clerp that does not say the token
    doc["links"].append({"source": "feat-a", "target": logit, "weight": 3.0})
    (tmp_path / "g.json").write_text(json.dumps(doc), encoding="utf-8")
    opened = api.open_graph(tmp_path / "g.json")
    feature = opened.nodes[0]
    assert (feature.kind, feature.layer, feature.pos, feature.feature) == ("feature", 1, 5, 69)
    assert feature.label == "says Paris" and feature.activation == 2.5
    target = next(i for i, n in enumerate(opened.nodes) if n.kind == "logit")
    assert opened.tensors["graph.adjacency"][target, 0] == 3.0
    assert opened.nodes[target].text is None and opened.nodes[target].token == 99
    shown = _tfx("graph", "--open", tmp_path / "g.json")
    assert "logit #99 (p = 0.313)" in shown and "+3 feature L1 #69" in shown


def test_opening_a_graph_loads_no_model_machinery(tmp_path):
    """--open reads JSON and draws: torch is never imported (the command starts in well
    under a second, where a model command pays for torch first)."""
    import subprocess

    code = ("import sys\nfrom tfx_cli.cli import main\n"
            f"sys.argv = ['tfx', 'graph', '--open', {str(CASE / 'graph_files' / 'gpt2-prompt0.json')!r},"
            f" '--html', {str(tmp_path / 'g.html')!r}]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, env={"PYTHONPATH": str(root), "TFX_QUIET": "1",
                                        "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"
    assert "tfx graph" in out.stdout and (tmp_path / "g.html").stat().st_size > 1000


# -- the unpruned graph --save wrote, opened and pruned again ---------------------------
SMALL_KW = dict(config="gpt124m", layers=2, d_model=64, heads=4)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run that saved its unpruned graph (one layer's features labelled by a `tfx top`
    folder of that layer's transcoder), the file, the labels that folder gives, and how
    to run it again."""
    folder = tmp_path_factory.mktemp("saved")
    tc = str(write_transcoders(folder / "tc", 2, 64, 96, skip=True))
    corpus = folder / "docs.txt"
    corpus.write_text("The capital of France is Paris. The capital of Italy is Rome.\n" * 6)
    top = api.top(corpus, sae=f"{tc}/layer_1.safetensors", k=3, around=2,
                  output=folder / "top", **SMALL_KW)
    shown = {_shown(unit) for unit in top.to_dict()["result"]["units"] if unit["examples"]}
    path = folder / "g.safetensors"
    kw = dict(transcoders=tc, labels=[str(folder / "top")], **SMALL_KW)
    run = api.graph(TEXT, save=path, **kw)
    return run, path, kw, shown


def _shown(unit: dict) -> str:
    """A unit's first three examples as a label shows them: the token before, [the token]."""
    out = []
    for e in unit["examples"][:3]:
        tokens, at = e["context"]["tokens"], e["context"]["at"]
        out.append(f"{tokens[at - 1]}[{e['token']}]" if 0 < at < len(tokens) else f"[{e['token']}]")
    return " · ".join(out)


def _same(fresh, opened, path) -> None:
    """Two results that must be one: equal to the last number, but for which file."""
    a, b = fresh.to_dict(), opened.to_dict()
    a["result"].pop("saved", None)
    assert b["result"].pop("opened") == str(path)
    assert a == b


def test_a_saved_graph_opens_as_the_run_that_saved_it(saved):
    run, path, _, _ = saved
    assert run.saved == str(path)
    _same(run, api.graph(open=path), path)
    _same(run, api.open_graph(path), path)  # the defaults: the run's thresholds here
    shown = _tfx("graph", "--open", path, "--precision", "4")
    assert "opened from" in shown and "replacement score" in shown
    assert _tree(shown) == _tree(_tfx("graph", TEXT, *SMALL, "--transcoders",
                                      saved[2]["transcoders"], "--labels",
                                      saved[2]["labels"][0], "--precision", "4"))


@pytest.mark.parametrize("node_threshold,edge_threshold", [(1.0, 1.0), (0.5, 0.9)])
def test_pruned_again_it_is_the_run_at_those_thresholds(saved, node_threshold,
                                                         edge_threshold):
    """Every node, label (the --labels feature's and the output tokens of features the
    run's own pruning dropped), score and edge: what a run at these thresholds gives."""
    run, path, kw, shown = saved
    fresh = api.graph(TEXT, node_threshold=node_threshold, edge_threshold=edge_threshold,
                      **kw)
    opened = api.graph(open=path, node_threshold=node_threshold,
                       edge_threshold=edge_threshold)
    _same(fresh, opened, path)
    assert len(opened.nodes) != len(run.nodes)
    if node_threshold == 1:  # every node: layer 1's --labels among them
        assert shown & {n.label for n in opened.nodes if n.kind == "feature" and n.layer == 1}


def test_graph_json_and_the_page_from_a_saved_graph(saved, tmp_path):
    """-o and --html of a reopened graph are the files its run writes at those
    thresholds."""
    _, path, kw, _ = saved
    _tfx("graph", "--open", path, "--node-threshold", "0.6", "-o", tmp_path / "a.json",
         "--html", tmp_path / "a.html")
    _tfx("graph", TEXT, *SMALL, "--transcoders", kw["transcoders"], "--labels",
         kw["labels"][0], "--node-threshold", "0.6", "-o", tmp_path / "b.json", "--html",
         tmp_path / "b.html")
    a = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    b = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert a["metadata"].pop("slug") == "a" and b["metadata"].pop("slug") == "b"
    assert a == b and a["metadata"]["pruning_settings"]["node_threshold"] == 0.6
    assert (tmp_path / "a.html").read_text(encoding="utf-8") == \
        (tmp_path / "b.html").read_text(encoding="utf-8")


def test_what_makes_a_graph_is_refused_with_open(saved, written):
    """A saved unpruned graph takes thresholds, not what makes a graph; a graph.json
    takes neither: refused by name in Python as on the command line."""
    from tfx_cli.errors import UsageError

    _, path, _, _ = saved
    pruned = written[3]
    for call, flag in ((dict(open=path, max_features=3), "--max-features"),
                       (dict(open=path, weights="x"), "--weights"),
                       (dict(open=path, targets=[" a"]), "--target"),
                       (dict(open=path, truncate=True), "--truncate"),
                       (dict(open=pruned, node_threshold=0.5), "--node-threshold")):
        with pytest.raises(UsageError, match=f"so {flag} does not apply"):
            api.graph(**call)
    with pytest.raises(UsageError, match="takes no TEXT"):
        api.graph("hello", open=path)
    out = CliRunner().invoke(app, ["graph", "--open", str(path), "--seed", "5"], env=ENV)
    assert out.exit_code == 2 and "so --seed does not apply" in out.stderr


def test_a_damaged_saved_graph_is_refused_by_name(saved, tmp_path):
    """Whatever is changed in a saved graph's file (its metadata's fields, its tensors,
    its bytes), --open answers with it or refuses it in one line: never an internal
    error, never a NaN."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    _, path, _, _ = saved
    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    about = json.loads(meta["tfx_graph"])
    rng = np.random.default_rng(0)
    hostile = [None, True, -1, 10**400, 1e308, "x", [], {}, [None], ["a"] * 3, 2.5]
    cases = []
    for key in about:
        for value in hostile:
            cases.append(({**about, key: value}, tensors))
    for key in about["model"]:
        cases.append(({**about, "model": {**about["model"], key: "?"}}, tensors))
    for key in about["model"]["cfg"]:  # the model's config, read as a config file is
        for value in ("x", 10**400):
            model = {**about["model"], "cfg": {**about["model"]["cfg"], key: value}}
            cases.append(({**about, "model": model}, tensors))
    for name, t in tensors.items():
        cases.append((about, {**tensors, name: t[:1]}))
        cases.append((about, {**tensors, name: t.double() * 1e300 if t.is_floating_point()
                              else -t - 1}))
        cases.append((about, {k: v for k, v in tensors.items() if k != name}))
    codes = set()
    for i, (doc, ts) in enumerate(cases):
        file = tmp_path / f"m{i}.safetensors"
        save_file({k: v.contiguous() for k, v in ts.items()}, str(file),
                  metadata={"tfx_graph": json.dumps(doc)})
        codes.add(_answer(file))
    data = path.read_bytes()
    for i in range(40):  # bytes changed at random
        mutated = bytearray(data)
        for at in rng.integers(0, len(data), 4):
            mutated[at] = int(rng.integers(0, 256))
        (tmp_path / f"b{i}.safetensors").write_bytes(bytes(mutated))
        codes.add(_answer(tmp_path / f"b{i}.safetensors"))
    assert codes == {0, 2}  # some changes leave a graph that opens


def _answer(file: Path) -> int:
    out = CliRunner().invoke(app, ["graph", "--open", str(file), "--json"], env=ENV)
    assert out.exit_code in (0, 2), (file, out.output)
    if out.exit_code:
        assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
        assert "internal error" not in out.stderr
    else:
        json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"{c} in {file}"))
    return out.exit_code
