"""Feature interventions against circuit-tracer 0.5.0's `feature_intervention` on its
recording (tests/recordings/circuit_tracer/README.md, "Interventions"): three features
set at once on each prompt, with the attention frozen, free, constrained to every layer
(norm divisors and FFN outputs frozen) and constrained from layer 1; the logits at every
position within 1e-4 of the largest."""
import json
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file

from ranks import assert_ranked
from tfx_cli.core import load as loading
from tfx_cli.core.circuits.intervene import feature_intervention
from tfx_cli.core.features.transcoder_set import read_transcoders
from tfx_cli.core.spec import ModelSpec

HERE = Path(__file__).resolve().parents[1] / "recordings" / "circuit_tracer"
SETTINGS = ("freeze_attention", "free", "constrained_all", "constrained_from_1")


@pytest.fixture(scope="module")
def models():
    return {case: loading.load(ModelSpec(weights=str(HERE / case / "model")))
            for case in ("gpt2", "llama", "clt")}


@pytest.mark.parametrize("case", ["gpt2", "llama", "clt"])
@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("setting", SETTINGS)
def test_feature_intervention_logits(models, case, index, setting):
    meta = json.loads((HERE / case / "recording.json").read_text())
    prompt = meta["prompts"][index]
    t = load_file(str(HERE / case / prompt["tensors"]))
    model = models[case]
    tc = read_transcoders(HERE / case / "transcoders", n_layers=model.cfg.n_layers,
                          d_model=model.cfg.d_model)
    spec = prompt["interventions"]
    how = spec["settings"][setting]
    constrained = how["constrained_layers"]
    logits, acts = feature_intervention(
        model.model, t["input_ids"].tolist(), tc, [tuple(x) for x in spec["triples"]],
        freeze_attention=how["freeze_attention"],
        constrained=range(*constrained) if constrained else None)
    want = t[f"intervention.{setting}.logits"]
    plain = t["clean_logits"]
    assert float((want - plain).abs().max()) > 1e-3  # the interventions change the logits
    assert float((logits - want).abs().max()) <= 1e-4 * float(want.abs().max())


@pytest.mark.parametrize("setting", ["freeze_attention", "constrained_all"])
def test_next_and_generate_with_set_feature(setting):
    """`tfx next`/`generate` --set-feature: the recorded intervention's last-position
    logits, through the commands' own forward pass. Positions are the graph's: the ids
    `tfx graph` runs, which circuit-tracer ran too (this tokenizer puts the BOS first
    itself, so nothing more is put first)."""
    from tfx_cli import api

    case = "gpt2"
    meta = json.loads((HERE / case / "recording.json").read_text())
    prompt = meta["prompts"][0]
    t = load_file(str(HERE / case / prompt["tensors"]))
    spec = prompt["interventions"]
    how = spec["settings"][setting]
    span = how["constrained_layers"]
    kw = dict(weights=str(HERE / case / "model"), transcoders=str(HERE / case / "transcoders"),
              set_feature=["{}:{}:{}={}".format(*x) for x in spec["triples"]],
              constrained_layers=f"{span[0]}:{span[1]}" if span else None,
              allow_inactive=True)  # the recording sets some features from zero
    result = api.next(prompt["prompt"], candidates=5, **kw)
    assert result.input.ids == t["input_ids"].tolist()
    graph = api.graph(prompt["prompt"], weights=kw["weights"], transcoders=kw["transcoders"])
    assert [n.token for n in graph.nodes if n.kind == "embedding"] == result.input.ids
    want = t[f"intervention.{setting}.logits"][-1]
    scale = float(want.abs().max())
    assert_ranked([c.id for c in result.candidates], want, 1e-4 * scale)
    for c in result.candidates:
        assert abs(c.logit - float(want[c.id])) <= 1e-4 * scale
    plain = api.next(prompt["prompt"], candidates=5, weights=kw["weights"])
    assert max(abs(a.logit - b.logit) for a, b in zip(plain.candidates, result.candidates)) > 1e-3
    # generate: the first token is the intervened argmax; later steps run plain
    gen = api.generate(prompt["prompt"], max_new_tokens=2, **kw)
    assert_ranked([gen.steps[0].id], want, 1e-4 * scale)


def test_set_feature_refuses_an_inactive_feature_unless_allowed(models):
    """A feature set where the plain run has it off is refused (a likely wrong index)
    unless allow_inactive; an active one passes without it."""
    from tfx_cli import api
    from tfx_cli.errors import UsageError

    meta = json.loads((HERE / "gpt2" / "recording.json").read_text())
    prompt = meta["prompts"][0]
    ids = load_file(str(HERE / "gpt2" / prompt["tensors"]))["input_ids"].tolist()
    model = models["gpt2"]
    tc = read_transcoders(HERE / "gpt2" / "transcoders", n_layers=model.cfg.n_layers,
                          d_model=model.cfg.d_model)
    _, acts = feature_intervention(model.model, ids, tc, [])
    layer, pos = 1, len(ids) - 1
    on = int(acts[layer, pos].argmax())
    off = int((acts[layer, pos] == 0).nonzero()[0])
    kw = dict(weights=str(HERE / "gpt2" / "model"), transcoders=str(HERE / "gpt2" / "transcoders"),
              candidates=3)
    with pytest.raises(UsageError, match=f"feature {off} of layer {layer} is not active"):
        api.next(prompt["prompt"], set_feature=[f"{layer}:{pos}:{off}=2"], **kw)
    with pytest.raises(UsageError, match="position 0 holds no features"):
        api.next(prompt["prompt"], set_feature=[f"{layer}:0:{on}=2"], **kw)
    assert float(acts[layer, pos, on]) > 0
    api.next(prompt["prompt"], set_feature=[f"{layer}:{pos}:{on}=0"], **kw)
    api.next(prompt["prompt"], set_feature=[f"{layer}:{pos}:{off}=2"], allow_inactive=True, **kw)


