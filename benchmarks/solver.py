"""Solver benchmark: our exact MCKP vs OR-Tools (CP-SAT, SCIP) and the paper's quantized DP.

    .venv/bin/python benchmarks/solver.py            # all instances
    .venv/bin/python benchmarks/solver.py --quick    # skip the 5,000-item instance

Instances: Llama-3-8B (224 low-rank weights), Llama-3-70B (560), and a
5,000-item model, at rho = 15 % with ASVD-like irregular ranks. Two candidate
regimes: "rule" (multiples of 8/16/32 within +/-64 of d*, 4-16 candidates) and
"measured" (frontier-like sets that include multiples of 4, 4-16 candidates,
where the paper's quantum u no longer divides every cost). All solvers get the
same integer instance, so "identical optimum" is checked by equality.
Timings are medians in this run; compare ratios, not absolute figures (the
machine is shared).

The random suite (`--suite` runs only it) draws 216 realistic instances in 36
classes: a model (Llama-3-8B-like, 224 low-rank weights; Llama-3-70B-like, 560;
per-head items, 8 KV groups per layer plus the MLP width, 288) x a candidate
kind (every integer dim of a window, 2-40 of them; multiples of 8/16/32, 2-16;
a measured frontier, 2-40 irregular dims) x an importance (uniform: all 1.0,
so value = constant * params, a subset-sum; lognormal; near-tied 1 + 1e-6
noise rounded at 20 bits, as align does, which leaves groups of exact ties;
the same at 30 bits, which keeps them distinct), with tight, mid and loose
budgets. Ours, SCIP and (on the smaller models) CP-SAT solve the same integer
instance; any two proved optima that differ are an error. Per class it prints
the median and worst time ratio ours / fastest OR-Tools backend, the worst
absolute times and how often OR-Tools hit its time limit.

    .venv/bin/python benchmarks/solver.py --suite           # the suite only (~16 min on 2 cores)
    .venv/bin/python benchmarks/solver.py --suite --quick   # one instance per class
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gac.solver.baselines import TooLarge, paper_dp  # noqa: E402
from gac.solver.crosscheck import compare, solve_ortools  # noqa: E402
from gac.solver.mckp import solve_mckp  # noqa: E402

RHO = 0.15


@dataclass
class Instance:
    name: str
    regime: str
    costs: list[list[int]]
    values: list[list[int]]  # integer, as align builds them
    fvalues: list[list[float]]  # s * (params(d) - params(d*)), the paper DP's float values
    budget: int
    u: int  # the paper's quantum: 8 * smallest row count (min(out, in) of any weight)
    u_unit: int  # the other reading of the paper: 8 * smallest parameters per unit of d (in + out)

    @property
    def n(self) -> int:
        return len(self.costs)

    @property
    def cand_range(self) -> tuple[int, int]:
        sizes = [len(c) for c in self.costs]
        return min(sizes), max(sizes)


def llama_shapes(layers: int, hidden: int, inter: int, kv: int) -> list[tuple[int, int]]:
    per_layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (inter, hidden), (inter, hidden), (hidden, inter)]
    return per_layer * layers


def make_instance(name: str, shapes: list[tuple[int, int]], regime: str, seed: int) -> Instance:
    rng = random.Random(seed)
    scores = [rng.lognormvariate(0.0, 0.5) for _ in shapes]
    full = [o * i for o, i in shapes]
    budget_f = (1 - RHO) * sum(full)
    raw = [s**0.5 for s in scores]
    scale = budget_f / sum(r * f for r, f in zip(raw, full))
    s_max = max(scores)
    costs, values, fvalues = [], [], []
    for (o, i), s, r, f in zip(shapes, scores, raw, full):
        unit, top = o + i, min(o, i)
        d_star = min(top, r * scale * f / unit)
        if regime == "rule":
            step = rng.choice([8, 16, 32])
            half = 64
        else:  # a measured frontier: finer steps, narrower window, still 4-16 points
            step = rng.choice([4, 8, 16, 32])
            half = {4: 32, 8: 64, 16: 64, 32: 64}[step]
        grid = range(step, top + 1, step)
        dims = [d for d in grid if abs(d - d_star) <= half]
        if len(dims) < 4:  # near the full rank the window is cut: take the 4 nearest instead
            dims = sorted(sorted(grid, key=lambda d: (abs(d - d_star), d))[:4])
        dims = dims[:16]
        s_int = round(s / s_max * (1 << 20))
        costs.append([unit * d for d in dims])
        values.append([s_int * unit * d for d in dims])
        fvalues.append([s * unit * (d - d_star) for d in dims])
    u = 8 * min(min(o, i) for o, i in shapes)
    u_unit = 8 * min(o + i for o, i in shapes)
    return Instance(name, regime, costs, values, fvalues, math.floor(budget_f), u, u_unit)


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run(inst: Instance, repeats: int, ort_repeats: int, time_limit: float) -> dict:
    solve_mckp(inst.costs, inst.values, inst.budget)  # warm-up (imports, allocator)
    ours_t, ours = median_time(lambda: solve_mckp(inst.costs, inst.values, inst.budget), repeats)
    row: dict = {
        "instance": inst.name, "regime": inst.regime, "items": inst.n, "candidates": "{}-{}".format(*inst.cand_range),
        "ours_ms": ours_t * 1e3, "ours_method": ours.method, "ours_value": ours.value,
        "fixed": ours.fixed_items, "states": ours.max_states,
    }  # fmt: skip
    best_backend, best_t = None, math.inf
    for backend in ("cp-sat", "scip"):
        t, res = median_time(partial(solve_ortools, inst.costs, inst.values, inst.budget, backend, time_limit), ort_repeats)
        compare(ours.value, res)  # raises on any disagreement
        row[f"{backend}_s"] = t
        row[f"{backend}_status"] = res.status
        row[f"{backend}_value"] = res.value
        if res.status == "OPTIMAL" and t < best_t:
            best_backend, best_t = backend, t
    row["fastest_ortools"] = best_backend
    row["speedup"] = best_t / ours_t if best_backend else None
    row["identical_optimum"] = all(row[f"{b}_value"] == ours.value for b in ("cp-sat", "scip") if row[f"{b}_status"] == "OPTIMAL")
    ours_obj = sum(inst.fvalues[i][j] for i, j in enumerate(ours.choice))
    row["ours_objective"] = ours_obj
    for tag, u in (("paper", inst.u), ("paper_unit", inst.u_unit)):
        try:
            pd_t, pd = median_time(partial(paper_dp, inst.costs, inst.fvalues, inst.budget, u), 1)
        except TooLarge as exc:
            row[f"{tag}_s"] = None
            row[f"{tag}_note"] = str(exc)
            continue
        pd_obj = sum(inst.fvalues[i][j] for i, j in enumerate(pd.picks))
        row.update({
            f"{tag}_u": u, f"{tag}_s": pd_t, f"{tag}_raw_violation": max(0, pd.raw_cost - inst.budget),
            f"{tag}_raw_violation_rel": max(0, pd.raw_cost - inst.budget) / inst.budget,
            f"{tag}_objective": pd_obj, f"{tag}_gap_rel": (ours_obj - pd_obj) / abs(ours_obj) if ours_obj else 0.0,
        })  # fmt: skip
    return row


def fmt_row(r: dict) -> str:
    def s(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    papers = []
    for tag in ("paper", "paper_unit"):
        if r.get(f"{tag}_s") is None:
            papers.append(f"{tag} skipped ({r.get(f'{tag}_note')})")
        else:
            papers.append(
                f"{tag}(u={r[f'{tag}_u']}) {r[f'{tag}_s']:.2f} s, raw over budget by {r[f'{tag}_raw_violation']:,} "
                f"({r[f'{tag}_raw_violation_rel']:.1e} of B), gap after repair {r[f'{tag}_gap_rel']:.1e}"
            )
    paper = " | ".join(papers)
    return (
        f"{r['instance']:<12} {r['regime']:<8} n={r['items']:<5} C={r['candidates']:<5} "
        f"ours {r['ours_ms']:8.2f} ms ({r['ours_method']}, fixed {r['fixed']}, states {r['states']}) | "
        f"CP-SAT {s(r['cp-sat_s'])} s {r['cp-sat_status']} | SCIP {s(r['scip_s'])} s {r['scip_status']} | "
        f"speedup x{s(r['speedup'], '.0f')} vs {r['fastest_ortools']} | identical optimum: {r['identical_optimum']} | "
        f"ours objective {r['ours_objective']:.6g} | {paper}"
    )


# ---------------------------------------------------------------- random suite

SUITE_PER_CLASS = 6  # x 36 classes = 216 instances
CANDIDATE_KINDS = ("window", "grid", "measured")
IMPORTANCE_KINDS = ("uniform", "lognormal", "near20", "near30")
BUDGET_KINDS = ("tight", "mid", "loose")
CP_SAT_MAX_ITEMS = 300  # CP-SAT needs 10-100x SCIP's time on the 560-item model: run it on the smaller ones


@dataclass
class SuiteInstance:
    name: str
    cls: str  # model/candidates/importance
    budget_kind: str
    costs: list[list[int]]
    values: list[list[int]]
    budget: int


def suite_model(model: str) -> list[tuple[int, int, tuple[float, float]]]:
    """Per item: (params per unit of d, largest d, range of d* as a share of the largest)."""
    if model in ("8b", "70b"):
        sh = llama_shapes(32, 4096, 14336, 1024) if model == "8b" else llama_shapes(80, 8192, 28672, 1024)
        return [(o + i, min(o, i), (0.2, 0.8)) for o, i in sh]
    # Per-head items: a layer's 8 KV groups (4 q heads, k, v, 4 o heads) each choose a head dim,
    # and the layer's MLP its width.
    layer = [(10 * 4096, 128, (0.4, 0.95))] * 8 + [(3 * 4096, 14336, (0.3, 0.9))]
    return layer * 32


def suite_dims(rng: random.Random, kind: str, d_star: float, top: int) -> list[int]:
    if kind == "window":  # a smooth measured curve: every integer dim around d*
        k = rng.randint(2, 40)
        lo = min(max(1, round(d_star) - k // 2), max(1, top - k + 1))
        return list(range(lo, min(top, lo + k - 1) + 1))
    if kind == "grid":  # the alignment rule: multiples of the step nearest d*
        step = rng.choice([8, 16, 32])
        k = rng.randint(2, 16)
        grid = range(step, top + 1, step)
        return sorted(sorted(grid, key=lambda d: (abs(d - d_star), d))[:k]) or [top]
    k = rng.randint(2, 40)  # a measured frontier: irregular dims in a window twice as wide
    lo = max(1, round(d_star) - k)
    pool = range(lo, min(top, lo + 2 * k) + 1)
    return sorted(rng.sample(pool, min(k, len(pool))))


def suite_instance(model: str, cands: str, importance: str, budget_kind: str, seed: int) -> SuiteInstance:
    rng = random.Random(f"{model}/{cands}/{importance}/{budget_kind}/{seed}")
    items = suite_model(model)
    if importance == "uniform":
        scores = [1.0] * len(items)
    elif importance == "lognormal":
        scores = [rng.lognormvariate(0.0, 0.5) for _ in items]
    else:
        scores = [1.0 + 1e-6 * rng.gauss(0.0, 1.0) for _ in items]
    bits = 30 if importance == "near30" else 20  # align's importance_bits defaults to 20
    s_max = max(scores)
    costs, values = [], []
    compressor = 0.0  # the compressor's own (fractional) choice: the "mid" budget
    for (unit, top, (lo, hi)), s in zip(items, scores):
        d_star = rng.uniform(lo, hi) * top
        dims = suite_dims(rng, cands, d_star, top)
        s_int = round(s / s_max * (1 << bits))
        costs.append([unit * d for d in dims])
        values.append([s_int * unit * d for d in dims])
        compressor += unit * d_star
    smallest = sum(min(c) for c in costs)
    largest = sum(max(c) for c in costs)
    if budget_kind == "mid":
        budget = min(max(int(compressor), smallest), largest)
    else:
        share = rng.uniform(0.01, 0.25) if budget_kind == "tight" else rng.uniform(0.75, 0.99)
        budget = smallest + int(share * (largest - smallest))
    cls = f"{model}/{cands}/{importance}"
    return SuiteInstance(f"{cls}/{budget_kind}#{seed}", cls, budget_kind, costs, values, budget)


def suite_instances(per_class: int) -> list[SuiteInstance]:
    out = []
    classes = itertools.product(("8b", "70b", "8b-heads"), CANDIDATE_KINDS, IMPORTANCE_KINDS)
    for c, (model, cands, importance) in enumerate(classes):
        for k in range(per_class):  # budgets rotate within a class and across classes (--quick sees all three)
            out.append(suite_instance(model, cands, importance, BUDGET_KINDS[(c + k) % 3], k))
    return out


def run_suite_instance(inst: SuiteInstance, time_limit: float, cp_sat_limit: float) -> dict:
    t0 = time.perf_counter()
    ours = solve_mckp(inst.costs, inst.values, inst.budget)
    ours_s = time.perf_counter() - t0
    if ours_s < 0.2:  # short runs are noisy on a shared machine: take the median of three
        more = []
        for _ in range(2):
            t0 = time.perf_counter()
            solve_mckp(inst.costs, inst.values, inst.budget)
            more.append(time.perf_counter() - t0)
        ours_s = statistics.median([ours_s, *more])
    row: dict = {
        "instance": inst.name, "class": inst.cls, "budget": inst.budget_kind, "items": len(inst.costs),
        "candidates": sum(len(c) for c in inst.costs), "ours_s": ours_s, "ours_value": ours.value,
        "ours_method": ours.method, "states": ours.max_states, "errors": [],
    }  # fmt: skip
    backends = [("scip", time_limit)]
    if len(inst.costs) <= CP_SAT_MAX_ITEMS:
        backends.append(("cp-sat", cp_sat_limit))
    for backend, limit in backends:
        res = solve_ortools(inst.costs, inst.values, inst.budget, backend, limit, workers=1)
        row[f"{backend}_s"] = res.seconds
        row[f"{backend}_status"] = res.status
        row[f"{backend}_value"] = res.value
        # Equality, not a tolerance: a proved optimum other than ours, or anything better, is an error.
        if res.value is not None and res.value > ours.value:
            row["errors"].append(f"{backend} found {res.value} > ours {ours.value}")
        elif res.status == "OPTIMAL" and res.value != ours.value:
            row["errors"].append(f"{backend} proved {res.value} != ours {ours.value}")
    proved = [row[f"{b}_s"] for b, _ in backends if row[f"{b}_status"] == "OPTIMAL"]
    row["fastest_ortools_s"] = min(proved) if proved else None
    # Without a proof, OR-Tools took at least its time limit: the ratio is then an upper bound.
    row["ratio"] = ours_s / (min(proved) if proved else max(row[f"{b}_s"] for b, _ in backends))
    row["ortools_limit_hit"] = [b for b, _ in backends if row[f"{b}_status"] != "OPTIMAL"]
    scip_s = row["scip_s"] if row["scip_status"] == "OPTIMAL" else time_limit
    row["within_target"] = ours_s <= max(2.0, 2.0 * scip_s)
    return row


def fmt_suite_row(r: dict) -> str:
    def ort(b: str) -> str:
        if f"{b}_s" not in r:
            return f"{b} -"
        return f"{b} {r[f'{b}_s']:7.2f} s {r[f'{b}_status']}"

    flag = " ERROR: " + "; ".join(r["errors"]) if r["errors"] else ""
    return (
        f"{r['instance']:<36} n={r['items']:<4} C={r['candidates']:<6} ours {r['ours_s'] * 1e3:9.1f} ms "
        f"({r['ours_method']}, states {r['states']}) | {ort('scip')} | {ort('cp-sat')} | ratio {r['ratio']:.3f}{flag}"
    )


def summarize_suite(rows: list[dict]) -> list[str]:
    lines = [
        f"{'class':<30} {'n':>3} {'ratio med':>9} {'ratio worst':>11} {'ours worst':>10} "
        f"{'scip worst':>10} {'cp-sat worst':>12} {'limit hits':>10} {'errors':>6}"
    ]
    by_class: dict[str, list[dict]] = {}
    for r in rows:
        by_class.setdefault(r["class"], []).append(r)

    def worst(rs: list[dict], key: str) -> str:
        xs = [r[key] for r in rs if r.get(key) is not None]
        return f"{max(xs):.2f} s" if xs else "-"

    for cls, rs in by_class.items():
        ratios = [r["ratio"] for r in rs]
        lines.append(
            f"{cls:<30} {len(rs):>3} {statistics.median(ratios):>9.3f} {max(ratios):>11.3f} {worst(rs, 'ours_s'):>10} "
            f"{worst(rs, 'scip_s'):>10} {worst(rs, 'cp-sat_s'):>12} {sum(len(r['ortools_limit_hit']) for r in rs):>10} "
            f"{sum(len(r['errors']) for r in rs):>6}"
        )
    ratios = [r["ratio"] for r in rows]
    slowest = max(rows, key=lambda r: r["ours_s"])
    worst_ratio = max(rows, key=lambda r: r["ratio"])
    hits = {b: [r["instance"] for r in rows if b in r["ortools_limit_hit"]] for b in ("scip", "cp-sat")}
    no_proof = [r["instance"] for r in rows if r["fastest_ortools_s"] is None]
    lines += [
        f"instances: {len(rows)}; errors (disagreements): {sum(len(r['errors']) for r in rows)}",
        f"ratio ours / fastest OR-Tools: median {statistics.median(ratios):.4f}, worst {max(ratios):.3f} ({worst_ratio['instance']})",
        f"worst absolute time, ours: {slowest['ours_s']:.3f} s ({slowest['instance']})",
        f"within max(2 s, 2 x SCIP): {sum(r['within_target'] for r in rows)} of {len(rows)}",
        f"OR-Tools time-limit hits: SCIP {len(hits['scip'])}"
        + (f" ({', '.join(hits['scip'])})" if hits["scip"] else "")
        + f", CP-SAT {len(hits['cp-sat'])} (per class above, per instance in the rows)",
        f"instances no OR-Tools backend proved (ratio vs its time limit): {len(no_proof)}"
        + (f" ({', '.join(no_proof)})" if no_proof else ""),
    ]
    return lines


def run_suite(args: argparse.Namespace) -> list[dict]:
    insts = suite_instances(1 if args.quick else SUITE_PER_CLASS)
    print(f"random suite: {len(insts)} instances", flush=True)
    rows = []
    for inst in insts:
        row = run_suite_instance(inst, args.suite_time_limit, args.cp_sat_time_limit)
        rows.append(row)
        print(fmt_suite_row(row), flush=True)
    for line in summarize_suite(rows):
        print(line)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the 5,000-item instance; one suite instance per class")
    ap.add_argument("--suite", action="store_true", help="run only the random suite")
    ap.add_argument("--suite-time-limit", type=float, default=30.0, help="SCIP's limit per suite instance (s)")
    ap.add_argument("--cp-sat-time-limit", type=float, default=5.0, help="CP-SAT's limit per suite instance (s)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--ortools-repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()

    shapes = {
        "llama3-8b": llama_shapes(32, 4096, 14336, 1024),
        "llama3-70b": llama_shapes(80, 8192, 28672, 1024),
        "5000-items": (llama_shapes(715, 4096, 14336, 1024))[:5000],
    }
    if args.suite:
        rows = run_suite(args)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rows, indent=1))
        sys.exit(1 if any(r["errors"] for r in rows) else 0)
    rows = []
    for regime in ("rule", "measured"):
        for name, sh in shapes.items():
            if args.quick and name == "5000-items":
                continue
            inst = make_instance(name, sh, regime, seed=len(sh))
            big = inst.n >= 5000
            row = run(inst, 5 if big else args.repeats, 1 if big else args.ortools_repeats, args.time_limit)
            rows.append(row)
            print(fmt_row(row), flush=True)
    suite_rows = run_suite(args)
    rows += suite_rows
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    if any(r.get("errors") for r in suite_rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
