"""Is a GEMM width's time a property of the width, or of one measurement burst (or one allocation)?

The profiler times each point in one burst, so a noisy spell moves a whole point. This times a few
widths of F.linear(x[m, k], W[n, k]) with several separately allocated weights each, every
(width, allocation) pair once per round in a freshly shuffled order, and prints per width the
median over allocations, the range between allocations and within them, and the widths that are
multiples of 8 against the others: a comb (multiples fast, every other width slower) shows as a
lower median at n % 8 == 0 with small ranges; placement effects show as a wide range between
allocations of one width.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gemm_comb.py [--widths 1903 1904 ...] [--m 128 --k 1024] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[1903, 1904, 1905, 1906, 1911, 1912, 1913, 1920])
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--allocations", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--reps", type=int, default=7, help="timed calls per (width, allocation) and round; their median counts")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(0)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.m, args.k, dtype=dtype)
    weights = {}
    spacers = []  # kept alive so that each weight is a separate allocation at another place
    for n in args.widths:
        for a in range(args.allocations):
            spacers.append(torch.empty(rng.randint(1, 5000)))
            weights[(n, a)] = torch.randn(n, args.k, dtype=dtype)
    times: dict[tuple[int, int], list[float]] = {key: [] for key in weights}
    keys = list(weights)
    for _ in range(args.rounds):
        rng.shuffle(keys)
        for key in keys:
            w = weights[key]
            F.linear(x, w)  # warm
            calls = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                F.linear(x, w)
                calls.append(time.perf_counter() - t0)
            times[key].append(statistics.median(calls) * 1e3)
    print(f"F.linear(x[{args.m},{args.k}], W[n,{args.k}]), {args.dtype}, 1 thread; ms, median of {args.reps} calls per round")
    medians = {}
    for n in args.widths:
        per = [statistics.median(times[(n, a)]) for a in range(args.allocations)]
        spreads = [(max(times[(n, a)]) - min(times[(n, a)])) / statistics.median(times[(n, a)]) for a in range(args.allocations)]
        within = statistics.median(spreads)
        medians[n] = statistics.median(per)
        print(
            f"n={n:5d} (n % 8 = {n % 8}): median {medians[n]:.2f} ms over {args.allocations} allocations; "
            f"range between allocations {100 * (max(per) - min(per)) / medians[n]:.0f} %, within one (over rounds) {100 * within:.0f} %"
        )
    aligned = [t for n, t in medians.items() if n % 8 == 0]
    other = [t for n, t in medians.items() if n % 8]
    if aligned and other:
        print(
            f"multiples of 8: median {statistics.median(aligned):.2f} ms; others {statistics.median(other):.2f} ms "
            f"({statistics.median(other) / statistics.median(aligned):.3f}x)"
        )


if __name__ == "__main__":
    main()