def _recorded(case: str, index: int = 0):
    meta = json.loads((HERE / case / "recording.json").read_text())
    prompt = meta["prompts"][index]
    kw = dict(weights=str(HERE / case / "model"), transcoders=str(HERE / case / "transcoders"))
    return prompt, load_file(str(HERE / case / prompt["tensors"])), kw


@pytest.mark.parametrize("setting", ["freeze_attention", "constrained_all"])
def test_every_intervention_is_recorded_with_the_activation_it_replaced(models, setting):
    """next and generate list each --set-feature in result.interventions (and so in
    --json and the terminal's "changed:" line): layer, position, feature, value and the
    activation the value replaced: the run's own at that layer (earlier layers' changes
    included), or the plain run's where the layers are constrained."""
    from tfx_cli import api

    prompt, t, kw = _recorded("gpt2")
    spec = prompt["interventions"]
    span = spec["settings"][setting]["constrained_layers"]
    texts = ["{}:{}:{}={}".format(*x) for x in spec["triples"]]
    kw.update(set_feature=texts, allow_inactive=True,
              constrained_layers=f"{span[0]}:{span[1]}" if span else None)
    model, ids = models["gpt2"], t["input_ids"].tolist()
    tc = read_transcoders(HERE / "gpt2" / "transcoders", n_layers=model.cfg.n_layers,
                          d_model=model.cfg.d_model)
    _, plain = feature_intervention(model.model, ids, tc, [])
    _, changed = feature_intervention(model.model, ids, tc,
                                      [tuple(x) for x in spec["triples"]],
                                      constrained=range(*span) if span else None)
    seen = plain if span else changed
    for result in (api.next(prompt["prompt"], **kw),
                   api.generate(prompt["prompt"], max_new_tokens=2, **kw)):
        done = result.to_dict()["result"]["interventions"]
        assert [d["site"] for d in done] == texts
        for d, (layer, pos, feat, value) in zip(done, spec["triples"]):
            assert (d["kind"], d["layer"], d["position"], d["feature"], d["value"]) == \
                ("set", layer, pos, feat, value)
            assert d["name"] == f"blocks.{layer}.ffn.out"
            assert d["transcoders"] == kw["transcoders"]
            want = float(seen[layer, pos, feat])
            assert abs(d["activation"] - want) <= 1e-5 * max(1.0, abs(want))
    # a layer-2 feature set after two layer-0 ones: the activation it replaced is the
    # changed run's, not the plain one (a check that the two differ there)
    layer, pos, feat, _ = spec["triples"][1]
    if not span:
        assert abs(float(changed[layer, pos, feat]) - float(plain[layer, pos, feat])) > 1e-4


def test_the_terminal_shows_each_feature_set():
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    prompt, _, kw = _recorded("gpt2")
    out = CliRunner().invoke(app, ["next", prompt["prompt"], "-w", kw["weights"],
                                   "--transcoders", kw["transcoders"], "--set-feature",
                                   "1:5:69=20", "--candidates", "3"],
                             env={"TFX_QUIET": "1", "COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert re.search(r"changed: feature 69 of layer 1 at position 5 set to 20, was "
                     r"0\.02\d+ \(transcoders ", out.stdout)


def test_a_feature_named_twice_is_refused_by_name():
    """Each copy would add (value − activation) × its decoder row again."""
    from tfx_cli import api
    from tfx_cli.errors import UsageError

    prompt, _, kw = _recorded("gpt2")
    with pytest.raises(UsageError, match=re.escape(
            "--set-feature 1:5:69=2 sets feature 69 of layer 1 at position 5 again (also "
            "--set-feature 1:5:69=20)")):
        api.next(prompt["prompt"], set_feature=["1:5:69=20", "0:5:0=1", "1:5:69=2"], **kw)
    with pytest.raises(UsageError, match="again"):
        api.generate(prompt["prompt"], set_feature=["1:5:69=0", "1:5:69=0"], **kw)


@pytest.mark.parametrize("case, refused", [("gpt2", True), ("clt", False)])
def test_an_intervention_the_constrained_layers_drop_is_refused(case, refused):
    """A layer-0 feature with --constrained-layers 1:3 writes nothing the run keeps when
    it writes layer 0 alone (per-layer transcoders): refused, naming it and the option.
    A cross-layer feature of layer 0 also writes layers 1 and 2, which take it."""
    from tfx_cli import api
    from tfx_cli.errors import UsageError

    prompt, _, kw = _recorded(case)
    kw.update(set_feature=["0:3:5=1"], constrained_layers="1:3", allow_inactive=True)
    if refused:
        with pytest.raises(UsageError, match=re.escape(
                "--set-feature 0:3:5=1 cannot take effect: feature 5 of layer 0 writes "
                "layer 0, outside --constrained-layers 1:3, which drops it; widen the range "
                "(e.g. --constrained-layers 0:3)")):
            api.next(prompt["prompt"], **kw)
        with pytest.raises(UsageError, match="cannot take effect"):
            api.generate(prompt["prompt"], max_new_tokens=1, **kw)
    else:
        done = api.next(prompt["prompt"], **kw).interventions
        assert [(d.layer, d.feature) for d in done] == [(0, 5)]
