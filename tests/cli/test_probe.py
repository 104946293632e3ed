"""The probe of `gac align --profile-missing`: how many points it times for the estimate, and which."""

from __future__ import annotations

from gac.agent.timing import POINTS_PER_ROUND
from gac.commands.profile_missing import PROBE_MAX, PROBE_MIN_ROUNDS, PROBE_SECONDS, duration, points_plan, probe_order, probe_size
from gac.contracts.plans import plan_for_points


def test_the_probe_takes_about_its_seconds_in_whole_rounds():
    per_round = POINTS_PER_ROUND  # the GPU timer's
    assert probe_size(PROBE_SECONDS / 100, 10_000, per_round) == 104  # 100 points' worth, in whole rounds of 8
    assert probe_size(PROBE_SECONDS / 30, 10_000, 1) == 30  # a CPU times one point a round


def test_the_probe_is_bounded_and_leaves_points_to_estimate():
    assert probe_size(1e-4, 10_000, 8) == PROBE_MAX  # a fast machine: no more than the cap
    assert probe_size(0.0, 10_000, 1) == PROBE_MAX
    # A slow one (or a slow warm-up): still enough rounds that one slow round does not set the rate.
    assert probe_size(60.0, 10_000, 8) == PROBE_MIN_ROUNDS * 8
    assert probe_size(60.0, 10_000, 1) == PROBE_MIN_ROUNDS
    assert probe_size(1e-4, 20, 8) == 5  # a small plan: a quarter of it, the rest stays the main run's
    assert probe_size(1e-4, 2, 8) == 1


def test_the_probe_and_the_rest_cover_the_plan_once():
    points = [("gemm", "float16", {"m": 1024, "k": 4096, "n": n}, "n") for n in range(1000, 1100)]
    plan = plan_for_points("missing", points)
    order = probe_order(plan)
    assert order == probe_order(plan)  # seeded: the same command probes the same points
    assert sorted(p[2]["n"] for p in order) == list(range(1000, 1100))
    assert [p[2]["n"] for p in order[:10]] != list(range(1000, 1010))  # drawn across the plan, not its first dims
    parts = [points_plan(plan, order[:8]), points_plan(plan, order[8:40]), points_plan(plan, order[40:])]
    assert [p.n_points() for p in parts] == [8, 32, 60]
    assert all(p.name == plan.name and p.timing == plan.timing for p in parts)


def test_estimates_read_in_the_unit_that_suits_them():
    # An 8B model's estimate on a platform with nothing measured: hours, not 24579 s.
    assert [duration(s) for s in (45, 119, 450, 7199, 24579)] == ["45 s", "119 s", "7.5 min", "120.0 min", "6.8 h"]
