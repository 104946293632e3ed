"""A noise-aware model of one latency curve: denoised latency per dim, its uncertainty, the steps
(up and down), the robust cliff-free frontier and the period the steps follow. Pure functions.

Why a model and not raw medians: a staircase's plateau of 24 noisy dims has a random minimum,
and a raw-median frontier keeps every dim that happens to be faster than all larger ones, so
noise invents cliffs (and hides real ones). The model instead

1. gives each point a noise sigma: its median's standard error (from p10..p90 and n), at least
   the curve's typical point's and its own point-to-point jitter (medians that drift more
   than their spread admits);
2. looks for a period first: the m (any m >= 2, not only powers of two) whose "jump right
   after each multiple" sawtooth, or whose comb (multiples alone faster or slower: a CPU GEMM
   whose width is a multiple of the vector length), the curve follows, pooling the evidence of
   all its steps or teeth; a comb's factor is pooled over its teeth and divided out before the
   rest, so no tooth's estimate rests on its one noisy measurement;
3. cuts the curve into runs where a jump in EITHER direction beats the noise (optimal
   partitioning: a penalty per run, none right after a multiple of a found period; each run
   flat, or a line when its slope is significant);
4. splits off single dims that stand out of their run (a dim 30 % slower than both
   neighbours is its own run, not noise to average away) and rejoins the plateau around it;
5. fits each run robustly (Huber-weighted), so an estimate leans on the whole plateau and
   noise cannot dig a fake dip;
6. keeps a dim on the frontier only if every larger dim is slower beyond the noise of the two
   estimates; a flat plateau thus keeps only its top, a significantly rising curve every dim;
7. reports the period as the m whose measured multiples best match the frontier (else the
   up-steps' positions), as the dashboard's rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

# p90 - p10 of a normal distribution is 2.563 sigma; a median's standard error is
# sqrt(pi / 2) = 1.2533 times the mean's.
P10_P90_SIGMAS = 2.5631
MEDIAN_SE = 1.2533
_MAD_TO_SIGMA = 1.4826
MIN_LINE_POINTS = 4  # a slope through 2 or 3 points would let a spike pass for a trend
MIN_POINTS = 8  # fewer points than this tell too little about the curve's own noise
JITTER_LAGS = 4  # the jitter estimate sees through patterns repeating every 2, 3 or 4 dims
SMOOTH_NOTE = "no cliffs: any dim is as fast as its size"


@dataclass(frozen=True)
class Point:
    x: int
    median_us: float
    p10_us: float | None = None
    p90_us: float | None = None
    n: int | None = 1

    def median_sigma(self) -> float:
        """Standard error of the median, from the point's own spread (0 when unknown)."""
        if self.p10_us is None or self.p90_us is None:
            return 0.0
        sigma = max(0.0, self.p90_us - self.p10_us) / P10_P90_SIGMAS
        return MEDIAN_SE * sigma / math.sqrt(max(1, self.n or 1))


@dataclass(frozen=True)
class Step:
    """A jump between two neighbouring measured dims (size_pct < 0: the curve drops)."""

    x_before: int  # the last dimension before the jump
    x: int  # the first dimension after it
    before_us: float  # denoised latency at x_before
    after_us: float  # denoised latency at x
    size_pct: float  # (after - before) / before * 100
    z: float  # where the right segment starts beyond where the left one was heading, in noise units
    confidence: float  # in (0, 1): how far beyond the detection threshold the jump is


@dataclass(frozen=True)
class Modulus:
    """The rule d % m == 0 that best reproduces the frontier (or the steps), and how well it does."""

    m: int
    agreement: float  # Jaccard similarity between the marked dims and the measured multiples of m


@dataclass(frozen=True)
class Segment:
    """Measured dims x_first..x_last on one straight line: latency = level_us + slope_us * (x - x_first).

    Lone dims inside (spikes, dips) are segments of their own, so points may be fewer than the span.
    """

    x_first: int
    x_last: int
    level_us: float
    slope_us: float  # per dim; 0 when the segment is flat within its noise
    points: int


@dataclass(frozen=True)
class CliffOptions:
    z: float = 4.0  # a step (or a lone dim) must stand out by z times its noise ...
    min_rel: float = 0.01  # ... and by this fraction of the latency before it
    frontier_z: float = 2.0  # a larger dim "is slower" only when slower by this many noise units
    frontier_tol_min: float = 0.0  # ... and by at least this fraction of the latency
    slope_z: float = 4.0  # a segment gets a slope only when the slope is this significant
    penalty: float | None = None  # cost of one more segment, in chi^2 units (None: 3 ln n)
    grid_penalty: float = 0.0  # the fraction of it a segment pays that starts right after a
    # multiple of the period the data show (0: free, the period says a step may be there)
    min_agreement: float = 0.75  # below this no modulus "explains" the frontier
    min_multiples: int = 3  # a modulus needs this many measured multiples
    pattern_multiples: int = 2  # the sawtooth test pools every step: two jumps of a period suffice
    periods: tuple[int, ...] = ()  # periods seen elsewhere (the platform's other curves of the op)
    prior_z: float = 3.0  # ... each tested alone when the curve's own scan finds none
    min_sigma_rel: float = 1e-4  # floor of a point's relative sigma (exact synthetic data)


@dataclass(frozen=True)
class CurveModel:
    estimates: dict[int, float]  # x -> denoised latency (us)
    sigma: dict[int, float]  # x -> standard error of that estimate (us)
    segments: list[Segment]
    steps: list[Step]  # significant jumps, up (size_pct > 0) and down
    frontier: list[int]  # dims no larger dim beats or ties within the noise, ascending
    period: Modulus | None  # the alignment the data implies, None when nothing periodic
    smooth: bool  # no significant step anywhere
    noise_pct: float  # a point's typical relative noise (median over the curve)
    notes: list[str] = field(default_factory=list)
    # Which estimates move together: x -> its run (lone dims are runs of their own), and the
    # standard error of its run's slope (us per unit of x; 0 when flat). Two estimates of one run
    # differ by slope * dx, with noise slope_se * dx; estimates of different runs are independent.
    run: dict[int, int] = field(default_factory=dict)
    slope_se: dict[int, float] = field(default_factory=dict)
    comb: Comb | None = None  # the comb the curve shows, if any (its teeth are runs of their own)


