"""How many points `gac align --profile-missing` measures per example manifest: dense (--exhaustive,
every dim of each window) against sparse (each window's lattice and a sample first, then only the
dims the lattice fit cannot rule out: solver/sparse_needs.py), side by side.

The first pass needs no platform: it is what the rules-only alignment lists, as from an empty
database. The later passes depend on what the first one measured, so they are simulated, rounds
as in gac/commands/profile_missing.py, on SYNTHETIC platforms (no GPU timing is invented here:
their latencies only decide which points are asked for next):

  h100-lattice  synthetic: a GEMM's multiples of 8 at the work's share of the H100 fixture's own
                (tests/solver/data/h100_lattice.csv), the other classes slower by the factors that
                fixture measured (odd, 2 mod 4, 4 mod 8), 3 % point-to-point scatter;
  cpu-staircase synthetic: tiles of 16 (tests/solver/synthetic.py:gemm_truth), no lattice: the
                fallback to every dim.

Times are given only at the H100 fixture's own wall time per point (its measured_at stamps, per
plan), as a range, and say so.

    .venv/bin/python benchmarks/needs.py                       # every manifest of examples/, both platforms
    .venv/bin/python benchmarks/needs.py examples/llama3-8b-asvd-r15.json --platforms h100-lattice
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gac.contracts.alignment import AlignmentResult  # noqa: E402
from gac.contracts.manifest import Manifest  # noqa: E402
from gac.contracts.measurements import Op, op_flops, parse_shape_key  # noqa: E402
from gac.solver.align import AlignOptions, align  # noqa: E402
from gac.solver.candidates import CandidateOptions  # noqa: E402
from gac.solver.lattice import lattice_class  # noqa: E402
from gac.solver.lookup import FileLookup  # noqa: E402
from tests.solver.synthetic import gemm_truth  # noqa: E402

FIXTURE = ROOT / "tests" / "solver" / "data" / "h100_lattice.csv"
MAX_ROUNDS = 3  # as gac/commands/profile_missing.py
SCATTER = 0.03  # synthetic point-to-point scatter (relative)
Truth = Callable[[str, dict[str, int], str], float]


def fixture_rows() -> list[dict[str, str]]:
    with open(FIXTURE, newline="") as fh:
        return list(csv.DictReader(fh))


def class_factors(rows: list[dict[str, str]]) -> tuple[dict[int, float], float]:
    """The fixture's GEMM curves: each class's median latency over the multiples of 8's (averaged over
    the curves), and the multiples of 8's median microseconds per GFLOP."""
    ratios: dict[int, list[float]] = {}
    per_gflop = []
    for axis in ("n", "k"):
        pts = [r for r in rows if r["op"] == "gemm" and r["axis"] == axis and int(r["x"]) < 2000]
        lat = {int(r["x"]): float(r["median_us"]) for r in pts}
        fast = statistics.median(v for x, v in lat.items() if x % 8 == 0)
        for c in (1, 2, 4):
            ratios.setdefault(c, []).append(statistics.median(v for x, v in lat.items() if lattice_class(x) == c) / fast)
        fixed = parse_shape_key(pts[0]["fixed"])
        per_gflop += [v / op_flops(Op.gemm, {**fixed, axis: x}) * 1e9 for x, v in lat.items() if x % 8 == 0]
    return {c: statistics.mean(r) for c, r in ratios.items()}, statistics.median(per_gflop)


def seconds_per_point(rows: list[dict[str, str]]) -> tuple[float, float]:
    """The fixture's wall time per point, per plan of 50 points or more (first to last stamp): the range."""
    rates = []
    for plan in {r["plan"] for r in rows}:
        stamps = sorted(datetime.datetime.fromisoformat(r["measured_at"]) for r in rows if r["plan"] == plan)
        if len(stamps) >= 50:
            rates.append((stamps[-1] - stamps[0]).total_seconds() / (len(stamps) - 1))
    return min(rates), max(rates)


def h100_lattice(rows: list[dict[str, str]]) -> Truth:
    factors, us_per_gflop = class_factors(rows)

    def truth(op: str, shape: dict[str, int], axis: str) -> float:
        base = op_flops(Op(op), shape) / 1e9 * us_per_gflop
        return base * factors.get(lattice_class(shape[axis]), 1.0)

    return truth


def cpu_staircase(op: str, shape: dict[str, int], axis: str) -> float:
    return gemm_truth({**shape, axis: 1}, axis, 16)(shape[axis])


