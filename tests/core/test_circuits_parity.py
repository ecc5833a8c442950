"""Attribution graphs against circuit-tracer 0.5.0 (TransformerLens backend, CPU,
float32), recorded by bench/circuit_tracer_record.py in its own environment on tiny random
GPT-2 (LayerNorm, learned positions, W_skip, reading ln2.hook_normalized) and Llama-style
(RMSNorm, RoPE, grouped KV heads, JumpReLU, reading mlp.hook_in) models with random
transcoders, and a cross-layer transcoder on the GPT-2 (reading hook_resid_mid) (tests/recordings/circuit_tracer/README.md).

What must hold, per prompt, for the whole graph and for one limited to 40 features by
circuit-tracer's influence ranking: every node the same (active features and their
activations, the features selected, the logit targets and their probabilities), the
unpruned adjacency within 1e-4 of its largest edge, the pruned node set the same, both
scores within 1e-4.

No allowance for features on their threshold: the recorder puts each feature's crossing
halfway between two neighbouring pre-activations of the prompts' tokens
(bench/circuit_tracer_record.py `crossing`), so no (feature, token) sits where float
rounding alone decides whether it fires; a feature active on one side only fails.
"""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfx_cli.core import load as loading
from tfx_cli.core.circuits import attribution, graph, setup
from tfx_cli.core.features.transcoder_set import read_transcoders
from tfx_cli.core.spec import ModelSpec

HERE = Path(__file__).resolve().parents[1] / "recordings" / "circuit_tracer"
CASES = [(case, i) for case in ("gpt2", "llama", "clt") for i in range(2)]


@pytest.fixture(scope="module")
def models():
    return {case: loading.load(ModelSpec(weights=str(HERE / case / "model")))
            for case in ("gpt2", "llama", "clt")}


def common_nodes(ours: list, theirs: list, n_rest: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices that put circuit-tracer's nodes in tfx's order (features by (layer, pos,
    feature), then the errors, tokens and logits), after checking both have the same
    features."""
    assert set(ours) == set(theirs), (f"only in tfx: {sorted(set(ours) - set(theirs))[:5]}, "
                                      f"only in circuit-tracer: "
                                      f"{sorted(set(theirs) - set(ours))[:5]}")
    theirs_at = {f: i for i, f in enumerate(theirs)}
    a = list(range(len(ours))) + [len(ours) + k for k in range(n_rest)]
    b = [theirs_at[f] for f in ours] + [len(theirs) + k for k in range(n_rest)]
    return torch.tensor(a), torch.tensor(b)


@pytest.mark.parametrize("case,index", CASES)
@pytest.mark.parametrize("which", ["graph", "graph_limited"])
def test_graph_matches_circuit_tracer(models, case, index, which):
    meta = json.loads((HERE / case / "recording.json").read_text())
    prompt = meta["prompts"][index]
    t = load_file(str(HERE / case / prompt["tensors"]))
    ids = t["input_ids"].tolist()
    assert ids == prompt["input_ids"]
    model, kw = models[case], meta["attribute"]
    tc = read_transcoders(HERE / case / "transcoders", n_layers=model.cfg.n_layers,
                          d_model=model.cfg.d_model)
    p = setup.forward(model, ids, tc)
    logit_ids, probs, vecs = setup.targets(p, max_logits=kw["max_n_logits"],
                                           logit_prob=kw["desired_logit_prob"])
    g = attribution.attribute(p, logit_ids, probs, vecs,
                              max_features=40 if which == "graph_limited" else None,
                              batch_size=kw["batch_size"], update_interval=kw["update_interval"])
    # logit targets
    assert g.logit_ids == t[f"{which}.logit_token_ids"].tolist()
    assert torch.allclose(g.probabilities, t[f"{which}.logit_probabilities"], atol=1e-5)
    # feature nodes: the selected features, by (layer, pos, feature), with activations
    ours_all = [tuple(f) for f in p.active.tolist()]
    theirs_all = [tuple(f) for f in t[f"{which}.active_features"].long().tolist()]
    sel_ours, sel_theirs = g.selected.tolist(), t[f"{which}.selected_features"].long().tolist()
    ours = [ours_all[i] for i in sel_ours]
    theirs = [theirs_all[i] for i in sel_theirs]
    ours_act, theirs_act = p.activations[sel_ours], t[f"{which}.activation_values"][sel_theirs]
    n_rest = g.adjacency.shape[0] - len(ours)
    assert n_rest == t[f"{which}.adjacency"].shape[0] - len(theirs)
    assert set(ours_all) == set(theirs_all)  # every active feature, selected or not
    a, b = common_nodes(ours, theirs, n_rest)
    na = len(a) - n_rest
    assert torch.allclose(ours_act[a[:na]], theirs_act[b[:na]], rtol=0,
                          atol=1e-4 * float(theirs_act.abs().max()))
    mine, recorded = g.adjacency[a][:, a], t[f"{which}.adjacency"][b][:, b]
    T = len(ids)
    largest = float(recorded.abs().max())
    assert float((mine - recorded).abs().max()) <= 1e-4 * largest
    # circuit-tracer's pruning and scores, on its own adjacency
    whole = t[f"{which}.adjacency"]
    n_theirs = len(theirs)
    theirs_probs = t[f"{which}.logit_probabilities"]
    nodes, _, cumulative = graph.prune(whole, theirs_probs, n_features=n_theirs,
                                       n_tokens=T, **meta["prune"])
    assert torch.equal(nodes, t[f"{which}.prune.node_mask"].bool())
    assert torch.allclose(cumulative, t[f"{which}.prune.cumulative_scores"], atol=1e-5)
    want = prompt[which]
    got = graph.scores(whole, theirs_probs, n_features=n_theirs, n_tokens=T,
                       n_layers=model.cfg.n_layers)
    assert got == pytest.approx((want["replacement_score"], want["completeness_score"]),
                                abs=1e-4)
    # and on tfx's own graph
    nodes, _, _ = graph.prune(mine, g.probabilities, n_features=na, n_tokens=T,
                              **meta["prune"])
    assert torch.equal(nodes, t[f"{which}.prune.node_mask"].bool()[b])
    got = graph.scores(mine, g.probabilities, n_features=na, n_tokens=T,
                       n_layers=model.cfg.n_layers)
    assert got == pytest.approx((want["replacement_score"], want["completeness_score"]),
                                abs=1e-4)
