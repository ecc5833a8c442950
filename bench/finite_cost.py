"""What the non-finite check costs (core/model/finite.py): a forward pass with it and
without it, in one process, on the same model and input, interleaved.

    python bench/finite_cost.py                      # gpt124m, T = 1024, float32
    python bench/finite_cost.py --dtype bfloat16 --rounds 9 --threads 1

The check runs after the embedding, after every block and after the head: one float32 vector norm
(finite.fits_norm) over the residual stream (or the logits) each. "Without" replaces the
check by nothing; both runs are otherwise the same code. Rounds alternate the two so a drifting
machine slows both alike; the medians and their ratio are printed.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="gpt124m")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--head", default="all", help="all (logits at every position) or last")
    args = ap.parse_args()

    import torch

    from tfx_cli.core.model import finite
    from tfx_cli.core.model.transformer import Transformer, build_model
    from tfx_cli.core.presets import PRESETS

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = PRESETS[args.config]
    model = build_model(cfg, 123, dtype=getattr(torch, args.dtype))
    ids = torch.randint(0, cfg.vocab_size, (1, args.T), generator=torch.Generator().manual_seed(0))
    checked = Transformer.check_finite
    real_check = finite.check

    def forward() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            model(ids, head=args.head)
        return time.perf_counter() - start

    def off(*_args, **_kw) -> None:
        return None

    inside = [0.0]

    def timed_check(*a, **k) -> None:  # the check, timed where it runs
        start = time.perf_counter()
        try:
            real_check(*a, **k)
        finally:
            inside[0] += time.perf_counter() - start

    forward()  # warm-up: allocator, kernels
    times: dict[str, list[float]] = {"with the check": [], "without": []}
    for r in range(args.rounds):
        # alternate which goes first: a forward right after another runs differently
        for label in (list(times) if r % 2 == 0 else list(times)[::-1]):
            on = label == "with the check"
            Transformer.check_finite = checked if on else off
            finite.check = timed_check if on else off
            times[label].append(forward())
    Transformer.check_finite, finite.check = checked, real_check
    with_, without = (statistics.median(times[k]) for k in times)
    print(f"{args.config}, T = {args.T}, {args.dtype}, head={args.head}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds (median)")
    print(f"  forward with the check    {with_ * 1e3:9.1f} ms")
    print(f"  forward without           {without * 1e3:9.1f} ms")
    print(f"  the check costs           {(with_ - without) * 1e3:9.1f} ms "
          f"({(with_ / without - 1) * 100:+.2f}%)")
    # robust to a busy machine: the time spent in the checks during the checked forwards,
    # as a share of those same forwards
    share = inside[0] / sum(times["with the check"])
    print(f"  the checks inside the forward {inside[0] / args.rounds * 1e3:5.1f} ms per forward "
          f"({share * 100:.2f}% of it)")
    # the checks themselves, timed alone: 12 blocks' streams, the embedding, the logits
    x = torch.randn(1, args.T, cfg.d_model).to(getattr(torch, args.dtype))
    logits = torch.randn(1, args.T if args.head == "all" else 1, cfg.vocab_size).to(x.dtype)
    n = 20
    start = time.perf_counter()
    for _ in range(n):
        for _ in range(cfg.n_layers + 1):
            finite.fits_norm(x)
        finite.fits_norm(logits)
    alone = (time.perf_counter() - start) / n
    print(f"  the checks timed alone    {alone * 1e3:9.1f} ms per forward "
          f"({alone / without * 100:.2f}% of it)")


if __name__ == "__main__":
    main()
