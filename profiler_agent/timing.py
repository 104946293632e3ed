"""Timing kernels soundly: one Timer interface, a CPU and a CUDA backend.

Both take samples until a noise rule is met: at least `min_samples`, then stop
as soon as the relative spread (p90 - p10) / median is below `target_spread`,
or when the per-point time cap or sample cap is reached (the stopping rule is
documented with gac.contracts.plans.Timing).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch

from gac.agent.gpu_queue import GpuQueue, TorchCudaQueue
from gac.contracts.plans import MEDIAN_BATCHES, MIN_BATCH_SAMPLES, Timing

StopReason = Literal["spread", "median_ci", "time_cap", "max_samples"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values, q in [0, 1]."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_ci(sorted_values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95 % confidence interval of the median (order statistics
    n/2 -/+ z*sqrt(n)/2), valid whatever the shape of the noise."""
    n = len(sorted_values)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return sorted_values[lo], sorted_values[hi]


# Two-sided 97.5 % Student t quantiles for (batches - 1) degrees of freedom.
_T975 = {4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def batch_median_halfwidth(samples: Sequence[float], batches: int = MEDIAN_BATCHES) -> float | None:
    """Half-width of a ~95 % CI of the median from the medians of consecutive
    batches (the batch-means method): unlike the order-statistic interval it stays
    honest when neighbouring samples are correlated, as on a machine whose speed
    wanders over tens of milliseconds. None with fewer than 5 samples per batch."""
    n = len(samples)
    if n < MIN_BATCH_SAMPLES * batches:
        return None
    size = n // batches
    meds = [percentile(sorted(samples[i * size : (i + 1) * size]), 0.5) for i in range(batches)]
    mean = sum(meds) / batches
    sd = math.sqrt(sum((m - mean) ** 2 for m in meds) / (batches - 1))
    return _T975[batches - 1] * sd / math.sqrt(batches)


def spread_of_sorted(ordered: Sequence[float]) -> float:
    """(p90 - p10) / median of sorted samples: the noise figure the stopping rule compares with its target."""
    med = percentile(ordered, 0.5)
    return (percentile(ordered, 0.9) - percentile(ordered, 0.1)) / med if med > 0 else math.inf


def relative_spread(samples: Sequence[float]) -> float:
    """(p90 - p10) / median of samples in any order."""
    return spread_of_sorted(sorted(samples))


@dataclass(frozen=True)
class TimingResult:
    """One timed point: its samples (microseconds per kernel call) and how they were taken. The
    statistics are the samples' own, computed from them on first use (as torch.utils.benchmark's
    Measurement computes its own), so no figure can disagree with the samples it came from."""

    samples_us: tuple[float, ...]
    timer: str
    stop: StopReason
    wall_s: float  # time spent on this point, warm-up included
    inner: int = 1  # kernel calls per sample (CPU timer, tiny kernels)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. SM clock, throttle reasons

    def __post_init__(self) -> None:
        if not self.samples_us:
            raise ValueError("a timing result needs at least one sample")

    @cached_property
    def _sorted(self) -> list[float]:
        return sorted(self.samples_us)

    @property
    def n(self) -> int:
        return len(self.samples_us)

    @cached_property
    def median_us(self) -> float:
        return percentile(self._sorted, 0.5)

    @property
    def p10_us(self) -> float:
        return min(percentile(self._sorted, 0.1), self.median_us)

    @property
    def p90_us(self) -> float:
        return max(percentile(self._sorted, 0.9), self.median_us)

    @property
    def mean_us(self) -> float:
        return sum(self._sorted) / self.n

    @cached_property
    def spread(self) -> float:
        """(p90 - p10) / median of the samples."""
        return spread_of_sorted(self._sorted)


def summarize(samples_us: Sequence[float], **kw: Any) -> TimingResult:
    """The result of these samples (in the order taken), with how they were taken (TimingResult's fields)."""
    return TimingResult(tuple(samples_us), **kw)


# Where a model's weights come from: beyond the caches. Rotating a kernel's weights through
# this many bytes reads them from memory on a CPU: well past the size where a GEMM's time stops
# growing with the pool (docs/results/evidence.md).
WEIGHT_POOL_BYTES = 256 << 20
# What the platform records of it (PlatformDescriptor.timing): CPU curves timed hot, or with another
# pool, never mix with these.
COLD_WEIGHTS = f"cold-weights/{WEIGHT_POOL_BYTES >> 20}MiB"
# A GPU's curves timed by CudaTimer (L2 flushed, samples queued ahead of the host): those timed with a
# synchronisation per sample carry launch latency in small kernels and belong to another platform.
QUEUED_L2_FLUSH = "l2-flush/queued"


# The CUDA timer's rounds (see CudaTimer).
ROUND_US = 2_000.0  # device time a round aims at: ~2 ms, so a point takes a few host round trips
MIN_ROUND, MAX_ROUND = 10, 200  # samples per round (per point)
POINTS_PER_ROUND = 8  # points whose samples share a round in time_many: one lead and one synchronisation for all
LEAD_FACTOR = 1.5  # spin before a round: this many times the host's time to queue it
MAX_LEAD_US = 50_000.0  # a host slower than this per round is kept (extra["late_rounds"]), not waited on
FIRST_CALLS = 3  # untimed calls on a new point
# A chained sample's calls (CudaTimer.chained): enough that its two events are a small part of it.
CHAIN_CALLS = 8
IDLE_S = 1.0  # the device idle this long: let its clocks settle again


class Timer(ABC):
    """Times a zero-argument callable that launches one kernel (or one block)."""

    name: str
    # The kernel should take its weights from copies filling this many bytes (gac.agent.kernels);
    # 0 when the timer itself makes each sample cold (the CUDA timer flushes L2).
    weight_pool_bytes: int = 0

    @abstractmethod
    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        """Warm up, then sample fn until the stopping rule says enough."""

    def now(self) -> float:
        """The host clock the time caps are read on."""
        return time.perf_counter()

    def _sample_loop(self, take_samples: Callable[[], Sequence[float]], timing: Timing, started: float, **kw: Any) -> TimingResult:
        """The shared stopping rule over a sample source (microseconds per call, any number per
        call of the source: [] when it discarded what it took)."""
        rule = StopRule(timing)
        while rule.stop is None:
            taken = take_samples()
            if not taken:
                if self.now() - started >= 2 * rule.cap_s:
                    break  # the source keeps discarding: the caller falls back
                continue
            rule.add(taken, self.now() - started)
        if not rule.samples:
            raise RuntimeError("no sample was kept within twice the time cap")
        return summarize(rule.samples, timer=self.name, stop=rule.stop or "max_samples", wall_s=self.now() - started, **kw)

    # How many points time_many takes at once with a gain over one at a time (the CUDA timer's rounds).
    points_per_round: int = 1

    def time_many(self, fns: Sequence[Callable[[], object]], timing: Timing | None = None) -> list[TimingResult]:
        """Several points, each by the same stopping rule; one after another unless the timer can do better."""
        return [self.time(fn, timing) for fn in fns]


class StopRule:
    """The stopping rule of one point: at least min_samples, then stop once the spread (or the median's
    confidence interval) is tight enough, or at the time cap or the sample cap (gac.contracts.plans.Timing)."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.cap_s = timing.time_cap_ms / 1e3
        self.samples: list[float] = []
        self.stop: StopReason | None = None
        self._next_check = timing.min_samples

    def add(self, taken: Sequence[float], elapsed_s: float) -> StopReason | None:
        """Take new samples (after elapsed_s of this point's time); the reason to stop, or None."""
        timing, samples = self.timing, self.samples
        samples.extend(taken[: timing.max_samples - len(samples)])
        n = len(samples)
        if n >= self._next_check:
            # Re-check the spread every ~10 % more samples: sorting each time is O(n log n).
            self._next_check = n + max(1, n // 10)
            ordered = sorted(samples)
            if spread_of_sorted(ordered) < timing.target_spread:
                self.stop = "spread"
                return self.stop
            med = percentile(ordered, 0.5)
            if timing.median_ci > 0 and med > 0:
                lo, hi = median_ci(ordered)
                batch = batch_median_halfwidth(samples)
                # Both intervals must be tight: the order-statistic one assumes independent
                # samples, the batch one does not but needs >= 50 samples.
                if batch is not None and max(med - lo, hi - med, batch) / med < timing.median_ci:
                    self.stop = "median_ci"
                    return self.stop
        if n >= timing.min_samples and elapsed_s >= self.cap_s:
            self.stop = "time_cap"
        elif n >= timing.max_samples:
            self.stop = "max_samples"
        return self.stop


class CpuTimer(Timer):
    """perf_counter_ns around each sample, with a fixed intra-op thread count.

    Kernels shorter than `min_sample_us` are called `inner` times per sample so
    the clock's resolution and Python's call overhead stay small against them;
    a sample is then the mean of its inner calls.

    On a shared machine the timing thread is sometimes descheduled mid-sample;
    such a sample measures the neighbours, not the kernel. Each sample also
    reads the thread's CPU clock, and a sample where the thread ran for less
    than `min_on_cpu` of the wall time is discarded (counted in
    extra["preempted"]). This check is on by default only with one intra-op
    thread (see __init__). If fewer than min_samples survive, the discarded ones
    are used after all (extra["preempted_fallback"]) rather than fail the point.

    A CPU has no cheap cache flush, so the kernels it times read their weights from
    a pool of `weight_pool_bytes` (the name says "+cold-weights"); 0 times them hot.
    """

    name = "cpu-perf-counter"

    def __init__(
        self,
        threads: int | None = None,
        min_sample_us: float = 1000.0,
        min_on_cpu: float | None | Literal["auto"] = "auto",
        weight_pool_bytes: int = WEIGHT_POOL_BYTES,
    ) -> None:
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        self.threads = torch.get_num_threads()
        self.min_sample_us = min_sample_us
        if min_on_cpu == "auto":
            # With several OpenMP threads the caller may legitimately sleep at a
            # barrier (its CPU time < wall without any preemption): check only at 1 thread.
            min_on_cpu = 0.9 if self.threads == 1 else None
        self.min_on_cpu = min_on_cpu
        self.weight_pool_bytes = weight_pool_bytes
        self.name = (
            "cpu-perf-counter" + ("+preempt-filter" if min_on_cpu is not None else "") + ("+cold-weights" if weight_pool_bytes else "")
        )

    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        timing = timing or Timing()
        if torch.get_num_threads() != self.threads:  # someone changed it: the figures would not be comparable
            torch.set_num_threads(self.threads)
        started = time.perf_counter()
        # Warm-up: caches, allocator, oneDNN primitive creation; at least 2 calls.
        calls, t0 = 0, time.perf_counter_ns()
        while calls < 2 or (time.perf_counter_ns() - t0) < timing.warmup_ms * 1e6:
            fn()
            calls += 1
        per_call_us = (time.perf_counter_ns() - t0) / 1e3 / calls
        inner = max(1, min(10_000, math.ceil(self.min_sample_us / max(per_call_us, 1e-3))))
        clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
        min_on_cpu = self.min_on_cpu
        discarded: list[float] = []

        def take_sample() -> list[float]:
            c = cpu_clock()
            t = clock()
            for _ in range(inner):
                fn()
            wall = clock() - t
            on_cpu = cpu_clock() - c
            us = wall / 1e3 / inner
            if min_on_cpu is not None and wall > 0 and on_cpu < min_on_cpu * wall:
                discarded.append(us)
                return []
            return [us]

        extra: dict[str, Any] = {"threads": self.threads}
        try:
            result = self._sample_loop(take_sample, timing, started, inner=inner, extra=extra)
        except RuntimeError:
            result = None
        if result is None or result.n < timing.min_samples:
            kept = list(result.samples_us) if result is not None else []
            extra["preempted_fallback"] = True
            result = summarize(
                kept + discarded, timer=self.name, stop="time_cap", wall_s=time.perf_counter() - started, inner=inner, extra=extra
            )
        extra["preempted"] = len(discarded)
        return result


class CudaTimer(Timer):
    """CUDA events around each sample, L2 flushed before each, the device queue kept ahead of the host.

    Each sample is one kernel call on a cold L2 (a write over a buffer at least the L2's size
    before its start event), so it includes the kernel's real DRAM traffic, as a weight read in a
    real forward pass does.

    Samples are queued in rounds, with one host synchronisation per round: a spin kernel first
    keeps the device busy while the host queues the whole round behind it, so the device never
    waits for a launch between a sample's events, whatever the launch latency or host jitter
    (a synchronisation per sample lets the device go idle and puts both into small kernels'
    figures). A round counts only when the spin was still running after the host had queued it
    all (an event query says so); otherwise its samples are dropped and the lead doubles.

    Clocks settle once per timer and again after the device has been idle for IDLE_S, not once
    per point: a curve's points follow each other closely.

    Two other ways to take a sample, for comparison with what a model's step does: warm() times
    each call after an untimed one (operands in the L2), chained() times calls back to back, each
    on the next copy of its weights (as a model's step runs its layers' GEMMs).
    """

    name = "cuda-events+l2-flush+queued"

    def __init__(
        self,
        device: torch.device | str = "cuda:0",
        flush_bytes: int | None = None,
        queue: GpuQueue | None = None,
        cold: bool = True,
        chain: int = 1,
    ) -> None:
        if queue is None:
            dev = torch.device(device)
            if dev.index is None:
                if not torch.cuda.is_available():
                    raise RuntimeError("CudaTimer needs CUDA; this torch build or machine has none")
                dev = torch.device("cuda", torch.cuda.current_device())
            self.device = dev
            queue = TorchCudaQueue(dev, flush_bytes)
        self.queue = queue
        self.flush_bytes = queue.flush_bytes
        # cold=False: each sample follows an untimed call instead of a flush (its operands warm in
        # the L2); the selftest compares the two to see that the flush works.
        self.cold = cold
        if not cold:
            self.name = "cuda-events+queued"
        # chain > 1: a sample is that many calls back to back between its two events, read as their
        # mean; no flush between them, the kernel reading the next copy of its weights on each call
        # from a pool well beyond the L2 (gac.agent.kernels), its activations warm. One flush before
        # a point's samples in each round keeps the point before it from leaving its bytes in the L2.
        if chain < 1:
            raise ValueError(f"chain must be >= 1, got {chain}")
        self.chain = chain
        if chain > 1:
            self.weight_pool_bytes = max(WEIGHT_POOL_BYTES, 2 * self.flush_bytes)
            self.name = f"cuda-events+chain{chain}+cold-weights+queued"
        self._lead = LEAD_FACTOR  # spin length per queued sample, as a multiple of the host's time per sample
        self._host_us = 50.0  # host time to queue one sample (a guess on the slow side), learned from each round
        self._last_used: float | None = None

    def now(self) -> float:
        return self.queue.now()

    def warm(self) -> CudaTimer:
        """A timer on the same queue whose samples read warm operands (no flush)."""
        return CudaTimer(queue=self.queue, cold=False)

    def chained(self, calls: int = CHAIN_CALLS) -> CudaTimer:
        """A timer on the same queue whose samples are `calls` calls back to back, each on the next
        copy of the kernel's weights (build its kernels with its weight_pool_bytes)."""
        return CudaTimer(queue=self.queue, chain=calls)

    def _settle(self, fn: Callable[[], object], timing: Timing) -> None:
        """Run fn in rounds until two rounds agree within 5 % (clocks settled), for at least
        warmup_ms and at most 10x that (never less than a 2 s cap)."""
        q = self.queue
        t0 = q.now()
        cap = max(2.0, 10 * timing.warmup_ms / 1e3)
        prev = None
        while True:
            start, end = q.event(), q.event()
            q.record(start)
            for _ in range(10):
                fn()
            q.record(end)
            q.synchronize()
            cur = q.elapsed_us(start, end)
            elapsed = q.now() - t0
            settled = prev is not None and abs(cur - prev) <= 0.05 * max(prev, 1e-9)
            if (settled and elapsed * 1e3 >= timing.warmup_ms) or elapsed >= cap:
                return
            prev = cur

    def _round(self, fn: Callable[[], object], k: int, stats: dict[str, int]) -> list[float]:
        """k samples queued behind a spin, one synchronisation; [] when the queue ran dry."""
        taken = self._round_many([fn], k, stats)
        return taken[0] if taken else []

    def _round_many(self, fns: Sequence[Callable[[], object]], k: int, stats: dict[str, int]) -> list[list[float]] | None:
        """k samples of each fn, one fn after the other, all queued behind one spin, one synchronisation;
        None when the queue ran dry."""
        q = self.queue
        total = k * len(fns)
        events = [([q.event() for _ in range(k)], [q.event() for _ in range(k)]) for _ in fns]
        lead_done = q.event()
        q.spin(min(MAX_LEAD_US, self._lead * self._host_us * total))
        q.record(lead_done)
        t0 = q.now()
        chain = self.chain
        for fn, (starts, ends) in zip(fns, events):
            if chain > 1:  # once per point: the point before leaves none of its bytes in the L2
                q.flush_l2()
            for s, e in zip(starts, ends):
                if chain == 1 and self.cold:  # before each sample: a flush ...
                    q.flush_l2()
                elif chain == 1:  # ... or an untimed call (warm)
                    fn()
                q.record(s)
                for _ in range(chain):
                    fn()
                q.record(e)
        self._host_us = (q.now() - t0) * 1e6 / total
        ahead = not q.done(lead_done)  # the device was still spinning: every sample was queued in time
        q.synchronize()
        stats["rounds"] += 1
        if not ahead and self._lead * self._host_us * total < MAX_LEAD_US:
            stats["dry_rounds"] += 1
            self._lead *= 2
            return None
        stats["late_rounds"] += not ahead  # kept: the lead is at its cap (a very slow host)
        return [[q.elapsed_us(s, e) / chain for s, e in zip(starts, ends)] for starts, ends in events]

    points_per_round = POINTS_PER_ROUND

    def time_many(self, fns: Sequence[Callable[[], object]], timing: Timing | None = None) -> list[TimingResult]:
        """Several points at once: each round queues every unfinished point's samples behind one spin and
        synchronises once, so the host's round trip (the lead, the synchronisation, the device idle while
        the host queues the next round) is paid once per round for all of them, not once per point.
        Each point keeps its own stopping rule; its time cap counts its share of each round's time."""
        timing = timing or Timing()
        if len(fns) <= 1:
            return [self.time(fn, timing) for fn in fns]
        q = self.queue
        started = q.now()
        if self._last_used is None or started - self._last_used > IDLE_S:
            self._settle(fns[0], timing)
        for fn in fns:
            for _ in range(FIRST_CALLS):
                fn()
        stats = {"rounds": 0, "dry_rounds": 0, "late_rounds": 0}
        rules = [StopRule(timing) for _ in fns]
        spent = [0.0] * len(fns)  # each point's share of the time so far (seconds)
        per_sample = 0.0  # host time per queued sample in the last round (us)
        while active := [i for i, rule in enumerate(rules) if rule.stop is None]:
            k = min(MAX_ROUND, max(MIN_ROUND, round(ROUND_US / (per_sample * len(active))))) if per_sample else MIN_ROUND
            t0 = q.now()
            taken = self._round_many([fns[i] for i in active], k, stats)
            elapsed = q.now() - t0
            per_sample = max(1.0, elapsed * 1e6 / (k * len(active)))
            for j, i in enumerate(active):
                spent[i] += elapsed / len(active)
                if taken is not None:
                    rules[i].add(taken[j], spent[i])
            if taken is None and q.now() - started >= 2 * rules[0].cap_s * len(fns):
                raise RuntimeError("no round was kept within twice the points' time caps")
        self._last_used = q.now()
        clocks = dict(q.clocks())
        wall = q.now() - started
        return [
            summarize(
                rule.samples,
                timer=self.name,
                stop=rule.stop or "max_samples",
                wall_s=spent[i] or wall / len(fns),
                extra={**clocks, **stats, "points_per_round": len(fns)},
            )
            for i, rule in enumerate(rules)
        ]

    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        timing = timing or Timing()
        q = self.queue
        started = q.now()
        if self._last_used is None or started - self._last_used > IDLE_S:
            self._settle(fn, timing)
        for _ in range(FIRST_CALLS):  # library set-up on a new shape (cuBLAS heuristics, allocator)
            fn()
        stats = {"rounds": 0, "dry_rounds": 0, "late_rounds": 0}
        per_sample = [0.0]  # device time of one sample (flush and kernel), from the last round

        def take_round() -> list[float]:
            k = min(MAX_ROUND, max(MIN_ROUND, round(ROUND_US / per_sample[0]))) if per_sample[0] else MIN_ROUND
            t0 = q.now()
            samples = self._round(fn, k, stats)
            per_sample[0] = max(1.0, (q.now() - t0) * 1e6 / k)
            return samples

        extra = dict(q.clocks())
        result = self._sample_loop(take_round, timing, started, extra=extra)
        extra.update(stats)
        self._last_used = q.now()
        return result


def make_timer(device: torch.device | str, threads: int | None = None) -> Timer:
    dev = torch.device(device)
    if dev.type == "cuda":
        return CudaTimer(dev)
    return CpuTimer(threads=threads)


def fixed_loop(fn: Callable[[], object], reps: int = 100, warmup: int = 3, timer_name: str = "cpu-fixed-loop") -> TimingResult:
    """The naive baseline: a fixed number of individually timed calls (CPU). Used
    by the benchmark to show what the stopping rule buys."""
    started = time.perf_counter()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t) / 1e3)
    return summarize(samples, timer=timer_name, stop="max_samples", wall_s=time.perf_counter() - started)


def synced_samples(queue: GpuQueue, fn: Callable[[], object], n: int = 200) -> TimingResult:
    """The naive CUDA baseline: flush, events around one call, wait for the device, n times. Used
    by the benchmark and the tests to show what queueing ahead buys."""
    started = queue.now()
    samples = []
    for _ in range(n):
        start, end = queue.event(), queue.event()
        queue.flush_l2()
        queue.record(start)
        fn()
        queue.record(end)
        queue.synchronize()
        samples.append(queue.elapsed_us(start, end))
    return summarize(samples, timer="cuda-events+sync-per-sample", stop="max_samples", wall_s=queue.now() - started)


__all__ = [
    "CHAIN_CALLS",
    "COLD_WEIGHTS",
    "QUEUED_L2_FLUSH",
    "CpuTimer",
    "CudaTimer",
    "StopRule",
    "Timer",
    "TimingResult",
    "WEIGHT_POOL_BYTES",
    "fixed_loop",
    "make_timer",
    "batch_median_halfwidth",
    "median_ci",
    "percentile",
    "relative_spread",
    "summarize",
    "synced_samples",
]
