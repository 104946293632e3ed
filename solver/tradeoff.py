"""Speed against importance under one parameter budget: the exact two-resource knapsack.

Each item (a weight, or a group of weights sharing one dim) picks one candidate
dim d. Its parameters, unit * d, count against a hard budget; its kept importance,
worth * d, and its predicted latency t(d) are what gets traded:

- fastest(min_value): the least total latency whose kept importance is at least
  min_value (ties: more importance, then fewer parameters);
- frontier(): Pareto-optimal (latency, importance) points, each one exact.

Integers throughout (latency in integer units chosen by the caller), so every
answer can be checked by equality against brute force and OR-Tools.

Method. The Lagrangian dual over both side constraints (budget and importance)
gives a lower bound L on the latency. Any solution with latency <= T satisfies
sum_i r_i(d_i) <= T - L, where r_i >= 0 is a candidate's reduced cost; that fixes
most items outright. A DP over the rest keeps (params, importance, latency)
states, pruned by the same bound, by what the remaining items can still reach,
and by dominance. It prunes against an optimistic target T just above L: if it
finds a solution at or below T, nothing better was pruned; otherwise T rises
geometrically, ending at a known feasible solution, where success is certain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from solver.mckp import InfeasibleBudget, solve_mckp
from solver.tradeoff_core import CoreTooLarge, UnbudgetedSearch
from solver.tradeoff_dp import WindowSolver, WindowTooLarge, hull_vertices
from solver.tradeoff_fill import fill_budget

_REL_TOL = 1e-9  # float slack on bounds: pruning only ever keeps more than it must


class _TooManyStates(RuntimeError):
    """The closing DP passed its state cap: the caller reports a proven gap instead."""


class ImportanceOutOfReach(ValueError):
    """No choice within the budget keeps the importance asked for."""

    def __init__(self, wanted: int, best: int) -> None:
        super().__init__(f"kept importance {wanted} is out of reach under the budget (at most {best})")
        self.wanted = wanted
        self.best = best


@dataclass(frozen=True)
class TradeoffItem:
    unit: int  # parameters per unit of d
    worth: int  # kept importance per unit of d (integer-scaled)
    dims: tuple[int, ...]
    latency: tuple[int, ...]  # integer latency units, one per dim

    def __post_init__(self) -> None:
        if not self.dims or len(self.dims) != len(self.latency):
            raise ValueError("an item needs at least one dim and one latency per dim")
        if self.unit <= 0 or self.worth < 0 or min(self.dims) < 0:
            raise ValueError("unit must be positive, worth and dims non-negative")


@dataclass(frozen=True)
class Point:
    """One solution: the chosen index per item and its totals."""

    choice: tuple[int, ...]
    latency: int
    value: int
    cost: int


@dataclass
class TradeoffStats:
    fixed_items: int = 0
    max_states: int = 0
    rounds: int = 0  # target raises until the DP proved its answer
    bound: float = 0.0  # the Lagrangian lower bound on latency
    optimum_tie_proven: bool = True  # False: the importance optimum is not proven the fastest of its ties


@dataclass
class _Flat:
    """All candidates in flat arrays, item by item, each item sorted by dim and offset to its smallest."""

    starts: np.ndarray
    item: np.ndarray  # item index per position
    orig: np.ndarray  # index into the caller's dims of that item
    dd: np.ndarray  # d - smallest d of the item
    cost: np.ndarray  # unit * dd
    value: np.ndarray  # worth * dd
    lat: np.ndarray  # latency - smallest latency of the item
    unit: np.ndarray
    worth: np.ndarray
    base_cost: int
    base_value: int
    base_lat: int

    @property
    def n(self) -> int:
        return len(self.starts) - 1

    def span(self, i: int) -> slice:
        return slice(int(self.starts[i]), int(self.starts[i + 1]))


def _flatten(items: Sequence[TradeoffItem]) -> _Flat:
    lens = np.array([len(it.dims) for it in items], dtype=np.int64)
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    item = np.repeat(np.arange(len(items)), lens)
    dims = np.concatenate([np.asarray(it.dims, dtype=np.int64) for it in items])
    lat = np.concatenate([np.asarray(it.latency, dtype=np.int64) for it in items])
    local = np.arange(len(dims)) - starts[item]
    order = np.lexsort((local, lat, dims, item))  # per item by dim; equal dims: the faster first
    dims, lat, local = dims[order], lat[order], local[order]
    # An equal dim twice: the slower copy can never be better.
    keep = np.ones(len(dims), dtype=bool)
    keep[1:] = (dims[1:] != dims[:-1]) | (item[1:] != item[:-1])
    dims, lat, local, item = dims[keep], lat[keep], local[keep], item[keep]
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.bincount(item, minlength=len(items)), out=starts[1:])
    unit = np.array([it.unit for it in items], dtype=np.int64)
    worth = np.array([it.worth for it in items], dtype=np.int64)
    d0 = dims[starts[:-1]]
    t0 = np.minimum.reduceat(lat, starts[:-1])
    dd = dims - d0[item]
    return _Flat(
        starts=starts, item=item, orig=local, dd=dd, cost=unit[item] * dd, value=worth[item] * dd,
        lat=lat - t0[item], unit=unit, worth=worth,
        base_cost=int(sum(int(u) * int(d) for u, d in zip(unit, d0))),
        base_value=int(sum(int(w) * int(d) for w, d in zip(worth, d0))),
        base_lat=int(sum(int(t) for t in t0)),
    )


def _segmented_min(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.minimum.reduceat(x, starts[:-1])


@dataclass
class _Hulls:
    """Lower convex hull segments of each item's (d, latency) points, for the dual."""

    item: np.ndarray
    slope: np.ndarray  # latency per unit of d along the segment (increasing within an item)
    width: np.ndarray  # d span of the segment


