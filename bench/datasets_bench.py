"""The `datasets` group of bench/run.py: corpus commands against the loops users write.

On python-docs (the first --docs paragraphs), for each of --models (gpt124m: run.py's
random GPT-2-small weights; smollm2: SmolLM2-135M's real weights, handed to the peers as
a LlamaForCausalLM and a Llama-shaped HookedTransformer), each case in a fresh process,
--rounds times in alternating order, wall and CPU time of the corpus loop (models built
before the clock starts) and the process's peak RSS:
  scan: tfx scan (length-bucketed batches, patterns reduced as they are made) against a
    TransformerLens loop (run_with_cache per batch of 8 documents padded on the right,
    the five metrics from cache["pattern", l]) and a per-document api trace loop
    (Model.trace(doc, select=["*attn.pattern"]) and the same metrics);
  collect: tfx collect of blocks.*.resid_out against transformers with
    output_hidden_states=True in batches of 8 (rows of the real tokens kept as numpy);
  forward: tfx's forward at batch 8 x T=1024 against the arithmetic bound (its matmul
    FLOPs at the 2048^2 matmul rate measured in the same process);
  memory: tfx scan's peak RSS on the corpus and on one --memory times larger.
Torch runs one thread per case by default (--threads): on the shared 2-core machine two
threads wait for each other at every small op and the times scatter by 3x.
Run: python bench/datasets_bench.py [--docs 32] (or python bench/run.py --cases datasets).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MARK = "@@DATASETS@@"


def docs(n: int) -> list[str]:
    from tfx_cli.core.datasets.corpus import open_corpus

    return [d.text for d in open_corpus("python-docs", max_docs=n).documents()]


def metrics_torch(pattern, ids, valid):
    """The five metrics' sums (per head) and counts of a padded batch, as a TL user would
    write them from the cache: pattern (B, H, T, T), ids (B, T), valid (B, T)."""
    import torch

    B, H, T, _ = pattern.shape
    pos = torch.arange(T)
    same = (ids[:, :, None] == ids[:, None, :]) & (pos[None, :] < pos[:, None])
    ind = torch.zeros_like(same)
    ind[:, :, 1:] = same[:, :, :-1] & (pos[None, :-1] < pos[:, None] - 1)
    q_dup, q_ind = same.any(-1) & valid, ind.any(-1) & valid
    after0 = valid & (pos >= 1)
    values = (-torch.special.xlogy(pattern, pattern).sum(-1), pattern[..., 0],
              torch.cat([pattern.new_zeros(B, H, 1), pattern.diagonal(-1, -2, -1)], -1),
              (pattern * same[:, None]).sum(-1), (pattern * ind[:, None]).sum(-1))
    masks = (valid, after0, after0, q_dup, q_ind)
    return [(v * m[:, None]).sum((0, 2)) for v, m in zip(values, masks)]


def model_flops(cfg, T: int) -> float:
    """run.py's count (every linear, QK^T and PV over the full T x T square, the head),
    for any single-stack decoder: grouped K/V and a gated FFN (three matrices) counted."""
    C, F, L = cfg.d_model, cfg.d_ff, cfg.n_layers
    kv = cfg.n_kv_heads * cfg.head_dim
    A = cfg.n_heads * cfg.head_dim
    ffn = (3 if cfg.activation in ("swiglu", "geglu") else 2) * C * F
    per_layer = 2 * T * (C * A + 2 * C * kv + A * C + ffn)
    attention = 2 * 2 * T * T * A
    return L * (per_layer + attention) + 2 * T * C * cfg.vocab_size


def case(kind: str, peer: str, n_docs: int, weights: str, model: str) -> dict:
    """One timed case. The clock covers the corpus loop only: each side's model is built
    (and tfx's loaded into its process cache) before it starts."""
    import torch

    torch.set_grad_enabled(False)
    import run as bench

    cfg = _config(weights)
    texts = docs(n_docs)
    tokens = 0
    if peer in ("tfx", "trace-loop"):
        from tfx_cli import api

        m = api.load(**_tfx_model(model))  # api.scan/collect reuse the process's model
    elif peer == "tl":
        tl = tl_model(cfg, weights, model)
    elif peer == "hf":
        hf = hf_model(cfg, weights, model)
    tok = _tokenizer(model) if peer in ("tl", "hf") else None
    c0, start = time.process_time(), time.perf_counter()
    if kind == "scan" and peer == "tfx":
        tokens = api.scan("python-docs", max_docs=n_docs, **_tfx_model(model)).tokens
    elif kind == "scan" and peer == "trace-loop":
        import numpy as np

        for text in texts:
            tr = m.trace(text, select=["*attn.pattern"])
            ids = torch.tensor([tr.input.ids])
            for name in tr.tensors.names():
                pattern = torch.from_numpy(np.asarray(tr.tensors[name]))[None]
                metrics_torch(pattern, ids, torch.ones_like(ids, dtype=torch.bool))
            tokens += ids.shape[1]
    elif kind == "scan" and peer == "tl":
        for lo in range(0, len(texts), 8):
            ids, valid = _pad([tok.encode(t) for t in texts[lo:lo + 8]])
            _, cache = tl.run_with_cache(ids)
            for layer in range(cfg.n_layers):
                metrics_torch(cache["pattern", layer], ids, valid)
            tokens += int(valid.sum())
    elif kind == "collect" and peer == "tfx":
        with tempfile.TemporaryDirectory() as out:
            r = api.collect("python-docs", max_docs=n_docs, select=["blocks.*.resid_out"],
                            output=Path(out) / "acts", **_tfx_model(model))
        tokens = r.tokens
    elif kind == "collect" and peer == "hf":
        rows = []
        for lo in range(0, len(texts), 8):
            ids, valid = _pad([tok.encode(t) for t in texts[lo:lo + 8]])
            out = hf(ids, attention_mask=valid.long(), output_hidden_states=True)
            rows.append([h[valid].numpy() for h in out.hidden_states[1:]])
            tokens += int(valid.sum())
    elif kind == "forward":
        ids = torch.randint(0, cfg.vocab_size, (8, 1024),
                            generator=torch.Generator().manual_seed(0))
        net = m._loaded.model  # the Transformer under the api's Model
        net(ids[:, :128], head="none")  # warm-up
        times = []
        for _ in range(1):  # one timed pass: 2-3 TFLOP, about a minute on one thread
            t0 = time.perf_counter()
            net(ids, head="all")
            times.append(time.perf_counter() - t0)
        rate = bench.run_matmul(2048, 3)
        return {"tokens": 8 * 1024, "seconds": min(times), "times": times,
                "flops": 8 * model_flops(cfg, 1024), "matmul": rate,
                "cpu_seconds": time.process_time() - c0}
    return {"tokens": tokens, "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - c0}


MODELS = {"gpt124m": {"config": "gpt124m", "seed": 123},  # the weights run.py saves
          "smollm2": {"weights": "smollm2"}}  # SmolLM2-135M-Instruct (Q4_1, dequantised)


def _tfx_model(model):
    return dict(MODELS[model])


def _config(weights):
    from types import SimpleNamespace

    return SimpleNamespace(**json.loads(Path(weights + ".json").read_text()))


def _tokenizer(model):
    from tfx_cli.core.tokenizers import get_tokenizer

    return get_tokenizer("gpt2" if model == "gpt124m" else "smollm2")


def hf_model(cfg, weights, model):
    """transformers with the same weights: run.py's GPT2LMHeadModel, or LlamaForCausalLM
    with SmolLM2's (tfx reads Llama checkpoints under these names without reordering)."""
    import run as bench

    if model == "gpt124m":
        return bench.hf_model(bench.bench_config(False), weights, "sdpa")
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    sd = load_file(weights)
    hf_cfg = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
                         intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
                         num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
                         head_dim=cfg.head_dim, max_position_embeddings=cfg.context_length,
                         rms_norm_eps=cfg.ln_eps, rope_theta=cfg.rope_theta,
                         tie_word_embeddings=True, attention_bias=False, mlp_bias=False)
    top = {"embed.tok_emb.weight": "model.embed_tokens.weight",
           "ln_f.scale": "model.norm.weight"}
    parts = {"ln1.scale": "input_layernorm.weight",
             "ln2.scale": "post_attention_layernorm.weight",
             "attn.W_query.weight": "self_attn.q_proj.weight",
             "attn.W_key.weight": "self_attn.k_proj.weight",
             "attn.W_value.weight": "self_attn.v_proj.weight",
             "attn.out_proj.weight": "self_attn.o_proj.weight",
             "ffn.gate_proj.weight": "mlp.gate_proj.weight",
             "ffn.fc1.weight": "mlp.up_proj.weight", "ffn.fc2.weight": "mlp.down_proj.weight"}
    state = {}
    for k, v in sd.items():
        if k in top:
            state[top[k]] = v
        elif k.startswith("blocks."):
            _, i, rest = k.split(".", 2)
            state[f"model.layers.{i}.{parts[rest]}"] = v
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    hf = LlamaForCausalLM(hf_cfg)  # built on CPU (rotary tables included), then replaced
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def tl_model(cfg, weights, model):
    """TransformerLens with the same weights: run.py's GPT-2, or a Llama-shaped
    HookedTransformer (grouped K/V, gated SiLU MLP, RMS norms, rotary) for SmolLM2."""
    import run as bench

    if model == "gpt124m":
        return bench.tl_model(bench.bench_config(False), weights)
    import torch
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    sd = load_file(weights)
    C, H, K, D, F = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    tl_cfg = HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=C, n_ctx=2048, d_head=D, n_heads=H,
        n_key_value_heads=K, d_mlp=F, d_vocab=cfg.vocab_size, act_fn="silu",
        normalization_type="RMS", final_rms=True, gated_mlp=True, eps=cfg.ln_eps,
        positional_embedding_type="rotary", rotary_dim=D, rotary_base=int(cfg.rope_theta),
        rotary_adjacent_pairs=False, default_prepend_bos=False, device="cpu", seed=0,
        original_architecture="LlamaForCausalLM")
    tl = HookedTransformer(tl_cfg)
    per_head = lambda w, n: w.view(n, D, C).permute(0, 2, 1)  # (n*D, C) -> (n, C, D)
    out = {"embed.W_E": sd["embed.tok_emb.weight"], "ln_final.w": sd["ln_f.scale"],
           "unembed.W_U": sd["embed.tok_emb.weight"].t(),
           "unembed.b_U": torch.zeros(cfg.vocab_size)}
    for i in range(cfg.n_layers):
        p = f"blocks.{i}"
        out.update({
            f"{p}.ln1.w": sd[f"{p}.ln1.scale"], f"{p}.ln2.w": sd[f"{p}.ln2.scale"],
            f"{p}.attn.W_Q": per_head(sd[f"{p}.attn.W_query.weight"], H),
            f"{p}.attn._W_K": per_head(sd[f"{p}.attn.W_key.weight"], K),
            f"{p}.attn._W_V": per_head(sd[f"{p}.attn.W_value.weight"], K),
            f"{p}.attn.W_O": sd[f"{p}.attn.out_proj.weight"].t().reshape(H, D, C),
            f"{p}.attn.b_Q": torch.zeros(H, D), f"{p}.attn._b_K": torch.zeros(K, D),
            f"{p}.attn._b_V": torch.zeros(K, D), f"{p}.attn.b_O": torch.zeros(C),
            f"{p}.mlp.W_in": sd[f"{p}.ffn.fc1.weight"].t(),
            f"{p}.mlp.W_gate": sd[f"{p}.ffn.gate_proj.weight"].t(),
            f"{p}.mlp.W_out": sd[f"{p}.ffn.fc2.weight"].t(),
            f"{p}.mlp.b_in": torch.zeros(F), f"{p}.mlp.b_out": torch.zeros(C)})
    missing, unexpected = tl.load_state_dict({k: v.contiguous() for k, v in out.items()},
                                             strict=False)
    assert not unexpected, unexpected
    params = {n for n, _ in tl.named_parameters()}
    assert not params & set(missing), sorted(params & set(missing))[:5]
    return tl.eval()


