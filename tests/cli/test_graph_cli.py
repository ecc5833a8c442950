"""`tfx graph` on the command line and api.graph: the JSON the issue fixes (nodes with
their fields, the scores, graph.adjacency as targets × sources in nodes order), the
tree of paths in the terminal, --save, and the thresholds at 1 keeping every node that
has an edge."""
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app

import sys
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from circuit_makers import write_transcoders  # noqa: E402

SMALL = ["-c", "gpt124m", "--layers", "2", "--d-model", "64", "--heads", "4"]
TEXT = "The capital of France is Paris"
FIELDS = {"kind", "layer", "pos", "feature", "token", "text", "activation", "influence"}


def test_json_nodes_scores_and_adjacency(tmp_path):
    tc = write_transcoders(tmp_path / "tc", 2, 64, 96, skip=True)
    out = CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders", str(tc),
                                   "--json", "--save", str(tmp_path / "g.safetensors")])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    nodes = doc["result"]["nodes"]
    assert {n["kind"] for n in nodes} == {"feature", "error", "embedding", "logit"}
    for n in nodes:
        assert FIELDS <= set(n)
        if n["kind"] in ("feature", "error"):
            assert 0 <= n["layer"] < 2
        else:
            assert n["layer"] is None and n["token"] is not None
        assert (n["feature"] is None) == (n["kind"] != "feature")
        assert (n["activation"] is None) == (n["kind"] != "feature")
    n_tokens = len(doc["input"]["ids"])
    assert sum(n["kind"] == "embedding" for n in nodes) == n_tokens  # tokens always kept
    adj = np.asarray(doc["tensors"]["graph.adjacency"]["data"])
    assert adj.shape == (len(nodes), len(nodes))
    assert 0 < doc["result"]["replacement_score"] <= 1
    assert 0 < doc["result"]["completeness_score"] <= 1
    saved = load_file(str(tmp_path / "g.safetensors"))
    assert saved["adjacency"].shape[0] > len(nodes)  # the unpruned graph
    assert saved["input_ids"].tolist() == doc["input"]["ids"]


def test_thresholds_at_one_keep_more_and_the_terminal_tree(tmp_path):
    tc = write_transcoders(tmp_path / "tc", 2, 64, 96)
    pruned = api.graph(TEXT, transcoders=str(tc), **_api(SMALL))
    kept = api.graph(TEXT, transcoders=str(tc), node_threshold=1, edge_threshold=1,
                     **_api(SMALL))
    assert len(kept.nodes) > len(pruned.nodes)
    page = pruned._repr_html_()  # draws itself in a notebook
    assert "replacement score" in page and "<li>" in page
    assert kept.n_edges > pruned.n_edges
    out = CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders", str(tc)])
    assert out.exit_code == 0, out.output
    assert "replacement score" in out.stdout and "logit" in out.stdout
    assert "token “" in out.stdout  # paths reach the tokens


def _api(args):
    return dict(config=args[1], layers=int(args[3]), d_model=int(args[5]), heads=int(args[7]))


def _shown(unit: dict) -> str:
    """A unit's first three examples as a label shows them: the token before, [the token]."""
    out = []
    for e in unit["examples"][:3]:
        tokens, at = e["context"]["tokens"], e["context"]["at"]
        out.append(f"{tokens[at - 1]}[{e['token']}]" if 0 < at < len(tokens) else f"[{e['token']}]")
    return " · ".join(out)


@pytest.mark.parametrize("trained", [False, True], ids=["circuit-tracer-set", "tfx-set"])
def test_labels_from_top_runs_of_the_sets_own_layers(tmp_path, trained):
    """tfx top --sae TC/layer_1.safetensors -o DIR labels layer 1's features: graph
    --labels DIR shows its examples on them, and the other layer's keep their output
    labels; top folders of another layer or another set's features are refused."""
    corpus = tmp_path / "docs.txt"
    corpus.write_text("The capital of France is Paris. The capital of Italy is Rome.\n" * 6)
    if trained:
        api.collect(corpus, select=["blocks.*.ln2.out", "blocks.*.ffn.out"],
                    output=tmp_path / "acts", **_api(SMALL))
        api.train_transcoder(tmp_path / "acts", layer="all", output=tmp_path / "tc",
                             l1=1e-3, latents=96, batch_size=32, steps=20, score_tokens=0)
        tc = tmp_path / "tc"
    else:
        tc = write_transcoders(tmp_path / "tc", 2, 64, 96, skip=True, hook_in="mlp.hook_in")
    top = api.top(corpus, sae=str(tc / "layer_1.safetensors"), k=3, around=2,
                  output=tmp_path / "top1", **_api(SMALL))
    assert top.site == "blocks.1.ln2.out" and top.sae.format == "transcoder-layer"
    plain = api.graph(TEXT, transcoders=str(tc), node_threshold=1, edge_threshold=1,
                      **_api(SMALL))
    labelled = api.graph(TEXT, transcoders=str(tc), node_threshold=1, edge_threshold=1,
                         labels=[str(tmp_path / "top1")], **_api(SMALL))
    units = {u["unit"]: u for u in json.loads((tmp_path / "top1" / "result.json")
                                               .read_text())["result"]["units"]}
    pairs = list(zip(plain.nodes, labelled.nodes))
    ones = [(a, b) for a, b in pairs if a.kind == "feature" and a.layer == 1]
    assert ones and all(b.label == _shown(units[b.feature]) for a, b in ones
                        if units[b.feature]["examples"])
    assert all(a.label == b.label for a, b in pairs if a.kind == "feature" and a.layer == 0)
    # layer 0's graph features are not labelled by layer 1's folder moved to its place
    (tmp_path / "top1" / "result.json").write_text(
        (tmp_path / "top1" / "result.json").read_text().replace("blocks.1.", "blocks.0."))
    out = CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders", str(tc),
                                   "--labels", str(tmp_path / "top1")])
    assert out.exit_code == 2 and "which is not layer 0's transcoder" in out.stderr


