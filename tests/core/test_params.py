"""Analytic counts: pinned totals for every published shape, and the parts that sum to them."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from needs import need
from tfx_cli.core.presets import PRESETS
from tfx_cli.core.config import ModelConfig
from tfx_cli.core.spec import resolve_config, with_overrides
from tfx_cli.core.params import (analyse, count_flops, count_params, estimate_bytes,
                                 total_params, weight_bytes)

ROOT = Path(__file__).resolve().parents[2]

PUBLISHED = {
    "gpt124m": 163_009_536,  # LLMs-from-scratch, untied head
    "gpt2": 124_439_808,
    "nanogpt": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "minilm": 22_713_216,  # BertModel with pooler
    "smollm2-135m": 134_515_008,
}


@pytest.mark.parametrize("name, total", PUBLISHED.items())
def test_published_totals(name, total):
    assert total_params(PRESETS[name]) == total


def test_gpt124m_parts_as_in_the_book():
    cfg = PRESETS["gpt124m"]
    p = count_params(cfg)
    assert p.parts["token_embedding"] == 38_597_376
    assert p.parts["position_embedding"] == 786_432
    assert p.per_block == 7_085_568
    assert p.all_blocks == p.parts["blocks"] == 85_026_816
    assert p.parts["final_norm"] == 1_536
    assert p.parts["head"] == 38_597_376
    assert p.shared == 0
    tied = count_params(with_overrides(cfg, tie=True))
    assert tied.total == 124_412_160  # the book's "124M" after weight tying
    assert tied.parts["head"] == 0 and tied.shared == 38_597_376
    head = [r for r in tied.rows if r.name == "lm_head.weight"][0]
    assert head.count == 0 and "counted once" in head.note


def test_rows_sum_to_totals_for_every_preset():
    for cfg in PRESETS.values():
        p = count_params(cfg)
        assert sum(r.count for r in p.rows) == p.total == sum(p.parts.values())
        assert sum(r.count for r in p.block) == p.per_block == sum(p.block_parts.values())
        assert sum(p.named_counts().values()) == p.total


def test_block_details_switch_with_config():
    llama = count_params(PRESETS["smollm2-135m"])
    names = [r.name for r in llama.block]
    assert "ffn.gate_proj.weight" in names and not any(n.endswith(".bias") for n in names)
    assert "ln1.shift" not in names  # RMSNorm: scale only
    kv = {r.name: r.shape for r in llama.block}
    assert kv["attn.W_key.weight"] == (3 * 64, 576)  # n_kv_heads * head_dim rows
    assert kv["attn.W_query.weight"] == (576, 576)
    bert = count_params(PRESETS["minilm"])
    assert bert.parts["token_type_embedding"] == 2 * 384
    assert bert.parts["embedding_norm"] == 2 * 384
    assert bert.parts["pooler"] == 384 * 384 + 384
    assert "final_norm" not in bert.parts and "head" not in bert.parts  # post-LN, no head


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "none"])
def test_fixed_positions_have_no_parameters(positional):
    cfg = ModelConfig(d_model=64, n_heads=4, n_layers=1, positional=positional)
    assert count_params(cfg).parts.get("position_embedding", 0) == 0


def test_memory_bytes():
    assert weight_bytes(10) == {"fp32": 40, "bf16": 20, "int8": 10}
    assert estimate_bytes(PRESETS["gpt124m"]) == 4 * 163_009_536
    vas = PRESETS["vaswani"]  # the sinusoidal table is a buffer: memory, not parameters
    assert estimate_bytes(vas) == 4 * (total_params(vas) + 512 * 512)


def test_flops_gpt124m_by_hand():
    cfg = PRESETS["gpt124m"]
    C, F, V, L, T = 768, 3072, 50257, 12, 1024
    linear = L * 2 * (4 * C * C + 2 * C * F) + 2 * C * V
    attention = L * 2 * (2 * T * C)  # QK^T and pattern·V, full T×T
    f = count_flops(cfg)
    assert f.seq_len == T
    assert f.without_attention == linear
    assert f.per_token == linear + attention == 284_812_800
    assert f.per_sequence == f.per_token * T
    assert f.causal_skip == linear + L * 2 * C * (T + 1)
    short = count_flops(cfg, seq_len=6)
    assert short.per_token == linear + L * 4 * 6 * C


def test_flops_gqa_swiglu_and_pooler():
    cfg = PRESETS["smollm2-135m"]
    C, F, kv, T = 576, 1536, 192, 8
    f = count_flops(cfg, seq_len=T)
    assert f.per_block == 2 * (2 * C * C + 2 * C * kv + 3 * C * F) + 4 * T * C
    bert = count_flops(PRESETS["minilm"], seq_len=10)
    assert bert.causal_skip is None  # an encoder sees every key
    assert bert.per_sequence == bert.per_token * 10 + 2 * 384 * 384  # pooler once
    assert not any(r.name == "lm_head" for r in bert.rows)


def test_analyse_is_plain_json():
    out = analyse(PRESETS["gpt2"], seq_len=128)
    again = json.loads(json.dumps(out.to_dict()))["result"]
    assert again["total"] == 124_439_808 and again["tied"] is True
    assert again["flops_per_token"] == again["flops"]["per_token"]
    assert "2 FLOPs" in again["flops_convention"] and "T×T" in again["flops_convention"]
    assert again["memory_bytes"]["bf16"] == 2 * 124_439_808


def test_params_module_does_not_import_torch():
    code = ("import sys\nfrom tfx_cli.core.params import analyse\n"
            "from tfx_cli.core.presets import PRESETS\nanalyse(PRESETS['gpt124m'])\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", PRESETS)
def test_named_counts_match_built_model(name):
    # Built on torch's meta device: every shape, no weight memory.
    need("torch", "pip install torch")
    from tfx_cli.core.model import build_model

    built = {k: v.numel() for k, v in build_model(PRESETS[name], device="meta").named_parameters()}
    analytic = count_params(PRESETS[name]).named_counts()
    if not any(k.startswith("pooler.") for k in built):  # the core may skip BERT's pooler
        analytic = {k: v for k, v in analytic.items() if not k.startswith("pooler.")}
    assert built == analytic


def test_sample_config_files_equal_the_presets():
    # samples/configs/*.json are generated by samples/configs/regen.py; rerun it after
    # changing a preset.
    folder = ROOT / "samples" / "configs"
    for name, cfg in PRESETS.items():
        path = folder / f"{name}.json"
        loaded = resolve_config(str(path))
        assert loaded == cfg and loaded.name == name, f"{path} is stale: run regen.py"
        assert path.read_text(encoding="utf-8") == json.dumps(cfg.to_dict(), indent=2) + "\n"
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(PRESETS)
    import runpy  # the generator itself still runs and writes exactly these files

    regen = runpy.run_path(str(folder / "regen.py"))
    assert regen["preset_files"]() == {p.name: p.read_text(encoding="utf-8")
                                       for p in folder.glob("*.json")}
