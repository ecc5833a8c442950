"""The `ray` group of bench/run.py: tfx scan over python-docs with SmolLM2 on
--engine local against --engine ray with 1 and 2 workers, in one process.

The Ray runtime (ray.init on this machine's CPUs, a temporary folder) is started once and
timed apart ("runtime start"); each Ray run then includes what a run pays every time: the
actor pool's start, each actor loading the model, shipping batches and partial results.
The local run is timed after the model is loaded once (a warm-up scan of one document),
as the local engine loads it in the run's own process, once before the Ray runs and once
after (on a shared machine the load drifts; "x local" is against the first). Same total torch threads: local
uses torch's default (this machine's cores); a ray worker gets the cores divided among the
workers. The results are checked equal (the scan tensors within 1e-6) before timing counts.
Run: python bench/ray_bench.py [--docs 100] [--weights smollm2] (or python bench/run.py
--cases ray).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100, help="python-docs paragraphs")
    ap.add_argument("--weights", default="smollm2")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args(argv)

    import numpy as np
    import ray
    import torch

    from tfx_cli import api

    run = dict(max_docs=args.docs, batch_size=args.batch_size, weights=args.weights)
    rows = []
    api.scan("python-docs", max_docs=1, weights=args.weights)  # the model, loaded once

    def run_local():
        t0 = time.perf_counter()
        result = api.scan("python-docs", **run)
        wall = time.perf_counter() - t0
        rows.append({"engine": "local", "workers": None, "threads": torch.get_num_threads(),
                     "tokens": result.tokens, "wall_s": round(wall, 2),
                     "tokens_per_s": round(result.tokens / wall, 1)})
        return result

    local = run_local()  # before and after the Ray runs: the machine's load drifts

    folder = tempfile.mkdtemp(prefix="tfx-ray-bench-")
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), _temp_dir=folder,
             include_dashboard=False, log_to_driver=False, logging_level="error")
    startup = time.perf_counter() - t0
    try:
        for workers in [int(w) for w in args.workers.split(",")]:
            t0 = time.perf_counter()
            far = api.scan("python-docs", engine="ray", workers=workers, **run)
            wall = time.perf_counter() - t0
            for name in local.tensors.names():
                np.testing.assert_allclose(far.tensors[name], local.tensors[name], atol=1e-6,
                                           rtol=0)
            rows.append({"engine": "ray", "workers": workers,
                         "threads": max(1, (os.cpu_count() or 1) // workers),
                         "tokens": far.tokens, "wall_s": round(wall, 2),
                         "tokens_per_s": round(far.tokens / wall, 1),
                         "vs_local": round(rows[0]["wall_s"] / wall, 2)})
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    run_local()

    print(f"tfx scan python-docs --max-docs {args.docs} -w {args.weights} "
          f"--batch-size {args.batch_size}: {local.tokens} tokens, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"Ray runtime start (ray.init, local, once): {startup:.1f} s")
    print(f"{'engine':8} {'workers':>7} {'threads':>7} {'wall s':>8} {'tokens/s':>9} "
          f"{'x local':>8}")
    for r in rows:
        print(f"{r['engine']:8} {r['workers'] or '-':>7} {r['threads']:>7} {r['wall_s']:>8} "
              f"{r['tokens_per_s']:>9} {r.get('vs_local', 1.0):>8}")
    print(json.dumps({"ray_startup_s": round(startup, 2), "runs": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
