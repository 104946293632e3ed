"""The curve model reads what it read before it was made to scale: steps, comb, frontier, period,
runs and estimates of a fixed set of curves, recorded with the model at commit 67b4d92 (before
the rewrite) in data/curve_model_golden.json.gz.

The curves: the ones tests/solver/test_curve_model.py builds (one or two seeds each), synthetic
curves of 250 to 2,000 points (staircases with steps every 16, 24 and 64 dims, combs, ladders,
both at once, 0 to 5 % noise), and the dense curves of a real H100 (data/h100_lattice.csv: rows of
/work/shared/data/h100-2026-11-26/measurements.csv, measured on an NVIDIA H100 80GB HBM3, driver
580.159.04, CUDA 13.0).

Three H100 curves were recorded again when a point whose samples spread over half its median got
their sigma, not its median's standard error (UNSTEADY_SPREAD): h100-q-rank-n's frontier moved from
[1264, 1296, 1304] to [1272, 1304] (those points' p10..p90 span 20-37 µs at 2,000 samples), and the
two run2 curves' comb levels by 0.1 %.

Discrete readings must be equal; floats within REL (the rewrite sums in another order: running
sums and projections instead of dense least squares, so the last bits differ).

    python -m tests.solver.test_curve_model_golden --write   # record the current model's readings
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from gac.solver.curve_model import CurveModel, Point, model_curve
from tests.solver.synthetic import (
    Measure,
    gemm_truth,
    measure,
    measure_fast,
    smooth,
    spike_dims,
    staircase,
)

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "curve_model_golden.json.gz"
H100 = DATA / "h100_lattice.csv"
REL = 1e-6

Case = Callable[[], list[Point]]


def _line_comb(m: int, factor: float, const: float = 200.0, per_dim: float = 2.0) -> Callable[[int], float]:
    return lambda x: (const + per_dim * x) * (factor if x % m == 0 else 1.0)


LADDER = {32: 0.78, 16: 0.83, 8: 0.89, 4: 0.95}


def _ladder(x: int) -> float:
    return (200.0 + 2.0 * x) * next((f for m, f in LADDER.items() if x % m == 0), 1.0)


def _stairs_comb(period: int, step: float, rise: float, m: int, factor: float) -> Callable[[int], float]:
    stairs = staircase(period, step=step, rise=rise)
    return lambda x: stairs(x) * (factor if x % m == 0 else 1.0)


def _drop(x: int) -> float:
    return (50.0 + 0.1 * x) * (0.75 if x >= 200 else 1.0)


XS = list(range(1, 12 * 24 + 1))


def fixture_cases() -> dict[str, Case]:
    """The curves of tests/solver/test_curve_model.py (measured as it measures them)."""
    stairs, line = staircase(24, step=0.10, rise=0.005), smooth(per_dim_us=0.05, const_us=20.0)
    bursts = [x for x in range(16, 400) if x % 64 == 0 and x != 256]
    specs: list[tuple[str, Callable[[int], float], range | list[int], Measure, list[int]]] = []  # name, truth, dims, measure, spikes
    for seed in (0, 5):
        specs += [
            (f"fixture-samples-{seed}", stairs, XS, Measure(sample_noise=0.05, n=20, seed=seed), []),
            (f"fixture-jitter-{seed}", stairs, XS, Measure(jitter=0.05, seed=seed), []),
            (f"fixture-spikes-{seed}", stairs, XS, Measure(sample_noise=0.05, jitter=0.03, seed=seed), spike_dims(XS, 8, seed)),
        ]
    for name, how in (("clean", Measure()), ("samples", Measure(sample_noise=0.05)), ("jitter", Measure(jitter=0.05))):
        specs.append((f"fixture-smooth-{name}", line, range(16, 400), Measure(**{**vars(how), "seed": 1}), []))
    specs += [
        ("fixture-period-48", staircase(48, step=0.12, rise=0.005), range(1, 8 * 48 + 1), Measure(jitter=0.05, seed=2), []),
        ("fixture-period-96", staircase(96, step=0.12, rise=0.005), range(1, 6 * 96 + 1), Measure(sample_noise=0.05, seed=3), []),
        ("fixture-clean-flat", staircase(24, step=0.10, rise=0.0), XS, Measure(), []),
        ("fixture-rising", staircase(24, step=0.10, rise=0.06), XS, Measure(sample_noise=0.05, n=80, seed=1), []),
        ("fixture-drop", _drop, range(100, 301), Measure(sample_noise=0.05, seed=3), []),
        ("fixture-dips", _line_comb(24, 0.75, 20.0, 0.2), XS, Measure(sample_noise=0.05, seed=1), []),
        ("fixture-cpu-comb", _line_comb(8, 0.93), XS, Measure(sample_noise=0.02, jitter=0.05, seed=2), []),
        ("fixture-ladder-samples", _ladder, range(200, 520), Measure(sample_noise=0.03, seed=0), []),
        ("fixture-ladder-jitter", _ladder, range(200, 520), Measure(sample_noise=0.02, jitter=0.02, seed=3), []),
        ("fixture-steps-and-comb", _stairs_comb(32, 0.12, 0.0, 4, 0.93), range(200, 456), Measure(sample_noise=0.03, seed=1), []),
        ("fixture-bursts", line, range(16, 400), Measure(sample_noise=0.02, seed=0), bursts),
        ("fixture-comb-on-stairs", _stairs_comb(64, 0.10, 0.005, 8, 1.3), range(1, 12 * 64 + 1), Measure(sample_noise=0.05, seed=2), []),
        ("fixture-long-gemm", gemm_truth({"m": 512, "k": 2048, "n": 1}, "n", 24), range(1, 2049), Measure(sample_noise=0.05, seed=1), []),
    ]
    cases: dict[str, Case] = {
        name: (lambda truth=truth, xs=xs, how=how, spikes=spikes: measure(truth, xs, how, spikes=spikes))
        for name, truth, xs, how, spikes in specs
    }
    cases["fixture-no-spread"] = lambda: [Point(x, 10.0 + (x - 1) // 24) for x in XS]
    cases["fixture-flat"] = lambda: [Point(x, 10.0) for x in range(1, 50)]
    cases["fixture-few"] = lambda: [Point(8, 5.0), Point(16, 5.0), Point(24, 9.0), Point(32, 9.0)]
    return cases


def synthetic_cases() -> dict[str, Case]:
    """Curves of 250 to 2,000 points, drawn all at once (measure_fast)."""
    specs: list[tuple[str, Callable[[int], float], range, Measure, int]] = [  # name, truth, dims, measure, spikes
        ("stairs16-250-clean", staircase(16), range(1, 251), Measure(), 0),
        ("stairs16-1000-1pct", staircase(16), range(1, 1001), Measure(sample_noise=0.01, seed=1), 0),
        ("stairs16-2000-5pct", staircase(16), range(1, 2001), Measure(sample_noise=0.05, seed=2), 0),
        ("stairs24-250-2pct", staircase(24), range(1, 251), Measure(sample_noise=0.02), 0),
        ("stairs24-500-clean", staircase(24), range(1, 501), Measure(), 0),
        ("stairs24-500-1pct", staircase(24), range(1, 501), Measure(sample_noise=0.01), 0),
        ("stairs24-1000-clean", staircase(24), range(1, 1001), Measure(), 0),
        ("stairs24-1000-1pct", staircase(24), range(1, 1001), Measure(sample_noise=0.01, seed=1), 0),
        ("stairs24-2000-clean", staircase(24), range(1, 2001), Measure(), 0),
        ("stairs24-2000-1pct", staircase(24), range(1, 2001), Measure(sample_noise=0.01), 0),
        ("stairs24-2000-5pct", staircase(24), range(1, 2001), Measure(sample_noise=0.05, seed=3), 0),
        ("stairs24-1000-spikes", staircase(24), range(1, 1001), Measure(sample_noise=0.02, seed=4), 20),
        ("stairs16-rising-1000", staircase(16, rise=0.06), range(1, 1001), Measure(sample_noise=0.02, n=80), 0),
        ("stairs64-500-3pct", staircase(64), range(1, 501), Measure(sample_noise=0.03), 0),
        ("stairs64-2000-clean", staircase(64), range(1, 2001), Measure(), 0),
        ("stairs64-2000-1pct", staircase(64), range(1, 2001), Measure(sample_noise=0.01, seed=1), 0),
        ("comb8-500-jitter", _line_comb(8, 0.93), range(1, 501), Measure(sample_noise=0.02, jitter=0.02), 0),
        ("comb8-2000-1pct", _line_comb(8, 0.93), range(1, 2001), Measure(sample_noise=0.01, seed=1), 0),
        ("dips24-1000-5pct", _line_comb(24, 0.75, 20.0, 0.2), range(1, 1001), Measure(sample_noise=0.05, seed=2), 0),
        ("ladder-1000-3pct", _ladder, range(200, 1200), Measure(sample_noise=0.03), 0),
        ("ladder-2000-1pct", _ladder, range(100, 2100), Measure(sample_noise=0.01, seed=1), 0),
        ("stairs64-comb8-1000-5pct", _stairs_comb(64, 0.10, 0.005, 8, 1.3), range(1, 1001), Measure(sample_noise=0.05), 0),
        ("stairs32-comb4-1000-3pct", _stairs_comb(32, 0.12, 0.0, 4, 0.93), range(1, 1001), Measure(sample_noise=0.03, seed=1), 0),
        ("smooth-1000-2pct", smooth(), range(1, 1001), Measure(sample_noise=0.02), 0),
        ("gemm48-2000-1pct", gemm_truth({"m": 512, "k": 2048, "n": 1}, "n", 48), range(1, 2001), Measure(sample_noise=0.01), 0),
    ]
    cases: dict[str, Case] = {}
    for name, truth, xs, how, spikes in specs:
        planted = spike_dims(list(xs), spikes, how.seed) if spikes else []
        cases[name] = lambda truth=truth, xs=xs, how=how, planted=planted: measure_fast(truth, xs, how, spikes=planted)
    return cases


def h100_curves() -> dict[str, list[Point]]:
    """The H100's dense curves (one per op, dtype, swept axis and fixed shape, of one machine), and
    the q-rank-n sweep alone."""
    curves: dict[str, dict[int, Point]] = defaultdict(dict)
    with H100.open() as f:
        for row in csv.DictReader(f):
            point = Point(int(row["x"]), float(row["median_us"]), float(row["p10_us"]), float(row["p90_us"]), int(row["n"]))
            curves[f"h100-{row['op']}-{row['axis']}-{row['fixed']}-run{row['db_run']}"][point.x] = point
            if row["plan"] == "q-rank-n":
                curves["h100-q-rank-n"][point.x] = point
    return {name: sorted(c.values(), key=lambda p: p.x) for name, c in curves.items()}


def all_cases() -> dict[str, Case]:
    h100 = {name: (lambda pts=pts: pts) for name, pts in h100_curves().items()}
    return {**fixture_cases(), **synthetic_cases(), **h100}


def reading(model: CurveModel) -> dict:
    """What the model reads, as JSON: per dim (ascending) its estimate and sigma, its run as
    (run, dims) pairs in dim order, and per run its slope's standard error."""
    comb = model.comb
    runs: list[list[int]] = []
    for x in model.estimates:
        if runs and runs[-1][0] == model.run[x]:
            runs[-1][1] += 1
        else:
            runs.append([model.run[x], 1])
    slope_se = {model.run[x]: model.slope_se[x] for x in model.estimates}
    return {
        "frontier": model.frontier,
        "steps": [[s.x_before, s.x, s.size_pct, s.z] for s in model.steps],
        "period": None if model.period is None else [model.period.m, model.period.agreement],
        "comb": None if comb is None else [[lv.m, lv.log_offset, lv.se] for lv in comb.levels()],
        "segments": [[s.x_first, s.x_last, s.level_us, s.slope_us, s.points] for s in model.segments],
        "smooth": model.smooth,
        "noise_pct": model.noise_pct,
        "notes": model.notes,
        "estimates": list(model.estimates.values()),
        "sigma": list(model.sigma.values()),
        "runs": runs,
        "slope_se": [slope_se[k] for k in range(len(slope_se))],
    }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _close_rows(got: list, want: list, exact: tuple[int, ...]) -> bool:
    """Rows equal in the columns `exact`, the others close."""
    return len(got) == len(want) and all(
        all(g[k] == w[k] if k in exact else _close(g[k], w[k]) for k in range(len(w))) for g, w in zip(got, want)
    )


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


