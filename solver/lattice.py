"""A GPU latency curve as a lattice: a smooth trend times one factor per class of dims, where a
dim's class is the largest power of two dividing it (capped). Pure numpy, cheap enough to fit
once per item and curve.

Why: GPU kernels pick their code path by the width's alignment, so a curve is several smooth
curves interleaved (an H100's fp16 GEMM at M=1024, K=4096 along N: multiples of 8 take 21-30 us,
other even widths 55-77 us, odd ones 126-176 us). A few measured dims of each class pin its
curve down, and its scatter around it says how far an unmeasured dim of the class can stray.
Where the classes do not explain the measured dims (a CPU's staircase: every tile edge steps,
whatever its power of two), the fit says it is unsure and nothing is predicted from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from gac.solver.curve_model import MEDIAN_SE, P10_P90_SIGMAS, CurveModel, Point, model_curve
from gac.solver.frontier import cliff_free_frontier

CLASS_CAP = 64  # multiples of 64 and above form one class: the kernels' tiles rarely go finer
Z = 4.0  # bounds at this many sigmas: a dim left out on them is slower beyond doubt
MIN_CLASS_POINTS = 3  # a class needs this many measured dims before its dims are predicted
MIN_FIT_POINTS = 8  # ... and the fit this many in all
KNOT_SPAN = 512  # the trend bends at most once per this many dims (an item's span is one piece or two)
MIN_EXPLAINED = 0.8  # the classes must explain this share of the scatter the trend leaves ...
NOISE_RATIO = 3.0  # ... unless that scatter is within this many times the timing noise
NOISE_FLOOR = 0.02  # a measured median's relative uncertainty at least (run-to-run drift)
LATTICE_GAP = 0.15  # a curve is modelled class by class when its classes differ by this much (log)
_HUBER = 1.345  # Huber's constant, in units of the residuals' robust sigma
_MAD_TO_SIGMA = 1.4826


def lattice_class(x: int) -> int:
    """The largest power of two dividing x, capped at CLASS_CAP."""
    return min(x & -x, CLASS_CAP)


def relative_noise(median_us: float, p10_us: float | None, p90_us: float | None, n: int | None) -> float:
    """A measured median's relative standard error, from its p10..p90 and n (0 when unknown)."""
    if p10_us is None or p90_us is None or median_us <= 0:
        return 0.0
    sigma = max(0.0, p90_us - p10_us) / P10_P90_SIGMAS
    return MEDIAN_SE * sigma / math.sqrt(max(1, n or 1)) / median_us


