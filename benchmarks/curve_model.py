"""Speed of the curve model (solver/curve_model.py:model_curve) against the number of points, beside
the model as it was before it was made to scale (loaded from git, default 67b4d92, as a module of
its own in this process).

Curves (tests/solver/synthetic.py, every dim from 1 up, each point the median, p10 and p90 of 20
samples with the given relative noise, several seeds):
  * stairs: a 10 % step every 24 dims (synthetic.staircase(24)), the issue's curve. Its latency
    grows geometrically (3.5e8 us at 4,000 dims), so it stops at --stairs-max;
  * tiled: a GEMM's tiles of 24 (synthetic.tiled: 20 us plus 0.05 us per dim, padded to a
    multiple of 24): a step every 24 dims whose relative size shrinks as the latency grows;
  * smooth: no steps at all (one long run: the segmentation's hardest case).
Per size and noise: the new model's median and worst time over the seeds; the old model's
where the size is within --old-max; and whether both read the same frontier, steps and period
(on stairs past about 2,800 dims, where its latency is 1e5 times its start, the running sums of
the weights, cumulative over the curve, keep no precision for one run's: both models read
rounding noise there, and may break its ties differently).

    .venv/bin/python benchmarks/curve_model.py                       # every size, 3 seeds, old up to 2,000
    .venv/bin/python benchmarks/curve_model.py --curves tiled --seeds 5 --old-max 0
    .venv/bin/python benchmarks/curve_model.py --sizes 1000,4000 --old-max 4000
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gac.solver.curve_model import CurveModel, Point, model_curve  # noqa: E402
from tests.solver.synthetic import Measure, measure_fast, smooth, staircase, tiled  # noqa: E402

CURVES: dict[str, Callable[[int], float]] = {
    "stairs": staircase(24),
    "tiled": tiled(24, 0.05, 20.0),
    "smooth": smooth(),
}


def old_model(ref: str) -> ModuleType:
    """solver/curve_model.py as it was at git ref, imported as a module of its own."""
    source = subprocess.run(["git", "show", f"{ref}:solver/curve_model.py"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "curve_model_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("curve_model_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["curve_model_old"] = module
    spec.loader.exec_module(module)
    return module


def timed(model: Callable[[list], CurveModel], points: list) -> tuple[float, CurveModel]:
    start = time.perf_counter()
    result = model(points)
    return time.perf_counter() - start, result


def reading(model: CurveModel) -> tuple:
    return model.frontier, [(s.x_before, s.x) for s in model.steps], model.period and model.period.m


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="250,500,1000,2000,4000,8000,16000")
    parser.add_argument("--curves", default="stairs,tiled,smooth")
    parser.add_argument("--noise", default="0,0.01", help="relative sigma of one timing sample")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--old-ref", default="67b4d92", help="git ref of the model to compare with")
    parser.add_argument("--old-max", type=int, default=2000, help="largest size the old model is timed at (0: never)")
    parser.add_argument("--stairs-max", type=int, default=4000)
    args = parser.parse_args()

    old = old_model(args.old_ref) if args.old_max > 0 else None
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; numpy threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'curve':7} {'noise':>5} {'points':>6} | {'new median':>10} {'new worst':>9} | {'old median':>10} {'old worst':>9} |"
          f" {'speed-up':>8} same")  # fmt: skip
    for curve in args.curves.split(","):
        for noise in (float(v) for v in args.noise.split(",")):
            for n in (int(v) for v in args.sizes.split(",")):
                if curve == "stairs" and n > args.stairs_max:
                    continue
                new_times, old_times, same = [], [], []
                for seed in range(args.seeds):
                    points: list[Point] = measure_fast(CURVES[curve], range(1, n + 1), Measure(sample_noise=noise, seed=seed))
                    seconds, new = timed(model_curve, points)
                    new_times.append(seconds)
                    if old is not None and n <= args.old_max:
                        old_points = [old.Point(p.x, p.median_us, p.p10_us, p.p90_us, p.n) for p in points]
                        seconds, was = timed(old.model_curve, old_points)
                        old_times.append(seconds)
                        same.append(reading(new) == reading(was))
                line = f"{curve:7} {noise:>5.2f} {n:>6} | {statistics.median(new_times):>10.3f} {max(new_times):>9.3f} |"
                if old_times:
                    speedup = statistics.median(old_times) / statistics.median(new_times)
                    line += f" {statistics.median(old_times):>10.3f} {max(old_times):>9.3f} | {speedup:>7.1f}x"
                    line += " yes" if all(same) else f" {len(same) - sum(same)} of {len(same)} differ"
                else:
                    line += f" {'-':>10} {'-':>9} | {'-':>8}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
