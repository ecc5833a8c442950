"""Attribution graphs: the local replacement model's edges, pruning and scores.

What must hold: the sum rule (a node's incoming edges plus its constant term are its
input: a feature's pre-activation, a logit target's demeaned logit; error and token nodes
have no inputs); each edge is the change in its target's input when its source alone is
removed from the frozen model, computed forwards (the graph computes it backwards); the
influence is w·(A + A² + …); rows for --max-features features are those of the whole
graph; transcoders read from safetensors and from Gemma Scope's npz agree."""
import numpy as np
import pytest
import torch

from tfx_cli.core import load as loading
from tfx_cli.core.circuits import attribution, graph, setup
from tfx_cli.core.features.transcoder_set import read_transcoders
from tfx_cli.core.spec import ModelSpec

from tfx_cli.option_table import BLOCKS

from circuit_makers import write_clt, write_transcoders

DEFAULT = {name: BLOCKS["graph"][name].default for name in
           ("max_logits", "logit_prob", "node_threshold", "edge_threshold")}  # tfx graph's

GPT2 = dict(config="gpt124m", layers=2, d_model=64, heads=4)  # LayerNorm, learned positions
LLAMA = dict(config="smollm2-135m", layers=2, d_model=72, tokenizer="gpt2")  # RMSNorm, RoPE, GQA
TEXT = "The capital of France is Paris"
SETS = {  # input hook, skip connection, JumpReLU
    "ln2-skip-jump": dict(hook_in="ln2.hook_normalized", skip=True, jump=True),
    "resid-mid-relu": dict(hook_in="hook_resid_mid"),
    "mlp-in-jump": dict(hook_in="mlp.hook_in", jump=True),
}


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    return loading.load(ModelSpec(**(GPT2 if request.param == "gpt2" else LLAMA)))


def built(model, tmp_path, kind):
    if kind == "cross-layer":
        folder = write_clt(tmp_path / kind, model.cfg.n_layers, model.cfg.d_model, 96)
    else:
        folder = write_transcoders(tmp_path / kind, model.cfg.n_layers, model.cfg.d_model,
                                   96, **SETS[kind])
    tc = read_transcoders(folder, n_layers=model.cfg.n_layers, d_model=model.cfg.d_model)
    ids = setup.with_bos(model, model.tokenizer.encode(TEXT))
    p = setup.forward(model, ids, tc)
    logit_ids, probs, vecs = setup.targets(p, max_logits=DEFAULT["max_logits"],
                                           logit_prob=DEFAULT["logit_prob"])
    return p, attribution.attribute(p, logit_ids, probs, vecs, batch_size=64), vecs


def close(a, b, scale):
    return float((a - b).abs().max()) <= 1e-5 * max(1.0, float(scale))


@pytest.mark.parametrize("kind", [*SETS, "cross-layer"])
def test_sum_rule_per_node_kind(model, tmp_path, kind):
    p, g, vecs = built(model, tmp_path, kind)
    assert p.n_features > 20  # features do fire: the rows are not trivially empty
    A, nf, K = g.adjacency, p.n_features, len(g.logit_ids)
    feature_const, logit_const = attribution.constant_inputs(p, vecs)
    # features: pre-activation = incoming edges + constant
    assert close(A[:nf].sum(1) + feature_const, p.pre, p.pre.abs().max())
    # logit targets: the demeaned logit (final norm's output · demeaned unembedding row)
    logit_in = vecs @ p.final[-1]
    assert close(A[-K:].sum(1) + logit_const, logit_in, logit_in.abs().max())
    # error and token nodes have no inputs
    assert float(A[nf:-K].abs().max()) == 0.0
    # the edges are not all zero either: most of each input is edges
    assert float(A[:nf].abs().sum()) > 0 and float(A[-K:].abs().sum()) > 0


