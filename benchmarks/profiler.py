"""CPU cliff map of this machine, and what the timing method and adaptive refinement buy.

    .venv/bin/python benchmarks/profiler.py [--lo 64 --hi 160 --threads 1 --out-dir benchmarks/results]

1. GEMM in the platform's fast dtype (or --dtype; M=256; N swept with K=256, K swept with N=256), every value
   in lo..hi, each point timed twice, interleaved: by the stopping rule
   (gac.agent.timing.CpuTimer) and by a fixed 100-repetition loop of
   individually timed calls; then the whole sweep again. Side by side: wall
   time per point, sample spread (p90-p10)/median, the relative half-width of
   the median's 95 % CI, and how far the median moved on the repeat. Steps are found by the
   solver's noise-aware detector (gac.solver.cliffs.find_steps), as the dashboard and the solver find them.
2. The same sweeps with adaptive refinement (coarse step 8, refine where the
   latency jumps > 6 %): the share of points it timed and how many of the
   exhaustive sweep's steps it found.
Writes profiler_cliff_map.csv and profiler_cliff_map.png to --out-dir.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's solver, not benchmarks/solver.py

from gac.agent.dtypes import choose_dtype  # noqa: E402
from gac.agent.kernels import build_kernel  # noqa: E402
from gac.agent.plan_library import cliff_map_plan  # noqa: E402
from gac.agent.platform import detect_platform  # noqa: E402
from gac.agent.runner import run_plan  # noqa: E402
from gac.agent.timing import CpuTimer, TimingResult, fixed_loop, median_ci  # noqa: E402
from gac.contracts.measurements import (  # noqa: E402
    Dtype,
    Op,
    PlatformDescriptor,  # noqa: E402
)
from gac.contracts.plans import Sweep, SweepPlan, Timing  # noqa: E402
from gac.solver.cliffs import Point  # noqa: E402
from gac.solver.cliffs import find_steps as detect_steps  # noqa: E402


def ci_rel(r: TimingResult) -> float:
    lo, hi = median_ci(sorted(r.samples_us))
    return max(r.median_us - lo, hi - r.median_us) / r.median_us


def find_steps(points: dict[int, Point]) -> list[int]:
    """The first dim after each upward step the noise-aware detector finds."""
    return [s.x for s in detect_steps([points[x] for x in sorted(points)]) if s.size_pct > 0]


def as_point(x: int, r: TimingResult) -> Point:
    return Point(x, r.median_us, r.p10_us, r.p90_us, r.n)


def simulate_adaptive(curve: dict[int, Point], coarse_step: int, jump: float) -> set[int]:
    """The points adaptive refinement would time if the coarse pass saw these medians."""
    from gac.agent.runner import values_to_refine

    full = sorted(curve)
    coarse = full[::coarse_step] + ([full[-1]] if (len(full) - 1) % coarse_step else [])
    return set(coarse) | set(values_to_refine(full, coarse, {v: curve[v].median_us for v in coarse}, jump))


def _load() -> str:
    try:
        import os

        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


@dataclass
class Sweeps:
    """The exhaustive sweeps: one CSV row per point, and each method's curve per axis."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rule: dict[str, dict[int, Point]] = field(default_factory=lambda: {"n": {}, "k": {}})
    fixed: dict[str, dict[int, Point]] = field(default_factory=lambda: {"n": {}, "k": {}})
    seconds: float = 0.0


def time_point(sweep: Sweep, v: int, dtype: Dtype, timer: CpuTimer, timing: Timing, reps: int) -> tuple[TimingResult, TimingResult]:
    """One point by the stopping rule, then by the fixed loop, on one kernel."""
    with torch.inference_mode():
        k = build_kernel(Op.gemm, dtype, sweep.shape_at(v), weight_pool_bytes=timer.weight_pool_bytes)
        return timer.time(k.fn, timing), fixed_loop(k.fn, reps=reps)