def measured_bounds(medians: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of measured dims' latency, from their medians and relative_noise(): each median
    within Z standard errors, at least NOISE_FLOOR (a point's spread misses run-to-run drift)."""
    m = Z * np.maximum(NOISE_FLOOR, noise)
    return medians * np.exp(-m), medians * np.exp(m)


@dataclass(frozen=True)
class LatticeFit:
    """log latency = trend(x) + factor[class(x)], trend piecewise linear (a knot every KNOT_SPAN
    dims), with a sigma per class for a dim not measured yet.

    sure is False when the classes do not explain the dims (or too few were measured): then
    bounds() gives nothing and every dim must be measured."""

    sure: bool
    explained: float  # share of the trend's residual variance the classes explain (1: all)
    x_range: tuple[int, int]  # the dims bounds() predicts: the measured span, a little widened
    knots: tuple[float, ...] = ()  # the trend's: its first is where it starts, then one per bend
    trend: tuple[float, ...] = ()  # its slope before the first bend, then the change at each bend
    factor: tuple[tuple[int, float], ...] = ()  # (class, log factor)
    sigma: tuple[tuple[int, float], ...] = ()  # (class, log sigma of a new dim's prediction)

    def bounds(self, x: int) -> tuple[float, float] | None:
        """(low, high) latency of dim x at Z sigmas, or None: unsure, outside the span, or its class too rare."""
        low, high = self.bounds_of(np.array([x]))
        return (float(low[0]), float(high[0])) if math.isfinite(high[0]) else None

    def bounds_of(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """bounds() of many dims at once: (0, inf) where it gives None."""
        low, high = np.zeros(len(x)), np.full(len(x), math.inf)
        if not self.sure:
            return low, high
        cls = np.minimum(x & -x, CLASS_CAP)
        factor, sigma = dict(self.factor), dict(self.sigma)
        f = np.array([factor.get(int(c), math.nan) for c in range(CLASS_CAP + 1)])[cls]
        s = np.array([sigma.get(int(c), math.nan) for c in range(CLASS_CAP + 1)])[cls]
        ok = np.isfinite(f) & np.isfinite(s) & (x >= self.x_range[0]) & (x <= self.x_range[1])
        mid = _trend_basis(x[ok].astype(float), self.knots) @ np.array(self.trend) + f[ok]
        low[ok], high[ok] = np.exp(mid - Z * s[ok]), np.exp(mid + Z * s[ok])
        return low, high

    def gap(self) -> float:
        """How much slower the slowest class is than the fastest (log): 0 when the classes do not matter."""
        logs = [f for c, f in self.factor if c in dict(self.sigma)]
        return max(logs) - min(logs) if logs else 0.0


def fit_lattice(xs: Sequence[int], medians: ArrayLike, noise: ArrayLike) -> LatticeFit:
    """Fit the lattice to measured dims (distinct xs; noise: each median's relative standard error)."""
    x = np.asarray(xs, dtype=float)
    lo, hi = (int(x.min()), int(x.max())) if len(x) else (0, 0)
    pad = max(8, (hi - lo) // 10)  # the top dims of a span lie a few above its last multiple of 8
    unsure = LatticeFit(False, 0.0, (lo - pad, hi + pad))
    if len(x) < MIN_FIT_POINTS:
        return unsure
    y = np.log(np.asarray(medians, dtype=float))
    cls = np.array([lattice_class(int(v)) for v in xs])
    classes = sorted(set(cls.tolist()))
    counts = {c: int((cls == c).sum()) for c in classes}
    if sum(n >= MIN_CLASS_POINTS for n in counts.values()) < 2:
        return unsure
    knots = tuple(float(k) for k in np.arange(lo, hi, KNOT_SPAN))
    trend = _trend_basis(x, knots)
    onehot = (cls[:, None] == np.array(classes)[None, :]).astype(float)
    coef, resid = _robust_lstsq(np.column_stack([trend, onehot]), y)
    _, trend_resid = _robust_lstsq(np.column_stack([trend, np.ones_like(x)]), y)
    left, total = float(np.sum(resid**2)), float(np.sum(trend_resid**2))
    explained = 1.0 - left / total if total > 0 else 1.0
    pooled = _robust_sigma(resid)
    noise_level = float(np.median(np.asarray(noise, dtype=float)))
    # Not robust: a staircase's sawtooth shows in the few dims off the lattice only.
    if explained < MIN_EXPLAINED and math.sqrt(left / len(y)) > NOISE_RATIO * noise_level:
        return LatticeFit(False, explained, unsure.x_range)
    sigmas = []
    for c in classes:
        n = counts[c]
        if n >= MIN_CLASS_POINTS:
            own = float(np.sqrt(np.mean(resid[cls == c] ** 2)))
            # A class's few dims may agree by luck: never claim less scatter than the pooled.
            sigmas.append((c, max(own, pooled, noise_level) * math.sqrt(1 + 1 / n)))
    k = trend.shape[1]
    factors = tuple((c, float(coef[k + j])) for j, c in enumerate(classes))
    return LatticeFit(True, explained, unsure.x_range, knots, tuple(coef[:k].tolist()), factors, tuple(sigmas))


def _trend_basis(x: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    """Columns of a piecewise-linear trend in x (per KNOT_SPAN dims): a line from the first knot,
    and a hinge at each later one. The classes' factors carry the level."""
    if not knots:
        return np.zeros((len(x), 0))
    cols = [np.maximum(x - k, 0.0) / KNOT_SPAN for k in knots]
    cols[0] = (x - knots[0]) / KNOT_SPAN  # the first is a line through the whole span
    return np.column_stack(cols)


def _robust_sigma(r: np.ndarray) -> float:
    return float(_MAD_TO_SIGMA * np.median(np.abs(r - np.median(r)))) if len(r) else 0.0


def _robust_lstsq(cols: np.ndarray, y: np.ndarray, rounds: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Least squares, Huber-reweighted a few times, so one noisy median does not tilt a class."""
    w = np.ones(len(y))
    coef = np.zeros(cols.shape[1])
    for _ in range(rounds):
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(cols * sw[:, None], y * sw, rcond=None)[0]
        r = y - cols @ coef
        scale = max(_robust_sigma(r), 1e-9)
        w = np.minimum(1.0, _HUBER * scale / np.maximum(np.abs(r), 1e-300))
    return coef, y - cols @ coef


def is_lattice(fit: LatticeFit) -> bool:
    """Do the classes explain the curve, and differ enough to be modelled apart?"""
    return fit.sure and fit.explained >= MIN_EXPLAINED and fit.gap() >= LATTICE_GAP


def model_by_class(points: Sequence[Point]) -> CurveModel:
    """A lattice curve's noise-aware model, each class (lattice_class) modelled on its own dims
    (gac.solver.curve_model).

    Why: a class is a smooth curve of its own, while the whole curve jumps by 2-6x between
    neighbours; read whole, the curve's denoising mixes classes, and how depends on which dims of
    each class were measured (a sample of the odd widths gave multiples of 8 half their measured
    latency). Class by class, a multiple of 8 is read from its own class alone, the same whether
    the other classes were measured densely or sampled. Runs of different classes are
    independent; the period is the largest class's own (its steps)."""
    by_class: dict[int, list[Point]] = {}
    for p in points:
        by_class.setdefault(lattice_class(p.x), []).append(p)
    parts = [(c, model_curve(pts)) for c, pts in sorted(by_class.items())]
    estimates: dict[int, float] = {}
    sigma: dict[int, float] = {}
    run: dict[int, int] = {}
    slope_se: dict[int, float] = {}
    for j, (_, m) in enumerate(parts):
        estimates.update(m.estimates)
        sigma.update(m.sigma)
        slope_se.update(m.slope_se)
        run.update({x: j * (len(points) + 1) + r for x, r in m.run.items()})  # distinct per class
    top = parts[-1][1]  # the multiples of the largest power of two measured
    notes = [f"a lattice: modelled class by class (odd, 2 mod 4, ..., multiples of {CLASS_CAP})"]
    return CurveModel(
        estimates=estimates,
        sigma=sigma,
        segments=[s for _, m in parts for s in m.segments],
        steps=sorted((s for _, m in parts for s in m.steps), key=lambda s: s.x),
        frontier=cliff_free_frontier(estimates),
        period=top.period,
        smooth=False,
        noise_pct=float(np.median([m.noise_pct for _, m in parts])),
        notes=notes + [n for _, m in parts for n in m.notes],
        run=run,
        slope_se=slope_se,
    )
