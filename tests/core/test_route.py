"""tfx route and routing around an expert, on the tiny-moe preset (random weights):
what route reports is what the model's router taps hold, and an expert routed around is
never chosen while the model's own rule weighs the others."""
import json

import numpy as np
import pytest
import torch

TEXT = "The capital of France is Paris."


@pytest.fixture(scope="module")
def model():
    from tfx_cli import api

    return api.load(config="tiny-moe")


def test_route_is_what_the_router_taps_hold(model):
    from tfx_cli import api

    r = api.route(TEXT, config="tiny-moe")
    tr = model.trace(TEXT, select=["blocks.*.moe.*"])
    T, k, E = len(r.tokens), r.experts_per_token, r.n_experts
    assert r.layers == [0, 1, 2, 3] and r.tensors.shape("route.experts") == (4, T, k)
    for row, layer in enumerate(r.layers):
        chosen = tr.tensors.array(f"blocks.{layer}.moe.experts")  # (T, k)
        weights = tr.tensors.array(f"blocks.{layer}.moe.expert_weights")
        assert np.array_equal(np.sort(r.tensors.array("route.experts")[row], -1),
                              np.sort(chosen, -1))
        np.testing.assert_allclose(np.sort(r.tensors.array("route.weights")[row], -1),
                                   np.sort(weights, -1), atol=1e-6)
        np.testing.assert_allclose(r.tensors.array("route.weights")[row].sum(-1), 1,
                                   atol=1e-6)  # Mixtral renormalises the top k
        load = r.tensors.array("route.load")[row]
        assert load.sum() == T * k and list(load) == r.routing[row].load
        assert load.tolist() == np.bincount(chosen.ravel(), minlength=E).tolist()
        probs = tr.tensors.array(f"blocks.{layer}.moe.router_probs").astype(np.float64)
        entropy = -(probs * np.log(probs)).sum(-1).mean()
        assert abs(r.routing[row].entropy - entropy) < 1e-5
        assert r.routing[row].balance == pytest.approx(E * sum((n / (T * k)) ** 2
                                                               for n in load))
    # weights best first, as the view shows them
    w = r.tensors.array("route.weights")
    assert (w[..., 0] >= w[..., 1]).all()


