"""Decoding speed: tfx's generate loop (KV cache on and off) against HF GPT2LMHeadModel.

    python bench/generate_bench.py                 # gpt2 shape, 16-token prompt, 64 new tokens
    python bench/generate_bench.py --smoke         # a tiny model, seconds
    python bench/generate_bench.py --repeats 5 --json

Both models hold the SAME random weights: tfx builds the gpt2 preset from --seed, and the
HF model gets them through the state-dict mapping below. Greedy decoding, so the three
runs must produce the same tokens; the script checks that and the prefill logits before
timing anything. tokens/s counts new tokens over a whole call (prefill included), median
of --repeats calls after one warm-up call; CPU ms/token (process time, all threads) is
steadier than wall time on a busy machine. This is a benchmark, not a test: numbers
depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfx_cli.core.presets import PRESETS
from tfx_cli.core.config import ModelConfig  # noqa: E402
from tfx_cli.core.analysis.decode import decode  # noqa: E402
from tfx_cli.core.model import Transformer, build_model  # noqa: E402


# -- tfx names -> HF GPT-2 names -----------------------------------------------------
def hf_gpt2_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """tfx's parameters under GPT2LMHeadModel's names.

    HF's Conv1D stores (in, out), the transpose of nn.Linear's (out, in); c_attn is
    W_query, W_key and W_value side by side along the output axis.
    """
    sd, cfg = model.state_dict(), model.cfg

    def conv1d(name: str) -> torch.Tensor:
        return sd[f"{name}.weight"].t().contiguous()  # (out, in) -> (in, out)

    out = {"transformer.wte.weight": sd["embed.tok_emb.weight"],
           "transformer.wpe.weight": sd["embed.pos_emb.weight"],
           "transformer.ln_f.weight": sd["ln_f.scale"],
           "transformer.ln_f.bias": sd["ln_f.shift"],
           "lm_head.weight": sd["lm_head.weight"]}
    for i in range(cfg.n_layers):
        t, h = f"blocks.{i}", f"transformer.h.{i}"
        qkv = [f"{t}.attn.{w}" for w in ("W_query", "W_key", "W_value")]
        zeros = torch.zeros(cfg.d_model)
        out.update({
            f"{h}.ln_1.weight": sd[f"{t}.ln1.scale"], f"{h}.ln_1.bias": sd[f"{t}.ln1.shift"],
            f"{h}.attn.c_attn.weight": torch.cat([conv1d(n) for n in qkv], dim=1),  # (C, 3C)
            f"{h}.attn.c_attn.bias": torch.cat([sd.get(f"{n}.bias", zeros) for n in qkv]),
            f"{h}.attn.c_proj.weight": conv1d(f"{t}.attn.out_proj"),
            f"{h}.attn.c_proj.bias": sd[f"{t}.attn.out_proj.bias"],
            f"{h}.ln_2.weight": sd[f"{t}.ln2.scale"], f"{h}.ln_2.bias": sd[f"{t}.ln2.shift"],
            f"{h}.mlp.c_fc.weight": conv1d(f"{t}.ffn.fc1"),
            f"{h}.mlp.c_fc.bias": sd[f"{t}.ffn.fc1.bias"],
            f"{h}.mlp.c_proj.weight": conv1d(f"{t}.ffn.fc2"),
            f"{h}.mlp.c_proj.bias": sd[f"{t}.ffn.fc2.bias"],
        })
    return out


def hf_gpt2(model: Transformer):
    """A GPT2LMHeadModel (sdpa attention) holding `model`'s weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = model.cfg
    if cfg.activation != "gelu_tanh" or cfg.norm != "layernorm" or cfg.positional != "learned":
        raise SystemExit(f"{cfg.name} is not GPT-2 shaped; HF's GPT-2 cannot hold it")
    hf_cfg = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.context_length,
                        n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
                        n_inner=cfg.d_ff, activation_function="gelu_new",
                        layer_norm_epsilon=cfg.ln_eps, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=cfg.tie_embeddings)
    with torch.device("meta"):
        hf = GPT2LMHeadModel._from_config(hf_cfg, attn_implementation="sdpa")
    state = hf_gpt2_state_dict(model)
    if cfg.tie_embeddings:
        del state["lm_head.weight"]  # HF ties it to wte after loading
    missing, unexpected = hf.load_state_dict(state, assign=True, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise SystemExit(f"state-dict mapping is off: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


# -- the runs ------------------------------------------------------------------------
def tfx_runner(model: Transformer, use_cache: bool):
    def run(prompt: list[int], n: int) -> list[int]:
        return decode(model, prompt, max_new_tokens=n, use_cache=use_cache).ids[len(prompt):]
    return run


def hf_runner(hf):
    def run(prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                          min_new_tokens=n, do_sample=False, use_cache=True,
                          pad_token_id=0, eos_token_id=None)
        return out[0, len(prompt):].tolist()
    return run


def measure(runs: dict, prompt: list[int], n: int, repeats: int) -> dict:
    """Time every runner once per round, in a rotated order, so drift in the machine's
    load (other processes, thermals) spreads over all of them instead of one."""
    names = list(runs)
    out = {name: {"wall": [], "cpu": [], "tokens": None} for name in names}
    with torch.inference_mode():
        for name in names:  # warm-up: allocators, caches, lazy imports
            out[name]["tokens"] = runs[name](prompt, n)
        for r in range(repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                c0, t0 = time.process_time(), time.perf_counter()
                runs[name](prompt, n)
                out[name]["wall"].append(time.perf_counter() - t0)
                out[name]["cpu"].append(time.process_time() - c0)
    for r in out.values():
        r["tok_per_s"] = n / statistics.median(r["wall"])
        r["cpu_ms_per_tok"] = 1e3 * statistics.median(r["cpu"]) / n
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="gpt2", help="a GPT-2 shaped preset (default gpt2)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    ap.add_argument("--new", type=int, default=64, help="new tokens per call")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--no-uncached", action="store_true",
                    help="skip the slow run without a cache (tfx --no-cache)")
    ap.add_argument("--smoke", action="store_true", help="a tiny model, to check the script")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    cfg = PRESETS[args.config]
    if args.smoke:
        cfg = ModelConfig(vocab_size=512, context_length=128, d_model=64, n_heads=4,
                          n_layers=2, qkv_bias=True, tie_embeddings=True, name="smoke")
    model = build_model(cfg, args.seed)
    hf = hf_gpt2(model)
    prompt = torch.randint(0, cfg.vocab_size, (args.prompt,),
                           generator=torch.Generator().manual_seed(args.seed)).tolist()

    # Same weights, same numbers: check before timing anything.
    with torch.inference_mode():
        ours = model(torch.tensor([prompt]))
        theirs = hf(torch.tensor([prompt])).logits
    logit_diff = (ours - theirs).abs().max().item()
    if logit_diff > 1e-3:
        raise SystemExit(f"tfx and HF disagree on the prefill logits by {logit_diff:.2e}")

    runs = {"tfx (cache)": tfx_runner(model, True), "HF generate": hf_runner(hf)}
    if not args.no_uncached:
        runs["tfx --no-cache"] = tfx_runner(model, False)
    results = measure(runs, prompt, args.new, args.repeats)
    same = len({tuple(r["tokens"]) for r in results.values()}) == 1
    ratio = results["tfx (cache)"]["tok_per_s"] / results["HF generate"]["tok_per_s"]
    summary = {"config": cfg.name, "prompt": args.prompt, "new_tokens": args.new,
               "repeats": args.repeats, "threads": torch.get_num_threads(),
               "torch": torch.__version__, "prefill_logit_diff": logit_diff,
               "same_tokens": same, "tfx_over_hf": ratio,
               "tok_per_s": {name: r["tok_per_s"] for name, r in results.items()},
               "cpu_ms_per_token": {name: r["cpu_ms_per_tok"] for name, r in results.items()}}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{cfg.name}: {args.prompt}-token prompt, {args.new} new tokens, greedy, "
              f"{summary['threads']} threads, median of {args.repeats}")
        for name, r in results.items():
            print(f"  {name:<16} {r['tok_per_s']:8.1f} tokens/s   "
                  f"{r['cpu_ms_per_tok']:7.1f} CPU ms/token")
        print(f"  tfx (cache) / HF = {ratio:.2f}   same tokens: {same}   "
              f"prefill logits max |diff| {logit_diff:.1e}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
