"""A noise-aware model of one latency curve: denoised latency per dim, its uncertainty, the steps
(up and down), the robust cliff-free frontier and the period the steps follow. Pure functions.

Why a model and not raw medians: a staircase's plateau of 24 noisy dims has a random minimum,
and a raw-median frontier keeps every dim that happens to be faster than all larger ones, so
noise invents cliffs (and hides real ones). The model instead

1. gives each point a noise sigma: its median's standard error (from p10..p90 and n; the samples'
   own sigma when they spread over half the median: such runs move whole), at least
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

from gac.solver.multiples import Multiples, batches, measured_counts, multiples

# p90 - p10 of a normal distribution is 2.563 sigma; a median's standard error is
# sqrt(pi / 2) = 1.2533 times the mean's.
P10_P90_SIGMAS = 2.5631
MEDIAN_SE = 1.2533
_MAD_TO_SIGMA = 1.4826
# Samples spread this widely are no independent draws around one median: host stalls or a launch-bound
# stretch move a whole run (an H100's 5 µs GEMM read medians of 5.2 to 17.9 µs in three runs, each
# from 2,000 samples), so the next run's median may land anywhere among them, whatever n is.
UNSTEADY_SPREAD = 0.5
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
        """Standard error of the median, from the point's own spread (0 when unknown); a point whose
        samples spread over UNSTEADY_SPREAD of its median gets the samples' own sigma."""
        if self.p10_us is None or self.p90_us is None:
            return 0.0
        sigma = max(0.0, self.p90_us - self.p10_us) / P10_P90_SIGMAS
        if self.p90_us - self.p10_us > UNSTEADY_SPREAD * self.median_us:
            return sigma
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
    return np.concatenate(
        [[np.median(y[: i + half + 1]) for i in range(half)], level, [np.median(y[-(half + i + 1) :]) for i in reversed(range(half))]]
    )


# ---------------------------------------------------------------------------------------------
# 2. Segmentation


