"""Does a low-rank pair cost what its two GEMMs cost? (Is the solver right to price a rank as two GEMMs?)

The solver prices a low-rank weight's rank r as two GEMMs, x[m, in] @ A[in, r] (r as N) and
y[m, r] @ B[r, out] (r as K), each timed alone. Inside a model the second one reads the first's
fresh output. This times, per rank, the agent's three kernels (gemm with r as N, gemm with r as K,
and the lowrank pair run back to back) in freshly shuffled rounds, and prints pair / (sum of the
two): a ratio that depends on r % 8 would mean the pair has cliffs of its own that two GEMMs miss.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lowrank_pair.py [--dtype bfloat16] [--in 384 --out 384 --m 128] [--ranks 184 ... 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gac.agent.kernels import build_kernel  # noqa: E402
from gac.agent.timing import WEIGHT_POOL_BYTES  # noqa: E402
from gac.proof.latency import median_of_passes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="bfloat16")
    ap.add_argument("--in", dest="fin", type=int, default=384)
    ap.add_argument("--out", dest="fout", type=int, default=384)
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--ranks", type=int, nargs="+", default=[*range(184, 201), 288, 291, 295, 296, 304, 307, 312])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=15, help="timed calls per kernel and round, after a warm-up; their median counts")
    a = ap.parse_args()
    torch.set_num_threads(1)
    kernels = {}
    pool = WEIGHT_POOL_BYTES  # as the agent times them: weights beyond the caches
    for r in a.ranks:
        kernels["n", r] = build_kernel("gemm", a.dtype, {"m": a.m, "n": r, "k": a.fin}, weight_pool_bytes=pool).fn
        kernels["k", r] = build_kernel("gemm", a.dtype, {"m": a.m, "n": a.fout, "k": r}, weight_pool_bytes=pool).fn
        kernels["pair", r] = build_kernel(
            "lowrank", a.dtype, {"m": a.m, "in_features": a.fin, "rank": r, "out_features": a.fout}, weight_pool_bytes=pool
        ).fn
    times: dict[tuple[str, int], list[float]] = {key: [] for key in kernels}
    rng = random.Random(0)
    for _ in range(a.rounds):
        order = list(kernels)
        rng.shuffle(order)
        for key in order:
            times[key].append(median_of_passes(kernels[key], a.reps, filter_preempted=True)[0])
    med = {key: statistics.median(v) for key, v in times.items()}
    print(f"x[{a.m},{a.fin}] -> rank r -> {a.fout}, {a.dtype}, 1 thread; us, median over {a.rounds} rounds")
    ratios: dict[bool, list[float]] = {True: [], False: []}
    for r in a.ranks:
        n, k, p = med["n", r], med["k", r], med["pair", r]
        ratios[r % 8 == 0].append(p / (n + k))
        print(f"r={r:5d} (r % 8 = {r % 8})  r as N {n:7.1f}  r as K {k:7.1f}  sum {n + k:7.1f}  pair {p:7.1f}  pair/sum {p / (n + k):.3f}")
    for aligned, xs in ratios.items():
        if xs:
            print(f"pair/sum, r % 8 {'== 0' if aligned else '!= 0'}: median {statistics.median(xs):.3f}, range {min(xs):.3f}-{max(xs):.3f}")


if __name__ == "__main__":
    main()
