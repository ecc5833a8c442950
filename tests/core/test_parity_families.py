"""Parity of every decoder family with transformers, on tiny random models.

For each family transformers builds a 2-layer model (d_model 64) with its own config
class, saves it with `save_pretrained` and a byte-level tokenizer.json beside it; tfx
loads the folder with `--weights DIR` and must give the same logits (<= 1e-5), attention
patterns and residual streams as transformers' eager forward, through every command.
"""
import json

import pytest
import torch
from checkpoint_makers import byte_tokenizer_json, need
from parity import bound

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
IDS = [5, 17, 99, 3, 250, 42, 7, 7, 123, 201, 64, 33]
WINDOW = 4  # shorter than IDS, so sliding layers really hide keys

# family -> (config class, model class, config overrides)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 24}),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                {"head_dim": 16, "sliding_window": WINDOW}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"head_dim": 24, "query_pre_attn_scalar": 20, "sliding_window": WINDOW,
                "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"head_dim": 24, "query_pre_attn_scalar": 20, "sliding_window": WINDOW,
                "layer_types": ["sliding_attention", "full_attention"]}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
    "llama-yarn": ("LlamaConfig", "LlamaForCausalLM",
                   {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 16}}),
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM",
                    {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 16}}),
    # Phi-3.5's long-context rotation: per-pair factors, long ones past 8 positions, so
    # the 12-token forward uses long_factor and decoding crosses from short to long
    "phi3-longrope": ("Phi3Config", "Phi3ForCausalLM",
                      {"pad_token_id": 0, "original_max_position_embeddings": 8,
                       "rope_scaling": {"type": "longrope",
                                        "short_factor": [1.0 + i / 8 for i in range(8)],
                                        "long_factor": [1.0 + i for i in range(8)]}}),
    "qwen2-linear-rope": ("Qwen2Config", "Qwen2ForCausalLM",
                          {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
}


def make_folder(path, family: str):
    need("transformers", "pip install transformers")
    import transformers

    config_name, model_name, overrides = FAMILIES[family]
    size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=96, vocab_size=300,
                max_position_embeddings=64)
    if family == "gpt_neox":
        size.pop("num_key_value_heads")
    config = getattr(transformers, config_name)(**size, **overrides,
                                                attn_implementation="eager")
    torch.manual_seed(sum(map(ord, family)))
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # fresh norms are ones and biases zeros: jiggle everything
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(path)
    byte_tokenizer_json(path, 300)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    return request.param, path, make_folder(path, request.param)


def test_logits_patterns_and_residual_streams_match(family):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    name, path, hf = family
    cfg = checkpoint_config(str(path))
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_attentions=True, output_hidden_states=True)
        with model.record(["embed.out", "blocks.*.resid_out", "blocks.*.attn.pattern",
                           "logits"]) as tr:
            model(x)
    assert (torch.as_tensor(tr.array("logits")) - ref.logits[0]).abs().max() <= LOGITS, name
    for i in range(cfg.n_layers):
        got = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (got - ref.attentions[i][0]).abs().max() <= 1e-5, (name, i)
    ours = ["embed.out"] + [f"blocks.{i}.resid_out" for i in range(cfg.n_layers - 1)]
    for layer, (mine, want) in enumerate(zip(ours, ref.hidden_states)):
        assert (torch.as_tensor(tr.array(mine)) - want[0]).abs().max() <= 1e-5, (name, layer)
    # the fused attention path (nothing inside attention recorded) gives the same logits
    with torch.inference_mode():
        assert (model(x)[0] - ref.logits[0]).abs().max() <= LOGITS, name


