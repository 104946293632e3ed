"""Run a sweep plan: build each point's kernel, time it, emit Measurements.

Adaptive sweeps time a coarse grid first, then only the points between coarse
neighbours whose latencies differ by more than the sweep's `jump`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from gac.agent.kernels import Kernel, build_kernel, release_weight_pools
from gac.agent.quality import QualityGate, for_timer, isolated
from gac.agent.resume import CurveKey, planned_points, sweep_curve
from gac.agent.steps import RETIME_CAP_MS, StepCheck, check_steps
from gac.agent.timing import Timer, TimingResult
from gac.contracts.ids import new_id
from gac.contracts.measurements import Dtype, Measurement
from gac.contracts.plans import PlanPoint, Sweep, SweepPlan, Timing

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
    # (sweep index, dtype) -> its largest steps timed again (PlanRunner's confirm_steps; gac.agent.steps)
    steps: dict[tuple[int, str], StepCheck] = field(default_factory=dict)

    @property
    def measurements(self) -> list[Measurement]:
        return [o.measurement for o in self.outcomes if o.measurement is not None]

    @property
    def failures(self) -> list[PointOutcome]:
        return [o for o in self.outcomes if o.error is not None]


def to_measurement(
    point: PlanPoint,
    result: TimingResult,
    backend: str | None,
    kernel: str | None,
    flags: Sequence[str] = (),
) -> Measurement:
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
        quality=",".join(dict.fromkeys(flags)) or None,
    )


# What makes a point's kernel: build_kernel on a real device; a simulated device brings its own.
KernelBuilder = Callable[..., Kernel]


def time_point(
    point: PlanPoint,
    timer: Timer,
    timing: Timing,
    device: torch.device | str = "cpu",
    build: KernelBuilder = build_kernel,
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


@dataclass
class _Seen:
    """A point of the current run as its curve's neighbours see it."""

    median_us: float
    spread: float
    index: int  # in RunResult.outcomes (-1: stored by an earlier run)
    judged: bool = False  # checked against measured neighbours on both sides


