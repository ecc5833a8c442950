"""A mixture of experts larger than its budget streams as dense checkpoints do, and reads
only the experts its tokens are routed to: bit for bit the in-memory run, in the Hub's
per-expert layout (each expert its own part) and the stacked one (experts read with their
block)."""
import pytest
import torch
from test_parity_moe import make_folders

from tfx_cli.core.memory import Budget

IDS = [5, 17, 99, 3, 250, 42, 7]


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    return make_folders(tmp_path_factory.mktemp("mixtral-stream"), "mixtral")


def _load(path, budget):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights, plan_checkpoint

    cfg = checkpoint_config(str(path))
    if budget == "stream":
        plan, _ = plan_checkpoint(str(path), cfg, use_cache=False)
        budget = Budget(str(plan.nbytes(torch.float32)))  # too small to load it whole
    return load_weights(str(path), cfg, budget=budget, use_cache=False)


@pytest.mark.parametrize("layout", [0, 1], ids=["hub", "stacked"])
def test_streamed_moe_is_the_in_memory_one(mixtral, layout):
    path = mixtral[layout]
    whole, streamed = _load(path, None), _load(path, "stream")
    assert streamed.residency.streamed
    with torch.inference_mode():
        assert torch.equal(whole(torch.tensor([IDS])), streamed(torch.tensor([IDS])))


def test_only_the_routed_experts_are_read(mixtral):
    model = _load(mixtral[0], "stream")
    parts = model.residency.parts
    assert "blocks.0.moe.expert.3" in parts and not any(
        n.startswith("blocks.0.moe.expert") for n in parts["blocks.0"])
    with model.record(["blocks.*.moe.experts"]) as tr, torch.inference_mode():
        model(torch.tensor([IDS[:2]]))
    routed = sum(len(set(tr.array(f"blocks.{i}.moe.experts").ravel().tolist()))
                 for i in range(3))
    # embed, 3 blocks, head, and one part per expert a token went to (2 tokens: <= 4)
    assert model.residency.reads == 5 + routed and routed < 3 * 8
    # the budget holds a block with one expert, not a block with all eight
    sizes = model.residency.part_bytes()
    with_one = sizes["blocks.0"] + sizes["blocks.0.moe.expert.0"]
    assert model.residency.largest[1] == max(sizes["embed"], sizes["head"], with_one)
    assert with_one < sizes["blocks.0"] + 8 * sizes["blocks.0.moe.expert.0"]


def test_stacked_experts_stay_with_their_block(mixtral):
    model = _load(mixtral[1], "stream")
    assert not any(".moe.expert." in part for part in model.residency.parts)
