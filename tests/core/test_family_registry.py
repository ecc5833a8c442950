"""A model family is one declaration: a `Family` registered in the family registry is read
end to end (its config.json named by architecture or model_type, its tensors mapped, the
model built and run), with nothing else of tfx edited; forgetting it makes its folders
unknown again. The throwaway family here lives in this test alone."""
import json

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json

from tfx_cli.core.checkpoints.families.registry import (Family, Renames, TensorMap, register,
                                                          unregister)

IDS = [5, 17, 99, 3, 250, 42, 7]


def _toy_config(hf: dict, where: str) -> dict:
    """The toy's config.json keys -> ModelConfig keyword arguments (a pre-LN GPT)."""
    width = hf["width"]
    return dict(vocab_size=hf["vocab"], context_length=hf["context"], d_model=width,
                n_heads=hf["heads"], n_layers=hf["depth"], d_ff=3 * width, qkv_bias=True,
                proj_bias=True, activation="gelu", positional="learned",
                tie_embeddings=False)


# the toy saves tfx's own names under "toy.", and its buffers under "toy_buffer."
_TOY_NAMES = Renames([(r"toy\.(.+)", r"\1"), (r"toy_buffer\..+", None)])


def _map_toy(state: dict, cfg) -> tuple[dict, dict]:
    out = TensorMap()
    for key, t in state.items():
        if not _TOY_NAMES.apply(out, key, key, t):
            out.keep(key, t)  # reported as unexpected
    return out.result()


TOY = Family("toy", ("ToyForCausalLM",), _toy_config, _map_toy, model_types=("toy",),
             causal=True)


@pytest.fixture()
def toy():
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def _toy_folder(path, architectures=("ToyForCausalLM",)):
    """A checkpoint folder of the toy family: config.json, model.safetensors (a random tfx
    model's weights under the toy's names, plus a buffer) and a tokenizer; and that
    model."""
    from safetensors.torch import save_file

    from tfx_cli.core.config import ModelConfig
    from tfx_cli.core.model import build_model

    hf = {"model_type": "toy", "vocab": 300, "context": 32, "width": 48, "heads": 4,
          "depth": 2}
    if architectures:
        hf["architectures"] = list(architectures)
    path.mkdir()
    (path / "config.json").write_text(json.dumps(hf))
    model = build_model(ModelConfig(**_toy_config(hf, "test"), causal=True), seed=7).eval()
    state = {f"toy.{k}": v.contiguous() for k, v in model.state_dict().items()}
    state["toy_buffer.mask"] = torch.ones(4)
    save_file(state, str(path / "model.safetensors"))
    byte_tokenizer_json(path, 300)
    return model


def _logits(model):
    with torch.inference_mode(), model.record(["logits"]) as tr:
        model(torch.tensor([IDS]))
    return torch.tensor(tr.array("logits"))


@pytest.mark.parametrize("named_by", ["architectures", "model_type"])
def test_a_registered_family_is_read_end_to_end(toy, tmp_path, named_by):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.checkpoints.architecture import foreign_config
    from tfx_cli.core.checkpoints.families import families_read, hf_family
    from tfx_cli.core.load import load_weights

    path = tmp_path / "tiny-toy"
    made = _toy_folder(path, ("ToyForCausalLM",) if named_by == "architectures" else ())
    hf = json.loads((path / "config.json").read_text())
    assert hf_family(hf, "config.json") == "toy"
    assert "toy (ToyForCausalLM)" in families_read()
    cfg = checkpoint_config(str(path))
    assert (cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.causal) == (48, 2, 144, True)
    assert foreign_config(path / "config.json").d_model == 48  # --config config.json too
    model = load_weights(str(path), cfg)
    want = _logits(made)
    assert (_logits(model) - want).abs().max() <= 1e-5 * max(1.0, want.abs().max().item())


def test_an_unregistered_family_is_unknown_again(tmp_path):
    from tfx_cli.core.checkpoints.families import ARCHITECTURES, MODEL_TYPES, hf_family
    from tfx_cli.errors import WeightsError

    register(TOY)
    unregister(TOY.name)
    assert "ToyForCausalLM" not in ARCHITECTURES and "toy" not in MODEL_TYPES
    with pytest.raises(WeightsError, match="unknown architecture ToyForCausalLM"):
        hf_family({"architectures": ["ToyForCausalLM"]}, "config.json")


