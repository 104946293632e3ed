"""benchmarks/summary_steps.py: the step each way from one run's outcomes (the timings scripted)."""

from __future__ import annotations

from benchmarks.summary_steps import checked_steps, raw_steps
from gac.agent.quality import QualityGate
from gac.agent.runner import PlanRunner
from tests.agent.test_quality import FAST, PLAN, _build, _Scripted


def test_raw_and_checked_steps_of_one_run():
    high = [v * 1.5 for v in FAST]  # n=60 reads 1.5x once: a raw step, gone when timed again
    result = PlanRunner(_Scripted({60: [high, FAST]}), "cpu", shuffle_seed=None, build=_build, gate=QualityGate(), confirm_steps=2).run(
        PLAN
    )
    assert raw_steps(result, PLAN) == {0: "+50% 56->60"}
    assert checked_steps(result, PLAN) == {0: "none repeated (2 tried)"}
