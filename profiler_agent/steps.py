"""The largest step of each curve, timed again before a run's summary shows it.

The summary names each curve's largest step between neighbouring dims. On a noisy machine the
largest difference between two neighbours is where the noise happened to be largest, and the next
run puts it somewhere else: three runs of the quick plan on a 2-core AMD EPYC VM showed +46 %
n=80->84, +29 % n=96->100 and +50 % n=72->76 on one GEMM curve whose points each moved by 1.22x
(median) from run to run, while the medians of the three runs put n % 8 == 4 only 2 % above its
neighbours. So the largest steps whose p10..p90 ranges do not overlap are timed again: both ends in
turn, twice (lo, hi, lo, hi), so that the machine's slower spells fall on both ends alike. A step is
shown only when both pairs show it too, in the same direction with the two ranges apart, and the
figure shown is the smaller of the two: the first was picked for being the largest, and reads high.
Otherwise the summary says "none repeated (k tried)".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gac.agent.timing import TimingResult

CONFIRM_STEPS = 2  # the largest steps of a curve timed again, at most, until one repeats
PAIRS = 2  # each step's two ends timed in turn this many times
# A second timing needs its p10..p90, not a tight median: it stops here once it has its min_samples
# (a noisy point on a CPU would otherwise take the plan's whole time cap, four times per step).
RETIME_CAP_MS = 250.0


@dataclass(frozen=True)
class Step:
    """A step between two neighbouring dims of a curve: (b - a) / a as first measured, and as timed again."""

    lo: int
    hi: int
    first: float
    again: float | None = None  # None: not timed again (or a timing failed)

    @property
    def repeats(self) -> bool:
        return self.again is not None and self.again * self.first > 0


@dataclass(frozen=True)
class StepCheck:
    """What a curve's steps came to: the largest that repeated (if any), out of how many beyond noise, how many tried."""

    step: Step | None
    beyond_noise: int
    tried: int
    failed: int = 0  # steps whose second timing failed or was flagged (stalls): not shown, not disproved either

    def describe(self, axis: str) -> str:
        if self.step is not None and self.step.again is not None:
            return f"{self.step.again:+.0%} {axis}={self.step.lo}->{self.step.hi}"
        if self.beyond_noise == 0:
            return "none beyond noise"
        failed = f", {self.failed} unclean" if self.failed else ""  # a second timing failed or flagged
        return f"none repeated ({self.tried} tried{failed})"


def apart(a: TimingResult, b: TimingResult) -> bool:
    """Whether the two points' p10..p90 ranges do not overlap: a step their own noise cannot make."""
    return b.p10_us > a.p90_us or b.p90_us < a.p10_us


def step_of(a: TimingResult, b: TimingResult) -> float:
    return (b.median_us - a.median_us) / a.median_us


def steps_beyond_noise(curve: Sequence[tuple[int, TimingResult]]) -> list[Step]:
    """The steps between neighbours (curve sorted by dim) whose ranges are apart, largest first."""
    steps = [Step(x, y, step_of(a, b)) for (x, a), (y, b) in zip(curve, curve[1:]) if apart(a, b)]
    return sorted(steps, key=lambda s: -abs(s.first))


def check_steps(
    curve: Sequence[tuple[int, TimingResult]], retime: Callable[[int], TimingResult | None], tries: int = CONFIRM_STEPS, pairs: int = PAIRS
) -> StepCheck:
    """The largest step beyond noise that repeats when its ends are timed again in turn (retime(dim):
    lo, hi, `pairs` times), trying the largest `tries` steps in turn. A pair repeats the step when its
    ranges are apart and it points the same way; the step's figure is then its pairs' smallest."""
    found = steps_beyond_noise(curve)
    failed = 0
    for n, s in enumerate(found[:tries], start=1):
        again: list[float] = []
        for _ in range(pairs):
            a, b = retime(s.lo), retime(s.hi)
            if a is None or b is None:
                failed += 1
                break
            if not apart(a, b) or step_of(a, b) * s.first <= 0:
                break
            again.append(step_of(a, b))
        else:
            return StepCheck(Step(s.lo, s.hi, s.first, min(again, key=abs)), len(found), n, failed)
    return StepCheck(None, len(found), min(tries, len(found)), failed)
