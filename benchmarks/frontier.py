"""Speed of the two-resource tradeoff solver (solver/tradeoff.py) on Llama-like instances, against OR-Tools.

Families: size (one Llama-3-8B layer, 7 items, where CP-SAT proves its optimum; Llama-3-8B-like
224 items, 70B-like 560, 5,000 items) x importance kind (lognormal per weight; uniform:
importance proportional to params, the default without scores; near: every score within
0.1 % of the others, near-tied) x budget (mid: the candidate windows are centred on it;
tight / loose: 20 % / 80 % of the way from the smallest to the largest total). Per instance:
the importance optimum (construction), one epsilon point, the 50-point frontier (and how
evenly it spreads: the widest latency gap between neighbours as a share of the range), and
on 3 sampled frontier points our time for that point (a fresh fastest() call) against CP-SAT
(gac.solver.crosscheck.crosscheck_point: min latency s.t. params <= budget and importance >= the
point's; CP-SAT is the OR-Tools backend that takes both constraints), with the ratio and
whether both optima are identical. Past a few dozen items CP-SAT proves nothing within its
limit: then only a faster choice found by CP-SAT would be a disagreement. --eps-ortools S also
gives the epsilon point itself to CP-SAT and to SCIP (both constraints, zero gap), S seconds each,
and prints their status, latency and time beside ours (the near-tied family's worst case).
A disagreement is printed loudly and the run exits non-zero; so is an epsilon point we could
not prove, or an importance optimum whose latency among its ties is unproven.

    .venv/bin/python benchmarks/frontier.py                   # 8B, every kind, mid budget, CP-SAT 10 s a point (~3 min)
    .venv/bin/python benchmarks/frontier.py --heavy           # + tight/loose budgets, 70B and 5k sizes
    .venv/bin/python benchmarks/frontier.py --sizes 8B --kinds uniform --budgets tight,loose --seeds 3
    .venv/bin/python benchmarks/frontier.py --sizes 1L --seeds 5 --cpsat-limit 60   # CP-SAT proves these
    .venv/bin/python benchmarks/frontier.py --kinds near --cpsat-limit 0 --eps-ortools 300   # the epsilon point vs both
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

from gac.solver.crosscheck import crosscheck_point  # noqa: E402
from gac.solver.tradeoff import Tradeoff, TradeoffItem  # noqa: E402


def llama_shapes(layers: int, hidden: int, inter: int, kv: int) -> list[tuple[int, int]]:
    """(out, in) of q, k, v, o, gate, up, down per layer."""
    per_layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (inter, hidden), (inter, hidden), (hidden, inter)]
    return per_layer * layers


SIZES = {
    "1L": llama_shapes(1, 4096, 14336, 1024),
    "8B": llama_shapes(32, 4096, 14336, 1024),
    "70B": llama_shapes(80, 8192, 28672, 1024),
    "5k": llama_shapes(715, 4096, 14336, 1024)[:5000],
}
BUDGET_FRACTION = {"tight": 0.2, "loose": 0.8}  # of the way from the smallest to the largest total


def make_instance(shapes, seed: int, importance: str, period: int = 32, rho: float = 0.15, budget_kind: str = "mid"):
    """Every integer dim in a +-5 % window around a compressor's dim competes; staircase latency of `period`."""
    rng = random.Random(seed)
    if importance == "uniform":
        scores = [1.0 for _ in shapes]
    elif importance == "near":
        scores = [1.0 + 1e-3 * rng.random() for _ in shapes]
    else:
        scores = [rng.lognormvariate(0, 0.5) for _ in shapes]
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
    if budget_kind in BUDGET_FRACTION:
        lo = sum(it.unit * min(it.dims) for it in items)
        hi = sum(it.unit * max(it.dims) for it in items)
        return items, int(lo + BUDGET_FRACTION[budget_kind] * (hi - lo))
    return items, int(budget)


