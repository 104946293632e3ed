"""The quality gate: stalled points are re-timed, or sent flagged, and never make a cliff (issue: a busy 2-core
machine stored n=56 at 91 us and n=60 at 23,957 us for the same GEMM, "largest step +18814 %")."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from gac.agent.kernels import Kernel
from gac.agent.quality import CoreLoad, QualityGate, bimodal, isolated
from gac.agent.runner import PlanRunner
from gac.agent.timing import Timer, TimingResult, summarize
from gac.contracts.columns import ColumnBatch
from gac.contracts.measurements import Batch, Measurement, RunInfo
from gac.contracts.plans import Sweep, SweepPlan, Timing
from gac.solver.lookup import FileLookup
from tests import factories as f

FAST = [90.0 + i % 5 for i in range(40)]  # a kernel's samples on a quiet machine
STALLED = [90.0 + i % 5 for i in range(25)] + [4_000.0 + 50 * i for i in range(15)]  # some samples lost a scheduler tick
SMEARED = [2_000.0 * 1.08**i for i in range(40)]  # every sample stalled, each by another amount: a wide spike


def test_two_modes_are_bimodal_a_tail_or_a_lone_outlier_is_not():
    assert bimodal(STALLED)
    assert bimodal([v * 1e-3 for v in STALLED])  # unit-free
    assert not bimodal(FAST)
    assert not bimodal([90.0 * 1.03**i for i in range(40)])  # a smooth spread, no gap
    assert not bimodal(FAST[:38] + [5_000.0, 6_000.0])  # two stalls in forty: the median is safe
    assert not bimodal(STALLED[::5])  # too few samples to tell


def test_isolated_needs_both_neighbours_and_a_huge_spread():
    assert isolated(23_957.0, spread=1.4, below_us=91.0, above_us=95.0)  # a spike made of stalls
    assert isolated(10.0, spread=0.9, below_us=91.0, above_us=95.0)  # a dip, as wide
    assert not isolated(23_957.0, spread=0.02, below_us=91.0, above_us=95.0)  # tight: a real cliff (a GPU's odd width)
    assert not isolated(23_957.0, spread=1.4, below_us=None, above_us=95.0)  # an end of the curve: not judged
    assert not isolated(150.0, spread=1.4, below_us=91.0, above_us=95.0)  # within FAR of a neighbour


class _Scripted(Timer):
    """A timer whose samples for each dim come from a script, one list per try (the last repeats)."""

    name = "scripted"

    def __init__(self, script: dict[int, list[list[float]]]) -> None:
        self.script = script
        self.tries: dict[int, int] = {}

    def time(self, fn: Callable[[], object], timing: Timing | None = None) -> TimingResult:
        x = int(fn())  # type: ignore[call-overload]
        k = self.tries.get(x, 0)
        self.tries[x] = k + 1
        runs = self.script.get(x, [FAST])
        return summarize(runs[min(k, len(runs) - 1)], timer=self.name, stop="spread", wall_s=0.0)


def _build(op: Any, dtype: Any, shape: dict[str, int], device: Any = None, **_: Any) -> Kernel:
    n = shape["n"]
    return Kernel(op, dtype, shape, torch.device("meta"), lambda: n, "scripted")


PLAN = SweepPlan(
    name="gate", sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 256, "k": 256}, values=[52, 56, 60, 64, 68])]
)


class _Load:
    """A load probe that reads what the test says."""

    def __init__(self, cores: Sequence[float | None]) -> None:
        self.cores = list(cores)

    def start(self) -> None:
        pass

    def stop(self) -> float | None:
        return self.cores.pop(0) if len(self.cores) > 1 else self.cores[0]


def _run(
    script: dict[int, list[list[float]]],
    gate: QualityGate | None = None,
    seed: int | None = None,
) -> tuple[list[Measurement], Any, _Scripted]:
    timer = _Scripted(script)
    sent: list[Measurement] = []
    result = PlanRunner(timer, "cpu", on_measurement=sent.append, shuffle_seed=seed, build=_build, gate=gate or QualityGate()).run(PLAN)
    return sent, result, timer


def _curve(sent: list[Measurement]) -> dict[int, float]:
    lookup = FileLookup.from_measurements(sent, "p")
    return {x: p.latency_us for x, p in lookup.curve("gemm", "bfloat16", {"m": 256, "k": 256}, "n").items()}


def test_a_point_with_stalled_samples_is_timed_again_and_sent_clean():
    sent, result, timer = _run({60: [STALLED, FAST]})
    assert timer.tries[60] == 2
    at60 = [m for m in sent if m.x == 60]
    assert len(at60) == 1 and at60[0].quality is None and at60[0].median_us < 100
    assert all(m.quality is None for m in sent)


def test_a_point_that_always_stalls_is_sent_flagged_and_makes_no_cliff():
    from gac.agent.cli import _summary_table

    sent, result, timer = _run({60: [STALLED]})
    assert timer.tries[60] == 3  # the first try and two more
    at60 = [m for m in sent if m.x == 60]
    assert [m.quality for m in at60] == ["bimodal"]
    assert 60 not in _curve(sent)  # kept out of candidates and predictions
    table = _summary_table(result, PLAN)
    row = [list(c.cells) for c in table.columns]
    assert row[1] == ["4"] and row[5] == ["1"]  # four trusted points, one flagged
    assert row[3][0].startswith("none beyond noise") or "60" not in row[3][0]


def test_a_spike_timed_before_its_neighbours_is_outvoted_once_they_are_measured():
    """Timed in plan order, n=60 comes before n=64: when 64 arrives, 60 is a spike with a huge spread
    next to both neighbours; two clean re-timings make its median (as the service combines runs) the
    kernel's again, and the summary reads no cliff."""
    spike = SMEARED
    # No gap between modes (stalls of every length), so only its neighbours can tell.
    assert not bimodal(spike) and summarize(spike, timer="t", stop="spread", wall_s=0).spread > 0.5
    sent, result, timer = _run({60: [spike, FAST]})
    assert timer.tries[60] == 3
    assert [m.quality for m in sent if m.x == 60] == [None, None, None]
    assert _curve(sent)[60] < 100  # the median of three runs
    (o60,) = [o for o in result.outcomes if o.point.shape["n"] == 60]
    assert o60.result is not None and o60.result.median_us < 100