# ---------------------------------------------------------------------------------------------
# 1. Noise per point


def curve_jitter(medians: np.ndarray) -> float:
    """Robust relative sigma of one median, from differences of log latency.

    Differences between dims k apart (k = 1..JITTER_LAGS) have sqrt(2) times a point's sigma
    around the trend's slope; second differences sqrt(6) times, and a curved trend barely
    moves them. Structure spoils some of each kind: a step every few dims spoils the
    first differences it crosses (twice as many second ones), a pattern repeating every k dims
    (every odd dim slower) spoils all differences but those k apart. So each gives a robust
    (MAD) estimate and the smallest is taken; the fit's residuals correct it afterwards.
    """
    if len(medians) < MIN_POINTS:  # a step or two would pass for jitter
        return 0.0

    def mad(d: np.ndarray) -> float:
        return float(_MAD_TO_SIGMA * np.median(np.abs(d - np.median(d))))

    logs = np.log(medians)
    lags = [mad(logs[k:] - logs[:-k]) / math.sqrt(2) for k in range(1, JITTER_LAGS + 1) if len(logs) - k >= MIN_POINTS]
    return min([*lags, mad(np.diff(logs, 2)) / math.sqrt(6)])


def point_sigmas(pts: Sequence[Point], opts: CliffOptions, comb: Comb | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each median's noise (us): its own standard error, at least the curve's typical point's
    and the curve's jitter (of the comb-free curve, where there is a comb: its teeth are no
    jitter). Returned twice: relative to the local level (while deciding what is noise) and
    relative to the point's own median (for a dim found to stand alone)."""
    y = np.array([p.median_us for p in pts])
    own = np.array([p.median_sigma() for p in pts])
    # One point's p10..p90 from a few samples is itself noisy: a point may not claim less
    # noise than the curve's typical point, or a lucky narrow spread makes it an "outlier".
    typical = float(np.median(own / y))
    plain = y / teeth_factor(comb, np.array([p.x for p in pts]))
    floor_rel = max(curve_jitter(plain), typical, opts.min_sigma_rel)
    # Relative to the local level, not the point's own median: else a low outlier would get a
    # smaller sigma and look even more significant. A real dip, though, runs its own kernel.
    return np.maximum(own, floor_rel * local_level(y)), np.maximum(own, floor_rel * y)


def local_level(y: np.ndarray, half: int = 2) -> np.ndarray:
    """Running median over 2 * half + 1 points (fewer at the ends)."""
    if len(y) <= 2 * half:
        return np.full(len(y), float(np.median(y)))
    level = np.median(np.lib.stride_tricks.sliding_window_view(y, 2 * half + 1), axis=1)
    return np.concatenate([[np.median(y[:i + half + 1]) for i in range(half)], level,
                           [np.median(y[-(half + i + 1):]) for i in reversed(range(half))]])


# ---------------------------------------------------------------------------------------------
# 2. Segmentation


class _RunningSums:
    """Cumulative weighted sums: the chi^2 of a flat or straight fit over any run in O(1)."""

    def __init__(self, u: np.ndarray, y: np.ndarray, w: np.ndarray, slope_price: float) -> None:
        self.slope_price = slope_price
        terms = np.stack([w, w * u, w * u * u, w * y, w * u * y, w * y * y])
        self.sums = np.concatenate([np.zeros((6, 1)), np.cumsum(terms, axis=1)], axis=1)

    def rss(self, starts: np.ndarray, end: int) -> np.ndarray:
        """Chi^2 of the best fit to points starts..end-1: a flat level, or a line when the slope's
        chi^2 gain (its t^2) beats slope_price. Pricing the slope keeps a line from gliding
        over a few small steps that flat levels would show."""
        W, U, UU, Y, UY, YY = self.sums[:, end, None] - self.sums[:, starts]
        suu = UU - U * U / W
        suy = UY - U * Y / W
        syy = YY - Y * Y / W
        sloped = (suu > 1e-12 * W) & (end - starts >= MIN_LINE_POINTS)
        slope_gain = np.where(sloped, suy * suy / np.where(sloped, suu, 1.0), 0.0)
        return np.maximum(syy - np.maximum(slope_gain - self.slope_price, 0.0), 0.0)


def segment(u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, slope_price: float) -> list[tuple[int, int]]:
    """Runs [start, end) minimising total chi^2 plus penalty[start] per run (optimal partitioning).

    penalty[i] is the price of a run starting at point i (penalty[0] is ignored). Pruning (PELT)
    drops start points that can never win again, so flat curves cost about linear time. Runs
    shorter than MIN_LINE_POINTS get no slope, so a start point that loses now may still win
    for the next few ends: it is dropped only after those.
    """
    n = len(y)
    sums = _RunningSums(u, y, w, slope_price)
    pay = np.concatenate([[0.0], penalty[1:], [0.0]])
    most = float(pay.max()) + slope_price  # splitting a run can add at most one slope price
    start_cost = np.zeros(n + 1)  # best cost of the points before a start, plus its run's penalty
    cut = np.zeros(n + 1, dtype=int)
    live = np.array([0])
    expires = np.full(n + 1, n + 1)  # per start point: the last end it may still win at
    for end in range(1, n + 1):
        costs = start_cost[live] + sums.rss(live, end)
        k = int(np.argmin(costs))
        cut[end] = live[k]
        start_cost[end] = costs[k] + pay[end]
        lost = (costs > costs[k] + most) & (end - live >= MIN_LINE_POINTS)
        if lost.any():
            expires[live[lost]] = np.minimum(expires[live[lost]], end + MIN_LINE_POINTS - 1)
        live = np.append(live[expires[live] > end], end)
    runs = []
    end = n
    while end > 0:
        runs.append((int(cut[end]), end))
        end = int(cut[end])
    return runs[::-1]


