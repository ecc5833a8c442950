"""tfx eval-sae's throughput: tokens per second over a corpus, for an SAE of one site of
a real model, beside the same model's plain forward pass.

    python bench/eval_sae_bench.py --weights smollm2 --site blocks.15.resid_out

A random TopK SAE (--latents, --k) of the site is written to a scratch folder. The model
is loaded once; eval-sae's run (core.datasets.evaluate.eval_sae: the clean pass, then
the site zeroed and replaced from its block on) goes over --tokens of python-docs once to
warm up and then --rounds times timed, each between two timings of a plain forward pass
(logits of every position) over the same number of tokens in batches of the same shape.
On a machine others share, the ratio of the two rates (eval-sae's cost in plain forward
passes) is steadier than either rate.
"""
from __future__ import annotations

import argparse
import json
import statistics
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
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from tfx_cli.api._datasets import _corpus, _loaded
    from tfx_cli.core.datasets.evaluate import eval_sae
    from tfx_cli.core.features import write_tfx

    torch.set_num_threads(a.threads)
    loaded, _ = _loaded({"weights": a.weights})
    d, model = loaded.cfg.d_model, loaded.model
    ids = torch.randint(0, loaded.cfg.vocab_size, (a.batch_size, a.ctx),
                        generator=torch.Generator().manual_seed(1))

    def plain() -> float:
        batches = max(1, a.tokens // (a.batch_size * a.ctx))
        with torch.inference_mode():
            start = time.perf_counter()
            for _ in range(batches):
                model(ids, head="all")
        return batches * a.batch_size * a.ctx / (time.perf_counter() - start)

    g = torch.Generator().manual_seed(0)
    W_dec = torch.randn(a.latents, d, generator=g)
    W_dec /= W_dec.norm(dim=1, keepdim=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sae = write_tfx(Path(tmp) / "sae", activation="topk", k=a.k, W_enc=W_dec.T.clone(),
                        W_dec=W_dec, b_enc=torch.zeros(a.latents), b_dec=torch.zeros(d),
                        site=a.site)

        def run() -> tuple[int, float]:
            start = time.perf_counter()
            r = eval_sae(loaded, _corpus("python-docs", "text", None), sae=sae,
                         max_tokens=a.tokens, ctx=a.ctx, batch_size=a.batch_size)
            return r.tokens, time.perf_counter() - start

        run()  # warm-up
        for _ in range(a.rounds):
            before = plain()
            tokens, seconds = run()
            after = plain()
            rows.append({"eval_tokens_per_s": tokens / seconds,
                         "plain_tokens_per_s": (before + after) / 2})
    rate = statistics.median(r["eval_tokens_per_s"] for r in rows)
    ratio = statistics.median(r["plain_tokens_per_s"] / r["eval_tokens_per_s"] for r in rows)
    print(f"eval-sae on {a.weights} at {a.site} ({a.latents} latents, TopK {a.k}, "
          f"{a.batch_size} × {a.ctx} tokens per batch): {rate:,.0f} tokens/s; it costs "
          f"{ratio:.2f} plain forward passes per token")
    if a.out:
        Path(a.out).write_text(json.dumps({"settings": vars(a), "rounds": rows,
                                           "tokens_per_s": rate,
                                           "plain_forward_passes": ratio}, indent=2) + "\n")


if __name__ == "__main__":
    main()
