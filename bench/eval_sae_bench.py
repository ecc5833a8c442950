"""tfx eval-sae's throughput: tokens per second over a corpus, for an SAE of one site of
a real model (three forward passes per batch: clean, the site zeroed, the site replaced).

    python bench/eval_sae_bench.py --weights smollm2 --site blocks.15.resid_out

A random TopK SAE (--latents, --k) of the site is written to a scratch folder; eval-sae
runs over --tokens and then 2 × --tokens of python-docs, and the rate is the extra tokens
over the extra seconds, so the model's loading and the first batch's warm-up cancel out.
For scale, the same model's plain forward pass (logits of every position) on batches of
the same shape is timed before and after: eval-sae's work is about three of those.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default="smollm2")
    p.add_argument("--site", default="blocks.15.resid_out")
    p.add_argument("--latents", type=int, default=4096)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from tfx_cli import api
    from tfx_cli.core.features import write_tfx

    torch.set_num_threads(a.threads)
    model = api.load(weights=a.weights)
    d = model.config.d_model

    def plain() -> float:
        ids = torch.randint(0, model.config.vocab_size, (a.batch_size, a.ctx),
                            generator=torch.Generator().manual_seed(1))
        with torch.inference_mode():
            model.module(ids, head="all")
            start = time.perf_counter()
            model.module(ids, head="all")
        return a.batch_size * a.ctx / (time.perf_counter() - start)

    before = plain()
    g = torch.Generator().manual_seed(0)
    W_dec = torch.randn(a.latents, d, generator=g)
    W_dec /= W_dec.norm(dim=1, keepdim=True)
    with tempfile.TemporaryDirectory() as tmp:
        sae = write_tfx(Path(tmp) / "sae", activation="topk", k=a.k, W_enc=W_dec.T.clone(),
                        W_dec=W_dec, b_enc=torch.zeros(a.latents), b_dec=torch.zeros(d),
                        site=a.site)
        runs = []
        for n in (a.tokens, 2 * a.tokens):
            start = time.perf_counter()
            r = api.eval_sae("python-docs", sae=sae, weights=a.weights, max_tokens=n,
                             ctx=a.ctx, batch_size=a.batch_size)
            runs.append((r.tokens, time.perf_counter() - start))
    after = plain()
    (n1, t1), (n2, t2) = runs
    rate = (n2 - n1) / (t2 - t1)
    print(f"eval-sae on {a.weights} at {a.site} ({a.latents} latents, TopK {a.k}): "
          f"{n1:,} tokens in {t1:.1f} s, {n2:,} in {t2:.1f} s: {rate:,.0f} tokens/s; a plain "
          f"forward pass: {before:,.0f} tokens/s before, {after:,.0f} after")
    if a.out:
        Path(a.out).write_text(json.dumps({"settings": vars(a), "runs": runs,
                                           "tokens_per_s": rate, "plain_forward_tokens_per_s":
                                           [before, after]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
