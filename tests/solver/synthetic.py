"""Synthetic platforms for tests and benchmarks: latency curves with a hidden staircase (or none),
measured the way the agent measures, with seeded noise.

A curve is a truth function x -> latency (us) plus a measurement model:
  * sample_noise: each point draws n samples with this relative sigma and reports their
    median, p10 and p90 (what the agent sends);
  * jitter: the whole point is scaled by one draw of this relative sigma (run-to-run drift:
    the medians scatter more than their own p10..p90 admit);
  * spikes: dims whose truth is `spike` times slower than their neighbours (a bad kernel pick).
Everything is deterministic given the seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from solver.curve_model import Point

Truth = Callable[[int], float]


def staircase(period: int, step: float = 0.10, rise: float = 0.005, base_us: float = 50.0) -> Truth:
    """Latency that jumps up by `step` (relative) right after each multiple of `period`, and rises
    by `rise` (relative) across each step, so the top of a step is barely slower than its bottom."""

    def truth(x: int) -> float:
        k, within = divmod(x - 1, period)  # x = k * period + 1 .. (k + 1) * period share step k
        return base_us * (1 + step) ** k * (1 + rise * within / max(1, period - 1))

    return truth


def smooth(per_dim_us: float = 0.05, const_us: float = 20.0) -> Truth:
    """No cliffs at all: latency proportional to the dim, plus a launch constant."""
    return lambda x: const_us + per_dim_us * x


def step_tops(xs: Iterable[int], period: int) -> set[int]:
    """The dims right before each jump: the ones worth choosing on a staircase."""
    return {x for x in xs if x % period == 0}


@dataclass(frozen=True)
class Measure:
    sample_noise: float = 0.0  # relative sigma of one timing sample
    n: int = 20  # samples per point
    jitter: float = 0.0  # relative sigma of a whole point (its median moves by this)
    spike: float = 0.30  # how much slower a spike dim is than its truth
    seed: int = 0


def measure(truth: Truth, xs: Iterable[int], how: Measure = Measure(), spikes: Iterable[int] = ()) -> list[Point]:
    """One measured point per x: median, p10, p90 and n of its samples."""
    rng = np.random.default_rng(how.seed)
    spiked = set(spikes)
    points = []
    for x in xs:
        mu = truth(x) * (1 + how.spike if x in spiked else 1.0)
        samples = mu * (1 + how.sample_noise * rng.standard_normal(how.n))
        samples *= 1 + how.jitter * rng.standard_normal()
        samples = np.maximum(samples, 1e-3 * mu)  # a timing is never negative
        p10, med, p90 = np.percentile(samples, [10, 50, 90])
        points.append(Point(int(x), float(med), float(p10), float(p90), how.n))
    return points


def spike_dims(xs: list[int], count: int, seed: int, avoid: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """`count` distinct dims, none adjacent to another (each spike has plain neighbours)."""
    rng = np.random.default_rng(10_000 + seed)
    chosen: list[int] = []
    for x in rng.permutation(xs[1:-1]):
        if len(chosen) == count:
            break
        if x not in avoid and all(abs(int(x) - c) > 2 for c in chosen):
            chosen.append(int(x))
    return sorted(chosen)