@pytest.mark.parametrize("name", list(all_cases()))
def test_the_model_reads_what_it_read_before(name: str, golden: dict) -> None:
    got, want = reading(model_curve(all_cases()[name]())), golden[name]
    for key in ("frontier", "smooth", "notes", "runs"):
        assert got[key] == want[key], key
    assert (got["period"] is None) == (want["period"] is None)
    if want["period"] is not None:
        assert _close_rows([got["period"]], [want["period"]], exact=(0,))
    assert (got["comb"] is None) == (want["comb"] is None)
    if want["comb"] is not None:
        assert _close_rows(got["comb"], want["comb"], exact=(0,))
    assert _close_rows(got["steps"], want["steps"], exact=(0, 1))
    assert _close_rows(got["segments"], want["segments"], exact=(0, 1, 4))
    assert _close(got["noise_pct"], want["noise_pct"])
    for key in ("estimates", "sigma", "slope_se"):
        assert len(got[key]) == len(want[key])
        bad = [k for k, (g, w) in enumerate(zip(got[key], want[key])) if not _close(g, w)]
        assert not bad, f"{key} differ at positions {bad[:8]}"


def test_every_case_is_recorded(golden: dict) -> None:
    assert set(golden) == set(all_cases())


def _rounded(v: object) -> object:
    """Floats to 10 significant digits (far within REL): a smaller file."""
    if isinstance(v, float):
        return float(f"{v:.10g}")
    if isinstance(v, list):
        return [_rounded(e) for e in v]
    if isinstance(v, dict):
        return {k: _rounded(e) for k, e in v.items()}
    return v


def write() -> None:
    readings = {name: _rounded(reading(model_curve(case()))) for name, case in all_cases().items()}
    GOLDEN.write_bytes(gzip.compress((json.dumps(readings, separators=(",", ":")) + "\n").encode(), mtime=0))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