def forward_without(p, vecs, *, token=None, error=None, feature=None):
    """Targets' inputs in the frozen model with every node present except one, computed
    forwards from the stream (the graph computes the same thing backwards)."""
    fz = p.frozen
    tok = p.token_vecs.clone()
    if token is not None:
        tok[token] = 0
    stream = p.constant_embed + tok
    sites = []
    for layer in range(p.n_layers):
        mid = stream + fz.attn[layer].forward(stream)
        site = fz.site_forward(layer, mid)
        sites.append(site)
        out = fz.tc.b_dec[layer] + torch.zeros_like(mid)
        skip = fz.tc.skip(layer, site)
        if skip is not None:
            out = out + skip
        out[0] += p.unexplained0[layer]
        err = p.errors[layer].clone()
        if error is not None and error[0] == layer:
            err[error[1]] = 0
        out = out + err
        for i in torch.where(p.feature_layer == layer)[0].tolist():
            if i != feature:
                out[p.feature_pos[i]] += p.decoder_vecs[i]
        stream = mid + out
    sites = torch.stack(sites)
    layer, pos, feat = p.active.unbind(1)
    W = torch.stack([fz.tc.W_enc[int(l)][int(f)] for l, f in zip(layer, feat)])
    b = torch.stack([fz.tc.b_enc[int(l)][int(f)] for l, f in zip(layer, feat)])
    return (sites[layer, pos] * W).sum(-1) + b, vecs @ fz.ln_f.forward(stream)[-1]


@pytest.mark.parametrize("kind", list(SETS))
def test_edges_are_single_source_removals(model, tmp_path, kind):
    p, g, vecs = built(model, tmp_path, kind)
    A, nf, T, L = g.adjacency, p.n_features, p.n_tokens, p.n_layers
    full_f, full_l = forward_without(p, vecs)
    assert close(full_f, p.pre, p.pre.abs().max())  # nothing removed: the real inputs
    last_layer = [i for i in range(nf) if int(p.feature_layer[i]) == 0]
    sources = {"token": (3, nf + L * T + 3), "error": ((0, T - 1), nf + T - 1),
               "feature": (last_layer[-1], last_layer[-1])}
    for kind_, (what, column) in sources.items():
        f, lg = forward_without(p, vecs, **{kind_: what})
        scale = max(float(A.abs().max()), 1.0)
        assert close(full_f - f, A[:nf, column], scale), kind_
        assert close(full_l - lg, A[-len(lg):, column], scale), kind_


def test_max_features_rows_are_the_whole_graphs(tmp_path):
    model = loading.load(ModelSpec(**GPT2))
    p, whole, vecs = built(model, tmp_path, "ln2-skip-jump")
    some = attribution.attribute(p, whole.logit_ids, whole.probabilities, vecs,
                                 max_features=50, batch_size=16, update_interval=2)
    assert len(some.selected) == 50 and p.n_features > 50
    cols = torch.cat([some.selected, torch.arange(p.n_features, whole.adjacency.shape[0])])
    rows = cols
    assert torch.allclose(some.adjacency, whole.adjacency[rows][:, cols], atol=1e-6)
    # the features chosen are the most influential ones through the logits' rows first:
    # every chosen feature has an edge into some logit or some chosen feature
    sub = some.adjacency[:, :50]
    assert bool((sub.abs().sum(0) > 0).all())


def test_influence_is_the_neumann_series():
    g = torch.Generator().manual_seed(1)
    n = 12
    A = torch.tril(torch.rand(n, n, generator=g), -1)  # acyclic: sources before targets
    A[torch.rand(n, n, generator=g) < 0.4] = 0
    w = torch.zeros(n)
    w[-2:] = torch.tensor([0.7, 0.3])
    N = graph.normalized(A)
    exact = w @ (torch.linalg.inv(torch.eye(n) - N) - torch.eye(n))
    assert torch.allclose(graph.influence(N, w), exact, atol=1e-6)


def test_pruning_keeps_all_at_threshold_one_and_less_below(tmp_path):
    model = loading.load(ModelSpec(**GPT2))
    p, g, _ = built(model, tmp_path, "ln2-skip-jump")
    kw = dict(n_features=p.n_features, n_tokens=p.n_tokens)
    keep_all, edges_all, _ = graph.prune(g.adjacency, g.probabilities, node_threshold=1.0,
                                         edge_threshold=1.0, **kw)
    some, edges_some, cumulative = graph.prune(
        g.adjacency, g.probabilities, node_threshold=DEFAULT["node_threshold"],
        edge_threshold=DEFAULT["edge_threshold"], **kw)
    K = len(g.logit_ids)
    assert bool(keep_all[-K - p.n_tokens:].all()) and bool(some[-K - p.n_tokens:].all())
    assert int(some.sum()) < int(keep_all.sum())
    assert bool((some <= keep_all).all())
    # an edge kept joins two kept nodes; every kept feature has an edge in and out
    assert not bool(edges_some[~some].any()) and not bool(edges_some[:, ~some].any())
    kept_features = torch.where(some[:p.n_features])[0]
    assert bool(edges_some[kept_features].any(1).all())
    assert bool(edges_some[:, kept_features].any(0).all())
    assert 0 < float(cumulative.min()) and abs(float(cumulative.max()) - 1) < 1e-5


