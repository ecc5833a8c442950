"""Interventions on every decoder family tfx reads (the tiny random models of
test_parity_families.py): every site is read downstream, patching CLEAN into CLEAN is the
plain run, and attribution's parts sum to the logit difference (through Gemma's sandwich
norms and (1 + w) gains, its scaled embedding and its soft-capped logits, NeoX's parallel
blocks, Qwen3's q/k norms)."""
import pytest
import torch
from test_parity_families import make_folder

from tfx_cli.core.analysis import attribution, patching
from tfx_cli.core.analysis import sites as iv
from tfx_cli.core import load as loading
from tfx_cli.core.spec import ModelSpec

pytestmark = pytest.mark.slow
CLEAN = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201]
CORRUPT = [5, 17, 99, 3, 251, 42, 7, 7, 123, 201]
ANSWER, WRONG = 65, 66
FAMILY_NAMES = ["qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "gpt_neox"]


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    make_folder(path, request.param)
    return request.param, loading.load(ModelSpec(weights=str(path)))


def test_every_site_is_read_downstream(family):
    name, loaded = family
    model = loaded.model
    ids = torch.tensor([CLEAN])
    with torch.inference_mode():
        plain = model(ids)
        for site_name in iv.site_names(model):
            site = iv.parse_site(model, site_name)
            with iv.editing(model, [(site.name, iv.ablation(site, "zero"))]):
                ablated = model(ids)
            assert not torch.equal(ablated, plain), (name, site_name)
    assert all(tap.edit is None for tap in model.taps.values())


@pytest.mark.parametrize("site", patching.PATCH_SITES)
def test_patching_clean_into_clean_is_the_plain_run(family, site):
    _, loaded = family
    model = loaded.model
    with torch.inference_mode():
        plain = iv._metric(model(torch.tensor([CLEAN]), head="last"), ANSWER, WRONG)[0]
    alone = patching.sweep(model, CLEAN, CLEAN, ANSWER, WRONG, site, batch=1)
    assert (alone.metric == plain).all()
    batched = patching.sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site)
    one = patching.sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site, batch=1)
    assert torch.allclose(batched.metric, one.metric, rtol=0, atol=1e-5)


@pytest.mark.parametrize("per_head", [False, True], ids=["layers", "heads"])
def test_attribution_parts_sum_to_the_logit_difference(family, per_head):
    name, loaded = family
    found = attribution.logit_attribution(loaded.model, CLEAN, ANSWER, WRONG, per_head=per_head)
    assert abs(sum(found.values) - found.logit_diff) < 1e-4, name
    assert found.names[-1] == "remainder"