def _hulls(f: _Flat, on_hull: np.ndarray) -> _Hulls:
    """The segments between consecutive lower-hull vertices (on_hull, from tradeoff_dp.hull_vertices) of each item."""
    vert = np.flatnonzero(on_hull)
    same = f.item[vert[1:]] == f.item[vert[:-1]]
    a, b = vert[:-1][same], vert[1:][same]
    width = f.dd[b] - f.dd[a]
    return _Hulls(f.item[a], (f.lat[b] - f.lat[a]) / width, width)


class _Dual:
    """L(lam, mu) = sum_i min_j (t + lam c - mu v) - lam R + mu W: a lower bound on the latency for any lam, mu >= 0."""

    def __init__(self, f: _Flat, hulls: _Hulls, room: int, need: int) -> None:
        self.f, self.h, self.room, self.need = f, hulls, room, need
        self._cf = f.cost.astype(np.float64)
        self._vf = f.value.astype(np.float64)
        self._tf = f.lat.astype(np.float64)

    def reduced(self, lam: float, mu: float) -> np.ndarray:
        return self._tf + lam * self._cf - mu * self._vf

    def value(self, lam: float, mu: float) -> tuple[float, int]:
        """(L, kept importance of the per-item argmin): the second is the subgradient's part."""
        r = self.reduced(lam, mu)
        best = _segmented_min(r, self.f.starts)
        total = float(best.sum()) - lam * self.room + mu * self.need
        at = r <= best[self.f.item]
        # The importance at the argmin (the largest among ties, so mu stops rising once W is met).
        v = np.where(at, self.f.value, -1)
        return total, int(np.maximum.reduceat(v, self.f.starts[:-1]).sum())

    def best_lam(self, mu: float) -> float:
        """The budget multiplier maximizing L for this mu (fractional MCKP over hull segments)."""
        h, f = self.h, self.f
        if len(h.slope) == 0:
            return 0.0
        per_param = (h.slope - mu * f.worth[h.item]) / f.unit[h.item]
        gain = per_param < 0
        if not gain.any():
            return 0.0
        order = np.argsort(per_param[gain], kind="stable")
        spend = np.cumsum((h.width[gain] * f.unit[h.item[gain]])[order])
        k = int(np.searchsorted(spend, self.room, side="right"))
        return 0.0 if k >= len(spend) else float(-per_param[gain][order][k])

    def solve(self) -> tuple[float, float, float]:
        """(bound, lam, mu): mu by bisection on the subgradient need - importance(argmin)."""
        if self.need <= 0:
            lam = self.best_lam(0.0)
            return self.value(lam, 0.0)[0], lam, 0.0
        best = (-math.inf, 0.0, 0.0)

        def at(mu: float) -> int:
            nonlocal best
            lam = self.best_lam(mu)
            bound, kept = self.value(lam, mu)
            if bound > best[0]:
                best = (bound, lam, mu)
            return self.need - kept  # > 0: mu must rise

        t_span = float(self.f.lat.max()) + 1.0
        v_span = float(max(1, self.f.value.max()))
        lo, hi = 0.0, t_span / v_span
        if at(lo) <= 0:
            return best
        for _ in range(60):  # grow until the importance constraint is met at the argmin
            if at(hi) <= 0:
                break
            lo, hi = hi, hi * 4.0
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if at(mid) > 0:
                lo = mid
            else:
                hi = mid
        return best


