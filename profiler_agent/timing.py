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
from typing import Any, Literal

import torch

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
    meds = [percentile(sorted(samples[i * size:(i + 1) * size]), 0.5) for i in range(batches)]
    mean = sum(meds) / batches
    sd = math.sqrt(sum((m - mean) ** 2 for m in meds) / (batches - 1))
    return _T975[batches - 1] * sd / math.sqrt(batches)


def relative_spread(samples: Sequence[float]) -> float:
    """(p90 - p10) / median: the noise figure the stopping rule compares with its target."""
    s = sorted(samples)
    med = percentile(s, 0.5)
    return (percentile(s, 0.9) - percentile(s, 0.1)) / med if med > 0 else math.inf


@dataclass(frozen=True)
class TimingResult:
    """Statistics of one timed point (microseconds per kernel call)."""

    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    n: int
    timer: str
    spread: float  # (p90 - p10) / median of the samples
    stop: StopReason
    wall_s: float  # time spent on this point, warm-up included
    inner: int = 1  # kernel calls per sample (CPU timer, tiny kernels)
    samples_us: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. SM clock, throttle reasons


def summarize(samples_us: Sequence[float], **kw: Any) -> TimingResult:
    s = sorted(samples_us)
    med = percentile(s, 0.5)
    p10, p90 = percentile(s, 0.1), percentile(s, 0.9)
    return TimingResult(
        median_us=med,
        p10_us=min(p10, med),
        p90_us=max(p90, med),
        mean_us=sum(s) / len(s),
        n=len(s),
        spread=(p90 - p10) / med if med > 0 else math.inf,
        samples_us=tuple(samples_us),
        **kw,
    )


# Where a model's weights come from: beyond the caches. Rotating a kernel's weights through
# this many bytes reads them from memory on a CPU (on a 2-core Xeon VM with 2 MiB of L2 a
# GEMM's time grew with the pool up to 64 MiB and stayed within a few % from there to 1 GiB).
WEIGHT_POOL_BYTES = 256 << 20
# What the platform records of it (PlatformDescriptor.timing): CPU curves timed hot, or with another
# pool, never mix with these.
COLD_WEIGHTS = f"cold-weights/{WEIGHT_POOL_BYTES >> 20}MiB"