def run_one(items, budget, epsilon: float, cpsat_limit: float, eps_ortools: float = 0.0) -> dict:
    t0 = time.perf_counter()
    tr = Tradeoff(items, budget)
    t1 = time.perf_counter()
    eps = tr.fastest_within(epsilon)
    t2 = time.perf_counter()
    front = tr.frontier(50)
    t3 = time.perf_counter()
    lats = [p.latency for p in front]
    spread = max((b - a for a, b in zip(lats, lats[1:])), default=0) / max(1, lats[-1] - lats[0])
    row = {
        "opt_s": t1 - t0,
        "eps_s": t2 - t1,
        "frontier_s": t3 - t2,
        "points": len(front),
        "spread": spread,
        "gap": eps.gap,
        "optimal": eps.optimal,
        "tie_proven": tr.stats.optimum_tie_proven,
        "ours_s": [],
        "cpsat_s": [],
        "ratio": [],
        "cpsat": [],
        "errors": [],
        "eps_ortools": [],
    }
    for backend in ("cp-sat", "scip") if eps_ortools > 0 else ():
        ok, theirs, status, secs = crosscheck_point(items, budget, eps.point, time_limit_s=eps_ortools, backend=backend)
        row["eps_ortools"].append(f"{backend} {status} {theirs} in {secs:.1f} s (ours {eps.point.latency} in {t2 - t1:.2f} s)")
        if ok is False:
            row["errors"].append(f"epsilon point: ours {eps.point.latency} (proven {eps.optimal}), {backend} {theirs} ({status})")
    if cpsat_limit > 0:
        for pt in [front[len(front) // 4], front[len(front) // 2], front[(3 * len(front)) // 4]]:
            s0 = time.perf_counter()
            mine = tr.fastest(pt.value)
            ours = time.perf_counter() - s0
            ok, theirs, status, secs = crosscheck_point(items, budget, pt, time_limit_s=cpsat_limit)
            row["ours_s"].append(ours)
            row["cpsat_s"].append(secs)
            row["ratio"].append(ours / secs)
            row["cpsat"].append(f"{status}:{'=' if ok else ('!=' if ok is False else '?')}")
            if ok is False or mine.point.latency != pt.latency or not mine.optimal:
                row["errors"].append(
                    f"point value {pt.value}: ours {pt.latency} (again {mine.point.latency}, proven {mine.optimal}), "
                    f"CP-SAT {theirs} ({status})"
                )
    return row


def _stat(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} / {max(xs):.3f}" if xs else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8B")
    ap.add_argument("--kinds", default="lognormal,uniform,near")
    ap.add_argument("--budgets", default="mid")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--epsilon", type=float, default=0.005)
    ap.add_argument("--cpsat-limit", type=float, default=10.0, help="seconds per CP-SAT point; 0 skips CP-SAT")
    ap.add_argument("--heavy", action="store_true", help="sizes 8B,70B,5k and budgets mid,tight,loose")
    ap.add_argument("--eps-ortools", type=float, default=0.0, help="seconds for CP-SAT and for SCIP on the epsilon point; 0 skips")
    args = ap.parse_args()
    if args.heavy:
        args.sizes, args.budgets = "8B,70B,5k", "mid,tight,loose"
    errors: list[str] = []
    table: list[str] = []
    for size in args.sizes.split(","):
        for kind in args.kinds.split(","):
            for bkind in args.budgets.split(","):
                rows = []
                for seed in range(1, args.seeds + 1):
                    items, budget = make_instance(SIZES[size], seed, kind, budget_kind=bkind)
                    row = run_one(items, budget, args.epsilon, args.cpsat_limit, args.eps_ortools)
                    rows.append(row)
                    print(
                        f"  {size} {kind} {bkind} seed {seed}: optimum {row['opt_s']:.3f} s (tie proven {row['tie_proven']}), "
                        f"eps point {row['eps_s']:.3f} s (optimal={row['optimal']}, gap {row['gap']:.1e}), frontier {row['points']} pts "
                        f"{row['frontier_s']:.2f} s (widest gap {row['spread']:.1%} of the range), "
                        f"sampled points ours {', '.join(f'{s:.3f}' for s in row['ours_s'])} s, "
                        f"CP-SAT {', '.join(f'{s:.2f}' for s in row['cpsat_s'])} s {row['cpsat']}",
                        flush=True,
                    )
                    for line in row["eps_ortools"]:
                        print(f"    epsilon point: {line}", flush=True)
                    for e in row["errors"]:
                        msg = f"!!! DISAGREEMENT {size} {kind} {bkind} seed {seed}: {e}"
                        print(msg, flush=True)
                        errors.append(msg)
                    if not row["optimal"] or not row["tie_proven"]:
                        errors.append(
                            f"!!! UNPROVEN {size} {kind} {bkind} seed {seed}: epsilon point optimal={row['optimal']} "
                            f"(gap {row['gap']:.1e}), importance optimum's tie proven={row['tie_proven']}"
                        )
                table.append(_summary(size, kind, bkind, len(items), args.seeds, rows))
                print(table[-1], flush=True)
    print("\n| family | opt s | eps s | frontier s | widest gap | eps proven | fresh point s | CP-SAT s | ours/CP-SAT | CP-SAT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(*table, sep="\n")
    print("(median / worst over seeds and sampled points)")
    if errors:
        print(f"\n!!! {len(errors)} PROBLEM(S):", *errors, sep="\n", flush=True)
        return 1
    return 0


def _summary(size: str, kind: str, bkind: str, n: int, seeds: int, rows: list[dict]) -> str:
    """One table row: median / worst per measure, CP-SAT's verdicts counted."""
    marks = [c for r in rows for c in r["cpsat"]]
    same = f"{sum(c.endswith(':=') for c in marks)}/{len(marks)} proven =, {sum(c.endswith(':!=') for c in marks)} !=" if marks else "-"
    proven = sum(r["optimal"] for r in rows)
    return (
        f"| {size} {kind} {bkind} ({n} items, {seeds} seeds) | "
        f"{_stat([r['opt_s'] for r in rows])} | {_stat([r['eps_s'] for r in rows])} | "
        f"{_stat([r['frontier_s'] for r in rows])} | {_stat([r['spread'] for r in rows])} | {proven}/{len(rows)} | "
        f"{_stat([x for r in rows for x in r['ours_s']])} | {_stat([x for r in rows for x in r['cpsat_s']])} | "
        f"{_stat([x for r in rows for x in r['ratio']])} | {same} |"
    )


if __name__ == "__main__":
    sys.exit(main())
