"""Cliff detection on curves with steps planted at known positions and noise of known size."""

from __future__ import annotations

import math
import random

import pytest

from gac.solver.cliffs import CliffOptions, Point, analyze, explaining_modulus, find_steps

SEEDS = range(12)


def noisy_curve(truth, xs, rel_sigma: float, n: int, rng: random.Random) -> list[Point]:  # type: ignore[no-untyped-def]
    """Each point: n samples of sigma = rel_sigma * truth; report their median's realisation and p10/p90."""
    pts = []
    for x in xs:
        mu = truth(x)
        sigma = rel_sigma * mu
        med = mu + rng.gauss(0, 1.2533 * sigma / math.sqrt(n))
        pts.append(Point(x, med, med - 1.2816 * sigma, med + 1.2816 * sigma, n))
    return pts


@pytest.mark.parametrize("seed", SEEDS)
def test_every_planted_step_is_found_and_nothing_else(seed):
    rng = random.Random(seed)
    period = rng.choice([8, 16, 32])
    size = rng.uniform(0.08, 0.30)  # 8 % .. 30 % per step: 6 to 20 times a point's noise
    xs = list(range(1, 8 * period + 1))
    truth = lambda x: 100.0 * (1 + size) ** ((x - 1) // period)  # noqa: E731
    steps = find_steps(noisy_curve(truth, xs, rel_sigma=0.03, n=30, rng=rng))
    planted = [k * period + 1 for k in range(1, 8)]
    assert [s.x for s in steps] == planted
    for s in steps:
        assert s.x_before == s.x - 1
        assert s.size_pct == pytest.approx(100 * size, rel=0.25)
        assert 0 < s.confidence <= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_flat_noisy_stretches_report_no_step(seed):
    rng = random.Random(100 + seed)
    level = rng.uniform(5, 5000)
    pts = noisy_curve(lambda x: level, range(32, 320), rel_sigma=rng.uniform(0.01, 0.2), n=rng.choice([10, 30, 100]), rng=rng)
    assert find_steps(pts) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_smooth_rise_is_not_a_step(seed):
    rng = random.Random(200 + seed)
    pts = noisy_curve(lambda x: 50 + 0.2 * x, range(64, 400), rel_sigma=0.05, n=20, rng=rng)
    assert find_steps(pts) == []


def test_noise_from_the_curve_itself_when_points_carry_no_spread():
    # A timer that drifts: medians scatter much more than p10..p90 says; the jitter floor absorbs it.
    rng = random.Random(7)
    pts = [Point(x, 100 + rng.gauss(0, 2.0), 99.9, 100.1, 100) for x in range(64, 256)]
    assert find_steps(pts) == []
    pts[100] = Point(pts[100].x, 100, 99.9, 100.1, 100)
    for i in range(101, len(pts)):
        pts[i] = Point(pts[i].x, pts[i].median_us + 30, 129.9, 130.1, 100)
    assert [s.x for s in find_steps(pts)] == [pts[101].x]


@pytest.mark.parametrize("period", [8, 16, 32])
@pytest.mark.parametrize("seed", range(4))
def test_frontier_and_modulus_of_a_periodic_staircase(period, seed):
    rng = random.Random(300 + seed)
    xs = list(range(1, 10 * period + 1))
    pts = noisy_curve(lambda x: 40.0 * (1 + math.ceil(x / period) * 0.15), xs, rel_sigma=0.02, n=30, rng=rng)
    a = analyze(pts)
    assert a.frontier == [k * period for k in range(1, 11)]
    assert a.modulus is not None and a.modulus.m == period and a.modulus.agreement == 1.0


def test_modulus_of_a_misalignment_spike_pattern():
    # GPU-style: multiples of 8 take the fast kernel, the rest a slow one, on a gentle rise.
    pts = [Point(x, (1.0 if x % 8 == 0 else 1.6) * (100 + x), None, None) for x in range(64, 257)]
    a = analyze(pts)
    assert set(a.frontier) == {x for x in range(64, 257) if x % 8 == 0} | {256}
    assert a.modulus is not None and a.modulus.m == 8


def test_no_modulus_for_a_smooth_curve():
    pts = [Point(x, 10 + x, None, None) for x in range(64, 200)]
    a = analyze(pts)
    assert a.frontier == list(range(64, 200))
    assert a.modulus is None and a.steps == []


def test_modulus_uses_only_measured_dims():
    # Measured every 4: multiples of 16 among those, not among all integers.
    xs = list(range(4, 260, 4))
    frontier = [x for x in xs if x % 16 == 0]
    assert explaining_modulus(frontier, xs).m == 16
    assert explaining_modulus([64], xs) is None


def test_options_tighten_detection():
    pts = [Point(x, 100.0 if x < 100 else 103.0, None, None) for x in range(64, 140)]
    assert [s.x for s in find_steps(pts)] == [100]
    assert find_steps(pts, CliffOptions(min_rel=0.05)) == []
