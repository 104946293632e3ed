"""The two-resource tradeoff solver against brute force, a planted staircase, and CP-SAT."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gac.solver.crosscheck import crosscheck_point
from gac.solver.mckp import InfeasibleBudget
from gac.solver.tradeoff import EXACT_SECONDS, ImportanceOutOfReach, Tradeoff, TradeoffItem


def _all_points(items, budget):
    """(latency, importance, params) of every choice within the budget."""
    out = []
    for ch in itertools.product(*(range(len(it.dims)) for it in items)):
        c = sum(it.unit * it.dims[j] for it, j in zip(items, ch))
        if c <= budget:
            v = sum(it.worth * it.dims[j] for it, j in zip(items, ch))
            out.append((sum(it.latency[j] for it, j in zip(items, ch)), v, c))
    return out


def _best_for(points, want):
    """Least latency keeping `want`, ties: more importance, then fewer params."""
    ok = [p for p in points if p[1] >= want]
    return min(ok, key=lambda p: (p[0], -p[1], p[2])) if ok else None


def _pareto(points):
    out = []
    for p in sorted(points, key=lambda p: (p[0], -p[1], p[2])):
        if not out or p[1] > out[-1][1]:
            out.append(p)
    return [(p[0], p[1]) for p in out]


@st.composite
def instances(draw):
    n = draw(st.integers(1, 4))
    items = []
    for _ in range(n):
        dims = sorted(draw(st.sets(st.integers(1, 30), min_size=1, max_size=4)))
        slope = draw(st.integers(0, 3))
        lat = [draw(st.integers(0, 40)) + slope * d for d in dims]
        items.append(TradeoffItem(draw(st.sampled_from([1, 3, 5])), draw(st.integers(0, 9)), tuple(dims), tuple(lat)))
    lo = sum(it.unit * min(it.dims) for it in items)
    hi = sum(it.unit * max(it.dims) for it in items)
    return items, draw(st.integers(lo, hi + 2))


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(instances())
def test_frontier_is_exactly_the_pareto_set(inst):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    got = tr.frontier(points=10**6)
    assert all(p.cost <= budget for p in got)
    expected = _pareto(pts)
    pairs = [(p.latency, p.value) for p in got]
    assert set(pairs) <= set(expected)  # none dominated
    # Every Pareto point from the fast supported end up to the importance optimum is found.
    assert pairs == [e for e in expected if e[0] >= pairs[0][0]]
    assert pairs[-1] == expected[-1]


@SETTINGS
@given(instances(), st.lists(st.integers(-5, 400), min_size=1, max_size=5))
def test_fastest_matches_brute_force_with_tie_break(inst, wants):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    for want in wants:
        expected = _best_for(pts, want)
        if expected is None:
            with pytest.raises(ImportanceOutOfReach):
                tr.fastest(want)
            continue
        got = tr.fastest(want)
        assert got.optimal and got.gap == 0.0
        assert (got.point.latency, got.point.value, got.point.cost) == expected
        assert got.point.cost <= budget


@SETTINGS
@given(instances())
def test_epsilon_zero_keeps_the_importance_optimum(inst):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    top = max(p[1] for p in pts)
    assert tr.max_value == top
    got = tr.fastest_within(0.0)
    assert got.point.value == top
    assert (got.point.latency, got.point.value, got.point.cost) == _best_for(pts, top)


def test_infeasible_budget_raises():
    with pytest.raises(InfeasibleBudget):
        Tradeoff([TradeoffItem(2, 1, (3, 4), (1, 1))], 5)


def _staircase_item(unit, dims, period=8):
    """Flat steps: latency jumps every `period` dims and stays put inside a step; importance is proportional to params."""
    return TradeoffItem(unit, unit, tuple(dims), tuple(100 * (-(-d // period)) for d in dims))


def test_planted_staircase_picks_step_tops():
    items = [_staircase_item(1, range(8, 31)), _staircase_item(2, range(8, 27)), _staircase_item(1, range(8, 25))]
    budget = 16 + 2 * 16 + 16  # reachable with step tops only
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    for pt in (tr.importance_optimum, tr.fastest_within(0.25).point, tr.fastest_within(0.5).point):
        assert (pt.latency, pt.value, pt.cost) == _best_for(pts, pt.value)
        # Inside a flat step the top keeps more importance at the same latency: only tops are chosen.
        assert all(it.dims[j] % 8 == 0 for it, j in zip(items, pt.choice)), pt


def _sample_instance(seed):
    import random

    rng = random.Random(seed)
    items = []
    for _ in range(8):
        lo = rng.randint(8, 20)
        dims = tuple(range(lo, lo + rng.randint(10, 24)))
        unit = rng.choice([3, 5, 8])
        items.append(TradeoffItem(unit, unit * rng.randint(1, 9), dims, tuple(unit * (4 * (-(-d // 4)) + rng.randint(0, 2)) for d in dims)))
    budget = int(0.8 * sum(it.unit * max(it.dims) for it in items))
    return items, budget


@pytest.mark.parametrize("backend", ["cp-sat", "scip"])
@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_frontier_points_agree_with_ortools(seed, backend):
    pytest.importorskip("ortools")
    items, budget = _sample_instance(seed)
    tr = Tradeoff(items, budget)
    front = tr.frontier(points=20)
    for pt in [front[0], front[len(front) // 2], front[-1]]:
        agrees, theirs, status, _ = crosscheck_point(items, budget, pt, time_limit_s=30.0, workers=1, backend=backend)
        assert status == "OPTIMAL", status
        assert agrees, (pt.latency, theirs)


@st.composite
def uniform_instances(draw):
    """Importance proportional to params (every item's worth / unit the same): the window-DP path."""
    n = draw(st.integers(1, 5))
    ratio = draw(st.integers(0, 4))
    period = draw(st.sampled_from([1, 3, 4]))
    items = []
    for _ in range(n):
        unit = draw(st.sampled_from([2, 3, 4, 6]))
        dims = sorted(draw(st.sets(st.integers(1, 24), min_size=1, max_size=5)))
        noise = [draw(st.integers(0, 3)) for _ in dims]
        lat = [unit * (-(-d // period)) * period + e for d, e in zip(dims, noise)]  # staircase + rounding noise
        items.append(TradeoffItem(unit, ratio * unit, tuple(dims), tuple(lat)))
    lo = sum(it.unit * min(it.dims) for it in items)
    hi = sum(it.unit * max(it.dims) for it in items)
    return items, draw(st.integers(lo, hi + 2))


@SETTINGS
@given(uniform_instances())
def test_uniform_frontier_is_exactly_the_pareto_set(inst):
    items, budget = inst
    tr = Tradeoff(items, budget)
    assert tr._p.ratio is not None  # the proportional path is the one under test
    pts = _all_points(items, budget)
    got = tr.frontier(points=10**6)
    assert all(p.cost <= budget for p in got)
    pairs = [(p.latency, p.value) for p in got]
    assert pairs == _pareto(pts)  # from the fastest choice to the importance optimum, every one


@SETTINGS
@given(uniform_instances(), st.lists(st.integers(-5, 600), min_size=1, max_size=5))
def test_uniform_fastest_matches_brute_force(inst, wants):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    for want in wants:
        expected = _best_for(pts, want)
        if expected is None:
            with pytest.raises(ImportanceOutOfReach):
                tr.fastest(want)
            continue
        got = tr.fastest(want)
        assert got.optimal and got.gap == 0.0 and got.lower_bound == got.point.latency
        assert (got.point.latency, got.point.value, got.point.cost) == expected
        assert got.point.cost <= budget


@SETTINGS
@given(uniform_instances())
def test_uniform_epsilon_zero_is_the_importance_optimum(inst):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    top = max(p[1] for p in pts)
    assert tr.max_value == top
    got = tr.fastest_within(0.0)
    assert got.optimal and got.point.value == top and got.point.cost <= budget
    assert (got.point.latency, got.point.value, got.point.cost) == _best_for(pts, top)
    assert (tr.importance_optimum.latency, tr.importance_optimum.value) == (got.point.latency, top)


def test_uniform_staircase_many_items_matches_the_general_dp():
    """A bigger proportional instance: the window DP and the general closing DP agree point by point."""
    import random

    from gac.solver.tradeoff.fastest import fastest_keeping
    from gac.solver.tradeoff.problem import Problem

    rng = random.Random(7)
    items = []
    for _ in range(12):
        unit = rng.choice([5, 8, 18])
        lo = rng.randint(20, 60)
        dims = tuple(range(lo, lo + rng.randint(8, 20)))
        items.append(TradeoffItem(unit, 3 * unit, dims, tuple(round(unit * (4 * (-(-d // 4)) * 0.9 + 0.1 * d)) for d in dims)))
    budget = int(0.9 * sum(it.unit * max(it.dims) for it in items))
    tr = Tradeoff(items, budget)
    assert tr._p.ratio == (3, 1)
    top = tr.max_value
    for eps in (0.0, 0.01, 0.05, 0.2):
        want = tr.value_for(eps)
        got = tr.fastest(want).point
        p = tr._p
        general = Problem(p.f, p.hulls, p.room, p.on_hull)  # ratio None: the general method
        ref = fastest_keeping(general, want - p.f.base_value, [tr._imp_picks], None)
        assert (got.latency, got.value, got.cost) == (ref.latency, ref.value, ref.cost)
        assert got.value >= want and got.cost <= budget and got.value <= top


@st.composite
def near_tied_instances(draw):
    """Importance per param within 0.3 % between items on staircase latency: the family whose LP gap is integral."""
    n = draw(st.integers(2, 5))
    items = []
    for _ in range(n):
        unit = draw(st.sampled_from([2, 3, 5]))
        dims = sorted(draw(st.sets(st.integers(1, 24), min_size=1, max_size=5)))
        lat = [unit * (-(-d // 4)) * 4 + draw(st.integers(0, 1)) for d in dims]
        items.append(TradeoffItem(unit, unit * draw(st.integers(1000, 1003)), tuple(dims), tuple(lat)))
    lo = sum(it.unit * min(it.dims) for it in items)
    hi = sum(it.unit * max(it.dims) for it in items)
    return items, draw(st.integers(lo, hi + 2))


@SETTINGS
@given(near_tied_instances(), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=4))
def test_near_tied_fastest_matches_brute_force(inst, epsilons):
    items, budget = inst
    pts = _all_points(items, budget)
    tr = Tradeoff(items, budget)
    for eps in epsilons:
        want = tr.value_for(eps)
        got = tr.fastest(want)
        assert got.optimal
        assert (got.point.latency, got.point.value, got.point.cost) == _best_for(pts, want)


@SETTINGS
@given(near_tied_instances(), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=4), st.sampled_from([0.0, 1e-9]))
def test_capped_search_reports_an_honest_gap(inst, epsilons, exact_seconds):
    """With every exact DP capped to nothing and no time (or none at all) for the exhaustive search, the
    fallback's point is feasible, its bound valid, and a claimed optimum exact."""
    import gac.solver.tradeoff.api as tt
    import gac.solver.tradeoff.core as tc

    items, budget = inst
    pts = _all_points(items, budget)
    with mock.patch.object(tc, "CORE_STATES", 1), mock.patch.object(tt, "MAX_STATES", 1):
        _check_honest(items, budget, pts, epsilons, exact_seconds)


@SETTINGS
@given(near_tied_instances(), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=4))
def test_search_out_of_work_keeps_its_proven_rounds(inst, epsilons):
    """The unbudgeted search stops mid-way (a tiny work budget): the rounds it finished raise the bound, validly."""
    items, budget = inst
    with _quick_searches_out_of_work():
        _check_honest(items, budget, _all_points(items, budget), epsilons, exact_seconds=0.0)


@SETTINGS
@given(near_tied_instances(), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=4))
def test_exhaustive_search_proves_what_the_quick_one_cannot(inst, epsilons):
    """The quick searches out of work at once: the exhaustive search still ends at the exact optimum wherever
    the budget does not bind (where it does, the point stays honest)."""
    items, budget = inst
    with _quick_searches_out_of_work():
        _check_honest(
            items, budget, _all_points(items, budget), epsilons, exact_seconds=EXACT_SECONDS, unbudgeted=_all_points(items, 10**9)
        )


@contextmanager
def _quick_searches_out_of_work():
    """The quick unbudgeted search with (almost) no work and the closing DP with one state: both give up at once."""
    import gac.solver.tradeoff.api as tt
    import gac.solver.tradeoff.core as tc

    with mock.patch.object(tc, "WORK_PER_ITEM", 2), mock.patch.object(tc, "WORK_FLOOR", 0), mock.patch.object(tt, "MAX_STATES", 1):
        yield


def _check_honest(items, budget, pts, epsilons, exact_seconds, unbudgeted=None):
    """The point keeps what was asked within the budget, its lower bound is valid, and a claimed optimum is exact.

    unbudgeted: every choice with the budget left out; where its best is the budgeted best (the budget does
    not bind), the point must be proven optimal.
    """
    tr = Tradeoff(items, budget, exact_seconds=exact_seconds)
    for eps in epsilons:
        want = tr.value_for(eps)
        got = tr.fastest(want)
        best = _best_for(pts, want)
        assert got.point.value >= want and got.point.cost <= budget
        assert got.lower_bound <= best[0] <= got.point.latency
        if unbudgeted is not None and _best_for(unbudgeted, want) == best:
            assert got.optimal
        if got.optimal:
            assert (got.point.latency, got.point.value, got.point.cost) == best
