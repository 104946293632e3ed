"""The timers and the stopping rule, on real kernels on this CPU."""

from __future__ import annotations

import random
import time

import pytest
import torch
import torch.utils.benchmark as tb

from gac.contracts.plans import Timing
from profiler_agent.kernels import build_kernel
from profiler_agent.timing import CpuTimer, median_ci, percentile, relative_spread, summarize


def test_percentile_matches_linear_interpolation():
    s = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(s, 0.5) == 3.0
    assert percentile(s, 0.1) == pytest.approx(1.4)
    assert percentile(s, 0.9) == pytest.approx(7.6)
    assert relative_spread(s) == pytest.approx((7.6 - 1.4) / 3.0)
    lo, hi = median_ci(sorted(range(100)))
    assert lo < 50 < hi and hi - lo < 25


def test_summary_keeps_percentiles_ordered():
    r = summarize([5.0] * 9 + [5.0000001], timer="t", stop="spread", wall_s=0.0)
    assert r.p10_us <= r.median_us <= r.p90_us and r.n == 10


class _Source(CpuTimer):
    """The stopping rule fed from a fixed sample sequence (to test the rule itself)."""

    def run(self, samples, timing):
        it = iter(samples)
        return self._sample_loop(lambda: next(it), timing, time.perf_counter())


def test_stopping_rule_quiet_noisy_and_capped():
    t = _Source(threads=torch.get_num_threads())
    quiet = t.run([100.0 + 0.1 * (i % 3) for i in range(1000)], Timing())
    assert quiet.stop == "spread" and quiet.n == 10  # never fewer than 10 samples
    rng = random.Random(1)
    noisy = t.run([rng.uniform(70.0, 130.0) for _ in range(100_000)], Timing(median_ci=0.02))
    assert noisy.stop == "median_ci" and noisy.spread > 0.3 and noisy.n > 10
    capped = t.run((rng.uniform(1, 100) for _ in range(100_000)), Timing(median_ci=0, max_samples=500))
    assert capped.stop == "max_samples" and capped.n == 500

    def slow():
        time.sleep(0.002)
        return rng.uniform(1, 100)

    timed = t.run(iter(slow, None), Timing(median_ci=0, time_cap_ms=60))
    assert timed.stop == "time_cap" and 10 <= timed.n < 40


def test_median_ci_is_not_fooled_by_correlated_samples():
    """A machine whose speed wanders in runs of samples: each run looks precise, the
    order-statistic CI alone would stop early; the batch-median CI keeps sampling."""
    t = _Source(threads=torch.get_num_threads())
    rng = random.Random(2)
    levels = [90.0, 110.0, 100.0, 95.0, 105.0] * 40
    drifting = [levels[i // 40] * rng.uniform(0.97, 1.03) for i in range(8000)]
    r = t.run(drifting, Timing(median_ci=0.01, max_samples=8000, target_spread=0.01))
    independent = t.run([levels[rng.randrange(200)] * rng.uniform(0.97, 1.03) for _ in range(8000)],
                        Timing(median_ci=0.01, max_samples=8000, target_spread=0.01))
    assert independent.stop == "median_ci"
    assert r.n > 1.5 * independent.n  # needs more correlated samples for the same precision


def test_cpu_timer_fixes_the_thread_count():
    before = torch.get_num_threads()
    try:
        t = CpuTimer(threads=1)
        torch.set_num_threads(2)  # someone else changes it...
        r = t.time(lambda: None, Timing(time_cap_ms=20))
        assert torch.get_num_threads() == 1  # ...the timer puts it back before sampling
        assert r.extra["threads"] == 1 and r.timer == "cpu-perf-counter+preempt-filter"
    finally:
        torch.set_num_threads(before)


def _busy(us: float) -> None:
    end = time.perf_counter_ns() + us * 1e3
    while time.perf_counter_ns() < end:
        pass


def test_samples_spent_off_cpu_are_discarded():
    """A sample during which the timing thread was off the CPU (here: asleep, as
    when the scheduler gives the core to a neighbour) does not measure the kernel."""
    before = torch.get_num_threads()
    try:
        timer = CpuTimer(threads=1, min_sample_us=1)
        calls = [0]

        def sometimes_descheduled():
            calls[0] += 1
            if calls[0] % 4 == 0:
                time.sleep(0.002)  # off-CPU for 2 ms
            else:
                _busy(300)

        r = timer.time(sometimes_descheduled, Timing(time_cap_ms=200, median_ci=0))
        assert r.extra["preempted"] > 0 and not r.extra.get("preempted_fallback")
        assert r.p90_us < 1000  # no 2 ms sample was kept (a busy sample preempted that long is off-CPU too)
        assert r.median_us >= 300  # the kept samples timed the 300 µs busy call (wall time, never less)

        asleep = timer.time(lambda: time.sleep(0.0005), Timing(time_cap_ms=50))
        assert asleep.extra.get("preempted_fallback") and asleep.n >= 10  # never an empty point
        assert CpuTimer(threads=2).name == "cpu-perf-counter"  # the check is off with several threads
    finally:
        torch.set_num_threads(before)


# Tolerance: on this shared 2-core VM the same kernel's median moves 10-30 % from
# one second to the next (other tenants, frequency changes); both tools time the
# same closure with one thread, interleaved, best agreement of 3 tries must be
# within 35 %. A broken timer (wrong unit, per-batch instead of per-call, missing
# warm-up) is off by 2x or more, which this still catches.
TOLERANCE = 0.35


@pytest.mark.slow
@pytest.mark.parametrize(
    ("op", "dtype", "shape"),
    [
        ("gemm", "float32", {"m": 256, "n": 256, "k": 256}),
        ("gemm", "bfloat16", {"m": 256, "n": 96, "k": 256}),
        ("gemv", "float32", {"n": 2048, "k": 2048}),
        ("sdpa", "float32", {"b": 1, "h": 4, "s": 128, "head_dim": 64}),
    ],
)
def test_median_agrees_with_torch_utils_benchmark(op, dtype, shape):
    before = torch.get_num_threads()
    try:
        timer = CpuTimer(threads=1)
        k = build_kernel(op, dtype, shape)
        ratios = []
        for _ in range(3):
            with torch.inference_mode():
                ours = timer.time(k.fn, Timing(time_cap_ms=400)).median_us
                ref = tb.Timer("fn()", globals={"fn": k.fn}, num_threads=1).blocked_autorange(min_run_time=0.3).median * 1e6
            ratios.append(ours / ref)
            if abs(ratios[-1] - 1) < TOLERANCE:
                break
        assert min(abs(r - 1) for r in ratios) < TOLERANCE, ratios
    finally:
        torch.set_num_threads(before)
