"""Least latency with the total cost inside a window [lo, hi]: the proportional case of gac.solver.tradeoff.

When every item keeps the same importance per parameter (worth_i / unit_i equal for all
items: uniform importance, the default when there are no scores), kept importance is a
fixed multiple kappa of the parameters. "Importance >= V and parameters <= B" is then
the window ceil(V / kappa) <= parameters <= B, and the two-resource problem is a plain
multiple-choice knapsack over one resource. The general closing DP (gac.solver.tradeoff.closing)
struggles there: importance per parameter ties everywhere, so its bound tells no two
states apart and every reachable parameter total is a state of its own.

Method (all decisions in integers):

1. LP bound. The Lagrangian L(lam) = sum_i min_j (t_ij + lam c_ij) - (lam hi if lam >= 0
   else lam lo) is a lower bound on the latency of every choice in the window, for any
   lam. lam is taken from the LP relaxation (the lower convex hulls of the items' (cost,
   latency) points, segments by slope, broken where the cumulative cost reaches the
   window), as an exact fraction -dt / dc, and everything is scaled by dc.
2. Reduced-cost fixing. A choice with latency <= T only uses candidates whose reduced
   cost dc t + (-dt) c above its item's least is <= dc T - (scaled bound). Staircase
   latency leaves few survivors per item (the step tops), and their cost differences
   share a large gcd.
3. A dense DP over the surviving candidates' cost in units of that gcd: per cell, the
   least latency; a cell is dropped once the reduced cost spent so far, plus what its
   distance from the window must still cost, passes the slack. The answer is the least
   latency over the window's cells (ties: the largest cost when importance grows with
   cost, else the smallest). With T at least the optimum it is exact, ties included:
   every choice with latency <= T survives the fixing and the cell pruning.

The target T: first the LP bound itself (at a breakpoint of the LP its solution is a real
choice, which settles the window in one small DP); then the bound of the group relaxation
(gac.solver.tradeoff.group: the cost modulo the latency period, within a unit of the optimum on
staircases), rising geometrically up to a known feasible latency, where success is certain.

Costs are kept in units of their gcd. The same solver serves any per-candidate objective in
place of the latency (api.Tradeoff.weighted: q t - p v over the window [0, budget]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gac.solver.tradeoff.group import GroupBound, period

INT64_SAFE = 1 << 62
GROUP_INF = int(1 << 60)  # the group relaxation's "no choice"
DENSE_WORK_LIMIT = 600_000_000  # cells x surviving candidates of one DP (some 10 s); past it the caller falls back
_INF = np.int64(1) << np.int64(60)


class WindowTooLarge(RuntimeError):
    """The dense DP would pass DENSE_WORK_LIMIT: the caller uses its general method instead."""


@dataclass
class WindowAnswer:
    picks: np.ndarray  # local index per item (into the item's cost-sorted candidates)
    latency: int  # sum of the picked latencies (the caller's offset units)
    cost: int
    bound: int  # proven lower bound on the latency of any choice in the window
    fixed: int  # items left with one candidate by the reduced-cost fixing
    cells: int  # largest DP row
    rounds: int  # DP runs until the target held


@dataclass
class _Lagrange:
    """The Lagrangian bound of a window at lam = -num / den, everything scaled by den (integers)."""

    num: int
    den: int
    rc: np.ndarray  # per candidate: den t + num c above its item's least
    least: np.ndarray  # per item: the least den t + num c
    lbn: int  # den * (the bound): sum of least plus the window term
    safe: bool  # int64 cannot overflow in the DP's pruning arithmetic

    @property
    def bound(self) -> int:
        return -((-self.lbn) // self.den)  # ceil: latencies are integers


@dataclass
class _Prune:
    """Cell pruning inside the DP: reduced cost spent so far plus the window's distance within slack."""

    lag: _Lagrange
    slack: int  # the most reduced cost a choice at the target latency can spend
    lo: int  # the window the distance term measures (the penalty is 0 inside it)
    hi: int
    group: GroupBound | None = None  # residue bounds on what the items to come add (solve() only)
    dist: np.ndarray | None = None  # the group's window term per final residue
    ok: np.ndarray | None = None  # the candidates the DP runs on (the group's completions use only these)