def _chi2_terms(u: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per point, the weighted sums a run's fit is made of: w, w u, w u^2, w y, w u y, w y^2."""
    return np.stack([w, w * u, w * u * u, w * y, w * u * y, w * y * y])


def _priced_rss(t: np.ndarray, points: np.ndarray | int, slope_price: float, gated: bool = True) -> np.ndarray:
    """Chi^2 of the best fit to a run from its sums t (_chi2_terms summed over it; a column per run):
    a flat level, or a line when the slope's chi^2 gain (its t^2) beats slope_price. Pricing the
    slope keeps a line from gliding over a few small steps that flat levels would show. A run of
    fewer than MIN_LINE_POINTS, or no spread in u, gets no slope unless not gated."""
    W, U, UU, Y, UY, YY = t
    suu = UU - U * U / W
    suy = UY - U * Y / W
    syy = YY - Y * Y / W
    sloped = (suu > 1e-12 * W) & (np.asarray(points) >= MIN_LINE_POINTS) if gated else suu > 0
    slope_gain = np.where(sloped, suy * suy / np.where(sloped, suu, 1.0), 0.0)
    return np.maximum(syy - np.maximum(slope_gain - slope_price, 0.0), 0.0)


class _RunningSums:
    """Cumulative weighted sums: the chi^2 of a flat or straight fit over any run in O(1)."""

    def __init__(self, u: np.ndarray, y: np.ndarray, w: np.ndarray, slope_price: float) -> None:
        self.slope_price = slope_price
        self.sums = np.concatenate([np.zeros((6, 1)), np.cumsum(_chi2_terms(u, y, w), axis=1)], axis=1)

    def rss(self, starts: np.ndarray, end: int) -> np.ndarray:
        """Chi^2 of the best fit to points starts..end-1 (_priced_rss)."""
        return _priced_rss(self.sums[:, end, None] - self.sums[:, starts], end - starts, self.slope_price)

    def rss_grid(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """rss of each start (rows) to each end (columns); inf where the start is not before the end."""
        with np.errstate(divide="ignore", invalid="ignore"):
            rss = _priced_rss(self.sums[:, None, ends] - self.sums[:, starts, None], ends - starts[:, None], self.slope_price)
        return np.where(starts[:, None] < ends, rss, np.inf)

    def rss_bound(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """A lower bound of rss(s, e) for every s up to each start (rows) and each end (columns, after
        the starts): its fit with a slope always allowed. A best fit costs no less on more points."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return _priced_rss(self.sums[:, None, ends] - self.sums[:, starts, None], ends - starts[:, None], self.slope_price, gated=False)


SEGMENT_BLOCK = 32  # ends the segmentation decides together (one array operation per step, not per end)
BOUND_CHUNK = 64  # start points bounded together (_Partitioning._floor)
RECENT = 64  # the latest live starts, always tried: they set the bar the older ones' bounds must clear


def segment(u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, slope_price: float) -> list[tuple[int, int]]:
    """Runs [start, end) minimising total chi^2 plus penalty[start] per run (optimal partitioning).

    penalty[i] is the price of a run starting at point i (penalty[0] is ignored). Pruning (PELT)
    drops start points that can never win again, so curves with frequent steps cost about linear
    time. Runs shorter than MIN_LINE_POINTS get no slope, so a start point that loses now may
    still win for the next few ends: it is dropped only after those.

    The ends are taken SEGMENT_BLOCK at a time (_Partitioning.block). A long run keeps every start
    inside it live (starting later saves less than a penalty), so a long smooth curve has many:
    the older ones are bounded in chunks first, and tried one by one only where the bound does
    not rule them out.
    """
    n = len(y)
    state = _Partitioning(u, y, w, penalty, slope_price)
    live = np.array([0])
    for first in range(1, n + 1, SEGMENT_BLOCK):
        live = state.block(np.arange(first, min(first + SEGMENT_BLOCK, n + 1)), live)
    runs = []
    end = n
    while end > 0:
        runs.append((int(state.cut[end]), end))
        end = int(state.cut[end])
    return runs[::-1]


class _Partitioning:
    """The optimal partitioning's state: per point, the best cost of the points before it plus the
    penalty of a run starting there, where the last run before it starts, and when it stops
    being a start worth trying."""

    def __init__(self, u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, slope_price: float) -> None:
        n = len(y)
        self.sums = _RunningSums(u, y, w, slope_price)
        self.pay = np.concatenate([[0.0], penalty[1:], [0.0]])
        self.most = float(self.pay.max()) + slope_price  # splitting a run can add at most one slope price
        self.start_cost = np.zeros(n + 1)
        self.cut = np.zeros(n + 1, dtype=int)
        self.expires = np.full(n + 1, n + 1)  # per start point: the last end it may still win at
        # Costs from running sums carry rounding of about 1e-16 of the sums' size (on curves whose
        # weights stay within a few orders of magnitude); a bound must clear the bar by far more.
        self.slack = 1e-10 * float(np.sum(w * (1 + y * y)))
        self.floors = np.full(n // BOUND_CHUNK + 1, np.nan)  # per chunk of start points, once known (_floor)

    def block(self, ends: np.ndarray, live: np.ndarray) -> np.ndarray:
        """Decide the ends (consecutive) given the live starts before them; the live starts after them.

        First each end's least cost (_block_best), then, from those, which start points each end
        drops and which live one it takes: the first of the cheapest, as one end at a time would
        (a dropped start, or one a bound ruled out, never ties the cheapest; where the running
        sums keep no precision for a run, a curve spanning many orders of magnitude, the costs
        are rounding noise and its ties may break otherwise)."""
        own = ends[:-1]  # the block's own ends are starts for its later ends
        starts = np.concatenate([self._worth_trying(live, own, ends), own])
        rss = self.sums.rss_grid(starts, ends)
        best = _block_best(self.start_cost[starts[: len(starts) - len(own)]], rss, self.pay[own])
        self.start_cost[ends] = best + self.pay[ends]
        costs = self.start_cost[starts, None] + rss
        lost = (costs > best + self.most) & (ends - starts[:, None] >= MIN_LINE_POINTS)
        first_loss = np.where(lost.any(axis=1), ends[lost.argmax(axis=1)], len(self.cut))
        self.expires[starts] = np.minimum(self.expires[starts], first_loss + MIN_LINE_POINTS - 1)
        alive = (starts[:, None] < ends) & (self.expires[starts, None] >= ends)
        self.cut[ends] = starts[np.argmin(np.where(alive, costs, np.inf), axis=0)]
        every = np.concatenate([live, own])
        return np.append(every[self.expires[every] > ends[-1]], ends[-1])

    def _worth_trying(self, live: np.ndarray, own: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The live starts that may be the cheapest for some end: all but the older ones whose chunk's
        floor (_floor) plus the cost of a run from the chunk's end stays above what the recent
        starts, the last ends' choices and the block's own reach."""
        if len(live) <= RECENT + BOUND_CHUNK:
            return live
        old, recent = live[:-RECENT], live[-RECENT:]
        taken = np.unique(self.cut[ends[0] - SEGMENT_BLOCK : ends[0]])
        taken = taken[(taken < recent[0]) & (self.expires[taken] >= ends[0])]  # still live
        bar = np.concatenate([taken, recent])
        reach = _block_best(self.start_cost[bar], self.sums.rss_grid(np.concatenate([bar, own]), ends), self.pay[own])
        chunk = old // BOUND_CHUNK
        first = np.flatnonzero(np.diff(chunk, prepend=-1))
        chunks = chunk[first]
        bounded = (chunks + 1) * BOUND_CHUNK < ends[0]  # a chunk ending among the block's ends is not bounded
        bound = self._floor(chunks[bounded])[:, None] + self.sums.rss_bound((chunks[bounded] + 1) * BOUND_CHUNK, ends)
        ruled_out = np.zeros(len(chunks), dtype=bool)
        ruled_out[bounded] = (bound > reach + self.slack).all(axis=1)
        return np.concatenate([old[~np.repeat(ruled_out, np.diff(np.append(first, len(old))))], recent])

    def _floor(self, chunks: np.ndarray) -> np.ndarray:
        """Per chunk of start points (BOUND_CHUNK in a row), a floor under start cost plus rss(start,
        e) for all its starts s and every end e past the chunk, less the cost of a run from the
        chunk's end a to e (rss taken with the slope always allowed: no more than rss). Both of
        the lowest start cost (a run costs no less than its tail), and the lowest cost of reaching
        a through a run from one of its starts less one slope price (a run costs no less than its
        two parts less the slope price the second part may add). On a long smooth run the second
        is about a penalty less a slope price above the cheapest way to a: it rules out chunks
        of any length."""
        for c in chunks[np.isnan(self.floors[chunks])]:
            starts = np.arange(c * BOUND_CHUNK, (c + 1) * BOUND_CHUNK)
            to_end = self.start_cost[starts] + self.sums.rss_bound(starts, np.array([(c + 1) * BOUND_CHUNK]))[:, 0]
            self.floors[c] = max(float(self.start_cost[starts].min()), float(to_end.min()) - self.sums.slope_price)
        return self.floors[chunks]


JACOBI_ROUNDS = 4  # a block whose best paths hold more runs than this is solved one end at a time


def _block_best(before: np.ndarray, rss: np.ndarray, pay: np.ndarray) -> np.ndarray:
    """Per end of a block, the least cost of a last run to it plus the best cost before its start.

    before: the start costs of the live starts before the block, rss: their rows and then the
    block's own starts' (each end but the last), pay: those starts' penalties. A start inside the
    block costs what the block found for its end: the costs are improved all at once until they
    hold still (one round per run a best path holds inside the block), or, after JACOBI_ROUNDS,
    taken end by end; both end where one end at a time would.
    """
    reach = (before[:, None] + rss[: len(before)]).min(axis=0)
    inner = rss[len(before) :]
    if not len(inner):
        return reach
    best = reach
    for _ in range(JACOBI_ROUNDS):
        better = np.minimum(reach, ((best[:-1] + pay)[:, None] + inner).min(axis=0))
        if np.array_equal(better, best, equal_nan=True):  # (sums that lost all precision give nan: no hang)
            return best
        best = better
    best = reach.copy()
    for j in range(1, len(best)):
        best[j] = min(best[j], ((best[:j] + pay[:j]) + inner[:j, j]).min())
    return best


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

    def testable(ms: np.ndarray) -> list[int]:
        count = measured_counts(xs, ms)
        return ms[(opts.pattern_multiples <= count) & (count < len(xs))].tolist()

    def best_of(ms: list[int]) -> Pattern | None:
        span = float(x[-1] - x[0] + 1)
        pieces = _piece_counts(span, np.array(ms))
        found = [p for k in np.unique(pieces) for p in _best_templates(xs, x, y, sigma, int(k), np.array(ms)[pieces == k])]
        best = max(found, key=lambda p: (p.t, p.kind == "comb"), default=None)
        combs = [p for p in found if p.kind == "comb"]
        if best is not None and best.kind == "steps" and combs:
            best = replace(best, also=max(combs, key=lambda p: p.t))
        return best

    # The best must beat the chance maximum of all the templates tried; a period seen elsewhere
    # is one hypothesis (per period offered), so a weaker pattern confirms it.
    for ms, z_min in (
        (testable(np.arange(2, int(xs[-1]) // opts.pattern_multiples + 1)), opts.z),
        (testable(np.array([m for m in sorted(set(opts.periods)) if m >= 2], dtype=int)), opts.prior_z),
    ):
        best = best_of(ms) if ms else None
        z_need = max(z_min, -NormalDist().inv_cdf(0.001 / (2 * len(ms)))) if ms else math.inf
        if best is not None and best.t >= z_need:
            return best if best.also is None or best.also.t >= z_need else replace(best, also=None)
    return None


PERIODS_PER_PIECE = 8


def _piece_count(span: float, m: int) -> int:
    """The finest trend for a pattern of period m: pieces a power of two, each PERIODS_PER_PIECE periods long at least."""
    return int(_piece_counts(span, np.array([m]))[0])


def _piece_counts(span: float, ms: np.ndarray) -> np.ndarray:
    """_piece_count of each m in ms."""
    pieces = np.ones(len(ms), dtype=int)
    finer = span / (2 * pieces) >= PERIODS_PER_PIECE * ms
    while finer.any():
        pieces = np.where(finer, 2 * pieces, pieces)
        finer = span / (2 * pieces) >= PERIODS_PER_PIECE * ms
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
    teeth = np.flatnonzero(xs % comb.m == 0)
    k = np.searchsorted(xs[plain], xs[teeth])
    inner = (k > 0) & (k < len(plain))
    teeth, k = teeth[inner], k[inner]
    lo, hi = plain[k - 1], plain[k]
    near = (xs[teeth] - xs[lo] <= comb.m) & (xs[hi] - xs[teeth] <= comb.m)
    i, lo, hi = teeth[near], lo[near], hi[near]
    w = (xs[i] - xs[lo]) / (xs[hi] - xs[lo])
    diff = logs[i] - ((1 - w) * logs[lo] + w * logs[hi])
    noise = np.sqrt(rel_sigma[i] ** 2 + ((1 - w) * rel_sigma[lo]) ** 2 + (w * rel_sigma[hi]) ** 2)
    z = (diff - expected[i]) / noise
    return len(z) < COMB_TEETH or _MAD_TO_SIGMA * float(np.median(np.abs(z))) <= COMB_SCATTER


def _ladder_fit(x: np.ndarray, y: np.ndarray, rel_sigma: np.ndarray, m: int, steps: int | None) -> tuple[Comb | None, float]:
    """(the ladder with base m, its base coefficient's z), or (None, 0) as fit_comb says."""
    xs = x.astype(int)
    if int((xs % m == 0).sum()) < COMB_TEETH or int((xs % m != 0).sum()) < COMB_TEETH:
        return None, 0.0
    levels = [m]
    while int((xs % (2 * levels[-1]) == 0).sum()) >= 2 and 2 * levels[-1] <= xs[-1]:
        levels.append(2 * levels[-1])
    trend = _PieceTrend(x, _piece_count(float(x[-1] - x[0] + 1), m))
    saw = [] if steps is None else [-((xs - 1) % steps) / steps]
    w = 1.0 / rel_sigma**2
    # Detrended once (nothing the trend absorbs changes the fit), which keeps the sums small.
    dense = trend.residual(np.stack([*saw, np.log(y)]), w)
    while True:
        beta, cov = _LadderRegression(trend, xs, m, len(levels), dense).fit(w)
        k = len(saw)
        deep = len(levels) - 1
        if deep == 0 or abs(beta[k + deep]) >= max(LADDER_MIN, LADDER_Z * _sd(cov[k + deep, k + deep])):
            break
        levels.pop()  # the deepest level is its parent's teeth: merge it back
    own_z = abs(beta[k]) / _sd(cov[k, k])
    if len(levels) > 1 and own_z < LADDER_Z:
        return None, 0.0
    comb: Comb | None = None
    for j in range(len(levels) - 1, -1, -1):
        ones = np.zeros(len(beta))
        ones[k : k + j + 1] = 1.0
        sd = _sd(float(ones @ cov @ ones))
        if math.isinf(sd):  # the fit cannot tell this level's height: no ladder
            return None, 0.0
        comb = Comb(levels[j], float(ones @ beta), sd, comb)
    return comb, own_z


def _sd(variance: float) -> float:
    """A coefficient's standard error; infinite where a near-singular fit leaves its variance at or below
    zero (rounding in the pseudo-inverse): such a coefficient is not determined, so no test passes on it."""
    return math.sqrt(variance) if variance > 0 else math.inf


# Products over the points are einsum's or sums, not BLAS calls: BLAS spreads long ones over threads,
# which costs more than it saves on a small, shared machine.
_PAIRS = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]  # a 3 x 3 symmetric matrix's distinct entries ...
_SYMMETRIC = np.array([[0, 1, 2], [1, 3, 4], [2, 4, 5]])  # ... and where each entry is among them


class _PieceTrend:
    """One quadratic per piece (pieces of equal span over x): the smooth trend beyond which the
    pattern scan and the comb's regression look for periodic structure.

    Per point it holds its piece's Legendre columns 1, v, (3 v^2 - 1) / 2 (v: -1..1 over the
    piece): they span what 1, u, u^2 do, and their normal equations are well conditioned. A
    piece of one or two dims has only its first one or two. Arrays run along the points
    (3 x n, k x n): the sums per piece are then over contiguous memory."""

    def __init__(self, x: np.ndarray, pieces: int) -> None:
        runs = _runs(_piece_labels(x, pieces))
        self.starts = np.array([start for start, _ in runs])
        self.stops = np.array([stop for _, stop in runs])
        self.count = len(runs)
        self.piece = np.repeat(np.arange(self.count), self.stops - self.starts)
        first, last = x[self.starts][self.piece], x[self.stops - 1][self.piece]
        v = 2 * (x - first) / np.maximum(1.0, last - first) - 1
        used = np.arange(3) < (self.stops - self.starts)[:, None]
        self.basis = np.stack([np.ones_like(v), v, 1.5 * v * v - 0.5]) * used[self.piece].T
        self.unused = ~used
        self.products = np.stack([self.basis[a] * self.basis[b] for a, b in _PAIRS])

    def sums(self, rows: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Per piece, the weighted products of its columns with each of rows (k x n): pieces x 3 x k."""
        products = ((self.basis * w)[:, None, :] * rows[None, :, :]).reshape(3 * len(rows), -1)
        return np.add.reduceat(products, self.starts, axis=1).reshape(3, len(rows), -1).transpose(2, 0, 1)

    def gram(self, w: np.ndarray) -> np.ndarray:
        """Per piece, its columns' weighted normal matrix (1 on the diagonal for a missing column)."""
        return self.gram_of(np.add.reduceat(self.products * w, self.starts, axis=1))

    def gram_of(self, sums: np.ndarray) -> np.ndarray:
        """gram from the per-piece sums of the weighted products (6 x pieces, as self.products)."""
        gram = sums[_SYMMETRIC].transpose(2, 0, 1)
        gram[:, np.arange(3), np.arange(3)] += self.unused
        return gram

    def inverse_gram(self, sums: np.ndarray) -> np.ndarray:
        """The inverse of gram_of(sums), by cofactors (a symmetric 3 x 3 per piece)."""
        a, b, c, d, e, f = sums
        a, d, f = a + self.unused[:, 0], d + self.unused[:, 1], f + self.unused[:, 2]
        cof = [d * f - e * e, c * e - b * f, b * e - c * d, a * f - c * c, b * c - a * e, a * d - b * b]
        det = a * cof[0] + b * cof[1] + c * cof[2]
        return np.stack([cof[k] for k in _SYMMETRIC.ravel()], axis=1).reshape(-1, 3, 3) / det[:, None, None]

    def spread(self, per_piece: np.ndarray) -> np.ndarray:
        """Per point, its piece's row of per_piece (k x pieces): k x n."""
        return np.repeat(per_piece, self.stops - self.starts, axis=1)

    def residual(self, rows: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Each of rows (k x n) less its weighted least-squares quadratic per piece."""
        coef = np.linalg.solve(self.gram(w), self.sums(rows, w))
        return rows - np.einsum("cn,nck->kn", self.basis, coef[self.piece])

    def orthonormal(self, sw: np.ndarray) -> np.ndarray:
        """Per point, its column of an orthonormal basis of its piece's columns times sw (3 x n)."""
        inverse = np.linalg.inv(np.linalg.cholesky(self.gram(sw * sw)))
        return np.einsum("jn,nkj->kn", self.basis * sw, inverse[self.piece])


class _LadderRegression:
    """Log latency on a quadratic per piece, the staircase's sawtooth (when the curve also steps) and
    one indicator per level of a ladder (multiples of m, 2m, 4m, ...), weighted.

    Solved through sums, without a design matrix: the trend is projected out of the normal
    equations piece by piece (Frisch-Waugh-Lovell: the other coefficients, their covariance and
    the residuals are the whole regression's), and a level's sums are over its teeth, which
    every deeper level shares: sums per deepest level, added up from the deepest."""

    def __init__(self, trend: _PieceTrend, xs: np.ndarray, m: int, levels: int, dense: np.ndarray) -> None:
        """levels: of m, 2m, 4m, ..., how many; dense: the sawtooth (if any), then the target, both detrended."""
        self.trend, self.levels, self.dense = trend, levels, dense
        teeth = np.flatnonzero(xs % m == 0)
        twos = np.abs(xs[teeth] // m)
        twos = twos & -twos  # the largest power of two dividing x / m (0 for x = 0, a multiple of all)
        self.teeth = teeth
        self.deepest = np.where(twos > 0, np.log2(np.maximum(twos, 1)).astype(int), levels - 1).clip(max=levels - 1)
        # Per tooth, what its weight multiplies: the trend's columns (summed per piece and deepest
        # level), the dense rows and 1 (summed per deepest level); and where each sum goes.
        self.on_trend = trend.basis[:, teeth]
        self.trend_cell = (np.arange(3)[:, None] * trend.count * levels + trend.piece[teeth] * levels + self.deepest).ravel()
        self.on_level = np.vstack([dense[:, teeth], np.ones(len(teeth))])
        self.level_cell = (np.arange(len(self.on_level))[:, None] * levels + self.deepest).ravel()
        # Per point, what its weight multiplies in the per-piece sums: the trend's products, its
        # columns times the dense rows, and the dense rows' products.
        self.pairs = [(i, j) for i in range(len(dense)) for j in range(i, len(dense))]
        self.on_pieces = np.vstack([trend.products, (trend.basis[:, None, :] * dense[None, :, :]).reshape(-1, len(xs)),
                                    np.array([dense[i] * dense[j] for i, j in self.pairs])])  # fmt: skip
        saws = len(dense) - 1
        self.dense_at = [*range(saws), saws + levels]  # the dense rows' places among the columns and the target
        self.level_at = slice(saws, saws + levels)
        self.deeper = np.maximum.outer(np.arange(levels), np.arange(levels))  # two levels share the deeper one's teeth

    def fit(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Huber-weighted (a few rounds): the coefficients of the sawtooth and the levels, and their
        covariance, scaled up when the residuals scatter more than the weights say."""
        h = np.ones(len(w))
        for _ in range(5):
            normal, per_piece = self._normal(w * h)
            c = len(normal) - 1
            beta = np.linalg.lstsq(normal[:c, :c], normal[:c, c], rcond=None)[0]
            r = self._residuals(beta, per_piece) * np.sqrt(w)
            scale = max(1.0, _MAD_TO_SIGMA * float(np.median(np.abs(r))))
            h, before = np.minimum(1.0, 2.0 * scale / np.maximum(np.abs(r), 1e-12)), h
            if np.array_equal(h, before):  # the rounds left would repeat this one
                break
        normal, _ = self._normal(w * h)
        return beta, np.linalg.pinv(normal[:-1, :-1]) * scale**2

    def _levels(self, per_class: np.ndarray) -> np.ndarray:
        """Sums per deepest level (last axis) to sums per level: each level's teeth are its own and every deeper level's."""
        return np.cumsum(per_class[..., ::-1], axis=-1)[..., ::-1]

    def _normal(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The normal equations of the columns (sawtooth, levels) and the target with the trend
        projected out (columns x columns, target last), and per piece its trend's normal matrix
        solved against the columns' and the target's products with it."""
        t, levels, dense = self.trend, self.levels, self.dense
        d = len(dense)
        wt = w[self.teeth]
        per_cell = np.bincount(self.trend_cell, weights=(self.on_trend * wt).ravel(), minlength=3 * t.count * levels)
        per_level = np.bincount(self.level_cell, weights=(self.on_level * wt).ravel(), minlength=(d + 1) * levels)
        on_trend = self._levels(per_cell.reshape(3, t.count, levels)).transpose(1, 0, 2)
        on_level = self._levels(per_level.reshape(d + 1, levels))
        per_piece = np.add.reduceat(self.on_pieces * w, t.starts, axis=1)
        dense_on_trend = per_piece[6 : 6 + 3 * d].reshape(3, d, t.count).transpose(2, 0, 1)
        products = np.concatenate([dense_on_trend[:, :, : d - 1], on_trend, dense_on_trend[:, :, d - 1 :]], axis=2)
        raw = np.empty((d + levels,) * 2)
        for (i, j), total in zip(self.pairs, per_piece[6 + 3 * d :].sum(axis=1)):
            raw[self.dense_at[i], self.dense_at[j]] = raw[self.dense_at[j], self.dense_at[i]] = total
        raw[self.dense_at, self.level_at] = on_level[:-1]
        raw[self.level_at, self.dense_at] = on_level[:-1].T
        raw[self.level_at, self.level_at] = on_level[-1][self.deeper]
        solved = np.einsum("pij,pjk->pik", t.inverse_gram(per_piece[:6]), products)  # pieces x 3 x columns
        return raw - np.einsum("pik,pil->kl", products, solved), solved

    def _residuals(self, beta: np.ndarray, per_piece: np.ndarray) -> np.ndarray:
        """The target less the columns times beta and less the trend fitted to what they leave."""
        saws = len(self.dense) - 1
        fitted = np.einsum("i,in->n", beta[:saws], self.dense[:saws])
        fitted[self.teeth] += np.cumsum(beta[saws:])[self.deepest]
        trend = per_piece[:, :, -1] - np.einsum("pik,k->pi", per_piece[:, :, :-1], beta)
        return self.dense[-1] - fitted - (self.trend.basis * self.trend.spread(trend.T)).sum(axis=0)


def comb_note(comb: Comb) -> str:
    """'multiples of 8 take 11.0 % less time than the dims around them', a ladder's deeper levels after it
    ("% less time", not "% faster": 82 % less time is 5.5 times as fast)."""
    parts = []
    for k, lv in enumerate(comb.levels()):
        how = f"{100 * abs(math.expm1(lv.log_offset)):.1f} % {'less' if lv.log_offset < 0 else 'more'} time"
        parts.append(f"multiples of {lv.m} take {how} than the dims around them" if k == 0 else f"of {lv.m} {how}")
    return ", ".join(parts)


def _runs(labels: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal neighbouring labels."""
    cuts = [0, *(np.flatnonzero(labels[1:] != labels[:-1]) + 1).tolist(), len(labels)]
    return list(zip(cuts[:-1], cuts[1:]))


def _best_templates(xs: np.ndarray, x: np.ndarray, y: np.ndarray, sigma: np.ndarray, pieces: int, ms: np.ndarray) -> list[Pattern]:
    """The best sawtooth and the best comb among the m in ms, as explanations of log latency beyond
    a trend that is one quadratic per piece (pieces of equal span). A comb may point either way
    (multiples faster or slower); a staircase only jumps up after its multiples.

    Each m's statistic is its detrended template's correlation with the detrended curve. The
    templates are never built: their products with the curve and with the pieces' bases are
    sums over the multiples of m (_TemplateSums), so all the m cost about span * log(span)."""
    trend = _WeightedTrend(x, y / sigma, pieces)
    resid = trend.detrend(np.log(y))
    scale = _MAD_TO_SIGMA * float(np.median(np.abs(resid - np.median(resid))))
    resid = np.clip(resid, -4 * scale, 4 * scale)  # lone spikes must not vote
    stats, teeth = _TemplateSums(trend, resid, xs).per_m(ms)
    templates = {
        "steps": lambda m: -((xs - 1) % m) / m,
        "comb": lambda m: -(xs % m == 0).astype(float),
    }
    two = ms == 2  # its sawtooth is half its comb: the same t exactly (a tie the comb wins)
    for v, c in zip(stats["steps"], stats["comb"]):
        v[two] = c[two]
    found = []
    for kind, template in templates.items():
        along, norm2 = stats[kind]
        norms = np.sqrt(np.maximum(norm2, 0.0))
        t = np.where(norms > 1e-9, along / np.where(norms > 1e-9, norms, 1.0), -np.inf)
        if kind == "comb":  # either way, but a few lone dims must not pass for one
            t = np.where(teeth >= COMB_TEETH, np.abs(t), -np.inf)
        k = int(np.argmax(t))
        if not np.isfinite(t[k]):
            continue
        # Medians that scatter more than their sigma inflate every t alike: judge the best by the scatter.
        left = _project_out(resid, trend.detrend(template(int(ms[k]))))
        found.append(Pattern(kind, int(ms[k]), float(t[k]) / max(1.0, _MAD_TO_SIGMA * float(np.median(np.abs(left - np.median(left)))))))
    return found


def _project_out(resid: np.ndarray, col: np.ndarray) -> np.ndarray:
    """resid less its projection on col; resid itself when col is all zeros (nothing to project out)."""
    norm2 = (col * col).sum()
    if norm2 == 0:
        return resid
    return resid - col * (col * resid).sum() / norm2


class _WeightedTrend:
    """A _PieceTrend fitted with weights sw**2: per point its column q of an orthonormal basis of
    its piece's weighted columns (3 x n)."""

    def __init__(self, x: np.ndarray, sw: np.ndarray, pieces: int) -> None:
        self.pieces = _PieceTrend(x, pieces)
        self.sw = sw
        self.q = self.pieces.orthonormal(sw)

    def residual(self, v: np.ndarray) -> np.ndarray:
        """v less its projection on the pieces' weighted quadratics."""
        coef = np.add.reduceat(self.q * v, self.pieces.starts, axis=1)
        return v - (self.q * coef[:, self.pieces.piece]).sum(axis=0)

    def detrend(self, v: np.ndarray) -> np.ndarray:
        """sw * v less its weighted quadratic per piece (what a weighted fit leaves, in noise units)."""
        return self.residual(v * self.sw)


class _TemplateSums:
    """For every m at once, a template's product with the detrended curve and its detrended norm^2.

    A template c's detrended column is r(sw * c) (the trend's residual), so its product with the
    detrended curve d is (sw * c) . r(d), and its norm^2 is |sw * c|^2 less, per piece, the squared
    length of the basis rows' sum weighted by sw * c. The comb's c is an indicator of the
    multiples: sums over them. The sawtooth's -((x - 1) mod m) / m is floor((x - 1) / m) less a line,
    and a line is in every piece's trend, so c may be taken as the count of multiples of m from the
    piece's first dim up to x (exclusive): each multiple adds one to every later dim of its piece,
    and a count's square is the sum of the odd numbers up to twice it."""

    def __init__(self, trend: _WeightedTrend, resid: np.ndarray, xs: np.ndarray) -> None:
        self.trend, self.xs = trend, xs
        self.along = trend.sw * trend.residual(resid)  # a template's product with resid is its sum weighted by this
        self.rows = trend.q * trend.sw  # 3 x n

    def per_m(self, ms: np.ndarray) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """Per m in ms: (product, norm^2) of the sawtooth ("steps") and of the comb, and the comb's
        teeth (measured multiples)."""
        parts = []
        for batch in batches(self.xs, ms):
            found = multiples(self.xs, ms[batch])
            parts.append((*self._steps(found, ms[batch]), *self._comb(found, len(ms[batch])),
                          np.bincount(found.j[found.measured], minlength=len(ms[batch]))))  # fmt: skip
        steps_along, steps_norm2, comb_along, comb_norm2, teeth = (np.concatenate(v) for v in zip(*parts))
        return {"steps": (steps_along, steps_norm2), "comb": (comb_along, comb_norm2)}, teeth

    def _comb(self, found: Multiples, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(product, norm^2) of the template -[m divides x], per m."""
        j, i = found.j[found.measured], found.above[found.measured] - 1
        along = -np.bincount(j, weights=self.along[i], minlength=count)
        return along, self._norm2(j, self.trend.pieces.piece[i], self.trend.sw[i] ** 2, self.rows[:, i], count)

    def _steps(self, found: Multiples, ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(product, norm^2) of the template -((x - 1) mod m) / m, per m."""
        t = self.trend.pieces
        after = found.above < len(self.xs)
        inside = np.zeros(len(found.j), dtype=bool)  # between two dims of one piece
        inside[after] = t.piece[found.above[after] - 1] == t.piece[found.above[after]]
        j, i = found.j[inside], found.above[inside]
        piece = t.piece[i]
        stop = t.stops[piece]
        rank = found.k[inside] - (self.xs[t.starts[piece]] - 1) // ms[j]  # the multiple's number in its piece, from 1

        def later(v: np.ndarray) -> np.ndarray:  # per multiple, v (along the last axis) summed over its piece's dims above it
            total = np.concatenate([np.zeros((*v.shape[:-1], 1)), np.cumsum(v, axis=-1)], axis=-1)
            return total[..., stop] - total[..., i]

        sq = (2 * rank - 1) * later(self.trend.sw**2)
        along = np.bincount(j, weights=later(self.along), minlength=len(ms))
        return along, self._norm2(j, piece, sq, later(self.rows), len(ms))

    def _norm2(self, j: np.ndarray, piece: np.ndarray, sq: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
        """|sw * c|^2 (its terms: sq) less, per piece, the squared length of the basis rows' sum (rows:
        the terms, 3 x len(j)), per m (j: which; count of them)."""
        pieces = self.trend.pieces.count
        cell = j * pieces + piece
        basis = sum(np.bincount(cell, weights=rows[c], minlength=count * pieces) ** 2 for c in range(3))
        return np.bincount(j, weights=sq, minlength=count) - np.asarray(basis).reshape(count, pieces).sum(axis=1)


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


def robust_fits(u: np.ndarray, y: np.ndarray, w: np.ndarray, runs: list[np.ndarray], slope_z: float) -> list[_Fit]:
    """A Huber-weighted line over each run (flat when its slope is not significant or the run is short).

    Huber weights let a moderately stray point count less instead of dragging the plateau.
    """
    _, _, u0, a, b, var_a, var_b = _line_fits(u, y, w, runs, slope_z)
    return [_Fit(r, float(u0[k]), float(a[k]), float(b[k]), float(var_a[k]), float(var_b[k])) for k, r in enumerate(runs)]


def _line_fits(u: np.ndarray, y: np.ndarray, w: np.ndarray, runs: list[np.ndarray], slope_z: float) -> tuple[np.ndarray, ...]:
    """robust_fits as arrays, all runs at once: the runs' points (concatenated) and each one's run,
    then per run u0, a, b, var_a and var_b."""
    sizes = np.array([len(r) for r in runs])
    idx = np.concatenate(runs)
    run = np.repeat(np.arange(len(runs)), sizes)
    uu, ww = u[idx], w[idx]

    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(run, weights=v, minlength=len(runs))

    level = _medians(y[idx], run, sizes)
    yy = y[idx] - level[run]  # fit around the run's median: a run of equal values comes out exact
    h = np.ones(len(idx))
    for _ in range(6):
        we = ww * h
        W = total(we)
        u0 = total(we * uu) / W
        a = total(we * yy) / W
        du = uu - u0[run]
        suu = total(we * du**2)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(suu > 0, total(we * du * (yy - a[run])) / suu, 0.0)
        flat = (sizes < MIN_LINE_POINTS) | (suu <= 0) | (np.abs(b) * np.sqrt(np.maximum(suu, 0.0)) < slope_z)  # |b| / se(b) < slope_z
        b, suu = np.where(flat, 0.0, b), np.where(flat, 0.0, suu)
        r = np.abs(yy - a[run] - b[run] * du) * np.sqrt(ww)
        h = np.minimum(1.0, 2.0 / np.maximum(r, 1e-12))
    with np.errstate(divide="ignore"):
        var_b = np.where(suu > 0, 1.0 / suu, 0.0)
    return idx, run, u0, level + a, b, 1.0 / W, var_b


def _medians(v: np.ndarray, group: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The median of v within each group (group: ascending labels 0.., sizes: their counts), as np.median takes it."""
    ordered = v[np.lexsort((v, group))]
    first = np.cumsum(sizes) - sizes
    return (ordered[first + (sizes - 1) // 2] + ordered[first + sizes // 2]) / 2


def split_lone_dims(runs: list[np.ndarray], u, y, w, opts: CliffOptions) -> list[tuple[np.ndarray, bool]]:
    """A dim that stands out of its run's robust fit becomes a run of its own: (run, lone) pairs.

    It must stand out by z sigmas, and by more than noise alone would push the most extreme
    of the curve's points (a 0.1 % chance), so long curves do not grow fake spikes and dips.
    """
    z_lone = max(opts.z, -NormalDist().inv_cdf(0.001 / len(y)))
    lone = np.zeros(len(y), dtype=bool)
    long = [idx for idx in runs if len(idx) >= MIN_LINE_POINTS]
    if long:
        idx, run, u0, a, b, var_a, var_b = _line_fits(u, y, w, long, opts.slope_z)
        du = u[idx] - u0[run]
        est, var = a[run] + b[run] * du, var_a[run] + var_b[run] * du * du
        z = (y[idx] - est) / np.sqrt(1.0 / w[idx] + var)
        lone[idx] = (np.abs(z) >= z_lone) & (np.abs(y[idx] - est) > opts.min_rel * est)
    out: list[tuple[np.ndarray, bool]] = []
    for idx in runs:
        mine = lone[idx]
        if not mine.any():
            out.append((idx, False))
            continue
        cuts = np.flatnonzero(mine | np.roll(mine, 1))  # a piece starts at a lone dim and right after it
        out.extend((p, bool(mine[np.searchsorted(idx, p[0])] and len(p) == 1)) for p in np.split(idx, cuts) if len(p))
    return out


def rejoin_runs(
    runs: list[tuple[np.ndarray, bool]], u, y, w, penalty: np.ndarray, opts: CliffOptions
) -> tuple[list[np.ndarray], list[float]]:
    """Join neighbouring runs, or the two sides of lone dims, that fit as one run for less than
    the price of the boundary between them: the runs, and each one's chi^2 (a slope priced).

    Lone dims taken out, a plateau the segmentation cut around a spike is one plateau again (its
    halves would otherwise be told apart by noise), and so is a plateau cut where nothing steps.
    A run of one dim may join too (a spike right before a step leaves one dim after it), unless
    it is a lone dim split off for standing out.
    """
    price = opts.slope_z**2
    sizes = np.array([len(idx) for idx, _ in runs])
    sums = np.add.reduceat(_chi2_terms(u, y - np.median(y), w)[:, np.concatenate([idx for idx, _ in runs])],
                           np.cumsum(sizes) - sizes, axis=1)  # fmt: skip
    alone = _priced_rss(sums, sizes, price)
    out: list[list[np.ndarray]] = []  # each run as the pieces it was joined from
    out_sums: list[np.ndarray] = []
    cost: list[float] = []
    host: int | None = None  # the last run in out of more than one dim ...
    last = size = between = 0  # ... its last point, its dims, and the single dims after it in out
    for k, (idx, lone) in enumerate(runs):
        # Lone dims only come after the host (by construction): those after its end lie between.
        if not lone and host is not None and last + 1 + between == idx[0]:
            both = out_sums[host] + sums[:, k]
            joined = float(_priced_rss(both, size + len(idx), price))
            extra = joined - cost[host] - float(alone[k])
            # The boundary could sit anywhere in the gap: it costs the cheapest place there.
            if extra < penalty[last + 1 : idx[0] + 1].min():
                out[host].append(idx)
                out_sums[host], cost[host] = both, joined
                last, size, between = int(idx[-1]), size + len(idx), 0
                continue
        out.append([idx])
        out_sums.append(sums[:, k])
        cost.append(float(alone[k]))
        if len(idx) > 1:  # a single dim that joins nothing (a spike the segmentation cut) hosts nothing
            host, last, size, between = len(out) - 1, int(idx[-1]), len(idx), 0
        else:
            between += 1
    return [np.concatenate(pieces) for pieces in out], cost


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
    return robust_fits(u, y, w, runs, opts.slope_z), comb


def _runs_and_cost(u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, opts: CliffOptions) -> tuple[list[np.ndarray], float]:
    """The runs (segmented, lone dims split off, rejoined) and what they cost: chi^2 plus a penalty per run."""
    runs = [np.arange(s, e) for s, e in segment(u, y - np.median(y), w, penalty, opts.slope_z**2)]
    runs, chi2 = rejoin_runs(split_lone_dims(runs, u, y, w, opts), u, y, w, penalty, opts)
    cost = sum(c + (penalty[idx[0]] if idx[0] else 0.0) for idx, c in zip(runs, chi2))
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
    """Steps between neighbouring dims of different runs: where the right run starts beyond where
    the left run's line was heading by opts.z noise units and opts.min_rel of the latency (less
    is noise, or a kink, not a step)."""
    run = point_fits(fits, len(x))
    i = np.flatnonzero(run[1:] != run[:-1]) + 1
    u0, a, b, var_a, var_b = (np.array([getattr(f, k) for f in fits]) for k in ("u0", "a", "b", "var_a", "var_b"))

    def at(k: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # as _Fit.at, per boundary
        du = where - u0[k]
        return a[k] + b[k] * du, var_a[k] + var_b[k] * du * du

    left, right = run[i - 1], run[i]
    expected, var_l = at(left, u[i])
    got, var_r = at(right, u[i])
    excess = got - expected
    z = excess / np.sqrt(var_l + var_r)
    i, z, before, after = (v[(np.abs(excess) > opts.min_rel * expected) & (np.abs(z) >= opts.z)]
                           for v in (i, z, at(left, u[i - 1])[0], got))  # fmt: skip
    return [Step(int(x[k - 1]), int(x[k]), bf, af, 100 * (af - bf) / bf, zz, 0.5 * (1 + math.erf((abs(zz) - opts.z) / math.sqrt(2))))
            for k, bf, af, zz in zip(i, before.tolist(), after.tolist(), z.tolist())]  # fmt: skip


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
    """The dims every larger dim is slower than, by max(frontier_z * sd, frontier_tol_min * est),
    where sd is the noise of the difference: slope_se * du within a run, else both variances'.

    Only a dim strictly faster than every larger one can pass. It is compared with the larger
    dims one by one only as far as one could still be within the margin: past that, each larger
    dim is slower by more than frontier_z times the sum of the two sigmas, and that sum bounds
    sd (an estimate's variance holds its run's slope variance times its distance from the run's
    centre squared, so slope_se * du is within it too)."""
    suffix_min = lambda v: np.minimum.accumulate(v[::-1])[::-1]  # noqa: E731
    candidates = np.flatnonzero(est < np.append(suffix_min(est)[1:], np.inf))
    z, tol = opts.frontier_z, opts.frontier_tol_min
    sd = np.sqrt(var)
    i = candidates
    slack = 1e-9 * (np.abs(est[i]) + z * sd[i])  # far beyond rounding: the dims past it pass the test below too
    past = np.maximum.reduce([
        i + 1,
        np.searchsorted(np.append(suffix_min(est - z * sd), np.inf), est[i] + z * sd[i] + slack, side="right"),
        np.searchsorted(np.append(suffix_min(est), np.inf), est[i] + tol * est[i] + slack, side="right"),
    ])  # fmt: skip
    count = past - i - 1  # the larger dims to compare one by one
    failed = np.zeros(len(i), dtype=int)
    for block in np.array_split(np.arange(len(i)), max(1, int(count.sum()) // 1_000_000)):  # bounded memory
        row = np.repeat(block, count[block])
        a = i[row]
        b = a + 1 + np.arange(len(row)) - np.repeat(np.cumsum(count[block]) - count[block], count[block])
        same = run[a] == run[b]
        sd_ab = np.where(same, slope_se[run[a]] * np.abs(u[b] - u[a]), np.sqrt(var[a] + var[b]))
        margin = np.maximum(z * sd_ab, tol * est[a])
        failed += np.bincount(row, weights=~(est[b] - est[a] > margin), minlength=len(i)).astype(int)
    return [int(v) for v in x[i[failed == 0]]]


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
    ms = np.arange(2, int(dims[-1]) // opts.min_multiples + 1)
    count, both = np.zeros(len(ms), dtype=int), np.zeros(len(ms), dtype=int)  # per m: multiples, and marked ones
    for batch in batches(dims, ms):
        found = multiples(dims, ms[batch])
        j, i = found.j[found.measured], found.above[found.measured] - 1
        count[batch] = np.bincount(j, minlength=len(ms[batch]))
        both[batch] = np.bincount(j, weights=mark[i], minlength=len(ms[batch]))
    ok = (count >= opts.min_multiples) & (count < len(dims))
    if not ok.any():
        return None
    agreement = both[ok] / (count[ok] + int(mark.sum()) - both[ok])  # Jaccard: shared over either
    k = int(np.argmax(agreement >= agreement.max() - 0.02))  # the smallest m among the near-best
    return Modulus(int(ms[ok][k]), float(agreement[k])) if agreement[k] >= opts.min_agreement else None


# ---------------------------------------------------------------------------------------------
# The model


def model_lookup_curve(curve: Mapping[int, Any], opts: CliffOptions = CliffOptions()) -> CurveModel:
    """model_curve over a LatencyLookup curve (dim -> gac.solver.lookup.PointLatency)."""
    return model_curve((Point(x, p.latency_us, p.p10_us, p.p90_us, p.n) for x, p in curve.items()), opts)


def model_curve(points: Iterable[Point], opts: CliffOptions = CliffOptions()) -> CurveModel:
    """Denoised latency, steps, robust frontier and period of one curve (points with distinct x)."""
    pts = sorted(points, key=lambda p: p.x)
    if not pts:
        return CurveModel({}, {}, [], [], [], None, True, 0.0, ["no points"])
    x = np.array([p.x for p in pts], dtype=float)
    y = np.array([p.median_us for p in pts], dtype=float)
    u = (x - x[0]) / max(1.0, x[-1] - x[0])  # well-conditioned sums
    fits, trend_fits, comb, sigma = _fit_curve(pts, x, y, u, opts)

    steps = find_jumps(fits, x, u, opts)
    frontier = robust_frontier(x, u, fits, opts)
    period = _curve_period(frontier, steps, (trend_fits, x, u), [p.x for p in pts], opts)

    est, var = estimate_arrays(fits, u)
    segments = _segments(fits, x, est)
    return CurveModel(
        estimates={int(xi): float(e) for xi, e in zip(x, est)},
        sigma={int(xi): math.sqrt(float(v)) for xi, v in zip(x, var)},
        segments=segments,
        steps=steps,
        frontier=frontier,
        period=period,
        smooth=not steps,
        noise_pct=100 * float(np.median(sigma / y)),
        notes=_curve_notes(len(pts), steps, comb, period, segments),
        run={int(xi): int(r) for xi, r in zip(x, point_fits(fits, len(x)))},
        slope_se={int(x[i]): math.sqrt(f.var_b) / max(1.0, x[-1] - x[0]) for f in fits for i in f.idx},
        comb=comb,
    )


def _fit_curve(
    pts: Sequence[Point], x: np.ndarray, y: np.ndarray, u: np.ndarray, opts: CliffOptions
) -> tuple[list[_Fit], list[_Fit], Comb | None, np.ndarray]:
    """The curve's runs fitted under the noise they show: (fits with a comb's teeth back, the trend's fits, comb, sigma)."""
    sigma, lone_sigma = point_sigmas(pts, opts)
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
    return put_teeth_back(trend_fits, comb, x), trend_fits, comb, sigma


def _curve_period(
    frontier: list[int], steps: list[Step], trend: tuple[list[_Fit], np.ndarray, np.ndarray], xs: list[int], opts: CliffOptions
) -> Modulus | None:
    """The period of the frontier, else of the upward steps, else of the trend's rises (trend: its fits, x and u)."""
    return (
        find_period(frontier, xs, opts)
        or find_period([s.x_before for s in steps if s.size_pct > 0], xs, opts)
        or find_period(rises(*trend), xs, opts)
    )


def _segments(fits: list[_Fit], x: np.ndarray, est: np.ndarray) -> list[Segment]:
    """One Segment per fitted run: its first and last dim, its first estimate, slope per dim and size."""
    segments = []
    for f in fits:
        per_dim = float(f.b / max(1.0, x[-1] - x[0]))
        segments.append(Segment(int(x[f.idx[0]]), int(x[f.idx[-1]]), float(est[f.idx[0]]), per_dim, len(f.idx)))
    return segments


def _curve_notes(n_points: int, steps: list[Step], comb: Comb | None, period: Modulus | None, segments: list[Segment]) -> list[str]:
    """What the model tells about its curve: few points, smooth, a comb, the steps' period, lone dims."""
    notes = []
    if n_points < MIN_POINTS:
        notes.append(f"fewer than {MIN_POINTS} points: steps and period are tentative")
    if not steps:
        notes.append(SMOOTH_NOTE)
    else:
        if comb is not None:
            notes.append(comb_note(comb))
        if period is not None and (comb is None or period.m != comb.m):
            notes.append(f"steps follow multiples of {period.m} (agreement {period.agreement:.2f})")
    lone = [s.x_first for s in segments if s.points == 1]
    if lone:
        notes.append(f"{len(lone)} dims stand alone (spikes or dips): {lone[:8]}{' ...' if len(lone) > 8 else ''}")
    return notes