def _as_saelens(layout: Path, out: Path, model: str) -> Path:
    """The set in `layout` (circuit-tracer's files) rewritten as SAELens transcoder
    folders: cfg.json + sae_weights.safetensors, W_enc stored (D, F), the threshold named
    as SAELens names it."""
    from safetensors.torch import save_file

    out.mkdir()
    config = (layout / "config.yaml").read_text(encoding="utf-8")
    names = [line.strip()[2:] for line in config.splitlines() if line.strip().startswith("- ")]
    for layer, name in enumerate(names):
        t = load_file(str(layout / name))
        folder = out / f"layer_{layer}"
        folder.mkdir()
        jump = "activation_function.threshold" in t
        tensors = {"W_enc": t["W_enc"].T.contiguous(), "W_dec": t["W_dec"],
                   "b_enc": t["b_enc"], "b_dec": t["b_dec"]}
        if jump:
            tensors["threshold"] = t["activation_function.threshold"]
        save_file(tensors, str(folder / "sae_weights.safetensors"))
        d, f = t["W_enc"].shape[1], t["W_enc"].shape[0]
        (folder / "cfg.json").write_text(json.dumps({
            "architecture": "jumprelu_transcoder" if jump else "transcoder",
            "d_in": d, "d_sae": f, "d_out": d, "apply_b_dec_to_input": False,
            "normalize_activations": "none",
            "metadata": {"model_name": model, "hook_name": f"blocks.{layer}.mlp.hook_in",
                         "hook_name_out": f"blocks.{layer}.mlp.hook_out"}}), encoding="utf-8")
    listed = "".join(f"  - layer_{i}\n" for i in range(len(names)))
    head = config.split("transcoders:")[0]
    (out / "config.yaml").write_text(head + "transcoders:\n" + listed, encoding="utf-8")
    return out


def test_saelens_transcoder_folders_give_the_same_graph(tmp_path):
    """A set whose config.yaml lists SAELens transcoder folders is read as the same
    transcoders: the graph of the recorded Llama-style model (JumpReLU) is the one its
    circuit-tracer-layout files give."""
    case = Path(__file__).resolve().parents[1] / "recordings" / "circuit_tracer" / "llama"
    folders = _as_saelens(case / "transcoders", tmp_path / "saelens", "llama")
    text = "The cat sat on the"
    args = dict(weights=str(case / "model"), node_threshold=1, edge_threshold=1)
    plain = api.graph(text, transcoders=str(case / "transcoders"), **args)
    saelens = api.graph(text, transcoders=str(folders), **args)
    assert [(n.kind, n.layer, n.pos, n.feature) for n in saelens.nodes] == \
        [(n.kind, n.layer, n.pos, n.feature) for n in plain.nodes]
    a, b = plain.tensors["graph.adjacency"], saelens.tensors["graph.adjacency"]
    assert np.abs(a - b).max() <= 1e-6 * max(1.0, np.abs(a).max())
    assert saelens.replacement_score == plain.replacement_score
    # an SAE that is not a transcoder is refused by name
    (folders / "layer_1" / "cfg.json").write_text(json.dumps({
        "architecture": "standard", "d_in": 48, "d_sae": 128, "apply_b_dec_to_input": False,
        "metadata": {"hook_name": "blocks.1.hook_resid_post"}}), encoding="utf-8")
    import pytest
    from tfx_cli.errors import TranscoderError

    with pytest.raises(TranscoderError, match="is a SAELens standard folder"):
        api.graph(text, transcoders=str(folders), **args)