def measured(points: list[tuple], truth: Truth) -> list[tuple]:
    """FileLookup rows of the points, each drawn (seeded by the point) around its truth."""
    rows = []
    for op, dtype, shape, axis in points:
        seed = hash((op, axis, tuple(sorted(shape.items())))) % (1 << 32)
        t = truth(op, shape, axis) * (1 + SCATTER * np.random.default_rng(seed).standard_normal())
        rows.append((op, dtype, shape, axis, t, 0.97 * t, 1.05 * t, 50))
    return rows


def missing_points(result: AlignmentResult) -> list[tuple]:
    return [(m.op, m.dtype, {**m.fixed_shape, m.axis: d}, m.axis) for m in result.missing for d in m.dims]


@dataclass
class Run:
    rounds: list[int]  # points measured per round
    result: AlignmentResult
    align_s: list[float]  # each alignment's seconds


def profile(manifest: Manifest, truth: Truth, exhaustive: bool) -> Run:
    """The profile-missing loop from an empty database: align, measure what is missing, align again."""
    opts = AlignOptions(candidates=CandidateOptions(sparse=not exhaustive), cross_check="none", baselines=False)
    have: list[tuple] = []
    rounds, seconds = [], []
    result = align(manifest, None, opts)
    for _ in range(MAX_ROUNDS):
        points = missing_points(result)
        if not points:
            break
        rounds.append(len(points))
        have += measured(points, truth)
        started = time.perf_counter()
        result = align(manifest, FileLookup(have, "synthetic"), opts)
        seconds.append(time.perf_counter() - started)
    return Run(rounds, result, seconds)


def manifests(paths: list[str]) -> list[tuple[str, Manifest]]:
    out = []
    for p in paths or sorted(str(p) for p in (ROOT / "examples").glob("*.json")):
        try:
            out.append((Path(p).name, Manifest.model_validate(json.loads(Path(p).read_text()))))
        except ValueError:
            continue  # a compressor's config or scores, not a manifest
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifests", nargs="*", help="default: every manifest in examples/")
    ap.add_argument("--platforms", default="h100-lattice,cpu-staircase")
    args = ap.parse_args()
    rows = fixture_rows()
    truths: dict[str, Truth] = {"h100-lattice": h100_lattice(rows), "cpu-staircase": cpu_staircase}
    slow, fast = seconds_per_point(rows)[::-1]
    print("points to profile from an empty database; later passes on SYNTHETIC platforms (see the docstring)")
    print(
        f"{'manifest':32} {'weights':>7}  {'platform (synthetic)':20} {'dense':>16}  {'sparse':>22} {'ratio':>6}  "
        f"{'left':>4}  {'same dims':>9}  align s"
    )
    for name, manifest in manifests(args.manifests):
        for platform in args.platforms.split(","):
            dense, sparse = profile(manifest, truths[platform], True), profile(manifest, truths[platform], False)
            same = [w.dim for w in dense.result.weights] == [w.dim for w in sparse.result.weights]
            differ = sum(a.dim != b.dim for a, b in zip(dense.result.weights, sparse.result.weights))
            print(
                f"{name:32} {len(manifest.weights):>7}  {platform:20} {sum(dense.rounds):>6,} {str(dense.rounds):>9}  "
                f"{sum(sparse.rounds):>6,} {str(sparse.rounds):>15} {sum(sparse.rounds) / sum(dense.rounds):>6.0%}  "
                f"{len(missing_points(sparse.result)):>4}  {'yes' if same else f'{differ} differ':>9}  "
                f"{max(sparse.align_s, default=0):.1f}"
            )
            if platform == "h100-lattice":
                print(
                    f"{'':42}at the H100 fixture's wall time per point ({fast:.3f}-{slow:.3f} s, measured): dense "
                    f"{sum(dense.rounds) * fast / 60:.1f}-{sum(dense.rounds) * slow / 60:.1f} min, sparse "
                    f"{sum(sparse.rounds) * fast / 60:.1f}-{sum(sparse.rounds) * slow / 60:.1f} min (timing only; alignments aside)"
                )
    print(
        "dense: rounds of --exhaustive; sparse: first pass (lattice, compressor's dims, sample), then later passes; "
        "left: points still missing after the last round; same dims: the two loops' chosen dims"
    )


if __name__ == "__main__":
    main()
