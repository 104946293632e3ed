"""How long profiling the missing points will take, from what the platform already measured.

A point's cost is its warm-up plus its samples: a sample is at least the CPU
timer's minimum sample length (short kernels are called several times per
sample), and sampling stops at the time cap. The latency of a point not yet
measured comes from the nearest measured dim of the same curve (scaled by the
work ratio), else from the platform's time per FLOP on other curves of the
same op (then of any op) that the alignment touched. How many samples it takes
follows from the noise its neighbours showed (their p10..p90), under the
timing's own stopping rule: the sample counts recorded under another plan's
time cap would not say. With nothing measured at all, every point is assumed
to run to its time cap: an upper bound, said so.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gac.contracts.alignment import MissingCurve
from gac.contracts.measurements import Dtype, Op, op_flops
from gac.contracts.plans import MEDIAN_BATCHES, MIN_BATCH_SAMPLES, Timing
from gac.solver.curve_model import MEDIAN_SE, P10_P90_SIGMAS
from gac.solver.lookup import LatencyLookup, PointLatency
from gac.solver.sparse_needs import FIRST_PASS

MIN_SAMPLE_US = 1000.0  # the CPU timer batches calls into samples of at least this long
# A curve's first pass (gac.solver.sparse_needs: its lattice and a sample) calls for more points once
# measured: on a GPU's lattice a few at most (none on an H100's q_proj curves and their synthetic
# Llama-3-8B extension), on a curve that is no lattice (a CPU's) every other dim of its windows,
# about 3x the first pass. The estimate adds this share for them; more may follow, and it says so.
LATER_PASSES = 0.25
POINT_OVERHEAD_S = 0.005  # allocating the inputs and recording the point
BATCH_MIN = MEDIAN_BATCHES * MIN_BATCH_SAMPLES  # a noisy point's median interval needs its batch-means interval too


@dataclass(frozen=True)
class ProfileEstimate:
    points: int
    seconds: float
    basis: str  # how the figure was obtained, for the user
    per_curve: tuple[float, ...] = ()  # seconds per missing curve, in order
    capped_per_curve: tuple[int, ...] = ()  # per missing curve, the dims estimated at the time cap (nothing measured near)


def point_seconds(latency_us: float, samples: int | None, timing: Timing) -> float:
    """Wall time of one point: warm-up, then samples until the count or the cap."""
    n = min(max(samples or timing.min_samples, timing.min_samples), timing.max_samples)
    sampling_ms = min(n * max(latency_us, MIN_SAMPLE_US) / 1e3, timing.time_cap_ms)
    return (timing.warmup_ms + sampling_ms) / 1e3 + POINT_OVERHEAD_S


def most_seconds(points: int, timing: Timing | None = None) -> float:
    """About the longest profiling `points` can take: each one's warm-up, then samples up to the
    time cap (kernels shorter than time_cap / min_samples). Noise the platform's measured points
    did not show (correlated noise, which the stopping rule's batch-means interval waits out)
    can take a point there: the estimate above is what quiet points take."""
    timing = timing or Timing()
    return points * ((timing.warmup_ms + timing.time_cap_ms) / 1e3 + POINT_OVERHEAD_S)


def samples_needed(p: PointLatency, timing: Timing) -> int | None:
    """Samples the timer's stopping rule takes on a point as noisy as p: min_samples when p's
    spread (p90 - p10) / median is within target_spread; else until the median's 95 % interval
    is within +/- median_ci (sigma from the spread, as of a normal sample). At least what p
    itself took (p.n): under the same timing that is the best guess, and a shorter time cap
    can only have cut it short. p.n alone without a spread."""
    if p.p10_us is None or p.p90_us is None or p.latency_us <= 0:
        return p.n
    spread = (p.p90_us - p.p10_us) / p.latency_us
    if spread <= timing.target_spread:
        need = timing.min_samples
    elif timing.median_ci <= 0:
        need = timing.max_samples
    else:
        need = max(BATCH_MIN, math.ceil((_Z95 * MEDIAN_SE * spread / P10_P90_SIGMAS / timing.median_ci) ** 2))
    return max(need, p.n or 0)


_Z95 = 1.96


def _shape(mc: MissingCurve, dim: int) -> dict[str, int]:
    return {**mc.fixed_shape, mc.axis: dim}


def _nearest(curve: dict[int, PointLatency], xs: list[int], dim: int) -> int:
    i = bisect.bisect_left(xs, dim)
    near = xs[max(0, i - 1) : i + 1]
    return min(near, key=lambda x: abs(x - dim))


def estimate(
    missing: Sequence[MissingCurve], lookup: LatencyLookup | None, timing: Timing | None = None, later: Sequence[int] | None = None
) -> ProfileEstimate:
    """Estimated seconds to profile every point of `missing` with `timing` (the plan default if None),
    and the later passes a first pass calls for (gac.solver.sparse_needs): LATER_PASSES of it, or, where
    nothing was measured (an upper bound), at most `later` more points per curve at the time cap."""
    timing = timing or Timing()
    points = sum(len(mc.dims) for mc in missing)
    curves = {id(mc): dict(lookup.curve(Op(mc.op), Dtype(mc.dtype), mc.fixed_shape, mc.axis)) if lookup else {} for mc in missing}
    rates, needs = _rates_and_needs(missing, curves, timing)
    any_rate, any_need = _any_op(rates, needs)
    per_curve: list[float] = []
    capped: list[int] = []
    tally = _Tally()
    for i, mc in enumerate(missing):
        rate = statistics.median(rates[mc.op]) if mc.op in rates else any_rate
        need = int(statistics.median(needs[mc.op])) if mc.op in needs else any_need
        capped_before = tally.capped
        seconds = _dims_seconds(mc, curves[id(mc)], (rate, need), timing, tally)
        if FIRST_PASS in mc.reasons:
            # an upper bound where nothing was measured: the later passes at their most
            at_most = later[i] if later is not None and tally.capped - capped_before == len(mc.dims) else None
            seconds = tally.with_later_passes(seconds, at_most, timing)
        per_curve.append(seconds)
        capped.append(tally.capped - capped_before)
    return ProfileEstimate(
        points=points, seconds=sum(per_curve), basis=tally.basis(timing), per_curve=tuple(per_curve), capped_per_curve=tuple(capped)
    )


def _rates_and_needs(
    missing: Sequence[MissingCurve], curves: dict[int, dict[int, PointLatency]], timing: Timing
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Time per FLOP and samples a point takes, per op, from the measured points of the curves involved."""
    rates: dict[str, list[float]] = {}
    needs: dict[str, list[int]] = {}
    for mc in missing:
        op = Op(mc.op)
        for x, p in curves[id(mc)].items():
            rates.setdefault(mc.op, []).append(p.latency_us / max(1, op_flops(op, _shape(mc, x))))
            n = samples_needed(p, timing)
            if n is not None:
                needs.setdefault(mc.op, []).append(n)
    return rates, needs


def _any_op(rates: dict[str, list[float]], needs: dict[str, list[int]]) -> tuple[float | None, int | None]:
    """The median time per FLOP and samples over every op (None where nothing was measured)."""
    any_rate = statistics.median(r for rs in rates.values() for r in rs) if rates else None
    any_need = int(statistics.median(n for ns in needs.values() for n in ns)) if needs else None
    return any_rate, any_need


@dataclass
class _Tally:
    """How the estimate's points were timed and what it added for later passes: its basis, for the user."""

    from_curve: int = 0
    from_rate: int = 0
    capped: int = 0
    added: float = 0.0
    bounded: float = 0.0

    def with_later_passes(self, seconds: float, at_most: int | None, timing: Timing) -> float:
        """A first pass's seconds with its later passes: at_most more points at the time cap, else LATER_PASSES of it."""
        if at_most is not None:
            self.bounded += at_most * most_seconds(1, timing)
            return seconds + at_most * most_seconds(1, timing)
        self.added += LATER_PASSES * seconds
        return seconds * (1 + LATER_PASSES)

    def basis(self, timing: Timing) -> str:
        """How the figure was obtained, in words."""
        parts = []
        if self.from_curve:
            parts.append(f"{self.from_curve} from measured dims of the same curve")
        if self.from_rate:
            parts.append(f"{self.from_rate} from the platform's time per FLOP on similar shapes")
        if self.capped:
            parts.append(f"{self.capped} at the {timing.time_cap_ms:g} ms time cap (nothing measured yet: an upper bound)")
        if self.added:
            parts.append(
                f"{self.added:.0f} s ({LATER_PASSES:.0%}) added for the points a first pass (lattice and sample) calls for next, "
                "more where a curve is no lattice"
            )
        if self.bounded:
            parts.append(f"{self.bounded:.0f} s for the rest of the first passes' windows, which later passes may ask for (at most)")
        return "; ".join(parts) or "nothing to profile"


def _dims_seconds(
    mc: MissingCurve, curve: dict[int, PointLatency], fallback: tuple[float | None, int | None], timing: Timing, tally: _Tally
) -> float:
    """Seconds to profile one missing curve's dims, each timed from its curve's nearest measured dim, else the op's rate
    (fallback: time per FLOP and samples), else at the time cap; tally counts which."""
    rate, need = fallback
    seconds = 0.0
    op = Op(mc.op)
    xs = sorted(curve)
    for d in mc.dims:
        work = op_flops(op, _shape(mc, d))
        if xs:
            x = _nearest(curve, xs, d)
            p = curve[x]
            lat, n = p.latency_us * work / max(1, op_flops(op, _shape(mc, x))), samples_needed(p, timing)
            tally.from_curve += 1
        elif rate is not None:
            lat, n = rate * work, need
            tally.from_rate += 1
        else:
            seconds += most_seconds(1, timing)
            tally.capped += 1
            continue
        seconds += point_seconds(lat, n, timing)
    return seconds