def _pad(batch):
    import torch

    T = max(len(b) for b in batch)
    ids = torch.zeros(len(batch), T, dtype=torch.long)
    valid = torch.zeros(len(batch), T, dtype=torch.bool)
    for i, b in enumerate(batch):
        ids[i, :len(b)] = torch.tensor(b)
        valid[i, :len(b)] = True
    return ids, valid


def run_child(kind, peer, n_docs, weights, model, threads) -> dict:
    argv = [sys.executable, __file__, "--child",
            json.dumps([kind, peer, n_docs, weights, model, threads])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TFX_QUIET": "1"})
    out, err = proc.communicate()
    line = [l for l in out.splitlines() if l.startswith(MARK)]
    if not line:
        return {"error": err.strip().splitlines()[-1:] or ["?"]}
    result = json.loads(line[-1][len(MARK):])
    result["peak_rss_mb"] = result.pop("maxrss_kb") / 1024
    return result


SAVE = """
import json, sys, dataclasses
sys.path.insert(0, %(here)r)
from safetensors.torch import save_file
if %(model)r == "gpt124m":
    import run
    cfg = run.bench_config(False)
    run.save_weights(cfg, 123, %(path)r)
else:
    from tfx_cli.core.load import load
    from tfx_cli.core.spec import ModelSpec
    loaded = load(ModelSpec(weights="smollm2"))
    cfg = loaded.cfg
    save_file({k: v.contiguous() for k, v in loaded.model.state_dict().items()
               if k != "lm_head.weight"}, %(path)r)
keys = ("vocab_size", "context_length", "d_model", "n_heads", "n_kv_heads", "head_dim",
        "n_layers", "d_ff", "ln_eps", "rope_theta", "activation")
json.dump({k: getattr(cfg, k) for k in keys}, open(%(path)r + ".json", "w"))
"""

CASES = (("scan", "tfx"), ("scan", "tl"), ("scan", "trace-loop"), ("collect", "tfx"),
         ("collect", "hf"), ("forward", "tfx"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--models", default="gpt124m,smollm2")
    ap.add_argument("--rounds", type=int, default=2, help="runs of every case (min, median)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads in every case (0: torch's choice); on a shared "
                         "2-core machine two threads wait on each other at every small op")
    ap.add_argument("--memory", type=int, default=4,
                    help="also scan a corpus this many times larger, for peak RSS (0: skip)")
    ap.add_argument("--peers", default="tfx,tl,trace-loop,hf",
                    help="which sides run (tfx alone, with PYTHONPATH at an older tree, "
                         "measures a change)")
    ap.add_argument("--kinds", default="scan,collect,forward", help="which cases run")
    ap.add_argument("--child")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.child:
        kind, peer, n_docs, weights, model, threads = json.loads(args.child)
        if threads:
            import torch

            torch.set_num_threads(threads)
        result = case(kind, peer, n_docs, weights, model)
        import resource

        result["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(MARK + json.dumps(result), flush=True)
        return 0
    import statistics

    tmp = tempfile.mkdtemp(prefix="tfx-dsbench-")
    rows = {}
    print(f"python-docs, first {args.docs} documents; torch threads: "
          f"{args.threads or 'default'}; {args.rounds} rounds (min / median wall)")
    for model in args.models.split(","):
        weights = str(Path(tmp) / f"{model}.safetensors")
        subprocess.run([sys.executable, "-c", SAVE % {"here": str(HERE), "model": model,
                                                      "path": weights}], check=True)
        cases = [(k, p, args.docs) for k, p in CASES if p in args.peers.split(",")
                 and k in args.kinds.split(",")]
        if args.memory and "scan" in args.kinds.split(",") and "tfx" in args.peers:
            cases.append(("scan", "tfx", args.docs * args.memory))
        runs = {c: [] for c in cases}
        for r in range(args.rounds):  # rounds alternate the order: drift spreads evenly
            for c in (cases if r % 2 == 0 else cases[::-1]):
                runs[c].append(run_child(c[0], c[1], c[2], weights, model, args.threads))
        for (kind, peer, n), got in runs.items():
            ok = [g for g in got if "error" not in g]
            label = f"{model} {kind} {peer}" + (f" x{args.memory}" if n != args.docs else "")
            if not ok:
                print(f"{label}: error {got[0]['error']}")
                rows[label] = got
                continue
            secs = sorted(g["seconds"] for g in ok)
            row = {"tokens": ok[0]["tokens"], "seconds_min": secs[0],
                   "seconds_median": statistics.median(secs),
                   "cpu_seconds_min": min(g["cpu_seconds"] for g in ok),
                   "peak_rss_mb": max(g["peak_rss_mb"] for g in ok), "runs": got}
            if kind == "forward":
                gflops = max(max(g["matmul"]["gflops"]) for g in ok)
                row["bound_seconds"] = ok[0]["flops"] / (gflops * 1e9)
                row["matmul_gflops"] = gflops
                print(f"{label:30} B=8 T=1024 {secs[0]:7.2f} s  bound {row['bound_seconds']:.2f} s"
                      f" at {gflops:.1f} GFLOP/s -> {secs[0] / row['bound_seconds']:.2f}x   "
                      f"peak RSS {row['peak_rss_mb']:.0f} MB")
            else:
                print(f"{label:30} {row['tokens']:7,} tokens {secs[0]:7.2f} s (median "
                      f"{row['seconds_median']:.2f}, cpu {row['cpu_seconds_min']:.2f}) "
                      f"{row['tokens'] / secs[0]:7.1f} tok/s  peak RSS "
                      f"{row['peak_rss_mb']:.0f} MB")
            rows[label] = row
        _ratios(model, rows, args.memory)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def _ratios(model, rows, memory) -> None:
    def rate(key, cpu=False):
        r = rows.get(f"{model} {key}")
        if not r or "tokens" not in r:
            return None
        return r["tokens"] / (r["cpu_seconds_min"] if cpu else r["seconds_min"])

    for what, a, b, target in (("scan / TL loop", "scan tfx", "scan tl", 3.0),
                               ("scan / api trace loop", "scan tfx", "scan trace-loop", 3.0),
                               ("collect / HF hidden states", "collect tfx", "collect hf", 1.5)):
        x, y = rate(a), rate(b)
        if x and y:
            xc, yc = rate(a, True), rate(b, True)
            print(f"  {model} {what}: {x / y:.2f}x tok/s (cpu {xc / yc:.2f}x), target "
                  f">= {target}x: {'met' if x / y >= target else 'missed'}")
    fwd = rows.get(f"{model} forward tfx")
    if fwd and "bound_seconds" in fwd:
        ratio = fwd["seconds_min"] / fwd["bound_seconds"]
        print(f"  {model} forward / bound: {ratio:.2f}x, target <= 1.15x: "
              f"{'met' if ratio <= 1.15 else 'missed'}")
    small, big = rows.get(f"{model} scan tfx"), rows.get(f"{model} scan tfx x{memory}")
    if memory and small and big and "peak_rss_mb" in big:
        ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
        print(f"  {model} scan peak RSS, {memory}x the corpus: {small['peak_rss_mb']:.0f} -> "
              f"{big['peak_rss_mb']:.0f} MB, {ratio:.2f}x, target <= 1.1x: "
              f"{'met' if ratio <= 1.1 else 'missed'}")


if __name__ == "__main__":
    sys.exit(main())
