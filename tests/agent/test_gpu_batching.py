"""Many points per host round trip on CUDA (CudaTimer.time_many), judged on the simulated GPU's virtual clock:
the same figures as one point at a time, with the synchronisations and lead of a round shared by all."""

from __future__ import annotations

import pytest
import torch

from gac.agent.runner import PlanRunner
from gac.agent.simulated_gpu import HostCosts, SimulatedGpu, lattice_us, operand_elements
from gac.agent.timing import POINTS_PER_ROUND, CudaTimer
from gac.contracts.measurements import Op
from gac.contracts.plans import Sweep, SweepPlan, Timing

SIZES_US = (3.0, 5.0, 6.0, 9.0, 14.0, 27.0, 70.0, 145.0)  # small kernels, where the round trip matters most


def _settled(seed: int) -> tuple[SimulatedGpu, CudaTimer, int, float]:
    """A timer whose clocks have settled (once per curve, as in a run), and the counters at that moment."""
    sim = SimulatedGpu(seed=seed)
    timer = CudaTimer(queue=sim)
    timer.time(sim.kernel(10.0), Timing())
    return sim, timer, sim.syncs, sim.host_us


def _one_by_one(seed: int) -> tuple[list[float], int, float]:
    sim, timer, syncs, at = _settled(seed)
    medians = [timer.time(sim.kernel(us), Timing()).median_us for us in SIZES_US]
    return medians, sim.syncs - syncs, sim.host_us - at


def _together(seed: int) -> tuple[list[float], int, float]:
    sim, timer, syncs, at = _settled(seed)
    medians = [r.median_us for r in timer.time_many([sim.kernel(us) for us in SIZES_US], Timing())]
    return medians, sim.syncs - syncs, sim.host_us - at


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_points_timed_together_read_the_same_as_one_by_one(seed: int) -> None:
    alone, _, _ = _one_by_one(seed)
    together, _, _ = _together(seed)
    for true_us, a, t in zip(SIZES_US, alone, together):
        assert t == pytest.approx(true_us, rel=0.03)
        assert t == pytest.approx(a, rel=0.04)


def test_points_timed_together_pay_one_round_trip_per_round_for_all() -> None:
    _, alone_syncs, alone_us = _one_by_one(3)
    _, together_syncs, together_us = _together(3)
    assert together_syncs * 4 <= alone_syncs, (together_syncs, alone_syncs)  # synchronisations for the same points
    # The virtual time stays about the same: each round's lead is as long as the host takes to queue the
    # round, so a round of eight points spins eight times as long (the saving is the round trips).
    assert together_us < 1.2 * alone_us
    print(
        f"{len(SIZES_US)} points: one by one {alone_syncs} syncs, {alone_us / 1e3:.2f} ms; "
        f"together {together_syncs} syncs, {together_us / 1e3:.2f} ms"
    )


def test_each_point_keeps_its_own_stopping_rule() -> None:
    """A quiet point stops at its first check while a noisy one keeps sampling: they share rounds, not samples."""
    sim = SimulatedGpu(seed=4, noise=0.0)
    noisy_sim_kernel = sim.kernel(8.0)
    quiet = sim.kernel(8.0)
    calls = {"n": 0}

    def noisy() -> None:  # every third launch of this kernel runs 3x as long on the device
        calls["n"] += 1
        sim._queue(16.0 if calls["n"] % 3 == 0 else 0.0, 0.0)
        noisy_sim_kernel()

    q, nz = CudaTimer(queue=sim).time_many([quiet, noisy], Timing(target_spread=0.05, median_ci=0.0, max_samples=300))
    assert q.stop == "spread" and q.n < nz.n
    assert nz.spread > 0.05


def test_a_slow_host_runs_rounds_dry_and_the_lead_grows_for_all_points() -> None:
    sim = SimulatedGpu(seed=1, host=HostCosts(op_us=200.0))
    results = CudaTimer(queue=sim).time_many([sim.kernel(3.0), sim.kernel(4.0)], Timing())
    assert results[0].extra["dry_rounds"] >= 1
    assert [r.median_us for r in results] == pytest.approx([3.0, 4.0], rel=0.03)