def _value_caps(f: _Flat, order: np.ndarray, ratios: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Upper bounds on the importance items order[k:] can add within room r: min over ratio q of q r + S_k(q).

    S_k(q) = sum over those items of max(0, worth - q unit) * top dd; q = 0 gives the sum of their tops.
    """
    top_dd = f.dd[f.starts[1:] - 1].astype(np.float64)
    qs = np.asarray(ratios, dtype=np.float64)
    gains = np.maximum(0.0, f.worth[order][None, :] - qs[:, None] * f.unit[order][None, :]) * top_dd[order][None, :]
    suffix = np.zeros((len(qs), len(order) + 1))
    suffix[:, :-1] = np.cumsum(gains[:, ::-1], axis=1)[:, ::-1]
    return qs, suffix


@dataclass
class _Problem:
    f: _Flat
    hulls: _Hulls
    room: int  # budget minus every item's smallest cost
    on_hull: np.ndarray  # per candidate: a vertex of its item's lower convex hull of (cost, latency)
    stats: TradeoffStats = field(default_factory=TradeoffStats)
    # (W, U) when every item keeps W / U importance per parameter (value = W / U * cost exactly), else None.
    ratio: tuple[int, int] | None = None
    _window: WindowSolver | None = None
    _value_window: WindowSolver | None = None

    @property
    def window(self) -> WindowSolver:
        """The window DP over (cost, latency): the proportional case and the weighted solves' hulls."""
        if self._window is None:
            self._window = WindowSolver(self.f.starts, self.f.cost, self.f.lat, self.on_hull)
        return self._window

    @property
    def value_window(self) -> WindowSolver:
        """The same over (importance, latency): the Lagrangian of the importance constraint alone."""
        if self._value_window is None:
            f = self.f
            self._value_window = WindowSolver(f.starts, f.value, f.lat, hull_vertices(f.starts, f.value, f.lat))
        return self._value_window


def _proportional(f: _Flat) -> tuple[int, int] | None:
    """(W, U) in lowest terms when worth_i / unit_i == W / U for every item with a choice to make."""
    multi = np.flatnonzero(np.diff(f.starts) > 1)
    if len(multi) == 0:
        return 0, 1
    w0, u0 = int(f.worth[multi[0]]), int(f.unit[multi[0]])
    g = math.gcd(w0, u0) or 1
    w, u = w0 // g, u0 // g
    worth, unit = f.worth[multi].astype(object), f.unit[multi].astype(object)
    if all(int(x) == 0 for x in worth * u - unit * w):
        return w, u
    return None


def _prepare(items: Sequence[TradeoffItem], budget: int) -> _Problem:
    if not items:
        raise ValueError("no items")
    f = _flatten(items)
    room = budget - f.base_cost
    if room < 0:
        raise InfeasibleBudget(budget, f.base_cost)
    on_hull = hull_vertices(f.starts, f.cost, f.lat)
    return _Problem(f, _hulls(f, on_hull), room, on_hull, ratio=_proportional(f))


def _point(p: _Problem, picks: np.ndarray) -> Point:
    f = p.f
    pos = f.starts[:-1] + picks
    return Point(
        choice=tuple(int(x) for x in f.orig[pos]),
        latency=f.base_lat + int(f.lat[pos].sum()),
        value=f.base_value + int(sum(int(x) for x in f.value[pos])),
        cost=f.base_cost + int(sum(int(x) for x in f.cost[pos])),
    )


def _better(a: Point, b: Point | None) -> bool:
    """Lexicographic: less latency, then more importance, then fewer parameters."""
    return b is None or (a.latency, -a.value, a.cost) < (b.latency, -b.value, b.cost)


def _importance_optimum(p: _Problem) -> np.ndarray:
    """Max kept importance within the budget (our exact MCKP), as local picks.

    Proportional importance first tries to fill the budget exactly (solver.tradeoff_fill): every total is a
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


def _feasible(p: _Problem, picks: np.ndarray, need: int) -> bool:
    f = p.f
    pos = f.starts[:-1] + picks
    return int(f.cost[pos].sum()) <= p.room and int(sum(int(x) for x in f.value[pos])) >= need


def _lagrangian_picks(p: _Problem, dual: _Dual, lam: float, mu: float) -> np.ndarray:
    r = dual.reduced(lam, mu)
    best = _segmented_min(r, p.f.starts)
    at = np.flatnonzero(r <= best[p.f.item])
    first = at[np.searchsorted(at, p.f.starts[:-1])]
    return first - p.f.starts[:-1]


def _fastest(p: _Problem, need: int, incumbents: Sequence[np.ndarray], max_states: int | None = None,
             unbudgeted: bool = True) -> Point:
    """min latency s.t. cost <= room and value >= need (offset units), lexicographic ties.

    First without the budget (_fastest_unbudgeted; unbudgeted=False: the caller tried it), which
    answers whenever its choice fits; else the dual bound and the closing DP over all three totals.
    """
    if p.ratio is not None:
        try:
            return _fastest_proportional(p, need, incumbents)
        except WindowTooLarge:
            pass  # the general method below
    f = p.f
    ceiling = min((int(f.lat[f.starts[:-1] + q].sum()) for q in incumbents if _feasible(p, q, need)), default=None)
    if ceiling is not None and unbudgeted:
        free = _fastest_unbudgeted(p, need, ceiling).exact
        if free is not None and free.cost - f.base_cost <= p.room:
            return free  # the best choice without the budget keeps within it: the best with it
    dual = _Dual(f, p.hulls, p.room, need)
    bound, lam, mu = dual.solve()
    p.stats.bound = bound + f.base_lat
    inc: Point | None = None
    inc_picks: np.ndarray | None = None
    for picks in [*incumbents, _lagrangian_picks(p, dual, lam, mu)]:
        if _feasible(p, picks, need):
            pt = _point(p, picks)
            if _better(pt, inc):
                inc, inc_picks = pt, picks
    if inc is None or inc_picks is None:
        raise AssertionError("no feasible incumbent: the caller must pass the importance optimum")
    inc_lat = inc.latency - f.base_lat
    tol = _REL_TOL * max(1.0, abs(bound), float(inc_lat)) + 1e-6
    delta = max(1.0, (inc_lat - bound) / 1024.0)
    rounds = 0
    while True:
        rounds += 1
        target = min(float(inc_lat), bound + delta)
        found = _bounded_dp(p, dual, lam, mu, need, target + tol, max_states)
        if found is not None:
            pt = _point(p, found)
            if pt.latency - f.base_lat <= target + tol or target >= inc_lat:
                p.stats.rounds = rounds
                return pt if _better(pt, inc) else inc
        if target >= inc_lat:  # cannot happen: the incumbent survives every prune at this target
            p.stats.rounds = rounds
            return inc
        delta *= 16.0


OPTIMAL_STATES = 200_000  # states of the tie-break DP among importance-optimal choices before it gives up


def _fastest_optimal(p: _Problem, imp: np.ndarray) -> Point:
    """The fastest importance-optimal choice (then the fewest parameters), imp being one of them.

    The importance optimum's LP (kept importance per parameter, as a window DP's Lagrangian over
    [0, room] with the lost importance as the objective) fixes every candidate whose reduced cost
    passes the optimum's gap: an importance-optimal choice loses exactly the optimum's importance,
    so it spends at most that gap. A handful of items stay free; a DP over them keeps the states
    that can still lose no more than the optimum, one per (lost importance, params) Pareto pair by
    latency, and ends at the least latency among those that lose exactly that within the budget.
    Raises _TooManyStates past OPTIMAL_STATES.
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
            raise _TooManyStates(f"{len(live)} importance-optimal states at free item {k + 1} of {len(keeps)}")
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
    return _point(p, picks)


def _group_running_min(x: np.ndarray, new_group: np.ndarray) -> np.ndarray:
    """Running minimum of x >= 0 that restarts where new_group is True (one accumulate: later groups are lifted above)."""
    if not len(x):
        return x
    gid = np.cumsum(new_group) - 1
    lift = int(x.max()) + 1
    return gid * lift - np.maximum.accumulate(gid * lift - x)


@dataclass
class _Unbudgeted:
    """What _fastest_unbudgeted found: the answer without the budget, and the fastest real choice met."""

    exact: Point | None  # the lexicographic best keeping need with the budget left out (None: not reached)
    seen: Point | None  # the fastest choice keeping need that any round returned (an incumbent)
    too_large: bool = False  # the core DP outgrew its cap: near-tied importance, no exact DP will be small
    above: int = -1  # offset latency below which no choice keeps need (budget left out): a proven bound


