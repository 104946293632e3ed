"""Run a sweep plan: build each point's kernel, time it, emit Measurements.

Adaptive sweeps time a coarse grid first, then only the points between coarse
neighbours whose latencies differ by more than the sweep's `jump`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from gac.contracts.ids import new_id
from gac.contracts.measurements import Dtype, Measurement
from gac.contracts.plans import PlanPoint, Sweep, SweepPlan, Timing
from profiler_agent.kernels import Kernel, build_kernel, release_weight_pools
from profiler_agent.timing import Timer, TimingResult

_T = TypeVar("_T")


@dataclass(frozen=True)
class Progress:
    """Sent after each point: how far the run is and what just happened."""

    done: int
    total: int  # grows when adaptive refinement adds points
    point: PlanPoint
    result: TimingResult | None
    error: str | None


@dataclass
class PointOutcome:
    point: PlanPoint
    measurement: Measurement | None
    result: TimingResult | None
    error: str | None = None


@dataclass
class RunResult:
    plan: str
    outcomes: list[PointOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def measurements(self) -> list[Measurement]:
        return [o.measurement for o in self.outcomes if o.measurement is not None]

    @property
    def failures(self) -> list[PointOutcome]:
        return [o for o in self.outcomes if o.error is not None]


def to_measurement(point: PlanPoint, result: TimingResult, backend: str | None, kernel: str | None) -> Measurement:
    return Measurement(
        id=new_id(),  # made here, once: every re-send of this row carries the same id
        op=point.op,
        dtype=point.dtype,
        shape=point.shape,
        sweep_axis=point.axis,
        median_us=result.median_us,
        p10_us=result.p10_us,
        p90_us=result.p90_us,
        mean_us=result.mean_us,
        n=result.n,
        timer=result.timer,
        backend=backend,
        kernel=kernel,
        stop=result.stop,
        samples_discarded=result.extra.get("preempted"),
        sm_clock_mhz=result.extra.get("sm_clock_mhz"),
        throttle_reasons=result.extra.get("throttle_reasons"),
    )


# What makes a point's kernel: build_kernel on a real device; a simulated device brings its own.
KernelBuilder = Callable[..., Kernel]


def time_point(
    point: PlanPoint, timer: Timer, timing: Timing, device: torch.device | str = "cpu", build: KernelBuilder = build_kernel,
) -> PointOutcome:
    """Build and time one point; an error (OOM, unsupported dtype) is recorded, not raised."""
    try:
        with torch.inference_mode():
            k = build(point.op, point.dtype, point.shape, device, weight_pool_bytes=timer.weight_pool_bytes)
            result = timer.time(k.fn, timing)
    except (RuntimeError, ValueError, MemoryError, NotImplementedError) as err:
        return PointOutcome(point, None, None, f"{type(err).__name__}: {err}"[:500])
    return PointOutcome(point, to_measurement(point, result, k.backend, k.kernel), result)


def values_to_refine(full: list[int], coarse: list[int], medians: dict[int, float], jump: float) -> list[int]:
    """The grid values strictly between coarse neighbours whose medians differ by
    more than `jump` (relative to the smaller), or where either failed."""
    fill: list[int] = []
    for a, b in zip(coarse, coarse[1:]):
        ta, tb = medians.get(a), medians.get(b)
        if ta is None or tb is None or abs(tb - ta) / min(ta, tb) > jump:
            fill += [v for v in full if a < v < b]
    return fill


class PlanRunner:
    """Times every point of a plan on one device with one timer."""

    def __init__(
        self,
        timer: Timer,
        device: torch.device | str = "cpu",
        on_progress: Callable[[Progress], None] | None = None,
        on_measurement: Callable[[Measurement], None] | None = None,
        adaptive: bool = True,
        shuffle_seed: int | None = 0,
        build: KernelBuilder = build_kernel,
    ) -> None:
        self.timer = timer
        self.build = build
        self.device = torch.device(device)
        self.on_progress = on_progress
        self.on_measurement = on_measurement
        self.adaptive = adaptive
        # Points are timed in a shuffled order (None: plan order). A noisy spell (another tenant, a clock
        # change) then hits scattered dims, which the curve model treats as outliers, rather than a run of
        # neighbouring dims, which looks like a step: timed in order, a VM here put 1903-1905 at 14-16 ms
        # between neighbours at 8.6-10.7 ms.
        self.shuffle_seed = shuffle_seed
        self._done = 0
        self._total = 0

    def run(self, plan: SweepPlan) -> RunResult:
        started = time.perf_counter()
        out = RunResult(plan=plan.name)
        self._done = 0
        self._total = sum(
            len(s.coarse_values() if (self.adaptive and s.adaptive) else s.value_list()) * len(s.dtypes)
            for s in plan.sweeps
        )
        rng = random.Random(self.shuffle_seed)
        fixed: list[tuple[PlanPoint, Timing]] = []  # every point of the non-adaptive sweeps, timed together
        for i, sweep in enumerate(plan.sweeps):
            timing = plan.timing_for(sweep)
            for dtype in sweep.dtypes:
                if self.adaptive and sweep.adaptive is not None:
                    self._run_adaptive(i, sweep, dtype, timing, out, rng)
                else:
                    fixed += [(PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing)
                              for v in sweep.value_list()]
        for point, timing in self._ordered(fixed, rng):
            self._one(point, timing, out)
        release_weight_pools()  # up to 256 MiB per dtype: not held between plans
        out.seconds = time.perf_counter() - started
        return out

    def _ordered(self, items: Sequence[_T], rng: random.Random) -> list[_T]:
        out = list(items)
        if self.shuffle_seed is not None:
            rng.shuffle(out)
        return out

    def _one(self, point: PlanPoint, timing: Timing, out: RunResult) -> PointOutcome:
        outcome = self._time(point, timing)
        out.outcomes.append(outcome)
        self._done += 1
        if outcome.measurement is not None and self.on_measurement is not None:
            self.on_measurement(outcome.measurement)
        if self.on_progress is not None:
            self.on_progress(Progress(self._done, self._total, point, outcome.result, outcome.error))
        return outcome

    def _time(self, point: PlanPoint, timing: Timing) -> PointOutcome:
        return time_point(point, self.timer, timing, self.device, self.build)

    def _run_adaptive(self, i: int, sweep: Sweep, dtype: Dtype, timing: Timing, out: RunResult, rng: random.Random) -> None:
        """The coarse values first, then the values between coarse neighbours that differ by more than the jump."""
        assert sweep.adaptive is not None
        full = sweep.value_list()
        coarse = sweep.coarse_values()
        medians: dict[int, float] = {}
        for v in self._ordered(coarse, rng):
            o = self._one(PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing, out)
            if o.result is not None:
                medians[v] = o.result.median_us
        fill = values_to_refine(full, coarse, medians, sweep.adaptive.jump)
        self._total += len(fill)
        for v in self._ordered(fill, rng):
            self._one(PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing, out)


def run_plan(
    plan: SweepPlan,
    timer: Timer,
    device: torch.device | str = "cpu",
    on_progress: Callable[[Progress], None] | None = None,
    on_measurement: Callable[[Measurement], None] | None = None,
    adaptive: bool = True,
) -> RunResult:
    """Convenience wrapper around PlanRunner."""
    return PlanRunner(timer, device, on_progress, on_measurement, adaptive).run(plan)


__all__ = ["PlanRunner", "PointOutcome", "Progress", "RunResult", "run_plan", "time_point", "to_measurement", "values_to_refine"]
