"""A run's summary shows a curve's step only when timing both its ends again, in turn, shows it too
(gac.agent.steps): on a noisy CPU the largest step between neighbours moved from run to run (+46 %
n=80->84, +29 % n=96->100, +50 % n=72->76 in three quick plans on one machine), and the figure shown
is the smaller of the two pairs'."""

from __future__ import annotations

from typing import Any

from gac.agent.cli import _summary_table
from gac.agent.quality import QualityGate
from gac.agent.runner import PlanRunner
from gac.agent.steps import StepCheck, check_steps, steps_beyond_noise
from gac.agent.timing import TimingResult
from tests.agent.test_quality import FAST, PLAN, _build, _Scripted


def _point(median: float, half_width: float = 1.0) -> TimingResult:
    """Eleven samples: p10 and p90 at median -/+ half_width."""
    lo, hi = median - half_width, median + half_width
    return TimingResult((lo, lo, *[median] * 7, hi, hi), timer="t", stop="spread", wall_s=0.0)


CURVE = [(56, _point(100)), (60, _point(120)), (64, _point(100)), (68, _point(160)), (72, _point(161, 5))]


def test_steps_beyond_noise_are_the_apart_ones_largest_first():
    steps = steps_beyond_noise(CURVE)
    assert [(s.lo, s.hi) for s in steps] == [(64, 68), (56, 60), (60, 64)]  # +60 %, +20 %, -17 %; 68 -> 72 overlaps: noise
    assert steps[0].first == 0.6


def _scripted(timings: dict[int, list[TimingResult]]) -> tuple[list[int], Any]:
    """A retime that reads each dim's timings in turn (the last repeats), and the dims it was asked for."""
    calls: list[int] = []

    def retime(x: int) -> TimingResult | None:
        k = calls.count(x)
        calls.append(x)
        runs = timings[x]
        return runs[min(k, len(runs) - 1)]

    return calls, retime


def test_a_step_that_repeats_in_both_pairs_is_shown_with_the_smaller_figure():
    # The first timing read +60 %; timed again in turn, +40 % then +30 %.
    calls, retime = _scripted({64: [_point(100)], 68: [_point(140), _point(130)]})
    check = check_steps(CURVE, retime)
    assert check.step is not None and (check.step.lo, check.step.hi, check.step.first, check.step.again) == (64, 68, 0.6, 0.3)
    assert check.describe("n") == "+30% n=64->68" and check.tried == 1
    assert calls == [64, 68, 64, 68]  # the two ends in turn, twice


def test_the_largest_that_does_not_repeat_gives_way_to_the_next():
    # 64 -> 68 was noise: its second pair overlaps. 56 -> 60 repeats, a little smaller.
    calls, retime = _scripted({64: [_point(100)], 68: [_point(130), _point(101)], 56: [_point(100)], 60: [_point(118)]})
    check = check_steps(CURVE, retime)
    assert check.describe("n") == "+18% n=56->60" and check.tried == 2
    assert calls == [64, 68, 64, 68, 56, 60, 56, 60]


def test_a_pair_that_points_the_other_way_ends_the_step_at_once():
    calls, retime = _scripted({64: [_point(100)], 68: [_point(80)], 56: [_point(100)], 60: [_point(100)]})
    assert check_steps(CURVE, retime).describe("n") == "none repeated (2 tried)"
    assert calls == [64, 68, 56, 60]  # one pair each: the first said no


def test_none_that_repeats_says_how_many_were_tried_and_a_flat_curve_says_noise():
    def flat(x: int) -> TimingResult:
        return _point(100)

    assert check_steps(CURVE, flat).describe("n") == "none repeated (2 tried)"
    failed = check_steps(CURVE, lambda x: None)  # a re-timing that failed (or was flagged) shows nothing, and says so
    assert failed.step is None and failed.describe("n") == "none repeated (2 tried, 2 unclean)"
    assert check_steps([(1, _point(10)), (2, _point(10.5))], flat).describe("k") == "none beyond noise"
    assert StepCheck(None, beyond_noise=3, tried=0).describe("n") == "none repeated (0 tried)"


def _run(script: dict[int, list[list[float]]]) -> tuple[list[Any], Any]:
    timer = _Scripted(script)
    sent: list[Any] = []
    result = PlanRunner(timer, "cpu", on_measurement=sent.append, shuffle_seed=None, build=_build, gate=QualityGate(), confirm_steps=2).run(
        PLAN
    )
    return sent, result


def test_the_runner_times_a_noise_step_again_and_the_summary_does_not_show_it():
    high = [v * 1.5 for v in FAST]  # n=60 read 1.5x once, tight: a step beyond its noise, until timed again
    sent, result = _run({60: [high, FAST]})
    row = [list(c.cells) for c in _summary_table(result, PLAN).columns]
    assert row[3] == ["none repeated (2 tried)"]
    assert sorted(m.x for m in sent) == [52, 56, 60, 64, 68]  # the second timings are not sent: one row per point


def test_the_runner_shows_a_real_step_with_its_second_timing():
    slow = [v * 2 for v in FAST]  # n >= 64 twice as slow, every time: a cliff
    sent, result = _run({64: [slow], 68: [slow]})
    row = [list(c.cells) for c in _summary_table(result, PLAN).columns]
    assert row[3] == ["+100% n=60->64"]
    assert result.steps[(0, "bfloat16")].tried == 1


def test_a_curve_of_one_point_is_not_checked():
    from gac.contracts.plans import Sweep, SweepPlan

    one = SweepPlan(name="one", sweeps=[Sweep(op="gemm", dtypes=["bfloat16"], axis="n", fixed={"m": 256, "k": 256}, values=[64])])
    timer = _Scripted({})
    result = PlanRunner(timer, "cpu", shuffle_seed=None, build=_build, gate=QualityGate(), confirm_steps=2).run(one)
    assert result.steps == {} and timer.tries == {64: 1}
    assert [list(c.cells) for c in _summary_table(result, one).columns][3] == ["-"]


def test_points_stored_by_an_earlier_run_are_counted_and_said_not_judged_here():
    """A resumed profile times what an earlier run left: its summary's steps are among the new points only, and it
    says so (a step between stored points read 'none beyond noise' on a resumed curve)."""
    from gac.agent.resume import sweep_curve

    sweep = PLAN.sweeps[0]
    sent, result = _run({64: [[v * 2 for v in FAST]], 68: [[v * 2 for v in FAST]]})
    stored = {sweep_curve(sweep, sweep.dtypes[0]): {8: 1.0, 16: 1.0, 24: 1.0}}
    table = _summary_table(result, PLAN, stored)
    row = [list(c.cells) for c in table.columns]
    assert row[1] == [f"{len(sent)} (+3 stored)"] and row[3] == ["+100% n=60->64 among these"]
    assert "stored by earlier runs are counted, not in the ranges or steps" in str(table.caption)
    assert _summary_table(result, PLAN).caption is None  # nothing stored: nothing to say