class Timer(ABC):
    """Times a zero-argument callable that launches one kernel (or one block)."""

    name: str
    # The kernel should take its weights from copies filling this many bytes (profiler_agent.kernels);
    # 0 when the timer itself makes each sample cold (the CUDA timer flushes L2).
    weight_pool_bytes: int = 0

    @abstractmethod
    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        """Warm up, then sample fn until the stopping rule says enough."""

    def _sample_loop(
        self, take_sample: Callable[[], float | None], timing: Timing, started: float, **kw: Any
    ) -> TimingResult:
        """The shared stopping rule over a sample source (microseconds per call;
        None for a sample the source itself discarded)."""
        cap_s = timing.time_cap_ms / 1e3
        samples: list[float] = []
        next_check = timing.min_samples
        stop: StopReason = "max_samples"
        while len(samples) < timing.max_samples:
            sample = take_sample()
            if sample is None:
                if time.perf_counter() - started >= 2 * cap_s:
                    break  # the source keeps discarding: the caller falls back
                continue
            samples.append(sample)
            n = len(samples)
            if n >= next_check:
                # Re-check the spread every ~10 % more samples: sorting each time is O(n log n).
                next_check = n + max(1, n // 10)
                ordered = sorted(samples)
                med = percentile(ordered, 0.5)
                if med > 0 and (percentile(ordered, 0.9) - percentile(ordered, 0.1)) / med < timing.target_spread:
                    stop = "spread"
                    break
                if timing.median_ci > 0 and med > 0:
                    lo, hi = median_ci(ordered)
                    batch = batch_median_halfwidth(samples)
                    # Both intervals must be tight: the order-statistic one assumes independent
                    # samples, the batch one does not but needs >= 50 samples.
                    if batch is not None and max(med - lo, hi - med, batch) / med < timing.median_ci:
                        stop = "median_ci"
                        break
            if n >= timing.min_samples and time.perf_counter() - started >= cap_s:
                stop = "time_cap"
                break
        if not samples:
            raise RuntimeError("no sample was kept within twice the time cap")
        return summarize(samples, timer=self.name, stop=stop, wall_s=time.perf_counter() - started, **kw)


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
        self, threads: int | None = None, min_sample_us: float = 1000.0, min_on_cpu: float | None | Literal["auto"] = "auto",
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
        self.name = "cpu-perf-counter" + ("+preempt-filter" if min_on_cpu is not None else "") + (
            "+cold-weights" if weight_pool_bytes else "")

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

        def take_sample() -> float | None:
            c = cpu_clock()
            t = clock()
            for _ in range(inner):
                fn()
            wall = clock() - t
            on_cpu = cpu_clock() - c
            us = wall / 1e3 / inner
            if min_on_cpu is not None and wall > 0 and on_cpu < min_on_cpu * wall:
                discarded.append(us)
                return None
            return us

        extra: dict[str, Any] = {"threads": self.threads}
        try:
            result = self._sample_loop(take_sample, timing, started, inner=inner, extra=extra)
        except RuntimeError:
            result = None
        if result is None or result.n < timing.min_samples:
            kept = list(result.samples_us) if result is not None else []
            extra["preempted_fallback"] = True
            result = summarize(kept + discarded, timer=self.name, stop="time_cap",
                               wall_s=time.perf_counter() - started, inner=inner, extra=extra)
        extra["preempted"] = len(discarded)
        return result


class CudaTimer(Timer):
    """CUDA events around each sample, L2 flushed before each sample, warm-up
    until clocks settle; SM clock and throttle reasons from NVML when present.

    Each sample is one kernel call on a cold L2: a buffer at least twice the
    device's L2 size is overwritten before the start event, so the sample
    includes the kernel's real DRAM traffic, as a weight read in a real forward pass does.
    """

    name = "cuda-events+l2-flush"

    def __init__(self, device: torch.device | str = "cuda:0", flush_bytes: int | None = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("CudaTimer needs CUDA; this torch build or machine has none")
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        # Unknown L2 size: 256 MiB is above every GPU's L2 to date.
        size = flush_bytes if flush_bytes is not None else (2 * l2 if l2 else 256 << 20)
        if size < l2:
            raise ValueError(f"flush buffer ({size} B) must be at least the L2 size ({l2} B)")
        self.flush_bytes = size
        self._flush = torch.empty(size // 4, dtype=torch.int32, device=self.device)
        self._nvml = _NvmlProbe(self.device)

    def _flush_l2(self) -> None:
        self._flush.fill_(1)  # a write over the whole buffer evicts every L2 line

    def _settle(self, fn: Callable[[], object], timing: Timing) -> None:
        """Run fn in rounds until two rounds agree within 5 % (clocks settled),
        for at least warmup_ms and at most 10x that (never less than 2 s cap)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        cap = max(2.0, 10 * timing.warmup_ms / 1e3)
        prev = None
        while True:
            start.record()
            for _ in range(10):
                fn()
            end.record()
            end.synchronize()
            cur = start.elapsed_time(end)
            elapsed = time.perf_counter() - t0
            settled = prev is not None and abs(cur - prev) <= 0.05 * max(prev, 1e-9)
            if (settled and elapsed * 1e3 >= timing.warmup_ms) or elapsed >= cap:
                return
            prev = cur

    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        timing = timing or Timing()
        started = time.perf_counter()
        with torch.cuda.device(self.device):
            self._settle(fn, timing)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

            def take_sample() -> float:
                self._flush_l2()
                start.record()
                fn()
                end.record()
                end.synchronize()
                return start.elapsed_time(end) * 1e3  # elapsed_time is in milliseconds

            result = self._sample_loop(take_sample, timing, started, extra=self._nvml.read())
        return result


def nvml_handle(nv: Any, dev: torch.device) -> tuple[Any, int | None]:
    """The NVML handle of this CUDA device: by PCI bus id when torch reports it, else by index."""
    props = torch.cuda.get_device_properties(dev)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        try:
            pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
            handle = nv.nvmlDeviceGetHandleByPciBusId(pci)
            return handle, int(nv.nvmlDeviceGetIndex(handle))
        except Exception:  # noqa: BLE001 - fall back to the index mapping
            pass
    try:
        index = int(torch.cuda._get_nvml_device_index(dev))  # honours CUDA_VISIBLE_DEVICES
    except Exception:  # noqa: BLE001
        index = dev.index or 0
    return nv.nvmlDeviceGetHandleByIndex(index), index



class _NvmlProbe:
    """SM clock (MHz) and clock-throttle reasons via nvidia-ml-py, when installed."""

    def __init__(self, device: torch.device) -> None:
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            # By PCI bus id: the CUDA index differs from NVML's under CUDA_VISIBLE_DEVICES or another device order.
            self._handle, _ = nvml_handle(pynvml, device)
        except Exception:  # noqa: BLE001 - no NVML: nothing recorded, nothing invented
            self._handle = None

    def read(self) -> dict[str, Any]:
        if self._handle is None:
            return {}
        nv = self._nvml
        out: dict[str, Any] = {}
        try:
            out["sm_clock_mhz"] = int(nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            pass
        getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is not None:
            try:
                out["throttle_reasons"] = int(getter(self._handle))
            except Exception:  # noqa: BLE001
                pass
        return out


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


__all__ = [
    "COLD_WEIGHTS",
    "CpuTimer",
    "CudaTimer",
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
]