def test_an_expert_routed_around_is_never_chosen(model):
    from tfx_cli import api

    plain = api.route(TEXT, config="tiny-moe")
    busiest = plain.routing[2].busiest
    r = api.route(TEXT, config="tiny-moe", ablate=[f"blocks.2.moe.expert:e={busiest}"])
    assert r.routing[2].load[busiest] == 0 and plain.routing[2].load[busiest] > 0
    assert r.interventions[0].mode == "route around"
    # the layers before it route as before; the rerouted tokens take their next best
    assert r.routing[:2] == plain.routing[:2]
    probs = model.trace(TEXT, select=["blocks.2.moe.router_logits"]).tensors.array(
        "blocks.2.moe.router_logits").astype(np.float64)
    probs[:, busiest] = -np.inf
    probs = np.exp(probs - probs.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.sort(np.argsort(-probs, -1)[:, :2], -1)
    assert np.array_equal(np.sort(r.tensors.array("route.experts")[2], -1), top)
    want = np.take_along_axis(probs, np.argsort(-probs, -1)[:, :2], -1)
    np.testing.assert_allclose(r.tensors.array("route.weights")[2],
                               want / want.sum(-1, keepdims=True), atol=1e-6)


def test_routing_around_one_position_only(model):
    from tfx_cli import api

    plain = api.route(TEXT, config="tiny-moe")
    e = int(plain.tensors.array("route.experts")[0, 3, 0])
    r = api.route(TEXT, config="tiny-moe", ablate=[f"blocks.0.moe.expert:e={e}:p=3"])
    got, was = r.tensors.array("route.experts")[0], plain.tensors.array("route.experts")[0]
    assert e not in got[3] and np.array_equal(np.delete(got, 3, 0), np.delete(was, 3, 0))


def test_route_cli_json_and_plot(tmp_path):
    from typer.testing import CliRunner

    from checkpoint_makers import need
    from tfx_cli.cli import app

    need("matplotlib", "pip install 'tfx-cli[plot]'")
    out = CliRunner().invoke(app, ["route", TEXT, "-c", "tiny-moe", "--json", "--plot",
                                   str(tmp_path / "load.png")], env={"TFX_QUIET": "1"})
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["command"] == "route" and doc["tensors"]["route.load"]["dims"] == ["L", "E"]
    assert (tmp_path / "load.png").stat().st_size > 1000
    view = CliRunner().invoke(app, ["route", TEXT, "-c", "tiny-moe"], env={"COLUMNS": "100"})
    assert view.exit_code == 0 and "layer 3" in view.stdout and "balance" in view.stdout


def test_the_fused_moe_equals_a_hand_written_mixture():
    """One MoE layer by hand: softmax, top 2, renormalise, Σ w · SwiGLU expert."""
    from tfx_cli.core.config import ModelConfig
    from tfx_cli.core.model import build_model

    cfg = ModelConfig(vocab_size=64, d_model=16, n_heads=2, n_layers=1, d_ff=24,
                      norm="rmsnorm", activation="swiglu", positional="rope", proj_bias=False,
                      n_experts=4, experts_per_token=2, tokenizer="byte")
    m = build_model(cfg, seed=3)
    moe = m.blocks[0].moe
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        got = moe(x)[0]
        probs = torch.softmax(x[0] @ moe.router.weight.T, -1)
        w, idx = probs.topk(2, -1)
        w = w / w.sum(-1, keepdim=True)
        want = torch.zeros(5, 16)
        for t in range(5):
            for j in range(2):
                ex = moe.expert[int(idx[t, j])]
                h = torch.nn.functional.silu(ex.gate_proj(x[0, t])) * ex.fc1(x[0, t])
                want[t] += w[t, j] * ex.fc2(h)
    assert (got - want).abs().max() < 1e-6


def tiny_moe_layer(**router):
    from tfx_cli.core.config import ModelConfig
    from tfx_cli.core.model import build_model

    cfg = ModelConfig(vocab_size=64, d_model=16, n_heads=2, n_layers=1, d_ff=24,
                      norm="rmsnorm", activation="swiglu", positional="rope", proj_bias=False,
                      n_experts=8, tokenizer="byte", **{"experts_per_token": 2, **router})
    return build_model(cfg, seed=3).blocks[0].moe


def test_a_routed_around_expert_is_not_chosen_when_the_others_score_zero():
    """One expert takes all of a token's probability and the rest round to 0: the second
    expert chosen is one of those left, never the one routed around (both score 0)."""
    moe = tiny_moe_layer()
    for removed in range(8):
        logits = torch.full((1, 1, 8), -200.0)
        logits[..., (removed + 1) % 8] = 0.0
        logits[..., removed] = float("-inf")
        with torch.no_grad():
            chosen, weights = moe.route(logits)
        assert removed not in chosen.flatten().tolist(), removed
        assert chosen[0, 0, 0] == (removed + 1) % 8 and weights[0, 0, 0] == 1.0


def test_routing_around_all_but_k_experts(model):
    """6 of 8 routed around: every token goes to the 2 left, each with a share."""
    from tfx_cli import api

    r = api.route(TEXT, config="tiny-moe",
                  ablate=[f"blocks.2.moe.expert:e={e}" for e in (0, 1, 3, 4, 5, 6)])
    chosen = r.tensors.array("route.experts")[2]
    assert np.array_equal(np.sort(chosen, -1), np.tile([2, 7], (len(r.tokens), 1)))
    weights = r.tensors.array("route.weights")[2]
    assert (weights > 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-6)
    assert r.routing[2].unused == [0, 1, 3, 4, 5, 6]
    assert r.routing[2].balance == pytest.approx(4.0)  # two experts, half each


@pytest.mark.parametrize("removed, pos, words", [
    (range(7), None, "7 of the 8 experts of block 2,"),
    (range(8), None, "all 8 experts of block 2,"),
    (range(6), 3, "7 of the 8 experts of block 2 at position 3,"),
])
def test_routing_around_too_many_experts_is_refused(removed, pos, words):
    """Fewer experts left than a token goes to: refused, naming --ablate (once the run
    chose a routed-around expert with weight 0, or blamed the checkpoint for the NaN of
    routing around all of them)."""
    from tfx_cli import api
    from tfx_cli.errors import UsageError

    ablate = [f"blocks.2.moe.expert:e={e}" for e in removed]
    if pos is not None:
        ablate.append(f"blocks.2.moe.expert:e=6:p={pos}")
    with pytest.raises(UsageError) as refused:
        api.route(TEXT, config="tiny-moe", ablate=ablate)
    message = str(refused.value)
    assert message.startswith("--ablate routes around " + words), message
    assert "at most 6" in message


def test_grouped_routing_with_too_few_experts_left_in_its_groups():
    """DeepSeek-style groups: experts left overall, but not k of them in the groups a token
    may use; the layer refuses rather than choose an expert routed around."""
    from tfx_cli.errors import UsageError

    moe = tiny_moe_layer(experts_per_token=4, router="sigmoid", router_groups=4,
                         router_topk_groups=2)
    logits = torch.zeros(1, 1, 8)
    logits[..., [0, 2, 4]] = float("-inf")  # one left in groups 0-2, both in group 3
    with pytest.raises(UsageError, match="--ablate routes around .* fewer than the 4"):
        with torch.no_grad():
            moe.route(logits)
    logits[..., 4] = 0.0  # groups 2 and 3 keep both: 4 experts left to choose from
    with torch.no_grad():
        chosen, _ = moe.route(logits)
    assert sorted(chosen.flatten().tolist()) == [4, 5, 6, 7]