def time_exhaustive(plan: SweepPlan, dtype: Dtype, timer: CpuTimer, reps: int) -> Sweeps:
    """Every point of the plan, both methods interleaved."""
    out = Sweeps()
    t0 = time.perf_counter()
    for sweep in plan.sweeps:
        for v in sweep.value_list():
            rule, fixed = time_point(sweep, v, dtype, timer, plan.timing, reps)
            out.rule[sweep.axis][v] = as_point(v, rule)
            out.fixed[sweep.axis][v] = as_point(v, fixed)
            out.rows.append(
                {
                    "axis": sweep.axis,
                    "value": v,
                    **{f"fixed_{a}": b for a, b in sweep.fixed.items()},
                    "rule_median_us": round(rule.median_us, 3),
                    "rule_p10_us": round(rule.p10_us, 3),
                    "rule_p90_us": round(rule.p90_us, 3),
                    "rule_n": rule.n,
                    "rule_inner": rule.inner,
                    "rule_stop": rule.stop,
                    "rule_wall_s": round(rule.wall_s, 4),
                    "rule_spread": round(rule.spread, 4),
                    "rule_ci": round(ci_rel(rule), 4),
                    "fixed_median_us": round(fixed.median_us, 3),
                    "fixed_p10_us": round(fixed.p10_us, 3),
                    "fixed_p90_us": round(fixed.p90_us, 3),
                    "fixed_wall_s": round(fixed.wall_s, 4),
                    "fixed_spread": round(fixed.spread, 4),
                    "fixed_ci": round(ci_rel(fixed), 4),
                }
            )
            print(
                f"  {sweep.axis}={v:4d}  rule {rule.median_us:8.1f} us (n={rule.n:4d}, {rule.stop:9s}, spread {rule.spread:.3f}, "
                f"{rule.wall_s * 1e3:5.0f} ms)   fixed-{reps} {fixed.median_us:8.1f} us (spread {fixed.spread:.3f}, "
                f"{fixed.wall_s * 1e3:5.0f} ms)",
                flush=True,
            )
    out.seconds = time.perf_counter() - t0
    return out


def repeat_exhaustive(sweeps: Sweeps, plan: SweepPlan, dtype: Dtype, timer: CpuTimer, reps: int) -> None:
    """Every point again, same interleaving: how far each method's median moves a minute later."""
    for r, (sweep, v) in zip(sweeps.rows, [(s, v) for s in plan.sweeps for v in s.value_list()]):
        rule2, fixed2 = time_point(sweep, v, dtype, timer, plan.timing, reps)
        r["rule_repeat_median_us"] = round(rule2.median_us, 3)
        r["fixed_repeat_median_us"] = round(fixed2.median_us, 3)
        r["rule_repeat_diff"] = round(abs(rule2.median_us / r["rule_median_us"] - 1), 4)
        r["fixed_repeat_diff"] = round(abs(fixed2.median_us / r["fixed_median_us"] - 1), 4)
        r["rule_repeat_p10_diff"] = round(abs(rule2.p10_us / r["rule_p10_us"] - 1), 4)
        r["fixed_repeat_p10_diff"] = round(abs(fixed2.p10_us / r["fixed_p10_us"] - 1), 4)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    fields = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def time_adaptive(lo: int, hi: int, dtype: Dtype, timer: CpuTimer) -> tuple[dict[str, dict[int, Point]], int, float]:
    """The adaptive plan over the same grid, live: its curves, its point count and its seconds."""
    t1 = time.perf_counter()
    adaptive = run_plan(cliff_map_plan(adaptive=True, lo=lo, hi=hi, dtype=dtype), timer)
    seconds = time.perf_counter() - t1
    curves: dict[str, dict[int, Point]] = {"n": {}, "k": {}}
    for m in adaptive.measurements:
        curves[m.sweep_axis][m.x] = Point(m.x, m.median_us, m.p10_us, m.p90_us, m.n)
    return curves, len(adaptive.measurements), seconds


def print_methods(rows: list[dict[str, Any]], reps: int) -> None:
    """Per method: time per point, sample spread, the median's CI and how far a repeat moved it."""
    for label, key in (("stopping rule", "rule"), (f"fixed {reps}-rep loop", "fixed")):
        walls = [r[f"{key}_wall_s"] * 1e3 for r in rows]
        spreads = [r[f"{key}_spread"] for r in rows]
        ci_list = sorted(r[f"{key}_ci"] for r in rows)
        rep = sorted(r[f"{key}_repeat_diff"] for r in rows)
        rep10 = sorted(r[f"{key}_repeat_p10_diff"] for r in rows)
        print(
            f"  {label:18s} time/point median {statistics.median(walls):6.1f} ms (total {sum(walls) / 1e3:5.1f} s)  "
            f"sample spread median {statistics.median(spreads):.3f}  median-CI half-width median {statistics.median(ci_list):.4f} "
            f"p90 {ci_list[int(0.9 * len(ci_list))]:.4f}  |repeat-1st|/1st median {statistics.median(rep):.4f} "
            f"p90 {rep[int(0.9 * len(rep))]:.4f}  (same for p10: median {statistics.median(rep10):.4f})"
        )
    stops = {s: sum(1 for r in rows if r["rule_stop"] == s) for s in ("spread", "median_ci", "time_cap", "max_samples")}
    print(f"  stopping rule ended by: {stops}")


