"""The importance optimum of gac.solver.tradeoff: the most kept importance within the budget, then the fastest such choice."""

from __future__ import annotations

import numpy as np

from gac.solver.mckp import solve_mckp
from gac.solver.tradeoff.closing import TooManyStates
from gac.solver.tradeoff.dp import WindowSolver, hull_vertices
from gac.solver.tradeoff.fill import fill_budget
from gac.solver.tradeoff.problem import Point, Problem, to_point


def importance_optimum(p: Problem) -> np.ndarray:
    """Max kept importance within the budget (our exact MCKP), as local picks.

    Proportional importance first tries to fill the budget exactly (gac.solver.tradeoff.fill): every total is a
    multiple of the costs' gcd, so a choice costing the largest such multiple within the room is
    optimal, and the MCKP solver's subset-sum over thousands of tied items is skipped.
    """
    f = p.f
    if p.ratio is not None and p.ratio[0] > 0:
        filled = fill_budget(f, p.room)
        if filled is not None:
            return filled
    costs = [f.cost[f.span(i)].tolist() for i in range(f.n)]
    values = [f.value[f.span(i)].tolist() for i in range(f.n)]
    sol = solve_mckp(costs, values, p.room)
    return np.asarray(sol.choice, dtype=np.int64)


OPTIMAL_STATES = 200_000  # states of the tie-break DP among importance-optimal choices before it gives up


def fastest_optimal(p: Problem, imp: np.ndarray) -> Point:
    """The fastest importance-optimal choice (then the fewest parameters), imp being one of them.

    The importance optimum's LP (kept importance per parameter, as a window DP's Lagrangian over
    [0, room] with the lost importance as the objective) fixes every candidate whose reduced cost
    passes the optimum's gap: an importance-optimal choice loses exactly the optimum's importance,
    so it spends at most that gap. A handful of items stay free; a DP over them keeps the states
    that can still lose no more than the optimum, one per (lost importance, params) Pareto pair by
    latency, and ends at the least latency among those that lose exactly that within the budget.
    Raises TooManyStates past OPTIMAL_STATES.
    """
    f = p.f
    top = np.maximum.reduceat(f.value, f.starts[:-1])
    g = int(np.gcd.reduce(f.value)) or 1
    lost = (top[f.item] - f.value) // g  # importance lost per candidate, in units of its gcd (>= 0)
    best = int(lost[f.starts[:-1] + imp].sum())
    window = WindowSolver(f.starts, f.cost, lost, hull_vertices(f.starts, f.cost, lost))
    lag = window.lagrange(0, p.room, *window.multiplier(0, p.room))
    ok = lag.rc <= lag.den * best - lag.lbn
    alive = np.add.reduceat(ok.astype(np.int64), f.starts[:-1])
    pos = np.flatnonzero(ok)
    first = pos[np.searchsorted(pos, f.starts[:-1])]
    free = np.flatnonzero(alive > 1)
    fixed = first[alive == 1]
    room = p.room - int(f.cost[fixed].sum())
    spare = best - int(lost[fixed].sum())  # what the free items may lose between them
    keeps = [np.flatnonzero(ok[f.span(i)]) + f.starts[i] for i in free.tolist()]
    low = np.array([int(lost[k].min()) for k in keeps] + [0], dtype=np.int64)
    low_rest = np.cumsum(low[::-1])[::-1]  # the least the free items k.. lose
    slack = lag.den * best - lag.lbn - int(lag.rc[fixed].sum())  # the reduced cost the free items may spend
    states = (np.zeros(1, dtype=np.int64),) * 4  # (lost, params, latency, reduced cost)
    trail: list[tuple[np.ndarray, np.ndarray]] = []
    for k, cand in enumerate(keeps):
        nl = (states[0][:, None] + lost[cand][None, :]).ravel()
        nc = (states[1][:, None] + f.cost[cand][None, :]).ravel()
        nt = (states[2][:, None] + f.lat[cand][None, :]).ravel()
        nr = (states[3][:, None] + lag.rc[cand][None, :]).ravel()
        live = np.flatnonzero((nl + low_rest[k + 1] <= spare) & (nc <= room) & (nr <= slack))
        # Same loss: keep the states no other beats on both latency and params.
        order = live[np.lexsort((nc[live], nt[live], nl[live]))]
        new_group = np.ones(len(order), dtype=bool)
        new_group[1:] = nl[order][1:] != nl[order][:-1]
        run = _group_running_min(nc[order], new_group)
        keep = np.ones(len(order), dtype=bool)
        keep[1:] = new_group[1:] | (nc[order][1:] < run[:-1])
        live = order[keep]
        if len(live) > OPTIMAL_STATES:
            raise TooManyStates(f"{len(live)} importance-optimal states at free item {k + 1} of {len(keeps)}")
        trail.append((live // len(cand), cand[live % len(cand)]))
        states = (nl[live], nc[live], nt[live], nr[live])
    done = np.flatnonzero(states[0] == spare)
    if not len(done):
        raise AssertionError("the importance optimum was lost by its own tie-break")
    s_idx = int(done[np.lexsort((states[1][done], states[2][done]))[0]])
    picks = first - f.starts[:-1]
    for i, (parent, cand) in zip(free[::-1].tolist(), trail[::-1]):
        picks[i] = int(cand[s_idx]) - int(f.starts[i])
        s_idx = int(parent[s_idx])
    p.stats.fixed_items = len(fixed)
    return to_point(p, picks)


def _group_running_min(x: np.ndarray, new_group: np.ndarray) -> np.ndarray:
    """Running minimum of x >= 0 that restarts where new_group is True (one accumulate: later groups are lifted above)."""
    if not len(x):
        return x
    gid = np.cumsum(new_group) - 1
    lift = int(x.max()) + 1
    return gid * lift - np.maximum.accumulate(gid * lift - x)