def _fastest_unbudgeted(p: _Problem, need: int, ceiling: int) -> _Unbudgeted:
    """Least latency keeping value >= need with the budget left out (lexicographic ties).

    solver.tradeoff_core on the Lagrangian of the importance constraint (a WindowSolver over
    importance instead of cost). The target starts at the bound and doubles its slack up to
    the ceiling, the latency of a choice keeping need, where success is certain; a round that
    returns a choice above its target still gives a real choice, which lowers the ceiling.
    When the core DP grows too large (near-tied importance), exact is None.
    """
    f = p.f
    w = p.value_window
    top = int(f.value[f.starts[1:] - 1].sum())
    if need > top:
        return _Unbudgeted(None, None)
    lag = w.lagrange(need, top, *w.multiplier(need, top))
    if not lag.safe:
        return _Unbudgeted(None, None)
    bound = lag.bound
    p.stats.bound = float(bound + f.base_lat)
    proven = bound
    search = UnbudgetedSearch(f.starts, f.item, f.value, f.lat, f.cost, lag.rc, -lag.num, w.scale)
    extra = 1  # doubling from one unit: the small rounds cost little, the last one at most twice the gap
    target = min(ceiling, bound)
    seen: Point | None = None
    rounds = 0
    while True:
        rounds += 1
        try:
            pos = search.best(lag.den * target - lag.lbn, need, target)
        except CoreTooLarge:
            return _Unbudgeted(None, seen, too_large=True, above=proven)
        if pos is not None:
            pt = _point(p, pos - f.starts[:-1])
            if pt.latency - f.base_lat <= target:
                p.stats.rounds = rounds
                return _Unbudgeted(pt, pt, above=pt.latency - f.base_lat)  # every choice at or below the target was in reach: exact
            if target >= ceiling:
                raise AssertionError("the unbudgeted search lost a choice at its ceiling")
            seen = pt if _better(pt, seen) else seen
            ceiling = min(ceiling, pt.latency - f.base_lat)  # a real choice: the search ends there at the latest
        elif target >= ceiling:
            return _Unbudgeted(None, seen, above=proven)
        proven = target + 1  # the round saw every choice at or below the target, and none kept need
        target = min(ceiling, bound + extra)
        extra *= 2


