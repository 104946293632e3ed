"""The CUDA timer's logic on a simulated GPU stream: launch latency, queueing and the bimodal host
stalls that made small kernels' figures wander on an H100 (gac.agent.simulated_gpu)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from gac.agent.kernels import _PoolViews, release_weight_pools
from gac.agent.runner import PlanRunner
from gac.agent.selftest import judge_l2_flush, judge_repeatability, l2_read_times, repeat_medians
from gac.agent.simulated_gpu import WARM_FACTOR, HostCosts, SimulatedGpu, lattice_us
from gac.agent.timing import CudaTimer, Timer, TimingResult, synced_samples
from gac.contracts.measurements import Op
from gac.contracts.plans import Sweep, SweepPlan, Timing

SIZES_US = (3.0, 6.0, 50.0, 1000.0)


@pytest.mark.parametrize("true_us", SIZES_US)
def test_queued_samples_measure_the_kernel_at_every_size(true_us: float) -> None:
    for seed in range(3):
        sim = SimulatedGpu(seed=seed)
        r = CudaTimer(queue=sim).time(sim.kernel(true_us), Timing())
        assert r.median_us == pytest.approx(true_us, rel=0.03), (seed, r)
        assert r.extra["late_rounds"] == 0


def test_a_sync_per_sample_puts_launches_into_small_kernels() -> None:
    """What the simulation reproduces: synchronising after each sample, a 6 us kernel's median
    lands anywhere up to 3x, depending on the run."""
    medians = []
    for seed in range(6):
        sim = SimulatedGpu(seed=seed)
        medians.append(synced_samples(sim, sim.kernel(6.0), 30).median_us)
    assert max(medians) > 1.5 * 6.0
    assert max(medians) / min(medians) > 1.3


def test_a_host_slower_than_the_device_is_outrun_by_the_lead() -> None:
    """A host that needs 200 us to queue a 3 us sample: the first rounds run dry and are dropped, the
    spin before each round grows until the whole round is queued in time."""
    sim = SimulatedGpu(seed=1, host=HostCosts(op_us=200.0))
    r = CudaTimer(queue=sim).time(sim.kernel(3.0), Timing())
    assert r.extra["dry_rounds"] >= 1
    assert r.median_us == pytest.approx(3.0, rel=0.03)


def test_clocks_settle_once_per_curve_not_once_per_point() -> None:
    sim = SimulatedGpu(seed=2)
    timer = CudaTimer(queue=sim)
    timer.time(sim.kernel(20.0), Timing(warmup_ms=30))
    first = sim.launches
    timer.time(sim.kernel(21.0), Timing(warmup_ms=30))
    second = sim.launches - first
    assert second < first / 3  # no settling rounds for the next point of the curve
    sim.idle(2.0)
    before = sim.launches
    timer.time(sim.kernel(22.0), Timing(warmup_ms=30))
    assert sim.launches - before > 2 * second  # after an idle spell the clocks settle again


class _SyncedTimer(Timer):
    """The timing the agent used before: one synchronisation per sample."""

    name = "synced"

    def __init__(self, sim: SimulatedGpu) -> None:
        self.sim = sim

    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        return synced_samples(self.sim, fn, 30)


def _small_kernels(sim: SimulatedGpu) -> list[tuple[str, Callable[[], object]]]:
    return [(f"{us} us", sim.kernel(us)) for us in (3.0, 5.0, 7.0)]


def test_repeatability_check_passes_the_queued_timer_and_fails_a_synced_one() -> None:
    sim = SimulatedGpu(seed=3)
    ok = judge_repeatability("r", repeat_medians(CudaTimer(queue=sim), _small_kernels(sim)))
    assert ok.status == "ok", ok.detail
    sim = SimulatedGpu(seed=3)
    bad = judge_repeatability("r", repeat_medians(_SyncedTimer(sim), _small_kernels(sim)))
    assert bad.status == "fail", bad.detail


def test_l2_flush_check_sees_a_cold_read_slower_than_a_warm_one() -> None:
    sim = SimulatedGpu(seed=4)
    warm, cold = l2_read_times(CudaTimer(queue=sim), sim.kernel(10.0, warm_us=5.0))
    assert warm == pytest.approx(5.0, rel=0.03) and cold == pytest.approx(10.0, rel=0.03)
    assert judge_l2_flush(50 << 20, 100 << 20, warm, cold).status == "ok"
    sim = SimulatedGpu(seed=4)
    warm, cold = l2_read_times(CudaTimer(queue=sim), sim.kernel(10.0))  # a flush that changes nothing
    assert judge_l2_flush(50 << 20, 100 << 20, warm, cold).status == "warn"


def test_gpu_inputs_are_disjoint_aligned_views_of_one_pool() -> None:
    views = _PoolViews(torch.float16, torch.device("cpu"))
    tensors = [views.take(1000), views.take(3, 5), views.take(10, 7), views.take(2, 2)]
    base = tensors[0].data_ptr()
    spans = sorted((t.data_ptr() - base, t.data_ptr() - base + t.numel() * t.element_size()) for t in tensors)
    assert all(t.is_contiguous() for t in tensors) and tensors[2].shape == (10, 7)
    assert all(t.untyped_storage().data_ptr() == tensors[0].untyped_storage().data_ptr() for t in tensors)  # one pool
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))  # no byte read by two tensors
    assert all(start % 64 == 0 for start, _ in spans)  # each starts on a cache line, as an allocation does


def test_a_lattice_curve_profiled_on_the_simulated_gpu_repeats_its_cliffs() -> None:
    """The runner with the CUDA timer on a simulated GPU whose GEMMs follow a lattice (multiples of 8
    fast, even widths slower, odd widths slowest): two separate runs find the same curve, so the
    largest step they report is a cliff, not noise."""
    plan = SweepPlan(
        name="lattice",
        sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 256, "k": 256}, values={"start": 120, "stop": 200, "step": 4})],
    )
    runs = []
    for seed in (5, 6):
        sim = SimulatedGpu(seed=seed)
        result = PlanRunner(CudaTimer(queue=sim), "cpu", adaptive=False, build=sim.build_kernel).run(plan)
        runs.append({m.shape["n"]: m.median_us for m in result.measurements})
    first, second = runs
    assert first.keys() == second.keys() and len(first) == 21
    assert all(abs(first[n] / second[n] - 1) < 0.03 for n in first)
    for curve in runs:
        fast = [us for n, us in curve.items() if n % 8 == 0]
        slow = [us for n, us in curve.items() if n % 8]
        assert max(fast) < min(slow)  # the lattice, read from the medians


def test_the_lattices_steps_repeat_when_timed_again_on_the_simulated_gpu() -> None:
    """The summary's step is one the runner timed again (gac.agent.steps): on a lattice it repeats, at a
    multiple of 8; the second timings decide the summary only, and are not sent."""
    plan = SweepPlan(
        name="lattice",
        sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 256, "k": 256}, values={"start": 120, "stop": 160, "step": 4})],
    )
    sim = SimulatedGpu(seed=7)
    sent: list = []
    result = PlanRunner(
        CudaTimer(queue=sim), "cpu", adaptive=False, build=sim.build_kernel, on_measurement=sent.append, confirm_steps=2
    ).run(plan)
    check = result.steps[(0, "bfloat16")]
    assert check.step is not None and check.step.repeats and check.tried == 1
    faster = check.step.hi if check.step.again < 0 else check.step.lo
    assert faster % 8 == 0  # the step goes up from a multiple of 8, or down to one
    assert abs(check.step.again) > 0.5  # the simulated lattice's steps are deep
    assert len(sent) == len(result.measurements) == 11  # both ends timed again, for the summary only: not sent


def _point(median: float, p10: float, p90: float) -> TimingResult:
    # Eleven samples whose 10th, 50th and 90th percentiles are these.
    result = TimingResult((p10, p10, *[median] * 7, p90, p90), timer="t", stop="spread", wall_s=0.0)
    assert (result.p10_us, result.median_us, result.p90_us) == (p10, median, p90)
    return result


def test_the_summary_names_no_step_inside_the_points_noise() -> None:
    from gac.agent.cli import _largest_step

    noisy = [(120, _point(5.2, 5.1, 17.0)), (124, _point(12.4, 5.3, 30.0)), (128, _point(6.0, 5.2, 33.0))]
    assert _largest_step(noisy, "n") == "none beyond noise"  # +138 % between medians, all inside each other's spread
    lattice = [(127, _point(99.0, 98.0, 101.0)), (128, _point(18.0, 17.8, 18.3)), (129, _point(99.5, 98.9, 100.2))]
    assert _largest_step(lattice, "n") == "+453% n=128->129 (not re-timed)"


# --- chained samples: calls back to back, as a model's step runs its GEMMs ---


@pytest.mark.parametrize("true_us", SIZES_US)
def test_chained_samples_read_each_call_cold_at_every_size(true_us: float) -> None:
    """Each call reads a new copy of its weights, so every call is cold though no flush runs between
    them; the sample's two events are spread over its calls."""
    for seed in range(3):
        sim = SimulatedGpu(seed=seed)
        r = CudaTimer(queue=sim).chained().time(sim.kernel(true_us, true_us / 2, pooled=True), Timing())
        assert r.median_us == pytest.approx(true_us, rel=0.03), (seed, r)
        assert r.extra["late_rounds"] == 0