def test_a_spike_that_stays_a_spike_is_sent_flagged_isolated():
    sent, _, timer = _run({60: [SMEARED]})
    assert [m.quality for m in sent if m.x == 60] == [None, "isolated", "isolated", "isolated"]


def test_a_real_cliff_with_a_tight_spread_is_left_alone():
    cliff = [400.0 + i % 3 for i in range(40)]
    sent, _, timer = _run({60: [cliff]})
    assert timer.tries[60] == 1 and _curve(sent)[60] > 390


def test_points_timed_while_other_work_took_the_cores_are_retimed_or_flagged():
    two_threads = QualityGate(load=_Load([1.6, 0.1]), cores=2, threads=2)
    sent, _, timer = _run({}, gate=two_threads)
    assert timer.tries[52] == 2 and all(m.quality is None for m in sent)  # the first point, re-timed once it was quiet
    always_busy = QualityGate(load=_Load([1.6]), cores=2, threads=2)
    sent, _, _ = _run({}, gate=always_busy)
    assert {m.quality for m in sent} == {"busy"} and _curve(sent) == {}
    one_thread = QualityGate(load=_Load([1.6]), cores=2, threads=1)  # waits on no other thread: not flagged
    sent, _, _ = _run({}, gate=one_thread)
    assert {m.quality for m in sent} == {None}


def test_every_point_carries_the_load_it_was_timed_under():
    """The gate's reading travels with the point (busy_cores), flagged or not: the dashboard's load while profiling."""
    sent, _, _ = _run({}, gate=QualityGate(load=_Load([1.6, 0.1234567]), cores=2, threads=2))
    assert [m.busy_cores for m in sent] == [0.123] * len(sent)  # the first, busy try was timed again
    sent, _, _ = _run({}, gate=QualityGate(load=_Load([1.6]), cores=2, threads=2))
    assert {(m.quality, m.busy_cores) for m in sent} == {("busy", 1.6)}
    sent, _, _ = _run({}, gate=QualityGate(load=_Load([None]), cores=2, threads=2))  # too short to read
    assert {m.busy_cores for m in sent} == {None}
    sent, _, _ = _run({})  # no probe (a GPU's points)
    assert {m.busy_cores for m in sent} == {None}