def test_the_runner_times_a_curve_in_groups_on_cuda() -> None:
    plan = SweepPlan(
        name="lattice",
        sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 256, "k": 256}, values={"start": 120, "stop": 184, "step": 4})],
    )
    syncs, curves = [], []
    for per_round in (1, POINTS_PER_ROUND):
        sim, timer, before, _ = _settled(5)
        timer.points_per_round = per_round
        result = PlanRunner(timer, "cpu", adaptive=False, build=sim.build_kernel).run(plan)
        syncs.append(sim.syncs - before)
        curves.append({m.shape["n"]: m.median_us for m in result.measurements})
        assert all(m.quality is None for m in result.measurements)
    one, grouped = curves
    assert one.keys() == grouped.keys() and len(one) == 17
    for n, us in grouped.items():
        assert us == pytest.approx(lattice_us(Op.gemm, {"m": 256, "n": n, "k": 256}), rel=0.03)
    assert syncs[1] * 3 <= syncs[0], syncs


def test_a_point_that_does_not_fit_beside_its_group_is_timed_alone() -> None:
    """A GPU's memory holds one of these kernels, not two: built in groups of 8, all but the first fail
    beside it, and each is timed alone once the group's kernels are freed. Only a point that does not
    fit on its own fails, and its error is torch's out-of-memory error."""
    m, k = 4096, 4096
    sim = SimulatedGpu(seed=6, memory_bytes=(m * k + 2 * m * 256) * 2 * 3 // 2)  # 1.5 kernels at n = 256
    timer = CudaTimer(queue=sim)
    plan = SweepPlan(
        name="tight",
        sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": m, "k": k}, values=[*range(64, 257, 32), 8192])],
    )
    result = PlanRunner(timer, "cpu", adaptive=False, build=sim.build_kernel).run(plan)
    assert sorted(m.shape["n"] for m in result.measurements) == list(range(64, 257, 32))
    assert [(o.point.shape["n"], o.error.split(" (")[0]) for o in result.failures] == [(8192, "OutOfMemoryError: CUDA out of memory")]
    assert sim.held_bytes == 0  # every kernel freed with the run


def _bimodal_at(sim: SimulatedGpu, n: int, fail_after: int | None = None):  # noqa: ANN202 - a KernelBuilder
    """The simulated GPU's kernels, but the one at N = n takes 3x as long every other launch (a flagged
    point, timed again by the quality gate); with fail_after, its builds after that many run out of memory."""
    builds = {"n": 0}

    def build(op, dtype, shape, device=None, weight_pool_bytes=0, **kw):  # noqa: ANN001, ANN202
        kernel = sim.build_kernel(op, dtype, shape, device, weight_pool_bytes, **kw)
        if shape["n"] != n:
            return kernel
        builds["n"] += 1
        if fail_after is not None and builds["n"] > fail_after:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        launches, plain = {"n": 0}, kernel.fn

        def stalled() -> None:
            launches["n"] += 1
            sim._queue(2 * lattice_us(Op.gemm, shape) if launches["n"] % 2 else 0.0, 0.0)
            plain()

        kernel.fn = stalled
        return kernel

    return build


def test_a_flagged_point_of_a_full_group_is_timed_again_once_the_group_is_freed() -> None:
    """The memory holds the group's 8 kernels and no ninth: the gate's re-time of a flagged point waits
    for the group to be freed instead of failing beside it, and the point is sent flagged, not lost."""
    m, k, dims = 1024, 1024, list(range(128, 129 + 7 * 16, 16))
    sim = SimulatedGpu(seed=7, memory_bytes=sum(operand_elements(Op.gemm, {"m": m, "n": n, "k": k}) * 2 for n in dims))
    plan = SweepPlan(name="full", sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": m, "k": k}, values=dims)])
    result = PlanRunner(CudaTimer(queue=sim), "cpu", adaptive=False, build=_bimodal_at(sim, dims[3])).run(plan)
    assert not result.failures, [o.error for o in result.failures]
    flagged = {m.shape["n"]: m.quality for m in result.measurements if m.quality}
    assert flagged == {dims[3]: "bimodal"}


def test_a_flagged_point_whose_re_time_fails_is_sent_flagged() -> None:
    dims = [128, 136]
    sim = SimulatedGpu(seed=8)
    plan = SweepPlan(name="flaky", sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 1024, "k": 1024}, values=dims)])
    result = PlanRunner(CudaTimer(queue=sim), "cpu", adaptive=False, build=_bimodal_at(sim, 136, fail_after=1)).run(plan)
    assert not result.failures
    assert {m.shape["n"]: m.quality for m in result.measurements} == {128: None, 136: "bimodal"}
