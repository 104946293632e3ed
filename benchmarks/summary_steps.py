"""What a run's summary shows as each curve's largest step, with and without timing it again, and what that costs.

The quick plan is run alternately as it was (the largest raw step between neighbours whose p10..p90 do not
overlap) and with the runner's step check (gac.agent.steps: the largest steps timed again at both ends in
turn, shown only if they repeat, with the smaller figure), --runs times each, in one process on this
machine, each way first every other run. Per run it prints each curve's step both ways and the run's
seconds; at the end the time with the check over the time without, median and worst.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/summary_steps.py [--runs 4] [--dtype float32] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gac.agent.plan_library import quick_plan  # noqa: E402
from gac.agent.platform import detect_platform  # noqa: E402
from gac.agent.runner import PlanRunner, RunResult  # noqa: E402
from gac.agent.steps import CONFIRM_STEPS, steps_beyond_noise  # noqa: E402
from gac.agent.timing import make_timer  # noqa: E402
from gac.contracts.plans import SweepPlan  # noqa: E402


def raw_steps(result: RunResult, plan: SweepPlan) -> dict[int, str]:
    """Per sweep, the largest step beyond the points' own noise, as the summary showed it before the check."""
    curves: dict[int, list] = {}
    for o in result.outcomes:
        if o.result is not None and o.measurement is not None and o.measurement.quality is None:
            curves.setdefault(o.point.sweep, []).append((o.point.shape[o.point.axis], o.result))
    out = {}
    for i, curve in curves.items():
        found = steps_beyond_noise(sorted(curve, key=lambda p: p[0]))
        out[i] = f"{found[0].first:+.0%} {found[0].lo}->{found[0].hi}" if found else "none beyond noise"
    return out


def checked_steps(result: RunResult, plan: SweepPlan) -> dict[int, str]:
    return {i: check.describe(plan.sweeps[i].axis) for (i, _), check in result.steps.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=4, help="runs each way, alternating")
    ap.add_argument("--dtype", default=None, help="the plan's dtype (default: the platform's fast one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    platform = detect_platform(a.device)
    plan = quick_plan([a.dtype or platform.fast_dtype or "float32"])
    timer = make_timer(a.device, a.threads if a.device == "cpu" else None)
    print(f"{platform.device_name} ({platform.isa}), torch {platform.torch_version}, plan {plan.name}, {plan.n_points()} points")
    seconds: dict[str, list[float]] = {"raw": [], "checked": []}
    ways = (("raw", 0), ("checked", CONFIRM_STEPS))
    for run in range(a.runs):
        for way, confirm in ways if run % 2 == 0 else ways[::-1]:  # each goes first every other run
            t0 = time.perf_counter()
            result = PlanRunner(timer, a.device, confirm_steps=confirm).run(plan)
            seconds[way].append(time.perf_counter() - t0)
            shown = checked_steps(result, plan) if confirm else raw_steps(result, plan)
            cells = " | ".join(f"{plan.sweeps[i].op.value} {plan.sweeps[i].axis}: {shown[i]}" for i in sorted(shown))
            print(f"run {run + 1} {way:7s} {seconds[way][-1]:5.1f} s  {cells}", flush=True)
    ratios = [c / r for c, r in zip(seconds["checked"], seconds["raw"])]
    print(
        f"checked / raw time, run by run: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x "
        f"(raw {statistics.median(seconds['raw']):.1f} s, checked {statistics.median(seconds['checked']):.1f} s, medians)"
    )


if __name__ == "__main__":
    main()