def print_steps(sweeps: Sweeps, live: dict[str, dict[int, Point]]) -> None:
    """Per axis: the steps each method finds, and which of them adaptive refinement catches."""
    ad_plan = cliff_map_plan(adaptive=True).sweeps[0].adaptive
    assert ad_plan is not None
    for axis in ("n", "k"):
        ex = find_steps(sweeps.rule[axis])
        print(f"  {axis}: steps, exhaustive, stopping rule: {ex}")
        print(f"  {axis}: steps, exhaustive, fixed loop:    {find_steps(sweeps.fixed[axis])}")
        # Same data, adaptive selection: which points would it have timed, and are both
        # sides of every exhaustive step among them?
        total = len(sweeps.rule[axis])
        sim = simulate_adaptive(sweeps.rule[axis], ad_plan.coarse_step, ad_plan.jump)
        caught = [s for s in ex if s in sim and s - 1 in sim]
        print(
            f"  {axis}: adaptive on the same medians: {len(sim)}/{total} points "
            f"({len(sim) / total:.0%}), both sides of {len(caught)}/{len(ex)} steps timed"
        )
        live_steps = find_steps(live[axis])
        near = [s for s in ex if any(abs(s - a) <= 1 for a in live_steps)]
        print(
            f"  {axis}: adaptive live run: {len(live[axis])}/{total} points ({len(live[axis]) / total:.0%}), "
            f"steps {live_steps}, {len(near)}/{len(ex)} within +/-1 of an exhaustive step"
        )


def plot(sweeps: Sweeps, live: dict[str, dict[int, Point]], dtype: Dtype, platform: PlatformDescriptor, reps: int, png: Path) -> bool:
    """The cliff map as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install matplotlib)")
        return False
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=False)
    for ax, axis in zip(axes, ("n", "k")):
        sub = [r for r in sweeps.rows if r["axis"] == axis]
        xs = [r["value"] for r in sub]
        ax.fill_between(xs, [r["rule_p10_us"] for r in sub], [r["rule_p90_us"] for r in sub], alpha=0.2, label="rule p10..p90")
        ax.plot(xs, [r["rule_median_us"] for r in sub], "-", lw=1.4, label="stopping rule median")
        ax.plot(xs, [r["fixed_median_us"] for r in sub], ":", lw=1.0, label=f"fixed {reps}-rep median")
        ad = sorted(live[axis].items())
        ax.plot([x for x, _ in ad], [p.median_us for _, p in ad], "o", ms=3, label="adaptive points")
        for s in find_steps(sweeps.rule[axis]):
            ax.axvline(s - 0.5, color="grey", lw=0.5, alpha=0.6)
        other = "K=256" if axis == "n" else "N=256"
        ax.set_title(f"{dtype.value} GEMM M=256, {other}, {axis.upper()} swept")
        ax.set_xlabel(axis.upper())
        ax.set_ylabel("latency (us)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{platform.label()}, {platform.threads} thread(s), oneDNN {platform.onednn_version}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lo", type=int, default=64)
    ap.add_argument("--hi", type=int, default=160)
    ap.add_argument(
        "--threads", type=int, default=1, help="1 by default: on a shared 2-core VM two OpenMP threads stall when a core is taken"
    )
    ap.add_argument("--reps", type=int, default=100, help="repetitions of the fixed-loop baseline")
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--dtype", choices=[d.value for d in Dtype], help="default: the platform's fast dtype")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)

    timer = CpuTimer(threads=args.threads)
    platform = detect_platform("cpu")
    print(f"platform: {platform.label()}  isa={platform.isa}  threads={platform.threads}  fp={platform.fingerprint()[:16]}")
    dtype_name, why = choose_dtype(platform, args.dtype)
    dtype = Dtype(dtype_name)
    print(why)
    plan = cliff_map_plan(adaptive=False, lo=args.lo, hi=args.hi, dtype=dtype)
    load0 = _load()
    sweeps = time_exhaustive(plan, dtype, timer, args.reps)
    repeat_exhaustive(sweeps, plan, dtype, timer, args.reps)
    csv_path = args.out_dir / "profiler_cliff_map.csv"
    write_csv(sweeps.rows, csv_path)
    live, live_points, adaptive_s = time_adaptive(args.lo, args.hi, dtype, timer)

    print()
    print(f"load average during the run: {load0} -> {_load()} (2 cores; other sessions share them)")
    print(f"exhaustive sweep: {len(sweeps.rows)} points in {sweeps.seconds:.1f} s (rule + fixed loop interleaved), then repeated")
    print_methods(sweeps.rows, args.reps)
    print_steps(sweeps, live)
    print(f"adaptive sweep: {live_points} points in {adaptive_s:.1f} s")
    png = args.out_dir / "profiler_cliff_map.png"
    print(f"wrote {csv_path} and {png}" if plot(sweeps, live, dtype, platform, args.reps, png) else f"wrote {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