def test_chained_calls_without_a_weight_pool_read_warm() -> None:
    """No flush between a chain's calls: a kernel that reuses one weight tensor reads it from the L2
    after its first call. The pool, not a flush, is what keeps a chained sample cold."""
    sim = SimulatedGpu(seed=4)
    r = CudaTimer(queue=sim).chained().time(sim.kernel(10.0, 5.0), Timing())
    assert r.median_us == pytest.approx(5.0, rel=0.03)


def test_a_chained_timer_asks_for_a_weight_pool_beyond_the_l2() -> None:
    sim = SimulatedGpu(seed=0, flush_bytes=600 << 20)
    plain, chained = CudaTimer(queue=sim), CudaTimer(queue=sim).chained(4)
    assert plain.weight_pool_bytes == 0 and plain.chain == 1
    assert chained.weight_pool_bytes >= 2 * sim.flush_bytes and chained.chain == 4
    assert "chain4" in chained.name and chained.name != plain.name
    with pytest.raises(ValueError, match="chain"):
        CudaTimer(queue=sim, chain=0)


def test_the_runner_builds_pooled_kernels_for_a_chained_timer() -> None:
    """Through the runner, a chained timer reads the lattice's cold times (its kernels rotate their
    weights) and the warm timer the warm ones."""
    plan = SweepPlan(
        name="lattice",
        sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 1, "k": 4096}, values={"start": 8, "stop": 24, "step": 4})],
    )
    for make, share in ((lambda t: t.chained(), 1.0), (lambda t: t.warm(), WARM_FACTOR)):
        sim = SimulatedGpu(seed=6)
        result = PlanRunner(make(CudaTimer(queue=sim)), "cpu", adaptive=False, build=sim.build_kernel).run(plan)
        assert len(result.measurements) == 5
        for m in result.measurements:
            assert m.median_us == pytest.approx(share * lattice_us(Op.gemm, m.shape), rel=0.03), (share, m.shape)


def test_gpu_weight_copies_are_disjoint_views_that_fill_the_pool() -> None:
    release_weight_pools()
    views = _PoolViews(torch.float16, torch.device("cpu"))
    x = views.take(4, 64)
    copies = views.copies([(8, 64), (48, 8)], 8 << 20)  # past the pool's first block: it has to grow
    per_copy = (8 * 64 + 48 * 8) * 2
    assert len(copies) == (8 << 20) // per_copy
    tensors = [x, *(t for ws in copies for t in ws)]
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))  # no byte read by two calls
    pool = copies[0][0].untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == pool for ws in copies for t in ws)  # grown once, not view by view
    assert [w.shape for w in copies[0]] == [(8, 64), (48, 8)]
    assert len(_PoolViews(torch.float16, torch.device("cpu")).copies([(8, 64)], 0)) == 1  # no pool: one copy