def _fastest_proportional(p: _Problem, need: int, incumbents: Sequence[np.ndarray]) -> Point:
    """_fastest when value = W / U * cost: least latency with cost in [ceil(need U / W), room] (solver.tradeoff_dp)."""
    f = p.f
    w, u = p.ratio or (0, 1)
    lo = -((-need * u) // w) if w > 0 else 0  # cost * W >= need * U
    feasible = [q for q in incumbents if _feasible(p, q, need)]
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
    return _point(p, ans.picks)


def _bounded_dp(
    p: _Problem, dual: _Dual, lam: float, mu: float, need: int, target: float, state_cap: int | None = None,
    beam: bool = False,
) -> np.ndarray | None:
    """The lexicographically best solution among those with latency <= target, or None.

    beam: past state_cap, keep only the state_cap states with the least latency bound instead of
    raising; the answer is then a good feasible solution, not a proven best one.
    """
    f, stats = p.f, p.stats
    r = dual.reduced(lam, mu)
    best_r = _segmented_min(r, f.starts)
    lower = float(best_r.sum()) - lam * p.room + mu * need
    slack = target - lower
    ok = (r - best_r[f.item]) <= slack + _REL_TOL * (abs(target) + abs(lower) + 1.0)
    alive = np.add.reduceat(ok.astype(np.int64), f.starts[:-1])
    if (alive == 0).any():
        return None
    pos_ok = np.flatnonzero(ok)
    first = pos_ok[np.searchsorted(pos_ok, f.starts[:-1])]
    picks = first - f.starts[:-1]
    single = np.flatnonzero(alive == 1)
    free = np.flatnonzero(alive > 1)
    stats.fixed_items = len(single)
    room = p.room - int(f.cost[first[single]].sum())
    need_rest = need - int(sum(int(x) for x in f.value[first[single]]))
    lat_fixed = int(f.lat[first[single]].sum())
    if room < 0:
        return None
    # Few candidates first: the state set grows late.
    free = free[np.lexsort((free, alive[free]))]
    keeps = [np.flatnonzero(ok[f.span(i)]) for i in free.tolist()]
    k_items = len(free)
    # Suffix bounds over free items k..: least reduced latency, least latency, importance caps.
    rbest_free = np.array([float(r[f.span(i)][jj].min()) for i, jj in zip(free.tolist(), keeps)]) if k_items else np.zeros(0)
    tmin_free = np.array([int(f.lat[f.span(i)][jj].min()) for i, jj in zip(free.tolist(), keeps)], dtype=np.int64)
    r_rest = np.append(np.cumsum(rbest_free[::-1])[::-1], 0.0)
    t_rest = np.append(np.cumsum(tmin_free[::-1])[::-1], 0)
    # Most and least the free items k.. can still add: a state's cost below room - cmax_rest can never
    # break the budget, and its importance above need - vmin_rest always suffices, so dominance may
    # compare such states as equals on that axis (exact: every completion stays feasible).
    cmax_free = np.array([int(f.cost[f.span(i)][jj].max()) for i, jj in zip(free.tolist(), keeps)], dtype=np.int64)
    vmin_free = np.array([int(f.value[f.span(i)][jj].min()) for i, jj in zip(free.tolist(), keeps)], dtype=np.int64)
    cmax_rest = np.append(np.cumsum(cmax_free[::-1])[::-1], 0)
    vmin_rest = np.append(np.cumsum(vmin_free[::-1])[::-1], 0)
    ratios = [0.0] + _value_ratios(f, free)
    qs, v_caps = _value_caps(f, free, ratios)
    target_rest = target - lat_fixed

    sc = np.zeros(1, dtype=np.int64)
    sv = np.zeros(1, dtype=np.int64)
    st = np.zeros(1, dtype=np.int64)
    trail: list[tuple[np.ndarray, np.ndarray]] = []
    max_states = 1
    for k, i in enumerate(free.tolist()):
        jj = keeps[k]
        s = f.span(i)
        cj, vj, tj = f.cost[s][jj], f.value[s][jj], f.lat[s][jj]
        if state_cap is not None and not beam and len(sc) * len(jj) > EXPAND_FACTOR * state_cap:
            stats.max_states = max(stats.max_states, len(sc))
            raise _TooManyStates(f"{len(sc)} states x {len(jj)} candidates at free item {k + 1} of {k_items}")
        nc = (sc[None, :] + cj[:, None]).ravel()
        nv = (sv[None, :] + vj[:, None]).ravel()
        nt = (st[None, :] + tj[:, None]).ravel()
        left = room - nc
        want = need_rest - nv
        keep = left >= 0
        # The importance still needed must be reachable by the items after this one.
        cap = np.min(qs[:, None] * np.maximum(left, 0)[None, :] + v_caps[:, k + 1][:, None], axis=0)
        keep &= want <= cap + 1e-9 * (np.abs(cap) + 1.0)
        # Latency: what is spent plus the least the rest must add (two bounds) must stay within target.
        lb = np.maximum(r_rest[k + 1] - lam * left + mu * want, t_rest[k + 1])
        keep &= nt + lb <= target_rest + _REL_TOL * (abs(target_rest) + 1.0)
        idx = np.flatnonzero(keep)
        if len(idx) == 0:
            return None
        if beam and state_cap is not None and len(idx) > 4 * state_cap:
            # Heuristic only: sorting every expansion costs more than the beam is worth.
            idx = idx[np.argpartition((nt + lb)[idx], 4 * state_cap)[: 4 * state_cap]]
        c_eff = np.maximum(nc[idx], room - cmax_rest[k + 1])
        v_eff = np.minimum(nv[idx], need_rest - vmin_rest[k + 1])
        idx = idx[_undominated(nc[idx], nv[idx], nt[idx], c_eff, v_eff)]
        n_states = len(sc)
        trail.append((idx % n_states, jj[idx // n_states]))
        sc, sv, st = nc[idx], nv[idx], nt[idx]
        max_states = max(max_states, len(sc))
        if state_cap is not None and len(sc) > state_cap and beam:
            # Heuristic: keep the states whose completion bound is lowest.
            lb_kept = (nt + lb)[idx]
            best = np.argpartition(lb_kept, state_cap)[:state_cap]
            trail[-1] = (trail[-1][0][best], trail[-1][1][best])
            sc, sv, st = sc[best], sv[best], st[best]
        elif state_cap is not None and len(sc) > state_cap:
            stats.max_states = max(stats.max_states, max_states)
            raise _TooManyStates(f"{len(sc)} states after {k + 1} of {k_items} free items")
    stats.max_states = max(stats.max_states, max_states)
    ok_end = np.flatnonzero((sv >= need_rest) & (sc <= room))
    if len(ok_end) == 0:
        return None
    best = ok_end[np.lexsort((sc[ok_end], -sv[ok_end], st[ok_end]))[0]]
    if st[best] > target_rest + _REL_TOL * (abs(target_rest) + 1.0):
        return None
    out = picks.copy()
    s_idx = int(best)
    for k in range(k_items - 1, -1, -1):
        parent, cand = trail[k]
        out[int(free[k])] = int(cand[s_idx])
        s_idx = int(parent[s_idx])
    return out


def _beam_point(p: _Problem, need: int, incumbent: np.ndarray) -> Point:
    """A good feasible point (no proof): the closing DP at the incumbent's latency, truncated to a beam."""
    f = p.f
    dual = _Dual(f, p.hulls, p.room, need)
    _, lam, mu = dual.solve()
    inc = _point(p, incumbent)
    target = float(inc.latency - f.base_lat)
    width = min(BEAM_STATES, max(64, BEAM_WORK // f.n))  # each item costs a pass over the beam: thousands of items, a narrow one
    found = _bounded_dp(p, dual, lam, mu, need, target + 0.5, width, beam=True)
    if found is None:
        return inc
    pt = _point(p, found)
    return pt if _better(pt, inc) else inc


def _value_ratios(f: _Flat, free: np.ndarray) -> list[float]:
    """Importance per parameter at the break of the free items' fractional knapsack (a tight cap multiplier)."""
    if len(free) == 0:
        return []
    ratio = f.worth[free] / f.unit[free]
    return sorted({float(np.median(ratio)), float(ratio.min()), float(ratio.max())})


def _undominated(c: np.ndarray, v: np.ndarray, t: np.ndarray, c_eff: np.ndarray, v_eff: np.ndarray) -> np.ndarray:
    """Indices of states no other state of equal effective cost dominates.

    B is dominated by A when A's effective cost equals B's, A is no slower, keeps at least B's
    effective importance, and wins the tie-break (latency, then importance, then parameters) on
    the real totals. Sorted by (group, latency, -importance, cost), that is: B's effective
    importance does not exceed the running maximum of the states before it in its group.
    """
    order = np.lexsort((c, -v, t, c_eff))
    g, ve = c_eff[order], v_eff[order]
    group_start = np.ones(len(g), dtype=bool)
    group_start[1:] = g[1:] != g[:-1]
    gid = np.cumsum(group_start) - 1
    rank = np.unique(ve, return_inverse=True)[1].ravel()  # small integers: no overflow below
    lifted = rank + gid * (len(ve) + 1)  # later groups lie above, so one running max does every group
    run = np.maximum.accumulate(lifted)
    keep = np.ones(len(g), dtype=bool)
    keep[1:] = (lifted[1:] > run[:-1]) | group_start[1:]
    return order[keep]


MAX_STATES = 30_000  # the closing DP gives up here and reports the proven gap instead
EXPAND_FACTOR = 8  # ... or when one item's expansion passes this many times the cap (time, not memory)
BEAM_STATES = 2_000
BEAM_WORK = 400_000  # beam width times items (5,000 items at the full width took 140 s)
WEIGHT_LIMIT = 1 << 46  # p * (total importance) and q * (total latency), in gcd units, stay below it
WINDOW_OBJECTIVE_LIMIT = 1 << 52  # a weighted score this large goes to our MCKP solver instead of the window DP


@dataclass(frozen=True)
class Fastest:
    """The answer to fastest(): the point, and how far from the least latency it is proven to be."""

    point: Point
    lower_bound: int  # no choice keeping the importance asked for is faster than this
    optimal: bool  # True: point.latency == the least latency possible (lower_bound == point.latency)

    @property
    def gap(self) -> float:
        return 0.0 if self.optimal else (self.point.latency - self.lower_bound) / max(1, self.point.latency)


class Tradeoff:
    """One instance, many questions: the importance optimum, the fastest choice keeping enough, the frontier.

    Supported points come from exact optima of p * importance - q * latency under the budget
    (our MCKP solver): for p, q > 0 every such optimum is Pareto-optimal, since a choice with more
    importance and less latency would score higher. Between two neighbouring supported points
    the frontier is found by the closing DP (_fastest).
    """

    def __init__(self, items: Sequence[TradeoffItem], budget: int) -> None:
        self.items = list(items)
        self.budget = budget
        self._p = _prepare(self.items, budget)
        f = self._p.f
        self._costs = [f.cost[f.span(i)].tolist() for i in range(f.n)]
        # Importance and latency in units of their gcds: the weighted scores stay small.
        self._vg = int(np.gcd.reduce(f.value)) or 1
        self._tg = int(np.gcd.reduce(f.lat)) or 1
        self._v_norm, self._t_norm = f.value // self._vg, f.lat // self._tg
        self._v_top = int(self._v_norm[f.starts[1:] - 1].sum())
        self._t_top = int(np.maximum.reduceat(self._t_norm, f.starts[:-1]).sum())
        imp = _importance_optimum(self._p)
        self._imp_picks = imp
        # Among importance-optimal choices, the fastest (a DP at need = the optimum prunes hard).
        try:
            if self._p.ratio is not None:
                # Proportional: the window DP or nothing (the general DP cannot tell tied states apart).
                self.importance_optimum = _fastest_proportional(self._p, _point(self._p, imp).value - f.base_value, [imp])
            else:
                self.importance_optimum = _fastest_optimal(self._p, imp)
        except (_TooManyStates, WindowTooLarge):
            # Still importance-optimal; only its latency tie-break is unproven (stats say so).
            self.importance_optimum = _point(self._p, imp)
            self._p.stats.optimum_tie_proven = False
        self.stats = self._p.stats
        self._supported: dict[int, Point] = {self.importance_optimum.value: self.importance_optimum}
        self._duals: list[tuple[int, int, Point]] = []  # (p, q, optimum of p * v - q * t) per weighted solve
        self._fast: Point | None = None  # _fastest_supported(), once found

    @property
    def max_value(self) -> int:
        return self.importance_optimum.value

    def weighted(self, p: int, q: int) -> Point:
        """The exact optimum of p * importance - q * latency within the budget (a supported Pareto point).

        Importance and latency count in units of their gcds (Tradeoff._weights keeps p and q small
        in those units). Fewest parameters among optima.
        """
        picks = self._weighted_picks(p, q)
        pt = _point(self._p, picks)
        self._supported.setdefault(pt.value, pt)
        self._duals.append((p * self._tg, q * self._vg, pt))  # the same weights in the caller's units
        return pt

    def _weighted_picks(self, p: int, q: int) -> np.ndarray:
        """Local picks of weighted(p, q): the items' own optima when they fit the budget, else the window DP.

        Without the budget every item takes its best score on its own (the cheapest among ties);
        when that fits, nothing can beat it. Otherwise the window DP minimizes q t - p v over the
        cost window [0, room] (the same lower hulls serve: the score differs from the latency by a
        linear function of the cost per item); past its limits, our MCKP solver.
        """
        f, prob = self._p.f, self._p
        score = p * self._v_norm - q * self._t_norm
        best = np.maximum.reduceat(score, f.starts[:-1])
        at = np.flatnonzero(score >= best[f.item])
        first = at[np.searchsorted(at, f.starts[:-1])]
        if int(f.cost[first].sum()) <= prob.room:
            return first - f.starts[:-1]
        obj = best[f.item] - score  # >= 0, least 0 per item
        largest = int(obj.max(initial=0)) * f.n
        if largest < WINDOW_OBJECTIVE_LIMIT:
            window = WindowSolver(f.starts, f.cost, obj, prob.on_hull)
            try:
                ans = window.solve(0, prob.room, int(obj[f.starts[:-1]].sum()), prefer_cost=False)
            except WindowTooLarge:
                ans = None
            if ans is not None:
                return ans.picks
        values = [(p * self._v_norm[f.span(i)] - q * self._t_norm[f.span(i)]).tolist() for i in range(f.n)]
        return np.asarray(solve_mckp(self._costs, values, prob.room).choice, dtype=np.int64)

    def _dual_bound(self, want: int) -> Fraction:
        """A proven lower bound on the latency keeping `want`: the best Lagrangian bound of the weighted solves.

        pt maximizes p * v - q * t within the budget, so any choice with v >= want has
        t >= pt.latency + p * (want - pt.value) / q. Valid even when (p, q) was rounded.
        """
        return max(Fraction(pt.latency) + Fraction(p * (want - pt.value), q) for p, q, pt in self._duals)

    def _weights(self, d_lat: int, d_val: int) -> tuple[int, int]:
        """(p, q) with p / q close to d_lat / d_val (caller's units) as weights on importance and latency in gcd units.

        Small enough that p * v and q * t stay below WEIGHT_LIMIT (the window DP scales them once more);
        rounding only moves which supported point the weights pick, never its exactness.
        """
        p_max = max(1, WEIGHT_LIMIT // max(1, self._v_top))
        q_max = max(1, WEIGHT_LIMIT // max(1, self._t_top))
        p, q = d_lat * self._vg, d_val * self._tg  # p v / q t keeps its ratio in the normalized units
        g = math.gcd(p, q) or 1
        p, q = p // g, q // g
        shrink = max(p / p_max, q / q_max, 1.0)
        if shrink > 1.0:
            p, q = max(1, round(p / shrink)), max(1, round(q / shrink))
        return p, q

    def _fastest_supported(self) -> Point:
        """The fast end: the least latency within the budget, then the most importance (a supported point).

        Usually every item's fastest candidate (most importance, then fewest parameters among ties)
        fits the budget and that is the answer; otherwise the weighted solve with one latency unit
        outweighing all importance.
        """
        if self._fast is None:
            f = self._p.f
            fast = np.flatnonzero(f.lat == _segmented_min(f.lat, f.starts)[f.item])  # each item's fastest (few ties)
            fast = fast[np.lexsort((f.cost[fast], -f.value[fast], f.item[fast]))]
            first = fast[np.searchsorted(f.item[fast], np.arange(f.n))]  # per item, its best under (latency, -importance, cost)
            if int(f.cost[first].sum()) <= self._p.room:
                self._fast = _point(self._p, first - f.starts[:-1])
                self._supported.setdefault(self._fast.value, self._fast)
            else:
                self._fast = self.weighted(1, max(1, min(self._v_top + 1, WEIGHT_LIMIT // max(1, self._t_top))))
        return self._fast

    def fastest(self, min_value: int) -> Fastest:
        """Least latency whose kept importance is >= min_value (then most importance, fewest params)."""
        if min_value > self.max_value:
            raise ImportanceOutOfReach(min_value, self.max_value)
        f = self._p.f
        if self._p.ratio is not None:
            # Proportional importance: one window DP, the importance optimum as the feasible ceiling.
            try:
                pt = _fastest_proportional(self._p, min_value - f.base_value, [self._imp_picks])
                return Fastest(pt, pt.latency, True)
            except WindowTooLarge:
                pass
        if min_value == self.max_value and self.stats.optimum_tie_proven:
            return Fastest(self.importance_optimum, self.importance_optimum.latency, True)
        fast = self._fastest_supported()
        if fast.value >= min_value:  # the fast end already keeps enough
            return Fastest(fast, fast.latency, True)
        need = min_value - f.base_value
        # Most questions leave the budget slack: the best choice without it, when it fits, is the answer.
        free = _fastest_unbudgeted(self._p, need, self.importance_optimum.latency - f.base_lat)
        if free.exact is not None and free.exact.cost - f.base_cost <= self._p.room:
            return Fastest(free.exact, free.exact.latency, True)
        lo, hi = self._bracket(min_value)
        if lo is None:  # the fast end already keeps enough
            return Fastest(hi, hi.latency, True)
        if hi is self.importance_optimum and not self.stats.optimum_tie_proven:
            pass  # the optimum's latency is not proven the least of its ties: search below
        elif hi.value == min_value or lo.latency == hi.latency:
            return Fastest(hi, hi.latency, True)
        # The weighted solves give a Lagrangian bound (the line through lo and hi when their weights were exact).
        bound = self._dual_bound(min_value)
        try:
            if free.too_large:
                raise _TooManyStates("the unbudgeted core DP outgrew its cap: the closing DP would too")
            pt = _fastest(self._p, need, [_picks_of(self._p, hi)], MAX_STATES, unbudgeted=False)
        except _TooManyStates:
            # Not proven: report the best of hi, the unbudgeted search's fastest choice within the budget and
            # a beam search below it, with the proven bound.
            start = hi
            if free.seen is not None and free.seen.cost - f.base_cost <= self._p.room and _better(free.seen, hi):
                start = free.seen
            best = _beam_point(self._p, need, _picks_of(self._p, start))
            lower = max(math.ceil(bound), math.ceil(self._p.stats.bound - 1e-6))
            if best.latency <= lower:
                return Fastest(best, best.latency, True)
            # Without the budget no choice keeping min_value is faster than free.above, so with it neither.
            # Reaching it proves the latency only, not the tie-break (more importance, fewer params): not optimal.
            return Fastest(best, max(lower, min(best.latency, free.above + f.base_lat)), False)
        return Fastest(pt, pt.latency, True)

    def fastest_within(self, epsilon: float) -> Fastest:
        """Least latency keeping at least (1 - epsilon) of the importance optimum's kept importance."""
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError("epsilon must be in [0, 1]")
        return self.fastest(self.value_for(epsilon))

    def value_for(self, epsilon: float) -> int:
        """ceil((1 - epsilon) * the optimum), in exact arithmetic: epsilon 0 asks for the optimum itself."""
        return math.ceil((1 - Fraction(epsilon)) * self.max_value)

    def _bracket(self, want: int) -> tuple[Point | None, Point]:
        """Neighbouring supported points around `want`: (most importance below it or None, least at or above)."""
        fast = self._fastest_supported()
        if fast.value >= want:
            return None, fast
        lo, hi = fast, self.importance_optimum
        while True:
            p, q = self._weights(hi.latency - lo.latency, hi.value - lo.value)
            mid = self.weighted(p, q)
            if mid.value in (lo.value, hi.value) or not lo.value < mid.value < hi.value:
                return lo, hi
            if mid.value >= want:
                hi = mid
            else:
                lo = mid

    def frontier(self, points: int = 50) -> list[Point]:
        """At least `points` Pareto-optimal (latency, importance) points where that many exist.

        Supported points first (dichotomic search, widest latency gap first), then, while fewer
        than `points`, the exact next point after the widest remaining gap.
        """
        if self._p.ratio is not None:
            try:
                return self._frontier_proportional(points)
            except WindowTooLarge:
                pass
        fast, top = self._fastest_supported(), self.importance_optimum
        found: dict[int, Point] = {fast.value: fast, top.value: top}
        settled: set[tuple[int, int]] = set()
        while len(found) < points:
            ordered = sorted(found.values(), key=lambda q: q.value)
            open_ = [(b.latency - a.latency, a, b) for a, b in zip(ordered, ordered[1:]) if (a.value, b.value) not in settled]
            if not open_:
                break
            _, a, b = max(open_, key=lambda g: g[0])
            settled.add((a.value, b.value))
            if b.latency <= a.latency or b.value <= a.value:
                continue
            mid = self.weighted(*self._weights(b.latency - a.latency, b.value - a.value))
            if a.value < mid.value < b.value:
                found[mid.value] = mid
        # Non-supported points inside the widest gaps, exact, while points are still wanted.
        asked: set[int] = set()
        while len(found) < points:
            ordered = sorted(found.values(), key=lambda q: q.value)
            gaps = [(b.latency - a.latency, a, b) for a, b in zip(ordered, ordered[1:]) if a.value + 1 not in asked and b.latency > a.latency]
            if not gaps:
                break
            _, a, b = max(gaps, key=lambda g: g[0])
            asked.add(a.value + 1)
            try:
                nxt = _fastest(self._p, a.value + 1 - self._p.f.base_value, [_picks_of(self._p, b)], MAX_STATES)
            except _TooManyStates:
                continue
            found.setdefault(nxt.value, nxt)
        return _pareto(list(found.values()))

    def _frontier_proportional(self, points: int) -> list[Point]:
        """frontier() when importance is proportional to parameters: every point from the window DP.

        The fast end is the least latency over the whole budget (then the most importance), the
        other end the importance optimum. Between them, the windows that start at a breakpoint of
        the LP (every item at a vertex of its hull: the LP solution is a real choice, so the bound
        is met at once) nearest to evenly spaced latencies (_breakpoint_probes). Where that leaves
        a gap, probes split it: the widest latency gap (a, b) is split at the middle of its
        unexplored importance range (a.value, u]: the least latency keeping at least that much is
        Pareto-optimal; when it is b itself, nothing between the probe and b is, and the range
        shrinks to below the probe.
        """
        base = self._p.f.base_value
        top = self.importance_optimum

        def probe(want: int) -> Point:
            return _fastest_proportional(self._p, want - base, [self._imp_picks])

        fast = probe(base)
        found: dict[int, Point] = {fast.value: fast, top.value: top}
        if points > 2 and top.latency > fast.latency and (self._p.ratio or (0, 1))[0] > 0:
            for want in self._breakpoint_wants(fast, top, points):
                try:
                    pt = probe(want)
                except WindowTooLarge:
                    continue
                found.setdefault(pt.value, pt)
        # (a, b, u): the importance range (a.value, u] is unexplored. A gap whose probe is too large is dropped:
        # nearer its top the windows are no smaller in practice (5k items: four more tries, 7 s each, all too large).
        ordered = sorted(found.values(), key=lambda q: q.value)
        gaps = [(a, b, b.value - 1) for a, b in zip(ordered, ordered[1:])]
        while len(found) < points:
            gaps = [g for g in gaps if g[2] > g[0].value and g[1].latency > g[0].latency]
            if not gaps:
                break
            k = max(range(len(gaps)), key=lambda i: gaps[i][1].latency - gaps[i][0].latency)
            a, b, u = gaps.pop(k)
            want = u - (u - a.value - 1) // 2  # the middle of (a.value, u]
            try:
                pt = probe(want)
            except WindowTooLarge:
                continue
            if pt.value >= b.value:
                gaps.append((a, b, want - 1))
            else:
                found.setdefault(pt.value, pt)
                gaps += [(a, pt, want - 1), (pt, b, u)]
        return _pareto(list(found.values()))

    def _breakpoint_wants(self, fast: Point, top: Point, points: int) -> list[int]:
        """Importance to ask for at the LP breakpoints nearest to points - 2 evenly spaced latencies in (fast, top).

        At a breakpoint's cost the LP takes whole hull segments only, so its solution is a real
        choice and the window DP ends in its first round; the LP's latency there is the bound,
        close to the answer's, so the targets stay evenly spread.
        """
        p, f = self._p, self._p.f
        w = p.window
        cost = w.cum * w.scale  # the LP's cost and latency at the end of each hull segment (offset units)
        lat = int(w.lat[f.starts[:-1]].sum()) + np.cumsum(w.seg_t) + f.base_lat
        inside = np.flatnonzero((cost > fast.cost - f.base_cost) & (cost <= p.room) & (lat > fast.latency) & (lat < top.latency))
        if not len(inside):
            return []
        wanted = min(points - 2, len(inside))
        targets = fast.latency + (top.latency - fast.latency) * np.arange(1, wanted + 1) / (wanted + 1)
        picked = inside[np.unique(_nearest(lat[inside].astype(np.float64), targets))]
        w_num, u_den = p.ratio or (0, 1)
        # Importance W / U per parameter: keeping cost c (offsets) keeps base_value + ceil(c W / U).
        return [f.base_value + -((-int(cost[b]) * w_num) // u_den) for b in picked.tolist()]


def _nearest(sorted_x: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per target, the index of the nearest value in sorted_x (non-empty, ascending)."""
    right = np.clip(np.searchsorted(sorted_x, targets), 0, len(sorted_x) - 1)
    left = np.clip(right - 1, 0, len(sorted_x) - 1)
    return np.where(np.abs(sorted_x[left] - targets) <= np.abs(sorted_x[right] - targets), left, right)


def _picks_of(p: _Problem, pt: Point) -> np.ndarray:
    """Local (sorted) picks of a point given in the caller's candidate order."""
    f = p.f
    out = np.empty(f.n, dtype=np.int64)
    for i, j in enumerate(pt.choice):
        s = f.span(i)
        out[i] = int(np.flatnonzero(f.orig[s] == j)[0])
    return out


def _pareto(points: list[Point]) -> list[Point]:
    """Drop points another beats on both latency and importance; ascending latency."""
    out: list[Point] = []
    for q in sorted(points, key=lambda q: (q.latency, -q.value, q.cost)):
        if out and q.value <= out[-1].value:
            continue
        out.append(q)
    return out
