"""Speed of the two-resource tradeoff solver (solver/tradeoff.py) on Llama-like instances, against CP-SAT.

For each size (Llama-3-8B-like 224 items, 70B-like 560, and 5,000 items) and importance kind
(lognormal per weight, or uniform: importance proportional to params), over a few seeds:
time of the importance optimum (construction), one epsilon point (0.5 %), the 50-point
frontier, the proven gap of the epsilon point, and CP-SAT's time on 3 sampled frontier points
(min latency s.t. params <= budget and importance >= the point's), with ours/CP-SAT.

    .venv/bin/python benchmarks/frontier.py [--sizes 8B,70B,5k] [--seeds 3] [--cpsat-limit 60]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.crosscheck import crosscheck_point  # noqa: E402
from solver.tradeoff import Tradeoff, TradeoffItem  # noqa: E402


def llama_shapes(layers: int, hidden: int, inter: int, kv: int) -> list[tuple[int, int]]:
    """(out, in) of q, k, v, o, gate, up, down per layer."""
    per_layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (inter, hidden), (inter, hidden), (hidden, inter)]
    return per_layer * layers


SIZES = {
    "8B": llama_shapes(32, 4096, 14336, 1024),
    "70B": llama_shapes(80, 8192, 28672, 1024),
    "5k": llama_shapes(715, 4096, 14336, 1024)[:5000],
}


def make_instance(shapes, seed: int, importance: str, period: int = 32, rho: float = 0.15):
    """Every integer dim in a +-5 % window around a compressor's dim competes; staircase latency of `period`."""
    rng = random.Random(seed)
    scores = [1.0 if importance == "uniform" else rng.lognormvariate(0, 0.5) for _ in shapes]
    full = [o * i for o, i in shapes]
    budget = (1 - rho) * sum(full)
    raw = [rng.uniform(0.6, 1.4) for _ in shapes]
    scale = budget / sum(r * f for r, f in zip(raw, full))
    top_score = max(scores)
    items = []
    for (o, i), s, r, f in zip(shapes, scores, raw, full):
        unit, top = o + i, min(o, i)
        dstar = min(top, r * scale * f / unit)
        half = max(16, math.ceil(0.05 * dstar))
        dims = list(range(max(1, math.floor(dstar) - half), min(top, math.ceil(dstar) + half) + 1))
        lat = [int(round(unit * (math.ceil(d / period) * period * 0.9 + d * 0.1) / 100)) for d in dims]
        items.append(TradeoffItem(unit, round(s / top_score * (1 << 20)) * unit, tuple(dims), tuple(lat)))
    return items, int(budget)


def run_one(items, budget, epsilon: float, cpsat_limit: float) -> dict:
    t0 = time.perf_counter()
    tr = Tradeoff(items, budget)
    t1 = time.perf_counter()
    eps = tr.fastest_within(epsilon)
    t2 = time.perf_counter()
    front = tr.frontier(50)
    t3 = time.perf_counter()
    row = {"opt_s": t1 - t0, "eps_s": t2 - t1, "frontier_s": t3 - t2, "points": len(front), "gap": eps.gap, "optimal": eps.optimal}
    # Ours per point: the frontier time shared out over its points (a fair, if rough, per-point figure).
    ours_per_point = (t3 - t2) / max(1, len(front))
    ratios, cp_times, agree = [], [], []
    if cpsat_limit > 0:
        for pt in [front[len(front) // 4], front[len(front) // 2], front[(3 * len(front)) // 4]]:
            ok, _, status, secs = crosscheck_point(items, budget, pt, time_limit_s=cpsat_limit)
            cp_times.append(secs)
            ratios.append(ours_per_point / secs)
            agree.append(f"{status}:{'=' if ok else ('!=' if ok is False else '?')}")
    row.update(cpsat_s=cp_times, ratio=ratios, cpsat=agree)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8B,70B,5k")
    ap.add_argument("--kinds", default="lognormal,uniform")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=0.005)
    ap.add_argument("--cpsat-limit", type=float, default=60.0, help="seconds per CP-SAT point; 0 skips CP-SAT")
    args = ap.parse_args()
    for size in args.sizes.split(","):
        for kind in args.kinds.split(","):
            rows = []
            for seed in range(1, args.seeds + 1):
                items, budget = make_instance(SIZES[size], seed, kind)
                row = run_one(items, budget, args.epsilon, args.cpsat_limit)
                rows.append(row)
                print(f"  {size} {kind} seed {seed}: optimum {row['opt_s']:.2f} s, eps point {row['eps_s']:.3f} s "
                      f"(optimal={row['optimal']}, gap {row['gap']:.1e}), frontier {row['points']} pts {row['frontier_s']:.2f} s, "
                      f"CP-SAT {', '.join(f'{s:.1f}' for s in row['cpsat_s'])} s {row['cpsat']}", flush=True)

            def stat(key: str) -> str:
                xs = [r[key] for r in rows]
                return f"{statistics.median(xs):.3f} / {max(xs):.3f}"

            ratios = [x for r in rows for x in r["ratio"]]
            cp = [x for r in rows for x in r["cpsat_s"]]
            print(f"{size} {kind} ({len(items)} items, {args.seeds} seeds; median / worst): optimum {stat('opt_s')} s, "
                  f"eps point {stat('eps_s')} s, frontier {stat('frontier_s')} s, gap {stat('gap')}"
                  + (f", CP-SAT/pt {statistics.median(cp):.2f} / {max(cp):.2f} s, ours/CP-SAT {statistics.median(ratios):.3g} / {max(ratios):.3g}" if cp else ""),
                  flush=True)


if __name__ == "__main__":
    main()
