"""Least latency keeping enough importance within the budget: the methods of gac.solver.tradeoff, in the order tried.

- importance proportional to parameters: one window DP over the cost (gac.solver.tradeoff.dp);
- the budget left out (gac.solver.tradeoff.core), which answers whenever its choice fits the budget;
- the dual bound (gac.solver.tradeoff.dual) and the closing DP (gac.solver.tradeoff.closing) against a
  target that rises from the bound to the best incumbent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gac.solver.tradeoff.closing import REL_TOL, bounded_dp
from gac.solver.tradeoff.core import CoreTooLarge, Effort, UnbudgetedSearch
from gac.solver.tradeoff.dp import WindowTooLarge
from gac.solver.tradeoff.dual import Dual, lagrangian_picks
from gac.solver.tradeoff.problem import Point, Problem, better, is_feasible, to_point


def fastest_keeping(
    p: Problem, need: int, incumbents: Sequence[np.ndarray], max_states: int | None = None, unbudgeted: bool = True
) -> Point:
    """min latency s.t. cost <= room and value >= need (offset units), lexicographic ties.

    First without the budget (fastest_unbudgeted; unbudgeted=False: the caller tried it), which
    answers whenever its choice fits; else the dual bound and the closing DP over all three totals.
    """
    if p.ratio is not None:
        try:
            return fastest_proportional(p, need, incumbents)
        except WindowTooLarge:
            pass  # the general method below
    f = p.f
    ceiling = min((int(f.lat[f.starts[:-1] + q].sum()) for q in incumbents if is_feasible(p, q, need)), default=None)
    if ceiling is not None and unbudgeted:
        free = fastest_unbudgeted(p, need, ceiling).exact
        if free is not None and free.cost - f.base_cost <= p.room:
            return free  # the best choice without the budget keeps within it: the best with it
    dual = Dual(f, p.hulls, p.room, need)
    bound, lam, mu = dual.solve()
    p.stats.bound = bound + f.base_lat
    inc: Point | None = None
    inc_picks: np.ndarray | None = None
    for picks in [*incumbents, lagrangian_picks(p, dual, lam, mu)]:
        if is_feasible(p, picks, need):
            pt = to_point(p, picks)
            if better(pt, inc):
                inc, inc_picks = pt, picks
    if inc is None or inc_picks is None:
        raise AssertionError("no feasible incumbent: the caller must pass the importance optimum")
    inc_lat = inc.latency - f.base_lat
    tol = REL_TOL * max(1.0, abs(bound), float(inc_lat)) + 1e-6
    delta = max(1.0, (inc_lat - bound) / 1024.0)
    rounds = 0
    while True:
        rounds += 1
        target = min(float(inc_lat), bound + delta)
        found = bounded_dp(p, dual, lam, mu, need, target + tol, max_states)
        if found is not None:
            pt = to_point(p, found)
            if pt.latency - f.base_lat <= target + tol or target >= inc_lat:
                p.stats.rounds = rounds
                return pt if better(pt, inc) else inc
        if target >= inc_lat:  # cannot happen: the incumbent survives every prune at this target
            p.stats.rounds = rounds
            return inc
        delta *= 16.0


@dataclass
class Unbudgeted:
    """What fastest_unbudgeted found: the answer without the budget, and the fastest real choice met."""

    exact: Point | None  # the lexicographic best keeping need with the budget left out (None: not reached)
    seen: Point | None  # the fastest choice keeping need that any round returned (an incumbent)
    too_large: bool = False  # the core DP outgrew its cap: near-tied importance, no exact DP will be small
    above: int = -1  # offset latency below which no choice keeps need (budget left out): a proven bound


def fastest_unbudgeted(p: Problem, need: int, ceiling: int, effort: Effort | None = None) -> Unbudgeted:
    """Least latency keeping value >= need with the budget left out (lexicographic ties).

    gac.solver.tradeoff.core on the Lagrangian of the importance constraint (a WindowSolver over
    importance instead of cost). The target starts at the bound and doubles its slack up to
    the ceiling, the latency of a choice keeping need, where success is certain; a round that
    returns a choice above its target still gives a real choice, which lowers the ceiling. Once
    the doubled slack reaches half the ceiling's, the next round goes to the ceiling itself: a
    round costs about its slack, so that one ends the search for at most twice the round it replaces.
    When the core DP outgrows its effort (quick by default; near-tied importance), exact is None.
    """
    f = p.f
    w = p.value_window
    top = int(f.value[f.starts[1:] - 1].sum())
    if need > top:
        return Unbudgeted(None, None)
    lag = w.lagrange(need, top, *w.multiplier(need, top))
    if not lag.safe:
        return Unbudgeted(None, None)
    bound = lag.bound
    p.stats.bound = float(bound + f.base_lat)
    proven = bound
    search = UnbudgetedSearch(f.starts, f.item, f.value, f.lat, f.cost, lag.rc, -lag.num, w.scale, effort)
    extra = 1  # doubling from one unit: the small rounds cost little, the last one at most twice the gap
    target = min(ceiling, bound)
    seen: Point | None = None
    rounds = 0
    while True:
        rounds += 1
        try:
            pos = search.best(lag.den * target - lag.lbn, need, target)
        except CoreTooLarge:
            return Unbudgeted(None, seen, too_large=True, above=proven)
        if pos is not None:
            pt = to_point(p, pos - f.starts[:-1])
            if pt.latency - f.base_lat <= target:
                p.stats.rounds = rounds
                return Unbudgeted(pt, pt, above=pt.latency - f.base_lat)  # every choice at or below the target was in reach: exact
            if target >= ceiling:
                raise AssertionError("the unbudgeted search lost a choice at its ceiling")
            seen = pt if better(pt, seen) else seen
            ceiling = min(ceiling, pt.latency - f.base_lat)  # a real choice: the search ends there at the latest
        elif target >= ceiling:
            return Unbudgeted(None, seen, above=proven)
        proven = target + 1  # the round saw every choice at or below the target, and none kept need
        target = min(ceiling, bound + extra)
        if 2 * (target - bound) >= ceiling - bound:
            target = ceiling
        extra *= 2


def fastest_proportional(p: Problem, need: int, incumbents: Sequence[np.ndarray]) -> Point:
    """fastest_keeping when value = W / U * cost: least latency with cost in [ceil(need U / W), room] (gac.solver.tradeoff.dp)."""
    f = p.f
    w, u = p.ratio or (0, 1)
    lo = -((-need * u) // w) if w > 0 else 0  # cost * W >= need * U
    feasible = [q for q in incumbents if is_feasible(p, q, need)]
    if not feasible:
        raise AssertionError("no feasible incumbent: the caller must pass the importance optimum")
    ceiling = min(int(f.lat[f.starts[:-1] + q].sum()) for q in feasible)
    ans = p.window.solve(lo, p.room, ceiling, prefer_cost=w > 0)
    if ans is None:  # cannot happen: the incumbent lies in the window
        raise AssertionError("the window DP lost the incumbent")
    p.stats.fixed_items = ans.fixed
    p.stats.max_states = max(p.stats.max_states, ans.cells)
    p.stats.rounds = ans.rounds
    p.stats.bound = float(ans.bound + f.base_lat)
    return to_point(p, ans.picks)