def test_scores_are_one_without_errors_and_fall_with_them(tmp_path):
    model = loading.load(ModelSpec(**GPT2))
    p, g, _ = built(model, tmp_path, "ln2-skip-jump")
    kw = dict(n_features=p.n_features, n_tokens=p.n_tokens, n_layers=p.n_layers)
    replacement, completeness = graph.scores(g.adjacency, g.probabilities, **kw)
    assert 0 < replacement < 1 and 0 < completeness < 1
    clean = g.adjacency.clone()
    clean[:, p.n_features:p.n_features + p.n_layers * p.n_tokens] = 0
    assert graph.scores(clean, g.probabilities, **kw) == pytest.approx((1.0, 1.0), abs=1e-6)


def test_gemma_scope_npz_reads_as_the_same_transcoder(tmp_path):
    a = write_transcoders(tmp_path / "st", 2, 16, 8, jump=True, seed=3)
    b = write_transcoders(tmp_path / "npz", 2, 16, 8, jump=True, seed=3, npz=True)
    ta = read_transcoders(a, n_layers=2, d_model=16)
    tb = read_transcoders(b, n_layers=2, d_model=16)
    x = torch.randn(5, 16)
    for layer in range(2):
        assert torch.equal(ta.activate(layer, ta.pre(layer, x)),
                           tb.activate(layer, tb.pre(layer, x)))
        assert torch.equal(ta.W_dec[layer], tb.W_dec[layer])


def test_the_node_order_names_every_index_once():
    """Features, errors (layer-major), tokens, logits: kind() reads back each index the
    order gives, and a graph's size gives back its layer count."""
    order = graph.NodeOrder(n_features=5, n_layers=3, n_tokens=4, n_logits=2)
    assert order.size == 5 + 3 * 4 + 4 + 2 and order.n_sources == order.size - 2
    kinds = [order.kind(i) for i in range(order.size)]
    assert kinds[:5] == [("feature", i, None) for i in range(5)]
    errors = [order.error(layer, pos) for layer in range(3) for pos in range(4)]
    assert errors == list(range(order.errors.start, order.errors.stop))
    assert [kinds[i] for i in errors] == [("error", l, p) for l in range(3) for p in range(4)]
    assert kinds[order.tokens.start:order.tokens.stop] == [("embedding", p, None)
                                                           for p in range(4)]
    assert kinds[-2:] == [("logit", 0, None), ("logit", 1, None)]
    assert graph.NodeOrder.of(order.size, n_features=5, n_tokens=4, n_logits=2) == order
    with pytest.raises(ValueError):
        graph.NodeOrder.of(order.size + 1, n_features=5, n_tokens=4, n_logits=2)
    w = order.logit_weights(torch.tensor([0.7, 0.3]))
    assert w[order.logits].tolist() == pytest.approx([0.7, 0.3]) and float(w.sum()) == \
        pytest.approx(1.0)


def test_a_graph_saves_and_loads_whole(tmp_path):
    """Graph.save then Graph.load: every tensor the same, the labels and what made it
    too; the node order of the one read back is the run's."""
    model = loading.load(ModelSpec(**GPT2))
    _, g, _ = built(model, tmp_path, "ln2-skip-jump")
    from tfx_cli.core.circuits.graph import GraphSource, Graph

    g.source = GraphSource(TEXT, model.tokenizer.pieces(g.ids),
                           model.tokenizer.pieces(g.logit_ids), model.info, "tc",
                           "ln2.hook_normalized", "hook_mlp_out", 0)
    g.labels = {i: f"label {i}" if i % 3 else None for i in range(len(g.selected))}
    back = Graph.load(g.save(tmp_path / "g.safetensors"))
    for name in ("active", "activations", "selected", "probabilities", "adjacency"):
        assert torch.equal(getattr(back, name), getattr(g, name)), name
    assert (back.ids, back.logit_ids, back.n_layers) == (g.ids, g.logit_ids, g.n_layers)
    assert back.labels == g.labels and back.order == g.order and back.prompt is None
    assert back.source.model.to_json() == model.info.to_json()
    assert back.source.tokens == g.source.tokens
