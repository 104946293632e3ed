"""Baselines: the paper's quantized DP (and its budget violation), rounding rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gac.solver.baselines import paper_dp, repair, round_down, round_nearest
from gac.solver.mckp import solve_mckp


def test_paper_dp_can_exceed_the_budget_before_repair():
    # u = 8: costs 12 and 20 floor to 1 and 2 quanta, so the DP thinks 12 + 20 = 32 fits 3 quanta (B = 31).
    costs = [[4, 12], [12, 20]]
    values = [[0.0, 8.0], [0.0, 8.0]]
    res = paper_dp(costs, values, budget=31, u=8)
    assert res.raw_cost == 32 > 31
    assert res.cost <= 31  # repaired
    exact = solve_mckp(costs, [[0, 8], [0, 8]], 31)
    assert exact.cost <= 31 and exact.value == 8


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_paper_dp_is_exact_when_u_divides_every_cost(data):
    u = data.draw(st.sampled_from([1, 4, 8]))
    n = data.draw(st.integers(1, 5))
    costs = [data.draw(st.lists(st.integers(0, 12).map(lambda q: q * u), min_size=1, max_size=4)) for _ in range(n)]
    values = [[data.draw(st.integers(-20, 40)) for _ in row] for row in costs]
    lo, hi = sum(min(c) for c in costs), sum(max(c) for c in costs)
    budget = data.draw(st.integers(lo, hi))
    res = paper_dp(costs, [[float(v) for v in row] for row in values], budget, u)
    ours = solve_mckp(costs, values, budget)
    assert res.raw_cost <= budget
    assert sum(values[i][j] for i, j in enumerate(res.picks)) == ours.value


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=4), min_size=1, max_size=5), st.data())
def test_repair_reaches_the_budget(costs, data):
    values = [[float(c) for c in row] for row in costs]
    picks = [data.draw(st.integers(0, len(row) - 1)) for row in costs]
    budget = data.draw(st.integers(sum(min(r) for r in costs), sum(max(r) for r in costs)))
    fixed = repair(costs, values, budget, picks)
    assert sum(costs[i][j] for i, j in enumerate(fixed)) <= budget


def test_rounding():
    assert round_nearest(1510.4, 8, 4096) == 1512 and round_down(1510.4, 8, 4096) == 1504
    assert round_nearest(1508.0, 8, 4096) == 1512  # halves go up
    assert round_nearest(3.0, 8, 4096) == 8 and round_down(3.0, 8, 4096) == 8  # at least one step
    assert round_nearest(4095.0, 8, 4095) == 4088  # never above the original


def test_a_paper_dp_its_rounding_puts_over_the_budget_is_skipped_saying_why_in_parameters():
    from gac.contracts.manifest import Manifest
    from gac.solver.align import AlignOptions, align

    w = {"name": "a", "kind": "lowrank", "out_features": 1, "in_features": 1, "dim": 1, "importance": 1.0}
    res = align(Manifest.model_validate({"model": "t", "budget": {"params": 2}, "weights": [w]}), None, AlignOptions(cross_check="none"))
    said = [x for x in res.warnings if x.startswith("paper-dp-64 baseline")]
    assert said == ["paper-dp-64 baseline skipped: in its units of 8 parameters the budget is 0, below the 2 its smallest dims take"]