@dataclass
class _Layout:
    """The surviving candidates of one DP, free items in DP order, costs relative to each item's cheapest survivor."""

    picks: np.ndarray  # per item: the local index of its cheapest survivor (the only one of a fixed item)
    first: np.ndarray  # per item: the flat position of that survivor
    fixed: np.ndarray  # items with one survivor
    free: np.ndarray  # items with more, in DP order
    bounds: np.ndarray  # free item k owns s_pos[bounds[k]:bounds[k + 1]]
    s_pos: np.ndarray
    s_cost: np.ndarray  # cost above the item's cheapest survivor (sorted within an item)
    s_t: np.ndarray
    unit: np.ndarray  # the table's grid after each free item (in cost units)
    base_cost: int  # every item at its cheapest survivor
    base_lat: int  # the fixed items' latency


@dataclass
class _Run:
    """A finished DP: per free item the argmin row, and the last row of least latencies."""

    layout: _Layout
    rows: list[tuple[int, int, np.ndarray]]  # (first cell, grid, argmin per cell) per free item
    best: np.ndarray  # least latency per cell of the last row (INF: unreachable or pruned)
    a: int  # the last row's first cell
    g: int  # the last row's grid
    cells: int  # the widest row

    def costs(self) -> np.ndarray:
        """The total cost of every cell of the last row."""
        return self.layout.base_cost + self.g * np.arange(self.a, self.a + len(self.best), dtype=np.int64)


