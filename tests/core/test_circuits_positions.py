"""One position convention for `tfx graph` and `--set-feature`: with --transcoders,
`next` and `generate` run the ids the graph runs (a special token put first when the text
starts with none, as circuit-tracer's ensure_tokenized), so the plain prediction is the
graph's and a feature read off the graph at position P is set with --set-feature L:P:F.

The model is a small seeded GPT-2 whose tokenizer puts no special token first: the case
where the graph's ids and the text's own ids differ by one position."""
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ranks import assert_ranked
from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core import load as loading
from tfx_cli.core.circuits.intervene import feature_intervention
from tfx_cli.core.features.transcoder_set import read_transcoders
from tfx_cli.core.spec import ModelSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from circuit_makers import write_transcoders  # noqa: E402

SMALL = dict(config="gpt124m", layers=2, d_model=64, heads=4)
ARGS = ["-c", "gpt124m", "--layers", "2", "--d-model", "64", "--heads", "4"]
TEXT = "The capital of France is"
EOT = 50256  # GPT-2's one special token, <|endoftext|>


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    folder = write_transcoders(tmp_path_factory.mktemp("tc") / "tc", 2, 64, 96)
    loaded = loading.load(ModelSpec(**SMALL))
    own = loaded.tokenizer.encode(TEXT)
    assert own[0] != EOT  # the tokenizer puts nothing first: the graph does
    graph = api.graph(TEXT, transcoders=str(folder), node_threshold=1, edge_threshold=1,
                      **SMALL)
    tc = read_transcoders(folder, n_layers=2, d_model=64)
    return folder, loaded, tc, [EOT] + own, graph


def strongest(graph, pos):
    at = [n for n in graph.nodes if n.kind == "feature" and n.pos == pos]
    assert at, f"no feature at position {pos}"
    return max(at, key=lambda n: n.influence)


def test_plain_next_with_transcoders_is_the_graphs_run(setting):
    folder, _, _, ids, graph = setting
    assert [n.token for n in graph.nodes if n.kind == "embedding"] == ids
    result = api.next(TEXT, transcoders=str(folder), candidates=10, **SMALL)
    assert result.input.ids == ids and result.input.tokens[0] == "<|endoftext|>"
    probs = {c.id: c.prob for c in result.candidates}
    logits = [n for n in graph.nodes if n.kind == "logit"]
    assert logits and all(n.pos == len(ids) - 1 for n in logits)
    scale = max(n.probability for n in logits)
    for n in logits:
        assert abs(probs[n.token] - n.probability) <= 1e-5 * scale
    # without --transcoders nothing is put first
    assert api.next(TEXT, candidates=3, **SMALL).input.ids == ids[1:]


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_feature_read_off_the_graph_is_set_at_its_position(setting, where):
    folder, loaded, tc, ids, graph = setting
    pos = len(ids) - 1 if where == "last" else 2
    node = strongest(graph, pos)
    # the intervention's own run finds the feature where the graph does, as strong
    _, acts = feature_intervention(loaded.model, ids, tc, [])
    got = float(acts[node.layer, pos, node.feature])
    assert abs(got - node.activation) <= 1e-5 * max(1.0, abs(node.activation))
    value = 20.0  # raised well past its activation, so the last logits move
    want, _ = feature_intervention(loaded.model, ids, tc, [(node.layer, pos, node.feature, value)])
    want = want[-1].double()
    plain, _ = feature_intervention(loaded.model, ids, tc, [])
    assert float((want - plain[-1]).abs().max()) > 1e-2 * float(want.abs().max())
    result = api.next(TEXT, transcoders=str(folder), candidates=5,
                      set_feature=[f"{node.layer}:{pos}:{node.feature}={value}"], **SMALL)
    assert result.input.ids == ids
    scale = float(want.abs().max())
    assert_ranked([c.id for c in result.candidates], want, 1e-5 * scale)
    for c in result.candidates:
        assert abs(c.logit - float(want[c.id])) <= 1e-5 * scale


def test_generate_keeps_the_first_token_and_counts_on(setting):
    folder, loaded, tc, ids, graph = setting
    node = strongest(graph, len(ids) - 1)
    gen = api.generate(TEXT, transcoders=str(folder), max_new_tokens=3,
                       set_feature=[f"{node.layer}:{len(ids) - 1}:{node.feature}=0"],
                       **SMALL)
    assert gen.prompt_ids == ids and gen.ids[:len(ids)] == ids
    assert [s.position for s in gen.steps] == [len(ids), len(ids) + 1, len(ids) + 2]
    want, _ = feature_intervention(loaded.model, ids, tc,
                                   [(node.layer, len(ids) - 1, node.feature, 0.0)])
    assert_ranked([gen.steps[0].id], want[-1], 1e-5 * float(want[-1].abs().max()))
    assert gen.text == TEXT + gen.completion  # the token put first is no text


def test_cli_positions_from_graph_json(setting):
    folder, _, _, ids, _ = setting
    out = CliRunner().invoke(app, ["graph", TEXT, *ARGS, "--transcoders", str(folder),
                                   "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["input"]["ids"] == ids
    feats = [n for n in doc["result"]["nodes"] if n["kind"] == "feature"]
    assert feats
    node = max(feats, key=lambda n: n["influence"])  # the graph's strongest feature
    edit = f"{node['layer']}:{node['pos']}:{node['feature']}=0"
    out = CliRunner().invoke(app, ["next", TEXT, *ARGS, "--transcoders", str(folder),
                                   "--set-feature", edit, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["input"]["ids"] == ids
    assert doc["input"]["tokens"][0] == "<|endoftext|>"
    assert "<|endoftext|> put first (position 0)" in out.stderr


def test_a_text_that_fills_the_context_leaves_room_for_the_token_put_first(setting):
    """The graph and next agree on a text as long as the context too: refused without
    --truncate (a one-line error, not a run past the positions), and with it both keep
    the token put first and the text's last tokens."""
    from tfx_cli.errors import InputTextError

    folder = str(setting[0])
    small = dict(SMALL, context=6)
    text = "one two three four five six seven"
    own = setting[1].tokenizer.encode(text)
    assert len(own) == 7
    with pytest.raises(InputTextError, match=re.escape("6 tokens, 7 with the <|endoftext|> put first")):
        api.next(text[:-len(" seven")], transcoders=folder, **small)
    with pytest.raises(InputTextError, match="context length is 6"):
        api.graph(text[:-len(" seven")], transcoders=folder, **small)
    graph = api.graph(text, transcoders=folder, truncate=True, **small)
    ids = [n.token for n in graph.nodes if n.kind == "embedding"]
    assert ids == [EOT] + own[-5:]
    result = api.next(text, transcoders=folder, truncate=True, **small)
    assert result.input.ids == ids
    node = strongest(graph, len(ids) - 1)
    edited = api.next(text, transcoders=folder, truncate=True, candidates=3,
                      set_feature=[f"{node.layer}:{len(ids) - 1}:{node.feature}=0"], **small)
    assert edited.input.ids == ids