def test_a_name_declared_twice_is_refused_and_nothing_changes(toy):
    from tfx_cli.core.checkpoints.families import ARCHITECTURES, FAMILIES

    before = dict(ARCHITECTURES)
    twin = Family("toy2", ("ToyV2ForCausalLM", "LlamaForCausalLM"), _toy_config, _map_toy)
    with pytest.raises(ValueError, match="LlamaForCausalLM already taken"):
        register(twin)
    assert ARCHITECTURES == before and "toy2" not in FAMILIES
    assert ARCHITECTURES["LlamaForCausalLM"] == "llama"


def test_every_family_is_declared_once_with_its_reader_and_mapping():
    """The registry is the one table: every architecture and model type names a declared
    family, and each family's reader and mapping are its own declaration's."""
    from tfx_cli.core.checkpoints.families import (ARCHITECTURES, FAMILIES, MODEL_TYPES,
                                                   hf_map)

    assert set(ARCHITECTURES.values()) == set(FAMILIES) >= set(MODEL_TYPES.values())
    for name, family in FAMILIES.items():
        assert hf_map(name) is family.mapping
        assert all(ARCHITECTURES[a] == name for a in family.architectures + family.headless)


# -- rename rules with converters ---------------------------------------------------------
def test_a_rule_splits_and_transposes_a_fused_conv1d_into_tfxs_linears():
    """GPT-2's c_attn: one (in, 3 × out) Conv1D -> q, k, v, each (out, in); a bias split,
    never transposed; a dropped buffer; an unmatched name kept to be reported."""
    from tfx_cli.core.checkpoints.families.registry import Split, Transpose

    rules = Renames([
        (r"h\.(\d+)\.qkv\.(weight|bias)", tuple(rf"b.\1.{n}.\2" for n in "qkv"),
         Split(dim=-1), Transpose()),
        (r"h\.(\d+)\.proj\.(weight|bias)", r"b.\1.proj.\2", Transpose()),
        (r"h\.\d+\.mask", None)])
    weight, bias = torch.arange(24.).reshape(2, 12), torch.arange(12.)
    proj = torch.arange(6.).reshape(2, 3)
    out = rules.read({"h.0.qkv.weight": weight, "h.0.qkv.bias": bias, "h.0.proj.weight": proj,
                      "h.0.mask": torch.ones(2), "h.0.odd": torch.zeros(1)})
    for i, n in enumerate("qkv"):
        assert torch.equal(out.tensors[f"b.0.{n}.weight"], weight[:, 4 * i:4 * i + 4].t())
        assert torch.equal(out.tensors[f"b.0.{n}.bias"], bias[4 * i:4 * i + 4])
        assert out.sources[f"b.0.{n}.weight"] == "h.0.qkv.weight"
    assert torch.equal(out.tensors["b.0.proj.weight"], proj.t())
    assert "h.0.mask" not in out.tensors and out.sources["h.0.odd"] == "h.0.odd"


def test_a_rule_splits_by_the_configs_widths_or_head_by_head():
    """Phi-3's qkv_proj (q wider than k and v) and GPT-NeoX's query_key_value (rows head
    by head: [q_h, k_h, v_h] for each head h)."""
    from types import SimpleNamespace

    from tfx_cli.core.checkpoints.families.registry import HeadByHead, Split

    cfg = SimpleNamespace(n_heads=2, head_dim=3)
    rules = Renames([
        (r"qkv", ("q", "k", "v"), Split(sizes=lambda c: [c.n_heads * c.head_dim, 3, 3])),
        (r"neox", ("q", "k", "v"), HeadByHead())])
    fused = torch.arange(12.).reshape(12, 1)
    out = rules.read({"qkv": fused}, cfg)
    assert [out.tensors[n].flatten().tolist() for n in "qkv"] == \
        [list(range(6)), [6, 7, 8], [9, 10, 11]]
    rows = torch.arange(18.).reshape(18, 1)  # head 0: q 0-2, k 3-5, v 6-8; head 1: 9-17
    out = rules.read({"neox": rows}, cfg)
    assert out.tensors["q"].flatten().tolist() == [0, 1, 2, 9, 10, 11]
    assert out.tensors["v"].flatten().tolist() == [6, 7, 8, 15, 16, 17]
    with pytest.raises(ValueError, match="2 tensors for 3 names"):
        Renames([(r"x", ("a", "b", "c"), Split(sizes=lambda c: [1, 1]))]).read(
            {"x": torch.zeros(2)}, cfg)


def test_a_family_says_what_stack_it_builds():
    from tfx_cli.core.checkpoints.families import FAMILIES

    assert FAMILIES["gpt2"].stack == "decoder" and FAMILIES["bert"].stack == "encoder"
    assert FAMILIES["bart"].stack == "encoder–decoder" and FAMILIES["t5"].stack == \
        "encoder–decoder"