def hull_vertices(starts: np.ndarray, cost: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Mask of the candidates on their item's strict lower convex hull of (cost, latency), cheapest to dearest.

    Adding a linear function of the cost to an item's latencies (a multiplier, an importance
    weight per parameter) keeps the same vertices, so one pass serves every objective of that form.
    Vectorized: a point on or above the chord of its two neighbours is no vertex, whatever the
    other points are, so every such point goes at once; repeating until none is left leaves the
    hull (each pass is one array operation over all items; staircases need a handful).
    """
    n = len(cost)
    alive = np.ones(n, dtype=bool)
    end = np.zeros(n, dtype=bool)  # an item's first and last candidates are always vertices
    end[starts[:-1]] = True
    end[starts[1:] - 1] = True
    idx = np.arange(n)
    while True:
        pos = idx[alive]
        inner = np.flatnonzero(~end[pos])
        if not len(inner):
            return alive
        a, b, c = pos[inner - 1], pos[inner], pos[inner + 1]
        # b on or above the chord a -> c (integers, exact): b is no strict lower-hull vertex.
        above = (lat[b] - lat[a]) * (cost[c] - cost[a]) >= (lat[c] - lat[a]) * (cost[b] - cost[a])
        if not above.any():
            return alive
        alive[b[above]] = False


class WindowSolver:
    """One instance (per item: candidates sorted by cost, the cheapest at cost 0), many windows.

    cost and lat are int64, non-negative, item by item; starts as in gac.solver.tradeoff.problem.Flat.
    hull: hull_vertices(starts, cost, lat) when the caller has it (it serves every objective
    that differs from lat by a linear function of the cost per item).
    """

    def __init__(self, starts: np.ndarray, cost: np.ndarray, lat: np.ndarray, hull: np.ndarray | None = None) -> None:
        self.starts = starts
        # Costs in units of their gcd (every total is a multiple of it): smaller numbers, no overflow in the scaling.
        self.scale = int(np.gcd.reduce(cost)) or 1
        self.cost = cost // self.scale
        self.lat = lat
        self.n = len(starts) - 1
        self.item = np.repeat(np.arange(self.n), np.diff(starts))
        vert = np.flatnonzero(hull_vertices(starts, cost, lat) if hull is None else hull)
        same = self.item[vert[1:]] == self.item[vert[:-1]]  # consecutive vertices of one item make a segment
        dc = (self.cost[vert[1:]] - self.cost[vert[:-1]])[same]
        dt = (lat[vert[1:]] - lat[vert[:-1]])[same]
        order = np.lexsort((np.arange(len(dc)), dt / np.maximum(dc, 1)))  # by slope; an item's segments stay in order
        self.seg_c, self.seg_t = dc[order], dt[order]
        self.cum = np.cumsum(self.seg_c)
        self.falling = int(self.seg_c[self.seg_t < 0].sum())  # the cost where the LP is unconstrained
        self.top = int(self.cost[starts[1:] - 1].sum())
        # The most latency one choice can have: with self.top it bounds every sum the DPs form (not lat.sum(),
        # which counts every candidate and ruled out the int64 path for thousands of items).
        self.lat_top = int(np.maximum.reduceat(lat, starts[:-1]).sum()) if self.n else 0
        self.grid = 1  # the normalized costs' gcd

    def _window(self, lo: int, hi: int) -> tuple[int, int]:
        """A window in the caller's cost units as normalized units (the same choices fall inside)."""
        return max(0, -((-lo) // self.scale)), min(self.top, hi // self.scale)

    # -- bounds ---------------------------------------------------------------------------------

    def multiplier(self, lo: int, hi: int) -> tuple[int, int]:
        """lam = -num / den (den > 0, per normalized cost unit) from the LP's break segment for the window [lo, hi].

        Any lam gives a valid bound; the LP's is the tightest linear one.
        """
        lo, hi = self._window(lo, hi)
        if len(self.seg_c) == 0 or lo <= self.falling <= hi:
            return 0, 1
        tau = min(max(self.falling, lo), hi)
        b = min(int(np.searchsorted(self.cum, tau, side="left")), len(self.cum) - 1)
        return -int(self.seg_t[b]), int(self.seg_c[b])

    def lagrange(self, lo: int, hi: int, num: int, den: int) -> _Lagrange:
        """The bound of the window [lo, hi] at lam = -num / den: den t >= sum least + (-num) lo (or hi when num > 0)."""
        lo, hi = self._window(lo, hi)
        return self._lagrange(lo, hi, num, den)

    def _lagrange(self, lo: int, hi: int, num: int, den: int) -> _Lagrange:
        # Costs and latencies are non-negative: every reduced cost, and every sum of one per item, is at most this.
        largest = den * self.lat_top + abs(num) * self.top
        safe = largest < INT64_SAFE
        if safe:
            red = den * self.lat + num * self.cost
        else:
            red = den * self.lat.astype(object) + num * self.cost.astype(object)
        least = np.minimum.reduceat(red, self.starts[:-1])
        rc = red - least[self.item]
        lbn = int(sum(int(x) for x in least)) + (-num * lo if num <= 0 else -num * hi)
        return _Lagrange(num, den, rc, least, lbn, safe)

    # -- one window -------------------------------------------------------------------------------

    def solve(self, lo: int, hi: int, ceiling: int, prefer_cost: bool = True) -> WindowAnswer | None:
        """Least latency with lo <= cost <= hi; ties: the largest cost (prefer_cost) else the smallest.

        ceiling: the latency of some choice known to lie in the window (the search ends there).
        None when the window holds no choice. Raises WindowTooLarge past DENSE_WORK_LIMIT.
        """
        num, den = self.multiplier(lo, hi)
        lo, hi = self._window(lo, hi)
        if lo > hi:
            return None
        lag = self._lagrange(lo, hi, num, den)
        target = min(max(lag.bound, 0), ceiling)
        # The LP bound itself first, on the candidates it leaves (no group relaxation): where the LP
        # solution is integral (at its breakpoints, say) that settles the window at once.
        found = self._best_in(lo, hi, prefer_cost, _Prune(lag, lag.den * target - lag.lbn, lo, hi), lag.rc <= lag.den * target - lag.lbn)
        if found is not None and found[1] <= target:
            picks, latency, cost, fixed, cells = found
            return WindowAnswer(picks, latency, cost * self.scale, lag.bound, fixed, cells, 1)
        if found is not None:
            ceiling = min(ceiling, found[1])
        return self._search(lo, hi, ceiling, prefer_cost, lag)

    def _search(self, lo: int, hi: int, ceiling: int, prefer_cost: bool, lag: _Lagrange) -> WindowAnswer | None:
        """solve() past the LP bound: the group relaxation's bound, then targets rising geometrically to the ceiling."""
        group, dist = self._group(lag, lo, hi, lag.den * ceiling - lag.lbn)
        if group is not None and dist is not None:
            excess = group.bound(dist)  # the residues' bound: within a unit of the optimum on staircases
            if excess >= GROUP_INF:
                return None  # no choice at or below the ceiling has a residue the window takes
            need = group.candidate_bounds(dist)
        else:
            excess, need = 0, lag.rc
        bound = -((-(lag.lbn + excess)) // lag.den)
        step = 1
        target = max(bound, 0)
        rounds = 1
        while True:
            rounds += 1
            target = min(target, ceiling)
            slack = lag.den * target - lag.lbn
            ok = need <= slack
            found = self._best_in(lo, hi, prefer_cost, _Prune(lag, slack, lo, hi, group, dist, ok), ok)
            if found is not None:
                picks, latency, cost, fixed, cells = found
                ans = WindowAnswer(picks, latency, cost * self.scale, bound, fixed, cells, rounds)
                if ans.latency <= target:
                    return ans  # nothing at or below the target was fixed away: exact, ties included
                ceiling = min(ceiling, ans.latency)  # a real choice in the window: the optimum lies in (target, latency]
                if int((need <= lag.den * ceiling - lag.lbn).sum()) <= 2 * int(ok.sum()):
                    target = ceiling  # a DP at the ceiling is certain to end the search, and little dearer
                    continue
            if target >= ceiling:
                return None
            target += step
            step *= 8

    def _group(self, lag: _Lagrange, lo: int, hi: int, cap: int) -> tuple[GroupBound | None, np.ndarray | None]:
        """The group relaxation of the window over the candidates within cap, or (None, None) when it cannot help."""
        if not lag.safe or lag.num == 0:
            return None, None  # no window term to sharpen (or no int64 room for the products)
        m = period(self.cost, lag.rc, self.starts, self.item, self.grid, 2 * lag.den)
        if m <= 1:
            return None, None
        group = GroupBound(self.cost, lag.rc, self.starts, self.item, lag.rc <= cap, self.grid, m)
        return group, group.distance(lo, hi, lag.num)

    def _best_in(self, lo: int, hi: int, prefer_cost: bool, prune: _Prune, ok: np.ndarray):
        """(picks, latency, cost, fixed, cells) of the least latency in [lo, hi] among the choices prune keeps, or None."""
        layout = self._layout(ok, prune.lag)
        if layout is None:
            return None
        run = self._run(layout, lo, hi, prune if prune.lag.safe else None)
        if run is None:
            return None
        costs = run.costs()
        inside = np.flatnonzero((costs >= lo) & (costs <= hi) & (run.best < _INF))
        if not len(inside):
            return None
        cell = _best_cell(run.best, inside, prefer_cost)
        picks = self._trace(run, cell)
        return picks, int(run.best[cell]), int(costs[cell]), len(layout.fixed), run.cells

    # -- the DP ---------------------------------------------------------------------------------

    def _layout(self, ok: np.ndarray, lag: _Lagrange) -> _Layout | None:
        """The survivors (ok) arranged for the DP, or None when some item has none.

        Items whose survivors lie on a coarse cost grid go first: the table stays in units of the
        gcd of the items so far (a few off-grid items, e.g. a first dim inside a latency step,
        would otherwise make every table fine-grained), and is refined only when a finer item comes.
        """
        st = self.starts
        alive = np.add.reduceat(ok.astype(np.int64), st[:-1])
        if (alive == 0).any():
            return None
        pos = np.flatnonzero(ok)
        first = pos[np.searchsorted(pos, st[:-1])]
        picks = first - st[:-1]
        fixed = np.flatnonzero(alive == 1)
        free = np.flatnonzero(alive > 1)
        sel = ok & (alive > 1)[self.item]
        s_pos = np.flatnonzero(sel)
        s_item = self.item[s_pos]
        s_cost = self.cost[s_pos] - self.cost[first][s_item]
        own = np.gcd.reduceat(s_cost, np.searchsorted(s_item, free)) if len(free) else np.zeros(0, dtype=np.int64)
        order = np.lexsort((free, -own))
        seg = np.searchsorted(s_item, free[order])  # where each free item's survivors start in s_pos
        lens = alive[free[order]]
        bounds = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(lens, out=bounds[1:])
        take = np.repeat(seg - bounds[:-1], lens) + np.arange(int(bounds[-1]))
        s_pos, s_cost = s_pos[take], s_cost[take]
        return _Layout(
            picks=picks,
            first=first,
            fixed=fixed,
            free=free[order],
            bounds=bounds,
            s_pos=s_pos,
            s_cost=s_cost,
            s_t=self.lat[s_pos],
            unit=np.gcd.accumulate(own[order]) if len(free) else own,
            base_cost=int(self.cost[first].sum()),
            base_lat=int(self.lat[first[fixed]].sum()),
        )

    def _run(self, lay: _Layout, lo: int, hi: int, prune: _Prune | None) -> _Run | None:
        """Least latency per reachable cost cell after every free item; None when no cell survives.

        Cells that can no longer reach lo (what the items to come add at most is too little)
        or already pass hi are dropped, and so are the cells prune rules out.
        """
        free, bounds = lay.free, lay.bounds
        top_c = lay.s_cost[bounds[1:] - 1] if len(free) else np.zeros(0, dtype=np.int64)
        if hi - lay.base_cost < 0 or lo - lay.base_cost > int(top_c.sum()):
            return None
        # rest[k]: the most the free items k.. can still add.
        rest = np.append(np.cumsum(top_c[::-1])[::-1], 0)
        pruner = _CellPruner(self, lay, prune, rest) if prune is not None else None
        if pruner is not None and not pruner.fixed_ok():
            return None
        best = np.full(1, lay.base_lat, dtype=np.int64)  # cells a .. a + len(best) - 1, in units of g
        a, g = 0, int(lay.unit[0]) if len(free) else 1
        g = g or 1
        rows: list[tuple[int, int, np.ndarray]] = []
        cells, work = 1, 0
        pick_dtype = np.uint8 if len(free) == 0 or int(np.diff(bounds).max()) < 256 else np.uint16
        for k in range(len(free)):
            b0, b1 = int(bounds[k]), int(bounds[k + 1])
            g_new = int(lay.unit[k]) or 1
            if g_new != g:  # refine the grid: g_new divides g
                r = g // g_new
                fine = np.full((len(best) - 1) * r + 1, _INF, dtype=np.int64)
                fine[::r] = best
                best, a, g = fine, a * r, g_new
            cc, tt = lay.s_cost[b0:b1] // g, lay.s_t[b0:b1]
            new_a = max(a, -((int(rest[k + 1]) - (lo - lay.base_cost)) // g))  # ceil((lo - base - rest) / g)
            new_b = min(a + len(best) - 1 + int(cc[-1]), (hi - lay.base_cost) // g)
            if new_b < new_a:
                return None
            work += (new_b - new_a + 1) * len(cc)
            if work > DENSE_WORK_LIMIT:
                raise WindowTooLarge(f"dense DP past {DENSE_WORK_LIMIT} cell updates at free item {k + 1} of {len(free)}")
            best, arg = _min_plus_row(best, a, new_a, new_b, cc, tt, pick_dtype)
            a = new_a
            if pruner is not None:
                kept = pruner.trim(k, best, a, g)
                if kept is None:
                    return None
                l0, l1 = kept
                best, arg, a = best[l0:l1], arg[l0:l1], a + l0
            rows.append((a, g, arg))
            cells = max(cells, len(best))
        return _Run(lay, rows, best, a, g, cells)

    def _trace(self, run: _Run, cell: int) -> np.ndarray:
        """Local picks per item of the choice the DP kept at `cell` of its last row."""
        lay = run.layout
        spent = (run.a + cell) * run.g  # above base_cost
        out = lay.picks.copy()
        for k in range(len(lay.free) - 1, -1, -1):
            row_a, row_g, row = run.rows[k]
            j = int(row[spent // row_g - row_a])
            p = int(lay.s_pos[lay.bounds[k] + j])
            out[int(lay.free[k])] = p - int(self.starts[lay.free[k]])
            spent -= int(lay.s_cost[lay.bounds[k] + j])
        return out


class _CellPruner:
    """Drops the cells whose reduced cost spent so far, plus the window's distance, passes the slack.

    After free item k a cell x holds the least latency t of the items so far; their reduced
    cost is den (t - fixed latency) + num (their cost) - their least, and the fixed items add
    theirs. Every completion adds a non-negative reduced cost, and the final cost lies in
    [cost so far, cost so far + what the rest can add], so the window term can only grow:
    lam (cost - lo) when lam >= 0, -lam (hi - cost) otherwise.
    """

    def __init__(self, solver: WindowSolver, lay: _Layout, prune: _Prune, rest: np.ndarray) -> None:
        lag = prune.lag
        self.lay, self.prune, self.lag, self.rest = lay, prune, lag, rest
        shift = solver.cost[lay.first[lay.free]]  # the free items' cheapest survivors' cost
        self.shift_pre = np.concatenate(([0], np.cumsum(shift)))
        self.least_pre = np.concatenate(([0], np.cumsum(lag.least[lay.free])))
        fixed_rc = int(lag.rc[lay.first[lay.fixed]].sum())
        self.room = prune.slack - fixed_rc
        # The cost every unprocessed free item still holds at its cheapest survivor is in base_cost.
        self.fixed_cost = lay.base_cost - int(shift.sum())
        self.completions = None
        if prune.group is not None and prune.dist is not None and prune.ok is not None:
            self.completions = prune.group.completions(lay.free, prune.ok, prune.dist)

    def fixed_ok(self) -> bool:
        return self.room >= 0

    def trim(self, k: int, best: np.ndarray, a: int, g: int) -> tuple[int, int] | None:
        """(first, end) of the live cells after free item k, the dead ones inside set to INF; None if none lives."""
        lag, lay = self.lag, self.lay
        x = g * np.arange(a, a + len(best), dtype=np.int64)  # cost above base of the free items so far
        spent = lag.den * (best - lay.base_lat) + lag.num * (int(self.shift_pre[k + 1]) + x) - int(self.least_pre[k + 1])
        extra = self._distance(k, x)
        if self.completions is not None:
            group = self.prune.group
            assert group is not None  # completions come from the group bound
            residue = ((self.fixed_cost + int(self.shift_pre[k + 1]) + x) // group.grid) % group.m
            extra = np.maximum(extra, self.completions[k][residue])
        spent += extra
        dead = (spent > self.room) | (best >= _INF)
        live = np.flatnonzero(~dead)
        if not len(live):
            return None
        l0, l1 = int(live[0]), int(live[-1]) + 1
        best[dead] = _INF
        return l0, l1

    def _distance(self, k: int, x: np.ndarray) -> np.ndarray:
        lag, lay, prune = self.lag, self.lay, self.prune
        low = lay.base_cost + x  # the least the final cost can be
        if lag.num <= 0:
            return -lag.num * np.maximum(0, low - prune.lo)
        return lag.num * np.maximum(0, prune.hi - (low + int(self.rest[k + 1])))


def _min_plus_row(
    best: np.ndarray, a: int, new_a: int, new_b: int, cc: np.ndarray, tt: np.ndarray, pick_dtype: type
) -> tuple[np.ndarray, np.ndarray]:
    """Row new_a..new_b of min_j best[x - c_j] + t_j, and the first minimizing j per cell."""
    width = new_b - new_a + 1
    out = np.full(width, _INF, dtype=np.int64)
    arg: np.ndarray = np.zeros(width, dtype=pick_dtype)
    b = a + len(best) - 1
    for j, (c, t) in enumerate(zip(cc.tolist(), tt.tolist())):
        # candidate j moves cell x to x + c: targets new_a .. new_b from sources new_a - c ..
        src_lo, src_hi = max(a, new_a - c), min(b, new_b - c)
        if src_hi < src_lo:
            continue
        cand = best[src_lo - a : src_hi - a + 1] + t
        d0 = src_lo + c - new_a
        dst = out[d0 : d0 + len(cand)]
        better = cand < dst
        np.copyto(dst, cand, where=better)
        np.copyto(arg[d0 : d0 + len(cand)], j, where=better)
    return out, arg


def _best_cell(best: np.ndarray, inside: np.ndarray, prefer_cost: bool) -> int:
    """The cell with the least latency among `inside` (ascending), ties by cost."""
    vals = best[inside]
    hits = inside[vals == vals.min()]
    return int(hits[-1] if prefer_cost else hits[0])
