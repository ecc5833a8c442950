"""The `datasets` group of bench/run.py: corpus commands against the loops users write.

On python-docs (the first --docs paragraphs) with gpt124m's shape (the bench weights, as
run.py makes them), each case in a fresh process, wall time and peak RSS (os.wait4):
  scan: tfx scan (batched, patterns reduced as they are made) against a
    TransformerLens loop (run_with_cache per batch of 8 documents padded on the right,
    the five metrics from cache["pattern", l]) and a per-document api trace loop
    (Model.trace(doc, select=["*attn.pattern"]) and the metrics in numpy);
  collect: tfx collect of blocks.*.resid_out against transformers with
    output_hidden_states=True in batches of 8 (rows of the real tokens kept as numpy);
  forward: tfx's forward at batch 8 x T=1024 against the arithmetic bound of the
    machine's matmul rate (run.py's FLOP count and 2048^2 matmul).
With --smollm2, tfx scan and collect also run on SmolLM2 (no peer loads it offline).
Run: python bench/datasets_bench.py [--docs 64] (or python bench/run.py --cases datasets).
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


def case(kind: str, peer: str, n_docs: int, weights: str) -> dict:
    import torch

    torch.set_grad_enabled(False)
    import run as bench

    cfg = bench.bench_config(False)
    texts = docs(n_docs)
    start = time.perf_counter()
    tokens = 0
    if kind == "scan" and peer == "tfx":
        from tfx_cli import api

        r = api.scan("python-docs", max_docs=n_docs, **_tfx_model(peer, weights))
        tokens = r.tokens
    elif kind == "scan" and peer == "trace-loop":
        import numpy as np

        from tfx_cli import api

        m = api.load(**_tfx_model(peer, weights))
        for text in texts:
            tr = m.trace(text, select=["*attn.pattern"])
            ids = torch.tensor([tr.input.ids])
            for name in tr.tensors.names():
                pattern = torch.from_numpy(np.asarray(tr.tensors[name]))[None]
                metrics_torch(pattern, ids, torch.ones_like(ids, dtype=torch.bool))
            tokens += ids.shape[1]
    elif kind == "scan" and peer == "tl":
        model = bench.tl_model(cfg, weights)
        tok = _tokenizer()
        for lo in range(0, len(texts), 8):
            batch = [tok.encode(t) for t in texts[lo:lo + 8]]
            ids, valid = _pad(batch)
            _, cache = model.run_with_cache(ids)
            for layer in range(cfg.n_layers):
                metrics_torch(cache["pattern", layer], ids, valid)
            tokens += int(valid.sum())
    elif kind == "collect" and peer == "tfx":
        from tfx_cli import api

        with tempfile.TemporaryDirectory() as out:
            r = api.collect("python-docs", max_docs=n_docs, select=["blocks.*.resid_out"],
                            output=Path(out) / "acts", **_tfx_model(peer, weights))
        tokens = r.tokens
    elif kind == "collect" and peer == "hf":
        model = bench.hf_model(cfg, weights, "sdpa")
        tok = _tokenizer()
        rows = []
        for lo in range(0, len(texts), 8):
            ids, valid = _pad([tok.encode(t) for t in texts[lo:lo + 8]])
            out = model(ids, attention_mask=valid.long(), output_hidden_states=True)
            rows.append([h[valid].numpy() for h in out.hidden_states[1:]])
            tokens += int(valid.sum())
    elif kind == "forward":
        from tfx_cli.core.load import load
        from tfx_cli.core.spec import ModelSpec

        model = load(ModelSpec(config="gpt124m")).model
        ids = torch.randint(0, cfg.vocab_size, (8, 1024))
        model(ids, head="none")  # warm-up
        start = time.perf_counter()
        model(ids, head="all")
        tokens = 8 * 1024
        elapsed = time.perf_counter() - start
        flops = 8 * bench.forward_flops(cfg, 1024)
        rate = bench.run_matmul(2048, 3)
        return {"tokens": tokens, "seconds": elapsed, "flops": flops, "matmul": rate}
    return {"tokens": tokens, "seconds": time.perf_counter() - start}


def _tfx_model(peer, weights):
    return {"config": "gpt124m", "seed": 123}  # the weights the file holds (run.py)


def _tokenizer():
    from tfx_cli.core.tokenizers import get_tokenizer

    return get_tokenizer("gpt2")


def _pad(batch):
    import torch

    T = max(len(b) for b in batch)
    ids = torch.zeros(len(batch), T, dtype=torch.long)
    valid = torch.zeros(len(batch), T, dtype=torch.bool)
    for i, b in enumerate(batch):
        ids[i, :len(b)] = torch.tensor(b)
        valid[i, :len(b)] = True
    return ids, valid


def run_child(kind, peer, n_docs, weights, extra=()) -> dict:
    argv = [sys.executable, __file__, "--child", json.dumps([kind, peer, n_docs, weights]),
            *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TFX_QUIET": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read()
    err = proc.stderr.read()
    line = [l for l in out.splitlines() if l.startswith(MARK)]
    if not line:
        return {"error": err.strip().splitlines()[-1:] or ["?"]}
    result = json.loads(line[-1][len(MARK):])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--child")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.child:
        kind, peer, n_docs, weights = json.loads(args.child)
        print(MARK + json.dumps(case(kind, peer, n_docs, weights)), flush=True)
        return 0
    import run as bench  # noqa: F401 (its weights helper runs in a child)

    tmp = tempfile.mkdtemp(prefix="tfx-dsbench-")
    weights = str(Path(tmp) / "weights.safetensors")
    subprocess.run([sys.executable, "-c", (
        "import sys; sys.path.insert(0, %r); import run; "
        "run.save_weights(run.bench_config(False), 123, %r)") % (str(HERE), weights)], check=True)
    rows = {}
    for kind, peer in (("scan", "tfx"), ("scan", "tl"), ("scan", "trace-loop"),
                       ("collect", "tfx"), ("collect", "hf"), ("forward", "tfx")):
        r = run_child(kind, peer, args.docs, weights)
        rows[f"{kind} {peer}"] = r
        if "error" in r:
            print(f"{kind:8} {peer:11} error: {r['error']}")
        elif kind == "forward":
            bound = r["flops"] / (max(r["matmul"]["gflops"]) * 1e9)
            print(f"forward B=8 T=1024: {r['seconds']:.2f} s, bound {bound:.2f} s "
                  f"({r['seconds'] / bound:.2f}x), peak RSS {r['peak_rss_mb']:.0f} MB")
        else:
            print(f"{kind:8} {peer:11} {r['tokens']:7,} tokens {r['seconds']:7.2f} s "
                  f"{r['tokens'] / r['seconds']:8.1f} tokens/s  peak RSS "
                  f"{r['peak_rss_mb']:.0f} MB")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