class PlanRunner:
    """Times every point of a plan on one device with one timer.

    Every point passes a quality gate (gac.agent.quality): one whose samples show stalls is timed
    again, and sent flagged if every try shows them. A point timed before both of its neighbours is
    judged against them once they are measured; if it is then a spike with a huge spread, it is timed
    again, and two clean re-measurements outvote it (points measured more than once are combined by
    median) or, failing that, the re-measurements go flagged.

    A timer that can time several points per host round trip (`points_per_round` > 1: the CUDA timer)
    gets the plan's points in groups of that many.

    With confirm_steps > 0, each curve's largest steps (up to that many) are timed again at both ends
    once the plan is done, and RunResult.steps says which repeated (gac.agent.steps): a run's summary
    shows no step its second timing does not show too. The second timings decide only that: they are
    not sent, so a plan still stores one row per point.
    """

    def __init__(
        self,
        timer: Timer,
        device: torch.device | str = "cpu",
        on_progress: Callable[[Progress], None] | None = None,
        on_measurement: Callable[[Measurement], None] | None = None,
        adaptive: bool = True,
        shuffle_seed: int | None = 0,
        build: KernelBuilder = build_kernel,
        gate: QualityGate | None = None,
        confirm_steps: int = 0,
        stored: Mapping[CurveKey, Mapping[int, float]] | None = None,
    ) -> None:
        self.timer = timer
        # Medians stored by an earlier, stopped run, per curve (gac.agent.resume.Known): an adaptive
        # sweep times only the rest of its coarse grid and refines from the whole of it.
        self.stored = stored or {}
        self.confirm_steps = confirm_steps
        self.build = build
        self.gate = gate if gate is not None else for_timer(timer)
        self._seen: dict[tuple[int, Dtype], dict[int, _Seen]] = {}
        self.device = torch.device(device)
        self.on_progress = on_progress
        self.on_measurement = on_measurement
        self.adaptive = adaptive
        # Points are timed in a shuffled order (None: plan order). A noisy spell (another tenant, a clock
        # change) then hits scattered dims, which the curve model treats as outliers, rather than a run of
        # neighbouring dims, which looks like a step (docs/results/evidence.md).
        self.shuffle_seed = shuffle_seed
        self._done = 0
        self._total = 0

    def run(self, plan: SweepPlan) -> RunResult:
        started = time.perf_counter()
        out = RunResult(plan=plan.name)
        self._done = 0
        self._seen = {}
        self._total = planned_points(plan, self.adaptive, self.stored)
        rng = random.Random(self.shuffle_seed)
        fixed: list[tuple[PlanPoint, Timing]] = []  # every point of the non-adaptive sweeps, timed together
        for i, sweep in enumerate(plan.sweeps):
            timing = plan.timing_for(sweep)
            for dtype in sweep.dtypes:
                if self.adaptive and sweep.adaptive is not None:
                    self._run_adaptive(i, sweep, dtype, timing, out, rng)
                else:
                    fixed += [
                        (PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing)
                        for v in sweep.value_list()
                    ]
        ordered = self._ordered(fixed, rng)
        group = max(1, int(getattr(self.timer, "points_per_round", 1)))
        if group > 1:
            for at in range(0, len(ordered), group):
                self._group(ordered[at : at + group], out)
        else:
            for point, timing in ordered:
                self._one(point, timing, out)
        if self.confirm_steps > 0:
            self._check_steps(plan, out)
        release_weight_pools()  # up to 256 MiB per dtype: not held between plans
        out.seconds = time.perf_counter() - started
        return out

    def _check_steps(self, plan: SweepPlan, out: RunResult) -> None:
        """Each curve's largest steps beyond noise timed again at both ends (gac.agent.steps), for the summary only."""
        curves: dict[tuple[int, str], dict[int, PointOutcome]] = {}
        for o in out.outcomes:
            if o.result is not None and o.measurement is not None and o.measurement.quality is None:
                curves.setdefault((o.point.sweep, o.point.dtype.value), {})[o.point.shape[o.point.axis]] = o
        for key, by_dim in curves.items():
            if len(by_dim) < 2:
                continue  # no step to check: the summary says so itself
            own = plan.timing_for(plan.sweeps[key[0]])
            timing = own.model_copy(update={"time_cap_ms": min(own.time_cap_ms, RETIME_CAP_MS)})

            def retime(x: int, by_dim: dict[int, PointOutcome] = by_dim, timing: Timing = timing) -> TimingResult | None:
                again = self._gated(by_dim[x].point, timing, self._time(by_dim[x].point, timing))
                clean = again.measurement is not None and again.measurement.quality is None
                return again.result if clean else None

            curve = sorted((x, o.result) for x, o in by_dim.items() if o.result is not None)
            out.steps[key] = check_steps(curve, retime, self.confirm_steps)

    def _ordered(self, items: Sequence[_T], rng: random.Random) -> list[_T]:
        out = list(items)
        if self.shuffle_seed is not None:
            rng.shuffle(out)
        return out

    def _one(self, point: PlanPoint, timing: Timing, out: RunResult) -> PointOutcome:
        return self._keep(self._gated(point, timing, self._time(point, timing)), timing, out)

    def _keep(self, outcome: PointOutcome, timing: Timing, out: RunResult) -> PointOutcome:
        """Record a gated point, send it, and judge the earlier points it is a neighbour of."""
        point = outcome.point
        out.outcomes.append(outcome)
        self._done += 1
        if outcome.measurement is not None and self.on_measurement is not None:
            self.on_measurement(outcome.measurement)
        if self.on_progress is not None:
            self.on_progress(Progress(self._done, self._total, point, outcome.result, outcome.error))
        if outcome.result is not None and outcome.measurement is not None and outcome.measurement.quality is None:
            curve = self._seen.setdefault((point.sweep, point.dtype), {})
            x = point.shape[point.axis]
            curve[x] = _Seen(outcome.result.median_us, outcome.result.spread, len(out.outcomes) - 1)
            below, above = _nearest(curve, x)
            for y in (x, below, above):
                if y is not None and not curve[y].judged and None not in _nearest(curve, y):
                    self._judge(curve, y, timing, out)
        return outcome

    def _time(self, point: PlanPoint, timing: Timing) -> PointOutcome:
        return self._probed(lambda: time_point(point, self.timer, timing, self.device, self.build))

    def _probed(self, timed: Callable[[], PointOutcome]) -> PointOutcome:
        """One timing with the load read around it (the cores other work used meanwhile, in extra["busy_cores"])."""
        load = self.gate.load
        if load is not None:
            load.start()
        outcome = timed()
        if load is not None and outcome.result is not None:
            busy = outcome.result.extra["busy_cores"] = load.stop()
            if busy is not None and outcome.measurement is not None:  # sent, so the dashboard can show the load
                m = outcome.measurement.model_copy(update={"busy_cores": round(busy, 3)})
                outcome = PointOutcome(outcome.point, m, outcome.result, outcome.error)
        return outcome

    def _gated(self, point: PlanPoint, timing: Timing, outcome: PointOutcome) -> PointOutcome:
        """The point re-timed while its samples show stalls (up to the gate's retries), flagged if they always do."""
        tries = 0
        while outcome.result is not None and outcome.measurement is not None:
            flags = self.gate.flags(outcome.result, outcome.result.extra.get("busy_cores"))
            if not flags:
                return outcome
            if tries >= self.gate.retries:
                return _flagged(outcome, flags)
            tries += 1
            again = self._time(point, timing)
            if again.result is None or again.measurement is None:
                return _flagged(outcome, flags)  # timing it again failed (out of memory, say): what was measured stands
            outcome = again
        return outcome

    def _judge(self, curve: dict[int, _Seen], x: int, timing: Timing, out: RunResult) -> None:
        """Judge point x against its measured neighbours; a spike with a huge spread is timed again."""
        seen = curve[x]
        seen.judged = True
        below, above = _nearest(curve, x)
        assert below is not None and above is not None
        if not isolated(seen.median_us, seen.spread, curve[below].median_us, curve[above].median_us):
            return
        first = out.outcomes[seen.index]
        clean: list[PointOutcome] = []
        for _ in range(1 + self.gate.retries):
            again = self._gated(first.point, timing, self._time(first.point, timing))
            if again.result is None or again.measurement is None:
                continue
            flags = [] if again.measurement.quality is None else again.measurement.quality.split(",")
            if isolated(again.result.median_us, again.result.spread, curve[below].median_us, curve[above].median_us):
                flags.append("isolated")
            if flags:
                again = _flagged(again, flags)
            else:
                clean.append(again)
            if again.measurement is not None and self.on_measurement is not None:
                self.on_measurement(again.measurement)
            if len(clean) >= 2:
                break
        if clean:  # what the point now reads: the median of its runs, as the service combines them
            runs = sorted([first, *clean], key=lambda o: o.result.median_us if o.result else 0.0)
            best = runs[len(runs) // 2]
            out.outcomes[seen.index] = best
            if best.result is not None:
                seen.median_us, seen.spread = best.result.median_us, best.result.spread

    def _group(self, items: Sequence[tuple[PlanPoint, Timing]], out: RunResult) -> None:
        """Points timed together, their rounds queued behind one lead (the timer's time_many). Once the
        group's kernels are freed, each is gated (a flagged point is timed again, alone) and a point that
        could not be built or timed beside the others (out of memory while they hold theirs) is timed
        alone: a failure, if any, is then its own."""
        timed, alone = self._time_group(items)
        for point, timing, outcome in timed:
            self._keep(self._gated(point, timing, outcome), timing, out)
        for point, timing in alone:
            self._one(point, timing, out)

    def _time_group(
        self, items: Sequence[tuple[PlanPoint, Timing]]
    ) -> tuple[list[tuple[PlanPoint, Timing, PointOutcome]], list[tuple[PlanPoint, Timing]]]:
        """(the points timed together with their outcomes, the points to time alone); the kernels are
        freed on return."""
        built: list[tuple[PlanPoint, Timing, Kernel]] = []
        alone: list[tuple[PlanPoint, Timing]] = []
        for point, timing in items:
            try:
                with torch.inference_mode():
                    kernel = self.build(point.op, point.dtype, point.shape, self.device, weight_pool_bytes=self.timer.weight_pool_bytes)
            except (RuntimeError, ValueError, MemoryError, NotImplementedError):
                alone.append((point, timing))
                continue
            built.append((point, timing, kernel))
        by_timing: dict[str, list[tuple[PlanPoint, Timing, Kernel]]] = {}
        for b in built:  # one stopping rule per call: points of sweeps with other timings go separately
            by_timing.setdefault(b[1].model_dump_json(), []).append(b)
        timed: list[tuple[PlanPoint, Timing, PointOutcome]] = []
        for members in by_timing.values():
            results: list[TimingResult | None]
            try:
                with torch.inference_mode():
                    results = list(self.timer.time_many([k.fn for _, _, k in members], members[0][1]))
            except (RuntimeError, ValueError, MemoryError, NotImplementedError):
                results = [None] * len(members)  # each timed alone, with its own error
            for (point, timing, kernel), result in zip(members, results):
                if result is None:
                    alone.append((point, timing))
                else:
                    timed.append((point, timing, PointOutcome(point, to_measurement(point, result, kernel.backend, kernel.kernel), result)))
        return timed, alone

    def _run_adaptive(self, i: int, sweep: Sweep, dtype: Dtype, timing: Timing, out: RunResult, rng: random.Random) -> None:
        """The coarse values first, then the values between coarse neighbours that differ by more than the jump."""
        assert sweep.adaptive is not None
        full = sweep.value_list()
        coarse = sweep.coarse_values()
        have = self.stored.get(sweep_curve(sweep, dtype), {})
        medians: dict[int, float] = {v: have[v] for v in coarse if v in have}
        # The stored points are neighbours the new ones are judged against (a spike beside them is still
        # timed again); judged already, in the run that stored them.
        seen = self._seen.setdefault((i, dtype), {})
        for v, us in have.items():
            seen.setdefault(v, _Seen(us, 0.0, -1, judged=True))
        for v in self._ordered([v for v in coarse if v not in have], rng):
            o = self._one(PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing, out)
            if o.result is not None:
                medians[v] = o.result.median_us
        fill = [v for v in values_to_refine(full, coarse, medians, sweep.adaptive.jump) if v not in have]
        self._total += len(fill)
        for v in self._ordered(fill, rng):
            self._one(PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(v), axis=sweep.axis), timing, out)


def _nearest(curve: dict[int, _Seen], x: int) -> tuple[int | None, int | None]:
    """The nearest measured dims below and above x on its curve."""
    below = max((y for y in curve if y < x), default=None)
    above = min((y for y in curve if y > x), default=None)
    return below, above


def _flagged(outcome: PointOutcome, flags: Sequence[str]) -> PointOutcome:
    assert outcome.result is not None and outcome.measurement is not None
    m = outcome.measurement.model_copy(update={"quality": ",".join(dict.fromkeys(flags))})
    return PointOutcome(outcome.point, m, outcome.result, outcome.error)


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