def test_cached_decoding_matches_the_full_forward(family):
    from tfx_cli.core.analysis.decode import decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    name, path, hf = family
    model = load_weights(str(path), checkpoint_config(str(path)))
    cached = decode(model, IDS[:3], max_new_tokens=10, keep_logits=True)
    # (longrope's factors follow the text's length: crossing the trained context, the
    # cache is rotated again with the long ones, so cached still equals recomputed)
    plain = decode(model, IDS[:3], max_new_tokens=10, use_cache=False, keep_logits=True)
    assert cached.ids == plain.ids, name
    for a, b in zip(cached.logits, plain.logits):
        assert (a - b).abs().max() <= 1e-5, name
    if "longrope" in name:
        assert [s.fed for s in cached.steps][5:8] == [1, 9, 1], "the cache was not rebuilt"
    with torch.inference_mode():  # and transformers' own greedy continuation
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=10, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert cached.ids == out[0].tolist(), name


@pytest.mark.parametrize("command", ["attend", "layernorm", "ffn", "trace", "next",
                                     "generate", "lens", "report", "embed", "posenc",
                                     "plot"])
def test_every_command_runs_on_the_family(family, command, tmp_path):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    name, path, _ = family
    extra = {"generate": ["-n", "3"], "report": ["-o", str(tmp_path / "r.html")],
             "trace": ["-s", "blocks.1.*"], "layernorm": ["--layer", "1"],
             "plot": ["--plot", str(tmp_path / "a.png")]}.get(command, [])
    if command == "plot":  # pictures: attention maps of the last layer
        need("matplotlib", "pip install 'tfx-cli[plot]'")
        command = "attend"
        extra += ["--layer", "1"]
    result = CliRunner().invoke(app, [command, "Hello there", "-w", str(path), "--json",
                                      *extra], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, (name, command, result.stderr)
    assert json.loads(result.stdout)["model"]["weights"] == str(path)
    if "--plot" in extra:
        assert (tmp_path / "a.png").stat().st_size > 1000


@pytest.mark.parametrize("layer", [0, 1])
def test_explain_spells_out_the_family_attention(family, layer):
    """--explain's hand arithmetic (scale, soft cap, window mask) is the model's pattern."""
    from tfx_cli import api

    name, path, _ = family
    res = api.attend("Hello there, general", weights=str(path), layer=layer, explain=True)
    assert res.explain.max_abs_diff_vs_pattern < 1e-6, (name, layer)
    if name == "gemma2":
        assert res.explain.softcap == 5.0 and res.explain.keys[0].capped is not None


def test_count_params_of_the_checkpoint_is_transformers_count(family):
    from tfx_cli import api

    name, path, hf = family
    counted = api.count_params(weights=str(path), verify=True)
    assert counted.verify.verified, (name, counted.verify.mismatched)
    assert counted.total == hf.num_parameters(), name  # tied weights once, in both


def test_multimodal_gemma3_runs_its_text_model(tmp_path):
    """Gemma 3 4B and up are Gemma3ForConditionalGeneration: a sparse text_config over
    the text defaults, the language model's tensors under a prefix, and a vision tower
    tfx leaves unread. Text-only logits and greedy decoding match transformers'."""
    need("transformers", "pip install transformers")
    import transformers

    from tfx_cli.core.analysis.decode import decode
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    text = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=96, vocab_size=300, head_dim=24,
                query_pre_attn_scalar=20, sliding_window=WINDOW,
                max_position_embeddings=64, sliding_window_pattern=2)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                       mm_tokens_per_image=4, image_token_index=299,
                                       boi_token_index=297, eoi_token_index=298,
                                       attn_implementation="eager")
    torch.manual_seed(3)
    hf = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    path = tmp_path / "tiny-gemma3-mm"
    hf.save_pretrained(path)
    byte_tokenizer_json(path, 300)
    saved = json.loads((path / "config.json").read_text())
    assert "vocab_size" not in saved and "text_config" in saved  # the sparse layout
    cfg = checkpoint_config(str(path))
    assert (cfg.d_model, cfg.head_dim, cfg.vocab_size, cfg.rope_theta) == (64, 24, 300, 1e6)
    model = load_weights(str(path), cfg)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        want = hf(input_ids=x).logits[0]
        assert (model(x)[0] - want).abs().max() <= 1e-5
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert decode(model, IDS[:3], max_new_tokens=8).ids == out[0].tolist()