def test_the_rows_show_as_progress(tmp_path):
    """The attribution rows (seconds to minutes on a real model) go through the progress
    factory the CLI hands in: a counted bar of the rows, to the last one."""
    from contextlib import contextmanager

    bars = {}

    @contextmanager
    def progress(description, total=None, unit=None):
        done = bars.setdefault(description, {"total": total, "unit": unit, "done": []})
        yield lambda n=None, tokens=None: done["done"].append(n)

    tc = write_transcoders(tmp_path / "tc", 2, 64, 96)
    r = api.graph(TEXT, transcoders=str(tc), progress=progress, **_api(SMALL))
    bar = bars["attribution rows"]
    assert bar["unit"] == "rows" and bar["total"] == r.n_selected_features > 0
    assert bar["done"][-1] == bar["total"] and bar["done"] == sorted(bar["done"])


def test_max_links_caps_graph_json_and_says_so(tmp_path):
    tc = write_transcoders(tmp_path / "tc", 2, 64, 96, skip=True)
    base = ["graph", TEXT, *SMALL, "--transcoders", str(tc), "--json"]
    full = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "all.json"), "--max-links", "0"])
    assert full.exit_code == 0, full.output
    every = json.loads((tmp_path / "all.json").read_text())
    n_edges = json.loads(full.stdout)["result"]["n_edges"]
    assert len(every["links"]) == n_edges > 20
    assert "max_links" not in every["metadata"]["pruning_settings"]
    capped = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "cap.json"), "--max-links", "20"])
    assert capped.exit_code == 0, capped.output
    doc = json.loads((tmp_path / "cap.json").read_text())
    assert len(doc["links"]) == 20
    assert doc["metadata"]["pruning_settings"] == {**every["metadata"]["pruning_settings"],
                                                    "max_links": 20, "links_before_cap": n_edges}
    assert f"the 20 strongest of the pruned graph's {n_edges} edges kept" in capped.stderr
    # the JSON on stdout is the whole pruned graph either way
    assert json.loads(capped.stdout)["result"]["n_edges"] == n_edges
    weights = {(x["source"], x["target"]): x["weight"] for x in every["links"]}
    assert all(weights[(x["source"], x["target"])] == x["weight"] for x in doc["links"])


def test_every_file_written_is_an_ordinary_files_mode(tmp_path):
    """graph.json, the page and the unpruned graph alike: the umask's 0644, none private
    (a temporary file's 0600)."""
    import os

    tc = write_transcoders(tmp_path / "tc", 2, 64, 96)
    old = os.umask(0o022)
    try:
        out = CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders", str(tc),
                                       "-o", str(tmp_path / "g.json"), "--html",
                                       str(tmp_path / "g.html"), "--save",
                                       str(tmp_path / "g.safetensors")])
    finally:
        os.umask(old)
    assert out.exit_code == 0, out.output
    for name in ("g.json", "g.html", "g.safetensors"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.html", "g.json",
                                                           "g.safetensors", "tc"]


def test_truncate_says_what_it_left_out(tmp_path):
    """--truncate crops the text's start: the terminal says how many tokens, --json has
    result.truncated; a text that fits has neither."""
    tc = write_transcoders(tmp_path / "tc", 2, 64, 96)
    args = ["graph", TEXT, *SMALL, "--context", "4", "--transcoders", str(tc), "--truncate"]
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    n_text = len(api.tokenize(TEXT, tokenizer="gpt2").input.ids)
    left_out = n_text - 3  # the context holds the token put first and the last three
    assert f"--truncate left out the text's first {left_out} tokens" in shown.stdout
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert doc["result"]["truncated"] == left_out and len(doc["input"]["ids"]) == 4
    whole = json.loads(CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders",
                                                str(tc), "--json"]).stdout)
    assert "truncated" not in whole["result"]


def test_cli_and_api_refuse_a_share_alike(tmp_path):
    """--node-threshold, --edge-threshold and --logit-prob are shares (0, 1], declared
    once: the same words from the command line and from Python, before any model."""
    from tfx_cli.errors import UsageError

    for option, value in (("node_threshold", "1.5"), ("edge_threshold", "0"),
                          ("logit_prob", "nan")):
        flag = "--" + option.replace("_", "-")
        out = CliRunner().invoke(app, ["graph", TEXT, *SMALL, "--transcoders", "nowhere",
                                       flag, value])
        with pytest.raises(UsageError) as caught:
            api.graph(TEXT, transcoders="nowhere", **{option: value}, **_api(SMALL))
        assert out.exit_code == 2 and out.stderr.strip() == f"tfx: error: {caught.value.message}"
        assert f"{flag} {value} must be " in out.stderr
        assert ("(0, 1]" if value != "nan" else "finite") in out.stderr
