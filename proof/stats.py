"""Paired speed-ups with a bootstrap confidence interval.

Each timing round measures every variant once, in a random order, so a round's
ratio baseline / variant compares the two under the same machine state. The
speed-up is the median of those per-round ratios; its 95 % confidence interval
comes from resampling the rounds with replacement (percentile bootstrap, seeded).
"Measurably faster" means the interval's lower bound is above 1.0, from at least
MIN_ROUNDS rounds: with a handful of rounds the percentile bootstrap of a median
is too narrow (its resampled medians never leave the observed range; 4 of 4 rounds
faster already "excludes" 1.0, while a sign test gives p = 0.125).

Written with numpy rather than scipy.stats.bootstrap: the percentile bootstrap of a median is a
few lines, and the proof extra would otherwise pull in scipy for them alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
N_BOOT = 10_000
MIN_ROUNDS = 10


def bootstrap_median_ci(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of `values` (resampling whole values)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values")
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Speedup:
    """baseline / variant over paired rounds: median ratio, its CI, and the raw range."""

    median: float
    ci_lo: float
    ci_hi: float
    n: int  # rounds
    faster: int  # rounds in which the variant was faster than the baseline
    lo: float  # min over rounds
    hi: float  # max over rounds

    @property
    def measurably_faster(self) -> bool:
        return self.n >= MIN_ROUNDS and self.ci_lo > 1.0

    @property
    def measurably_slower(self) -> bool:
        return self.n >= MIN_ROUNDS and self.ci_hi < 1.0

    def verdict(self) -> str:
        if self.n < MIN_ROUNDS:
            return f"no verdict: {self.n} rounds, the CI needs at least {MIN_ROUNDS}"
        if self.measurably_faster:
            return "measurably faster (95% CI lower bound > 1.0)"
        if self.measurably_slower:
            return "measurably SLOWER (95% CI upper bound < 1.0)"
        return "NOT measurably faster (95% CI includes 1.0)"


def paired_speedup(baseline: Sequence[float], variant: Sequence[float], seed: int = 0, n_boot: int = N_BOOT) -> Speedup:
    """Per-round ratios baseline[r] / variant[r] (same round, same machine state)."""
    if len(baseline) != len(variant) or not baseline:
        raise ValueError(f"need paired, non-empty rounds; got {len(baseline)} and {len(variant)}")
    ratios = [b / v for b, v in zip(baseline, variant)]
    lo, hi = bootstrap_median_ci(ratios, seed=seed, n_boot=n_boot)
    return Speedup(
        median=float(np.median(ratios)),
        ci_lo=lo,
        ci_hi=hi,
        n=len(ratios),
        faster=sum(r > 1.0 for r in ratios),
        lo=min(ratios),
        hi=max(ratios),
    )
