"""SAE training throughput: tfx train-sae's step against SAELens's trainer, on the same
activations (one site of a tfx collect folder) and the same settings (TopK, k, latents,
batch size, Adam lr, AuxK on), in tokens per second.

The `tfx-transcoder` peer is train-transcoder's step on pairs of the same folder
(--site the MLP's input, --target-site its output, --skip for W_skip). SAELens 6.54 has
no transcoder trainer (its Transcoder classes only run trained ones), so its SAE of the
same width on --site's rows is the nearest work to set beside it: one encoder and one
decoder product per step either way.

    python bench/sae_bench.py --collect acts --site blocks.15.ln2.out --target-site blocks.15.ffn.out --peers tfx-transcoder,tfx,saelens

    python bench/sae_bench.py --collect acts --site blocks.15.resid_out --steps 20
    python bench/sae_bench.py --collect acts --site blocks.15.resid_out --peers tfx

Each peer runs in a fresh process (`--threads` torch threads), a warm-up of 2 steps,
then `--steps` timed steps over batches drawn from the folder's rows; rounds alternate
the peers' order and the median is reported. SAELens runs its own SAETrainer.fit (its
tqdm, dead-latent bookkeeping and logging included; wandb off) with
TopKTrainingSAE and dense activations (its default); `--peers ...,saelens-sparse` tries
its use_sparse_activations=True, which fails on the CPU with torch 2.13 ("Could not run
'aten::view' with arguments from the 'SparseCPU' backend", sae_lens 6.54). Its TopK rescales activations by the decoder's norms and
its AuxK uses k_aux = d_in / 2 (sae_lens 6.54, saes/topk_sae.py); tfx keeps the rows at
unit norm and uses k_aux = min(512, latents / 2): the work per step is alike.
SAELens must be importable by the interpreter that runs this file (the peers venv of
bench/README.md: `pip install sae-lens` there leaves torch as it is).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rows(collect: str, site: str, limit: int):
    import numpy as np
    from safetensors.numpy import load_file

    manifest = json.loads((Path(collect) / "manifest.json").read_text())
    parts, have = [], 0
    for shard in manifest["shards"]:
        parts.append(load_file(str(Path(collect) / shard["file"]))[site].astype(np.float32))
        have += len(parts[-1])
        if have >= limit:
            break
    return np.concatenate(parts)[:limit]


def _batches(x, batch: int, n: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield x[torch.randint(0, len(x), (batch,), generator=g)]


def run_tfx(a) -> float:
    import torch

    from tfx_cli.core.features.trainer import Trainer

    x = torch.from_numpy(_rows(a.collect, a.site, a.rows))
    scale = float(x.shape[1] ** 0.5 / x.norm(dim=1).mean())
    trainer = Trainer(x.shape[1], a.latents, activation="topk", k=a.k, lr=a.lr,
                      aux_k=min(512, a.latents // 2), dead_after=a.dead_after, scale=scale)
    batches = list(_batches(x * scale, a.batch_size, a.steps + 2))
    for b in batches[:2]:
        trainer.step(b)
    start = time.perf_counter()
    for b in batches[2:]:
        trainer.step(b)
    return a.steps * a.batch_size / (time.perf_counter() - start)


def run_tfx_transcoder(a) -> float:
    """The same trainer as a transcoder (train-transcoder's): rows of --site in, the same
    rows of --target-site out, a skip path with --skip."""
    import torch

    from tfx_cli.core.features.trainer import Trainer

    if not a.target_site:
        raise SystemExit("the tfx-transcoder peer needs --target-site (the MLP's output)")
    x = torch.from_numpy(_rows(a.collect, a.site, a.rows))
    y = torch.from_numpy(_rows(a.collect, a.target_site, a.rows))
    c_in = float(x.shape[1] ** 0.5 / x.norm(dim=1).mean())
    c_out = float(y.shape[1] ** 0.5 / y.norm(dim=1).mean())
    trainer = Trainer(x.shape[1], a.latents, activation="topk", k=a.k, lr=a.lr,
                      aux_k=min(512, a.latents // 2), dead_after=a.dead_after, scale=c_in,
                      transcoder=True, d_out=y.shape[1], scale_out=c_out, skip=a.skip)
    g = torch.Generator().manual_seed(0)
    index = [torch.randint(0, len(x), (a.batch_size,), generator=g) for _ in range(a.steps + 2)]
    pairs = [(x[i] * c_in, y[i] * c_out) for i in index]
    for bx, by in pairs[:2]:
        trainer.step(bx, by)
    start = time.perf_counter()
    for bx, by in pairs[2:]:
        trainer.step(bx, by)
    return a.steps * a.batch_size / (time.perf_counter() - start)


def run_saelens(a, sparse: bool) -> float:
    import torch
    from sae_lens import LoggingConfig, SAETrainer, TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.config import SAETrainerConfig

    x = torch.from_numpy(_rows(a.collect, a.site, a.rows))
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(
        d_in=x.shape[1], d_sae=a.latents, k=a.k, use_sparse_activations=sparse,
        normalize_activations="expected_average_only_in", device="cpu", dtype="float32"))

    def fit(steps: int) -> float:
        cfg = SAETrainerConfig(total_training_samples=steps * a.batch_size,
                               train_batch_size_samples=a.batch_size, lr=a.lr, lr_end=a.lr,
                               device="cpu",
                               dead_feature_window=max(1, a.dead_after // a.batch_size),
                               n_batches_for_norm_estimate=2,
                               logger=LoggingConfig(log_to_wandb=False))
        trainer = SAETrainer(cfg=cfg, sae=sae, data_provider=_batches(x, a.batch_size,
                                                                      steps + 8))
        start = time.perf_counter()
        trainer.fit()
        return time.perf_counter() - start

    fit(2)  # warm-up
    return a.steps * a.batch_size / fit(a.steps)


def child(a) -> None:
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rate = run_tfx(a) if a.peer == "tfx" else run_tfx_transcoder(a) \
        if a.peer == "tfx-transcoder" else run_saelens(a, a.peer == "saelens-sparse")
    print(json.dumps({"peer": a.peer, "tokens_per_s": rate}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collect", required=True)
    p.add_argument("--site", required=True)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--latents", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rows", type=int, default=65536)
    p.add_argument("--dead-after", type=int, default=10_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--peers", default="tfx,saelens")
    p.add_argument("--target-site", help="tfx-transcoder's output site (the MLP's output)")
    p.add_argument("--skip", action="store_true", help="tfx-transcoder with a skip path")
    p.add_argument("--out")
    p.add_argument("--peer", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.peer:
        return child(a)
    peers = a.peers.split(",")
    rates: dict[str, list[float]] = {peer: [] for peer in peers}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for r in range(a.rounds):
        for peer in (peers if r % 2 == 0 else peers[::-1]):
            args = [sys.executable, __file__, "--peer", peer] + [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                if k not in ("peer", "out", "peers", "skip") and v is not None] + (
                ["--skip"] if a.skip else [])
            done = subprocess.run(args, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                errors = [line for line in done.stderr.splitlines() if "Error" in line]
                print(f"{peer}: failed: {(errors or ['?'])[-1][:300]}", file=sys.stderr)
                continue
            rates[peer].append(json.loads(done.stdout.strip().splitlines()[-1])["tokens_per_s"])
            print(f"round {r + 1} {peer}: {rates[peer][-1]:,.0f} tokens/s", file=sys.stderr)
    table = {peer: statistics.median(v) for peer, v in rates.items() if v}
    settings = {k: v for k, v in vars(a).items() if k not in ("peer", "out")}
    print(f"{'peer':16} tokens/s   × tfx")
    for peer, rate in table.items():
        ratio = table.get("tfx", 0) / rate if rate else float("nan")
        print(f"{peer:16} {rate:9,.0f}  {ratio:5.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"settings": settings, "tokens_per_s": rates,
                                           "median": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