@dataclass(frozen=True)
class Pattern:
    """A periodic structure beyond the trend: "steps" (a jump right after each multiple of m, a
    staircase) or "comb" (multiples of m alone faster, or slower, than the dims around them)."""

    kind: str
    m: int
    t: float  # its significance, in noise units of the scatter left around it
    also: Pattern | None = None  # a staircase's best comb when that stands out too (steps and a comb at once)


def find_pattern(x: np.ndarray, y: np.ndarray, sigma: np.ndarray, opts: CliffOptions) -> Pattern | None:
    """The periodic pattern the curve follows beyond a smooth trend; None when no m stands out.

    In log latency a staircase is a trend minus J * ((x - 1) mod m) / m (a sawtooth), a comb a
    trend minus C * [x mod m == 0]. Each m's sawtooth and comb is regressed, after removing a
    trend, against the curve; the evidence of all the curve's steps (or teeth) adds up, so steps
    too small to see one by one (2 sigma) are found together. The trend is piecewise quadratic,
    each piece PERIODS_PER_PIECE periods of m long at least: one quadratic over a long curve (a
    GEMM from 1 to 2048: launch-bound, then linear) leaves a misfit that drowns the pattern. For
    m = 2 the two templates are one; the comb's reading (pool each class) is kept on ties.
    """
    xs = x.astype(int)
    if len(xs) < MIN_POINTS:
        return None

    def testable(m: int) -> bool:
        multiples = int(np.count_nonzero(xs % m == 0))
        return opts.pattern_multiples <= multiples < len(xs)

    def best_of(ms: list[int]) -> Pattern | None:
        span = float(x[-1] - x[0] + 1)
        groups: dict[int, list[int]] = {}
        for m in ms:
            groups.setdefault(_piece_count(span, m), []).append(m)
        found = [p for pieces, group in sorted(groups.items()) for p in _best_templates(xs, x, y, sigma, pieces, np.array(group))]
        best = max(found, key=lambda p: (p.t, p.kind == "comb"), default=None)
        combs = [p for p in found if p.kind == "comb"]
        if best is not None and best.kind == "steps" and combs:
            best = replace(best, also=max(combs, key=lambda p: p.t))
        return best

    # The best must beat the chance maximum of all the templates tried; a period seen elsewhere
    # is one hypothesis (per period offered), so a weaker pattern confirms it.
    for ms, z_min in (
        ([m for m in range(2, int(xs[-1]) // opts.pattern_multiples + 1) if testable(m)], opts.z),
        ([m for m in sorted(set(opts.periods)) if m >= 2 and testable(m)], opts.prior_z),
    ):
        best = best_of(ms) if ms else None
        z_need = max(z_min, -NormalDist().inv_cdf(0.001 / (2 * len(ms)))) if ms else math.inf
        if best is not None and best.t >= z_need:
            return best if best.also is None or best.also.t >= z_need else replace(best, also=None)
    return None


PERIODS_PER_PIECE = 8


def _piece_count(span: float, m: int) -> int:
    """The finest trend for a pattern of period m: pieces a power of two, each PERIODS_PER_PIECE periods long at least."""
    pieces = 1
    while span / (2 * pieces) >= PERIODS_PER_PIECE * m:
        pieces *= 2
    return pieces


def _piece_labels(x: np.ndarray, pieces: int) -> np.ndarray:
    """Each point's piece (pieces of equal span over x)."""
    span = float(x[-1] - x[0] + 1)
    return np.minimum(((x - x[0]) * pieces / span).astype(int), pieces - 1)
COMB_TEETH = 8  # a comb needs this many measured multiples, and as many other dims (a few
# noise bursts that happen to share a divisor must not pass for one)
COMB_SCATTER = 2.0  # ... and its teeth sit where its levels put them within this many sigmas


@dataclass(frozen=True)
class Comb:
    """Multiples of m run another kernel: their latency is the trend's times exp(log_offset).

    A comb may be a ladder: multiples of a larger m (deeper, a multiple of this m) faster still,
    as on a CPU whose tiles take 32 elements of K (multiples of 4, 8, 16 and 32 each faster)."""

    m: int
    log_offset: float  # < 0: multiples are faster than the dims around them
    se: float  # its standard error
    deeper: Comb | None = None  # the multiples of deeper.m take deeper's offset instead

    def levels(self) -> list[Comb]:
        """This level and every deeper one, shallowest first."""
        return [self, *(self.deeper.levels() if self.deeper is not None else [])]


def teeth_factor(comb: Comb | None, x: np.ndarray) -> np.ndarray:
    """Per dim, latency over the trend's: exp(log_offset) of the deepest level of the comb whose
    multiple it is, 1 elsewhere (and without a comb)."""
    if comb is None:
        return np.ones(len(x))
    factors = np.array([1.0, *(math.exp(lv.log_offset) for lv in comb.levels())])
    return factors[tooth_level(comb, x) + 1]


def tooth_level(comb: Comb, x: np.ndarray) -> np.ndarray:
    """Per dim, the index into comb.levels() of the deepest level it is a multiple of; -1: no tooth."""
    xs = x.astype(int)
    level = np.full(len(x), -1)
    for k, lv in enumerate(comb.levels()):
        level = np.where(xs % lv.m == 0, k, level)
    return level


LADDER_Z = 3.0  # a deeper level of a comb must differ from the level above it by this many sigmas
LADDER_MIN = 0.02  # ... and by this much (log latency)
BASE_Z = 2.0  # a finer base of a comb found at m must be off the trend by this many sigmas


def fit_comb(x: np.ndarray, y: np.ndarray, rel_sigma: np.ndarray, m: int, steps: int | None = None) -> Comb | None:
    """The comb at m read from every point: a weighted regression of log latency on a smooth
    trend (one quadratic per piece, as the pattern test uses), the staircase's sawtooth when the
    curve also steps every `steps` dims, and one indicator per level of the ladder (multiples of
    m, 2m, 4m, ...: a level's teeth take the sum of its own and every shallower level's
    coefficient). Huber weights keep a lone spike from dragging a level. A deeper level stays
    when it differs from the level above it clearly (LADDER_Z sigmas and LADDER_MIN); a finer
    base (m / 2, m / 4, ...) is taken when its own teeth are off the trend too (BASE_Z). None
    when the teeth are too few, or when the multiples of m are plain and only a deeper level is
    not (that is a comb of its own, or no comb)."""
    comb, _ = _ladder_fit(x, y, rel_sigma, m, steps)
    while m % 2 == 0 and m > 2:
        m //= 2
        finer, own_z = _ladder_fit(x, y, rel_sigma, m, steps)
        if finer is None or own_z < BASE_Z or abs(finer.log_offset) < LADDER_MIN:
            break  # the finer base's own teeth are plain: the comb starts above it
        comb = finer
    return comb if comb is not None and _teeth_agree(x, y, rel_sigma, comb) else None


def _teeth_agree(x: np.ndarray, y: np.ndarray, rel_sigma: np.ndarray, comb: Comb) -> bool:
    """Do the teeth, each against the line through its nearest measured non-multiples (within m
    dims on both sides), sit where the comb's levels put them, within COMB_SCATTER times their
    noise (robustly)? Teeth that scatter beyond that are not one kernel's speed-up per level
    (a penalty that adds a constant, say, shrinks as the trend grows): each stands for itself."""
    xs = x.astype(int)
    logs = np.log(y)
    expected = np.log(teeth_factor(comb, x))
    plain = np.flatnonzero(xs % comb.m != 0)
    z = []
    for i in np.flatnonzero(xs % comb.m == 0):
        k = int(np.searchsorted(xs[plain], xs[i]))
        if k == 0 or k == len(plain):
            continue
        lo, hi = plain[k - 1], plain[k]
        if xs[i] - xs[lo] > comb.m or xs[hi] - xs[i] > comb.m:
            continue
        w = (xs[i] - xs[lo]) / (xs[hi] - xs[lo])
        diff = logs[i] - ((1 - w) * logs[lo] + w * logs[hi])
        noise = math.sqrt(rel_sigma[i] ** 2 + ((1 - w) * rel_sigma[lo]) ** 2 + (w * rel_sigma[hi]) ** 2)
        z.append((diff - expected[i]) / noise)
    return len(z) < COMB_TEETH or _MAD_TO_SIGMA * float(np.median(np.abs(z))) <= COMB_SCATTER


def _ladder_fit(x: np.ndarray, y: np.ndarray, rel_sigma: np.ndarray, m: int, steps: int | None) -> tuple[Comb | None, float]:
    """(the ladder with base m, its base coefficient's z), or (None, 0) as fit_comb says."""
    xs = x.astype(int)
    if int((xs % m == 0).sum()) < COMB_TEETH or int((xs % m != 0).sum()) < COMB_TEETH:
        return None, 0.0
    levels = [m]
    while int((xs % (2 * levels[-1]) == 0).sum()) >= 2 and 2 * levels[-1] <= xs[-1]:
        levels.append(2 * levels[-1])
    piece = _piece_labels(x, _piece_count(float(x[-1] - x[0] + 1), m))
    trend = []
    for start, stop in _runs(piece):
        u = np.zeros(len(x))
        u[start:stop] = (x[start:stop] - x[start]) / max(1.0, x[stop - 1] - x[start])
        inside = np.zeros(len(x))
        inside[start:stop] = 1.0
        trend += [inside, inside * u, inside * u * u][:stop - start]
    if steps is not None:
        trend.append(-((xs - 1) % steps) / steps)
    logs = np.log(y)
    w = 1.0 / rel_sigma**2
    while True:
        cols = np.column_stack([*trend, *[(xs % lv == 0).astype(float) for lv in levels]])
        beta, cov = _huber_wls(cols, logs, w)
        k = len(trend)
        deep = len(levels) - 1
        if deep == 0 or abs(beta[k + deep]) >= max(LADDER_MIN, LADDER_Z * math.sqrt(cov[k + deep, k + deep])):
            break
        levels.pop()  # the deepest level is its parent's teeth: merge it back
    own_z = abs(beta[k]) / math.sqrt(cov[k, k])
    if len(levels) > 1 and own_z < LADDER_Z:
        return None, 0.0
    comb: Comb | None = None
    for j in range(len(levels) - 1, -1, -1):
        ones = np.zeros(len(beta))
        ones[k:k + j + 1] = 1.0
        comb = Comb(levels[j], float(ones @ beta), math.sqrt(float(ones @ cov @ ones)), comb)
    return comb, own_z


def _huber_wls(cols: np.ndarray, target: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares with Huber weights (a few rounds), and the coefficients' covariance,
    scaled up when the residuals scatter more than the weights say."""
    h = np.ones(len(target))
    for _ in range(5):
        sw = np.sqrt(w * h)
        beta, *_ = np.linalg.lstsq(cols * sw[:, None], target * sw, rcond=None)
        r = (target - cols @ beta) * np.sqrt(w)
        scale = max(1.0, _MAD_TO_SIGMA * float(np.median(np.abs(r))))
        h = np.minimum(1.0, 2.0 * scale / np.maximum(np.abs(r), 1e-12))
    cov = np.linalg.pinv((cols * (w * h)[:, None]).T @ cols) * scale**2
    return beta, cov


def comb_note(comb: Comb) -> str:
    """'multiples of 8 are 11.0 % faster than the dims around them', a ladder's deeper levels after it."""
    parts = []
    for k, lv in enumerate(comb.levels()):
        how = f"{100 * abs(math.expm1(lv.log_offset)):.1f} % {'faster' if lv.log_offset < 0 else 'slower'}"
        parts.append(f"multiples of {lv.m} are {how} than the dims around them" if k == 0 else f"of {lv.m} {how}")
    return ", ".join(parts)


def _runs(labels: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal neighbouring labels."""
    cuts = [0, *(np.flatnonzero(labels[1:] != labels[:-1]) + 1).tolist(), len(labels)]
    return list(zip(cuts[:-1], cuts[1:]))


def _best_templates(
    xs: np.ndarray, x: np.ndarray, y: np.ndarray, sigma: np.ndarray, pieces: int, ms: np.ndarray
) -> list[Pattern]:
    """The best sawtooth and the best comb among the m in ms, as explanations of log latency beyond
    a trend that is one quadratic per piece (pieces of equal span). A comb may point either way
    (multiples faster or slower); a staircase only jumps up after its multiples."""
    sw = y / sigma  # sqrt of the weights in log space (relative sigma)
    piece = _piece_labels(x, pieces)
    bases = []  # per piece: its points and an orthonormal basis of its weighted quadratic
    for start, stop in _runs(piece):
        u = (x[start:stop] - x[start]) / max(1.0, x[stop - 1] - x[start])
        cols = np.column_stack([np.ones_like(u), u, u * u][:stop - start])  # independent columns only
        bases.append((start, stop, np.linalg.qr(cols * sw[start:stop, None])[0]))

    def detrend(v: np.ndarray) -> np.ndarray:
        v = v * (sw if v.ndim == 1 else sw[:, None])
        out = np.empty_like(v)
        for start, stop, q in bases:
            out[start:stop] = v[start:stop] - q @ (q.T @ v[start:stop])
        return out

    resid = detrend(np.log(y))
    scale = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    resid = np.clip(resid, -4 * scale, 4 * scale)  # lone spikes must not vote

    templates = {
        "steps": lambda m: -((xs[:, None] - 1) % m[None, :]) / m[None, :],
        "comb": lambda m: -(xs[:, None] % m[None, :] == 0).astype(float),
    }
    found = []
    for kind, template in templates.items():
        t = np.full(len(ms), -np.inf)
        for block in np.array_split(np.arange(len(ms)), max(1, len(ms) // 64)):  # bounded memory
            cols = detrend(template(ms[block]))
            norms = np.sqrt((cols * cols).sum(axis=0))
            t[block] = np.where(norms > 1e-9, cols.T @ resid / np.where(norms > 1e-9, norms, 1.0), -np.inf)
        if kind == "comb":  # either way, but a few lone dims must not pass for one
            t = np.where((xs[:, None] % ms[None, :] == 0).sum(axis=0) >= COMB_TEETH, np.abs(t), -np.inf)
        k = int(np.argmax(t))
        if not np.isfinite(t[k]):
            continue
        # Medians that scatter more than their sigma inflate every t alike: judge the best by the scatter.
        col = detrend(template(ms[k:k + 1]))[:, 0]
        left = resid - col * (col @ resid) / (col @ col)
        found.append(Pattern(kind, int(ms[k]), float(t[k]) / max(1.0, _MAD_TO_SIGMA * float(np.median(np.abs(left - np.median(left)))))))
    return found


# ---------------------------------------------------------------------------------------------
# 3-4. Robust fits and lone dims


@dataclass(frozen=True)
class _Fit:
    """A weighted line a + b (u - u0) over the points idx; a and b are uncorrelated at u0."""

    idx: np.ndarray  # ascending point indices (a run may have a lone dim cut out of it)
    u0: float
    a: float
    b: float
    var_a: float
    var_b: float  # 0 when flat

    def at(self, u: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        du = np.asarray(u) - self.u0
        return self.a + self.b * du, self.var_a + self.var_b * du * du


def robust_fit(u: np.ndarray, y: np.ndarray, w: np.ndarray, idx: np.ndarray, slope_z: float) -> _Fit:
    """Huber-weighted line over one run (flat when its slope is not significant or the run is short).

    Huber weights let a moderately stray point count less instead of dragging the plateau.
    """
    uu, ww = u[idx], w[idx]
    level = float(np.median(y[idx]))
    yy = y[idx] - level  # fit around the run's median: a run of equal values comes out exact
    h = np.ones_like(yy)
    for _ in range(6):
        we = ww * h
        W = we.sum()
        u0 = float((we * uu).sum() / W)
        a = float((we * yy).sum() / W)
        suu = float((we * (uu - u0) ** 2).sum())
        b = float((we * (uu - u0) * (yy - a)).sum() / suu) if suu > 0 else 0.0
        if len(idx) < MIN_LINE_POINTS or suu <= 0 or abs(b) * math.sqrt(suu) < slope_z:  # |b| / se(b) < slope_z
            b, suu = 0.0, 0.0
        r = np.abs(yy - a - b * (uu - u0)) * np.sqrt(ww)
        h = np.minimum(1.0, 2.0 / np.maximum(r, 1e-12))
    return _Fit(idx, u0, level + a, b, 1.0 / W, 1.0 / suu if suu > 0 else 0.0)


def split_lone_dims(runs: list[np.ndarray], u, y, w, opts: CliffOptions) -> list[tuple[np.ndarray, bool]]:
    """A dim that stands out of its run's robust fit becomes a run of its own: (run, lone) pairs.

    It must stand out by z sigmas, and by more than noise alone would push the most extreme
    of the curve's points (a 0.1 % chance), so long curves do not grow fake spikes and dips.
    """
    z_lone = max(opts.z, -NormalDist().inv_cdf(0.001 / len(y)))
    out: list[tuple[np.ndarray, bool]] = []
    for idx in runs:
        if len(idx) < MIN_LINE_POINTS:
            out.append((idx, False))
            continue
        est, var = robust_fit(u, y, w, idx, opts.slope_z).at(u[idx])
        z = (y[idx] - est) / np.sqrt(1.0 / w[idx] + var)
        lone = (np.abs(z) >= z_lone) & (np.abs(y[idx] - est) > opts.min_rel * est)
        cuts = np.flatnonzero(lone | np.roll(lone, 1))  # a piece starts at a lone dim and right after it
        out.extend((p, bool(lone[np.searchsorted(idx, p[0])] and len(p) == 1)) for p in np.split(idx, cuts) if len(p))
    return out


def run_cost(u: np.ndarray, y: np.ndarray, w: np.ndarray, idx: np.ndarray, slope_price: float) -> float:
    """The segmentation's cost (chi^2, a slope priced) of one run given by its point indices."""
    sums = _RunningSums(u[idx], y[idx], w[idx], slope_price)
    return float(sums.rss(np.array([0]), len(idx))[0])


def rejoin_runs(runs: list[tuple[np.ndarray, bool]], u, y, w, penalty: np.ndarray, opts: CliffOptions) -> list[np.ndarray]:
    """Join neighbouring runs, or the two sides of lone dims, that fit as one run for less than
    the price of the boundary between them.

    Lone dims taken out, a plateau the segmentation cut around a spike is one plateau again (its
    halves would otherwise be told apart by noise), and so is a plateau cut where nothing steps.
    A run of one dim may join too (a spike right before a step leaves one dim after it), unless
    it is a lone dim split off for standing out.
    """
    price = opts.slope_z**2
    out: list[np.ndarray] = []
    host: int | None = None  # the last run in out of more than one dim
    for idx, lone in runs:
        if not lone and host is not None:
            # Lone dims only come after the host (by construction); those past its end lie between.
            between = [r for r in out[host + 1:] if r[0] > out[host][-1]]
            if out[host][-1] + 1 + len(between) == idx[0]:
                both = np.concatenate([out[host], idx])
                extra = run_cost(u, y, w, both, price) - run_cost(u, y, w, out[host], price) - run_cost(u, y, w, idx, price)
                # The boundary could sit anywhere in the gap: it costs the cheapest place there.
                if extra < penalty[out[host][-1] + 1:idx[0] + 1].min():
                    out[host] = both
                    continue
        out.append(idx)
        if len(idx) > 1:  # a single dim that joins nothing (a spike the segmentation cut) hosts nothing
            host = len(out) - 1
    return out


def fit_runs(x: np.ndarray, y: np.ndarray, u: np.ndarray, sigma: np.ndarray, opts: CliffOptions) -> tuple[list[_Fit], Comb | None]:
    """Segment the curve, split off lone dims, rejoin what they cut, and fit each run robustly.

    Where the data show a comb, its teeth are first brought to the trend (divided by the comb's
    pooled factor), so each tooth's estimate leans on its run and on every other tooth instead
    of on its one noisy measurement; the fits are of that comb-free curve."""
    w = 1.0 / sigma**2
    # Runs cost a penalty each; where the data show a staircase, a run starting right after a
    # multiple of its period is cheap, so noise cannot shift a step by a dim or hide a small one.
    beta = opts.penalty if opts.penalty is not None else 3.0 * math.log(max(len(x), 3))
    penalty = np.full(len(x), beta)
    pattern = find_pattern(x, y, sigma, opts)
    comb_of, steps = None, None
    if pattern is not None:
        comb_of = pattern if pattern.kind == "comb" else pattern.also
        steps = pattern.m if pattern.kind == "steps" else None
    comb = fit_comb(x, y, sigma / y, comb_of.m, steps) if comb_of is not None else None
    if steps is not None:
        cell = (x.astype(int) - 1) // steps
        penalty[1:][cell[1:] != cell[:-1]] = opts.grid_penalty * beta
    runs, cost = _runs_and_cost(u, y, w, penalty, opts)
    if comb is not None:  # the comb must pay for itself (as a slope does): else it is not there
        factor = teeth_factor(comb, x)
        y, w = y / factor, w * factor**2
        comb_runs, comb_cost = _runs_and_cost(u, y, w, penalty, opts)
        if comb_cost + opts.slope_z**2 < cost:
            runs = comb_runs
        else:
            comb, y, w = None, y * factor, w / factor**2
    return [robust_fit(u, y, w, idx, opts.slope_z) for idx in runs], comb


def _runs_and_cost(u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, opts: CliffOptions) -> tuple[list[np.ndarray], float]:
    """The runs (segmented, lone dims split off, rejoined) and what they cost: chi^2 plus a penalty per run."""
    runs = [np.arange(s, e) for s, e in segment(u, y - np.median(y), w, penalty, opts.slope_z**2)]
    runs = rejoin_runs(split_lone_dims(runs, u, y, w, opts), u, y, w, penalty, opts)
    cost = sum(run_cost(u, y, w, idx, opts.slope_z**2) + (penalty[idx[0]] if idx[0] else 0.0) for idx in runs)
    return runs, float(cost)


def put_teeth_back(fits: list[_Fit], comb: Comb | None, x: np.ndarray) -> list[_Fit]:
    """Fits of the comb-free curve, each split into its plain dims and its teeth of each level (the
    trend times that level's factor, with the factor's uncertainty): each is a run of its own."""
    if comb is None:
        return fits
    levels = comb.levels()
    out = []
    for f in fits:
        which = tooth_level(comb, x[f.idx])
        if (which < 0).any():
            out.append(replace(f, idx=f.idx[which < 0]))
        for k, lv in enumerate(levels):
            on = which == k
            if on.any():
                factor = math.exp(lv.log_offset)
                var_factor = (factor * lv.se) ** 2
                out.append(_Fit(f.idx[on], f.u0, f.a * factor, f.b * factor,
                                factor**2 * f.var_a + f.a**2 * var_factor, factor**2 * f.var_b))  # fmt: skip
    return sorted(out, key=lambda f: int(f.idx[0]))


def residual_scale(fits: list[_Fit], u: np.ndarray, y: np.ndarray, sigma: np.ndarray) -> float:
    """Robust scatter of the points around their runs' fits, in units of their sigmas (1: as assumed)."""
    z = []
    for f in fits:
        n = len(f.idx)
        if n >= MIN_LINE_POINTS:
            params = 2 if f.var_b > 0 else 1
            est, _ = f.at(u[f.idx])
            z.append((y[f.idx] - est) / sigma[f.idx] * math.sqrt(n / (n - params)))
    if sum(len(v) for v in z) < 8:
        return 1.0
    zz = np.concatenate(z)
    return float(_MAD_TO_SIGMA * np.median(np.abs(zz - np.median(zz))))


# ---------------------------------------------------------------------------------------------
# 5. Steps and frontier


def jump(left: _Fit, right: _Fit, u_at: float, opts: CliffOptions) -> tuple[float, float] | None:
    """(relative excess, z) of where the right run starts over where the left run's line was
    heading; None when that is noise or too small to matter (a kink, not a step)."""
    expected, var_l = left.at(u_at)
    got, var_r = right.at(u_at)
    excess = float(got - expected)
    z = excess / math.sqrt(float(var_l + var_r))
    if abs(excess) <= opts.min_rel * float(expected) or abs(z) < opts.z:
        return None
    return excess / float(expected), z


def point_fits(fits: list[_Fit], n: int) -> np.ndarray:
    """Each point's run number."""
    run = np.empty(n, dtype=int)
    for k, f in enumerate(fits):
        run[f.idx] = k
    return run


def estimate_arrays(fits: list[_Fit], u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each point's denoised latency and that estimate's variance, from its run's fit."""
    est, var = np.empty(len(u)), np.empty(len(u))
    for f in fits:
        est[f.idx], var[f.idx] = f.at(u[f.idx])
    return est, var


def find_jumps(fits: list[_Fit], x: np.ndarray, u: np.ndarray, opts: CliffOptions) -> list[Step]:
    """Steps between neighbouring dims of different runs."""
    run = point_fits(fits, len(x))
    steps = []
    for i in np.flatnonzero(run[1:] != run[:-1]) + 1:
        left, right = fits[run[i - 1]], fits[run[i]]
        found = jump(left, right, u[i], opts)
        if found is None:
            continue
        before, after = float(left.at(u[i - 1])[0]), float(right.at(u[i])[0])
        z = found[1]
        confidence = 0.5 * (1 + math.erf((abs(z) - opts.z) / math.sqrt(2)))
        steps.append(Step(int(x[i - 1]), int(x[i]), before, after, 100 * (after - before) / before, z, confidence))
    return steps


def rises(fits: list[_Fit], x: np.ndarray, u: np.ndarray) -> list[int]:
    """The last dim of each run (lone dims aside) after which the curve goes on higher, however
    little: where a found period lets the segmentation cut for free, these are its multiples
    even when the steps are too small to report one by one and noise thins the frontier."""
    runs = sorted((f for f in fits if len(f.idx) > 1), key=lambda f: int(f.idx[0]))
    out = []
    for left, right in zip(runs, runs[1:]):
        i, j = int(left.idx[-1]), int(right.idx[0])
        if float(right.at(u[j])[0]) > float(left.at(u[i])[0]):
            out.append(int(x[i]))
    return out


def robust_frontier(x: np.ndarray, u: np.ndarray, fits: list[_Fit], opts: CliffOptions) -> list[int]:
    """Dims every larger dim is slower than, by frontier_z times the noise of the difference.

    Two estimates of one run differ by b * du with noise se(b) * du (they share the line);
    estimates of different runs are independent. A tie (a flat run) drops the smaller dim.
    """
    est, var = estimate_arrays(fits, u)
    slope_se = np.array([math.sqrt(f.var_b) for f in fits])
    return _frontier(x, u, est, var, point_fits(fits, len(x)), slope_se, opts)


def frontier_from_estimates(estimates: Mapping[int, float], sigma: Mapping[int, float], opts: CliffOptions = CliffOptions()) -> list[int]:
    """The robust frontier of estimates taken as independent (e.g. a weighted sum of several
    modelled curves): d stays when every larger d is slower by frontier_z times the noise of
    the difference. Equal estimates (one flat plateau) still drop the smaller dim."""
    x = np.array(sorted(estimates), dtype=float)
    est = np.array([estimates[int(d)] for d in x])
    var = np.array([sigma[int(d)] ** 2 for d in x])
    return _frontier(x, x, est, var, np.arange(len(x)), np.zeros(len(x)), opts)


def frontier_of_sum(dims: Sequence[int], terms: Sequence[tuple[CurveModel, float, int]], opts: CliffOptions = CliffOptions()) -> list[int]:
    """The robust frontier of a weighted sum of modelled curves (an item's kernels): d stays when
    every larger d is slower beyond frontier_z times the noise of the difference, each curve's
    share of that noise as its model says (one run: its slope's; different runs: independent).

    terms: (model, weight, scale) with latency(d) = sum weight * model.estimates[scale * d]; every
    scale * d must be modelled. A flat plateau still drops its smaller dims (a tie), a line
    keeps every dim (its differences are as sure as its slope), and two runs the noise split
    apart keep the smaller dim only when the larger run is slower beyond their noise.
    """
    d = np.array(sorted(set(dims)), dtype=int)
    if len(d) == 0:
        return []
    est = np.zeros(len(d))
    parts = []
    for model, weight, scale in terms:
        xs = (scale * d).tolist()
        e = np.array([model.estimates[x] for x in xs])
        est += weight * e
        parts.append((weight, scale, np.array([model.sigma[x] for x in xs]), np.array([model.run.get(x, -1 - i) for i, x in enumerate(xs)]),
                      np.array([model.slope_se.get(x, 0.0) for x in xs])))  # fmt: skip
    faster_than_rest = est < np.append(np.minimum.accumulate(est[::-1])[::-1][1:], np.inf)
    keep: list[int] = []
    candidates = np.flatnonzero(faster_than_rest)
    for block in np.array_split(candidates, max(1, len(candidates) // 128)):
        i = block[:, None]
        later = np.arange(len(d))[None, :] > i
        var = np.zeros((len(block), len(d)))
        for weight, scale, sig, run, slope_se in parts:
            same = run[None, :] == run[i]
            dx = scale * np.abs(d[None, :] - d[i])
            var += weight**2 * np.where(same, (slope_se[i] * dx) ** 2, sig[i] ** 2 + sig[None, :] ** 2)
        margin = np.maximum(opts.frontier_z * np.sqrt(var), opts.frontier_tol_min * est[i])
        ok = np.all(~later | (est[None, :] - est[i] > margin), axis=1)
        keep.extend(int(d[k]) for k in block[ok])
    return keep


def _frontier(x, u, est, var, run, slope_se, opts: CliffOptions) -> list[int]:
    # Only a dim strictly faster than every larger one can pass; test those in blocks of rows.
    faster_than_rest = est < np.append(np.minimum.accumulate(est[::-1])[::-1][1:], np.inf)
    candidates = np.flatnonzero(faster_than_rest)
    keep: list[int] = []
    for block in np.array_split(candidates, max(1, len(candidates) // 128)):
        i = block[:, None]
        later = np.arange(len(x))[None, :] > i
        same = run[None, :] == run[i]
        sd = np.where(same, slope_se[run[i]] * np.abs(u[None, :] - u[i]), np.sqrt(var[i] + var[None, :]))
        margin = np.maximum(opts.frontier_z * sd, opts.frontier_tol_min * est[i])
        ok = np.all(~later | (est[None, :] - est[i] > margin), axis=1)
        keep.extend(int(x[k]) for k in block[ok])
    return keep


# ---------------------------------------------------------------------------------------------
# 6. Period


def find_period(marked: Iterable[int], xs: Sequence[int], opts: CliffOptions = CliffOptions()) -> Modulus | None:
    """The m whose measured multiples best match the marked dims (Jaccard), any m from 2 up.

    An m needs min_multiples measured multiples, and some measured dims that are not
    multiples (else it says nothing). Among near-equal agreements the smallest m wins.
    """
    dims = np.array(sorted(set(xs)))
    mark = np.isin(dims, list(set(marked)))
    if mark.sum() < 2 or len(dims) == 0:
        return None
    scores: list[tuple[int, float]] = []
    for m in range(2, int(dims[-1]) // opts.min_multiples + 1):
        multiple = dims % m == 0
        count = int(multiple.sum())
        if count < opts.min_multiples or count == len(dims):
            continue
        scores.append((m, float((multiple & mark).sum() / (multiple | mark).sum())))
    if not scores:
        return None
    top = max(a for _, a in scores)
    m, agreement = min((m, a) for m, a in scores if a >= top - 0.02)
    return Modulus(m, agreement) if agreement >= opts.min_agreement else None


# ---------------------------------------------------------------------------------------------
# The model


def model_lookup_curve(curve: Mapping[int, Any], opts: CliffOptions = CliffOptions()) -> CurveModel:
    """model_curve over a LatencyLookup curve (dim -> solver.lookup.PointLatency)."""
    return model_curve(
        (Point(x, p.latency_us, p.p10_us, p.p90_us, p.n) for x, p in curve.items()), opts
    )


def model_curve(points: Iterable[Point], opts: CliffOptions = CliffOptions()) -> CurveModel:
    """Denoised latency, steps, robust frontier and period of one curve (points with distinct x)."""
    pts = sorted(points, key=lambda p: p.x)
    if not pts:
        return CurveModel({}, {}, [], [], [], None, True, 0.0, ["no points"])
    x = np.array([p.x for p in pts], dtype=float)
    y = np.array([p.median_us for p in pts], dtype=float)
    sigma, lone_sigma = point_sigmas(pts, opts)
    u = (x - x[0]) / max(1.0, x[-1] - x[0])  # well-conditioned sums

    fits, comb = fit_runs(x, y, u, sigma, opts)
    if comb is not None:  # its teeth passed for jitter: judge the noise without them
        sigma, lone_sigma = point_sigmas(pts, opts, comb)
        fits, comb = fit_runs(x, y, u, sigma, opts)
    # The sigmas came from each point's spread and a jitter guess; the fitted runs show the real
    # scatter (of the comb-free curve, where there is a comb). When it differs clearly, refit
    # once with sigmas scaled to it.
    factor = teeth_factor(comb, x)
    scale = residual_scale(fits, u, y / factor, sigma / factor)
    if not 0.9 <= scale <= 1.1:
        sigma, lone_sigma = (s * min(4.0, max(0.5, scale)) for s in (sigma, lone_sigma))
        fits, comb = fit_runs(x, y, u, sigma, opts)
        factor = teeth_factor(comb, x)
    trend_fits = [replace(f, var_a=float((lone_sigma / factor)[f.idx[0]] ** 2)) if len(f.idx) == 1 else f for f in fits]
    fits = put_teeth_back(trend_fits, comb, x)

    steps = find_jumps(fits, x, u, opts)
    frontier = robust_frontier(x, u, fits, opts)
    xs = [p.x for p in pts]
    period = (
        find_period(frontier, xs, opts)
        or find_period([s.x_before for s in steps if s.size_pct > 0], xs, opts)
        or find_period(rises(trend_fits, x, u), xs, opts)
    )

    est, var = estimate_arrays(fits, u)
    segments = []
    for f in fits:
        per_dim = float(f.b / max(1.0, x[-1] - x[0]))
        segments.append(Segment(int(x[f.idx[0]]), int(x[f.idx[-1]]), float(est[f.idx[0]]), per_dim, len(f.idx)))

    smooth = not steps
    notes = []
    if len(pts) < MIN_POINTS:
        notes.append(f"fewer than {MIN_POINTS} points: steps and period are tentative")
    if smooth:
        notes.append(SMOOTH_NOTE)
    else:
        if comb is not None:
            notes.append(comb_note(comb))
        if period is not None and (comb is None or period.m != comb.m):
            notes.append(f"steps follow multiples of {period.m} (agreement {period.agreement:.2f})")
    lone = [s.x_first for s in segments if s.points == 1]
    if lone:
        notes.append(f"{len(lone)} dims stand alone (spikes or dips): {lone[:8]}{' ...' if len(lone) > 8 else ''}")
    return CurveModel(
        estimates={int(xi): float(e) for xi, e in zip(x, est)},
        sigma={int(xi): math.sqrt(float(v)) for xi, v in zip(x, var)},
        segments=segments,
        steps=steps,
        frontier=frontier,
        period=period,
        smooth=smooth,
        noise_pct=100 * float(np.median(sigma / y)),
        notes=notes,
        run={int(xi): int(r) for xi, r in zip(x, point_fits(fits, len(x)))},
        slope_se={int(x[i]): math.sqrt(f.var_b) / max(1.0, x[-1] - x[0]) for f in fits for i in f.idx},
        comb=comb,
    )