def test_the_cpu_timer_falling_back_to_preempted_samples_flags_busy():
    result = summarize(FAST, timer="t", stop="time_cap", wall_s=0.0, extra={"preempted_fallback": True})
    assert QualityGate().flags(result, None) == ["busy"]


def test_the_load_probe_counts_other_work_not_this_process(tmp_path):
    stat = tmp_path / "stat"

    def write(user: int, idle: int) -> None:
        stat.write_text(f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n")

    probe = CoreLoad(str(stat))
    write(1_000, 1_000)
    probe.start()
    write(1_150, 1_050)  # 200 ticks over both cores, 150 busy: 1.5 cores (this test's own share is ~0)
    busy = probe.stop()
    assert busy is not None and 1.4 <= busy <= 1.5
    probe.start()
    write(1_152, 1_051)  # 3 ticks: too short a look to say anything
    assert probe.stop() is None


def test_a_busy_machine_makes_the_agent_time_with_one_thread_and_say_so(capsys):
    from gac.agent.cli import _threads_for_load
    from gac.agent.cpu_load import Busy

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert _threads_for_load(lambda: Busy(2.0, "2.0 cores busy with other work")) == 1
        said = capsys.readouterr().err
        assert "timing with --threads 1 instead of 2" in said and "2.0 cores busy" in said
        assert _threads_for_load(lambda: Busy(0.1, "0.1 cores busy with other work")) is None
        assert _threads_for_load(lambda: None) is None
    finally:
        torch.set_num_threads(before)


def test_a_busy_machine_at_a_pinned_thread_count_is_not_told_to_drop_to_one_thread(capsys):
    """Extending a platform timed with 2 threads, one thread would be another platform: the warning says
    to find a quieter machine instead; an unpinned count is told it may use --threads 1."""
    from gac.agent.cli import _warn_if_busy
    from gac.agent.cpu_load import Busy

    platform = f.platform().model_copy(update={"device_kind": "cpu", "cores": 2, "threads": 2})
    busy = lambda: Busy(1.5, "1.5 cores busy with other work")  # noqa: E731
    _warn_if_busy(platform, pinned="the platform being measured was timed with it", busy=busy)
    pinned = " ".join(capsys.readouterr().err.split())
    assert "1.5 cores busy" in pinned and "timed with it, so the count stays at 2" in pinned
    assert "--threads 1" not in pinned
    _warn_if_busy(platform, pinned=None, busy=busy)
    assert "use --threads 1" in capsys.readouterr().err
    quiet = lambda: Busy(0.0, "0.0 cores busy with other work")  # noqa: E731
    _warn_if_busy(platform, pinned="the platform being measured was timed with it", busy=quiet)
    assert capsys.readouterr().err == ""


def test_the_flag_travels_in_both_wire_layouts():
    rows = [f.measurement(56), f.measurement(60, quality="bimodal,busy")]
    batch = Batch(id=uuid.uuid4(), platform=f.platform(), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    again = ColumnBatch.model_validate(ColumnBatch.of(batch).model_dump(mode="json", by_alias=True, exclude_none=True)).to_batch()
    assert [m.quality for m in again.measurements] == [None, "bimodal,busy"]
    rows = [f.measurement(56), f.measurement(60, busy_cores=0.5)]
    batch = Batch(id=uuid.uuid4(), platform=f.platform(), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    again = ColumnBatch.model_validate(ColumnBatch.of(batch).model_dump(mode="json", by_alias=True, exclude_none=True)).to_batch()
    assert [m.busy_cores for m in again.measurements] == [None, 0.5]
    with pytest.raises(ValueError, match="quality"):
        f.measurement(60, quality="slow")
