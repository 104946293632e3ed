"""Least latency with the total cost inside a window [lo, hi]: the proportional case of solver.tradeoff.

When every item keeps the same importance per parameter (worth_i / unit_i equal for all
items: uniform importance, the default when there are no scores), kept importance is a
fixed multiple kappa of the parameters. "Importance >= V and parameters <= B" is then
the window ceil(V / kappa) <= parameters <= B, and the two-resource problem is a plain
multiple-choice knapsack over one resource. The general closing DP of solver.tradeoff
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
   least latency; the cells that can still reach the window only. The answer is the least
   latency over the window's cells (ties: the largest cost when importance grows with
   cost, else the smallest). With T at least the optimum it is exact, ties included:
   every choice with latency <= T survives the fixing.

T starts at the bound and rises geometrically up to a known feasible latency, where
success is certain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT64_SAFE = 1 << 62
DENSE_WORK_LIMIT = 60_000_000  # cells x surviving candidates of one DP; past it the caller falls back
_INF = np.int64(1) << np.int64(60)


@dataclass
class _Prune:
    rc: np.ndarray  # per candidate: reduced cost above its item's least (scaled by den)
    least: np.ndarray  # per item: the least reduced cost
    num: int
    den: int
    slack: int  # the most reduced cost a choice at the target latency can spend


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


def _hull_segments(starts: np.ndarray, cost: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(item, dc, dt) of every item's strict lower convex hull of (cost, latency), from its cheapest point."""
    seg_i: list[int] = []
    seg_c: list[int] = []
    seg_t: list[int] = []
    cs, ts = cost.tolist(), lat.tolist()
    bounds = starts.tolist()
    for i in range(len(bounds) - 1):
        a0, b0 = bounds[i], bounds[i + 1]
        if b0 - a0 < 2:
            continue
        hull: list[int] = []
        for j in range(a0, b0):
            cj, tj = cs[j], ts[j]
            while len(hull) >= 2:
                a, b = hull[-2], hull[-1]
                # b on or above the segment a -> j: not a strict lower-hull vertex
                if (ts[b] - ts[a]) * (cj - cs[a]) >= (tj - ts[a]) * (cs[b] - cs[a]):
                    hull.pop()
                else:
                    break
            hull.append(j)
        for a, b in zip(hull, hull[1:]):
            seg_i.append(i)
            seg_c.append(cs[b] - cs[a])
            seg_t.append(ts[b] - ts[a])
    return np.array(seg_i, dtype=np.int64), np.array(seg_c, dtype=np.int64), np.array(seg_t, dtype=np.int64)


class WindowSolver:
    """One instance (per item: candidates sorted by cost, the cheapest at cost 0), many windows.

    cost and lat are int64, non-negative, item by item; starts as in solver.tradeoff._Flat.
    """

    def __init__(self, starts: np.ndarray, cost: np.ndarray, lat: np.ndarray) -> None:
        self.starts = starts
        self.cost = cost
        self.lat = lat
        self.n = len(starts) - 1
        self.item = np.repeat(np.arange(self.n), np.diff(starts))
        si, dc, dt = _hull_segments(starts, cost, lat)
        order = np.lexsort((np.arange(len(si)), dt / np.maximum(dc, 1)))  # by slope; an item's segments stay in order
        self.seg_c, self.seg_t = dc[order], dt[order]
        self.cum = np.cumsum(self.seg_c)
        self.falling = int(self.seg_c[self.seg_t < 0].sum())  # the cost where the LP is unconstrained
        self.top = int(cost[starts[1:] - 1].sum())

    def _multiplier(self, lo: int, hi: int) -> tuple[int, int]:
        """lam = num / den (den > 0) from the LP's break segment; any lam gives a valid bound."""
        if len(self.seg_c) == 0 or lo <= self.falling <= hi:
            return 0, 1
        tau = min(max(self.falling, lo), hi)
        b = min(int(np.searchsorted(self.cum, tau, side="left")), len(self.cum) - 1)
        return -int(self.seg_t[b]), int(self.seg_c[b])

    def _reduced(self, num: int, den: int) -> np.ndarray:
        largest = den * int(self.lat.max(initial=0)) + abs(num) * int(self.cost.max(initial=0))
        if largest * max(1, self.n) < INT64_SAFE:
            return den * self.lat + num * self.cost
        return den * self.lat.astype(object) + num * self.cost.astype(object)

    def solve(self, lo: int, hi: int, ceiling: int, prefer_cost: bool = True) -> WindowAnswer | None:
        """Least latency with lo <= cost <= hi; ties: the largest cost (prefer_cost) else the smallest.

        ceiling: the latency of some choice known to lie in the window (the search ends there).
        None when the window holds no choice. Raises WindowTooLarge past DENSE_WORK_LIMIT.
        """
        lo = max(lo, 0)
        hi = min(hi, self.top)
        if lo > hi:
            return None
        num, den = self._multiplier(lo, hi)
        red = self._reduced(num, den)
        safe = red.dtype != object and (den * int(self.lat.sum()) + abs(num) * self.top) < INT64_SAFE
        least = np.minimum.reduceat(red, self.starts[:-1])
        rc = red - least[self.item]
        dt_b = -num
        lbn = int(sum(int(x) for x in least)) + (dt_b * lo if dt_b >= 0 else dt_b * hi)
        bound = -((-lbn) // den)  # ceil: latencies are integers
        step = 1
        target = max(bound, 0)
        rounds = 0
        while True:
            rounds += 1
            target = min(target, ceiling)
            slack = den * target - lbn
            ok = rc <= slack
            found = self._dense(ok, lo, hi, prefer_cost, _Prune(rc, least, num, den, slack) if safe else None)
            if found is not None:
                picks, latency, cost, fixed, cells = found
                ans = WindowAnswer(picks, latency, cost, bound, fixed, cells, rounds)
                if latency <= target:
                    return ans  # nothing at or below the target was fixed away: exact, ties included
                # A real choice in the window: the optimum lies in (target, latency].
                ceiling = min(ceiling, latency)
                at_ceiling = rc <= den * ceiling - lbn
                if int(at_ceiling.sum()) <= 2 * int(ok.sum()):
                    target = ceiling  # a DP at the ceiling is certain to end the search, and little dearer
                    continue
            if target >= ceiling:
                return None
            target += step
            step *= 8

    def _dense(
        self, ok: np.ndarray, lo: int, hi: int, prefer_cost: bool, prune: _Prune | None
    ) -> tuple[np.ndarray, int, int, int, int] | None:
        """The least latency over the surviving candidates (ok) with the cost in the window, or None.

        prune: also drop the cells whose reduced cost so far already passes the slack (the answer is
        then exact only when its latency is within the target the slack came from).
        """
        st = self.starts
        alive = np.add.reduceat(ok.astype(np.int64), st[:-1])
        if (alive == 0).any():
            return None
        pos = np.flatnonzero(ok)
        first = pos[np.searchsorted(pos, st[:-1])]
        picks = first - st[:-1]
        free = np.flatnonzero(alive > 1)
        base_cost = int(self.cost[first].sum())
        base_lat = int(self.lat[first[alive == 1]].sum())
        if not len(free):
            if lo <= base_cost <= hi:
                return picks, base_lat, base_cost, self.n, 1
            return None
        # Survivors of the free items, shifted to each item's cheapest survivor. Items whose survivors
        # lie on a coarse cost grid go first: the table stays in units of the gcd of the items so far
        # (a few off-grid items, e.g. a first dim inside a latency step, would otherwise make every
        # table fine-grained), and is refined only when a finer item comes.
        sel = ok & (alive > 1)[self.item]
        s_pos = np.flatnonzero(sel)
        s_item = self.item[s_pos]
        s_cost = self.cost[s_pos] - self.cost[first][s_item]
        own = np.gcd.reduceat(s_cost, np.searchsorted(s_item, free))
        order = np.lexsort((free, -own))
        free = free[order]
        lens = np.bincount(np.searchsorted(np.sort(free), s_item), minlength=len(free))[np.argsort(np.argsort(free))]
        seg = np.searchsorted(s_item, free)  # where each free item's survivors start in s_pos
        bounds = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(lens, out=bounds[1:])
        take = np.concatenate([np.arange(int(b), int(b) + int(n)) for b, n in zip(seg, lens)])
        s_pos, s_cost = s_pos[take], s_cost[take]
        s_t = self.lat[s_pos]
        unit = np.gcd.accumulate(own[order])  # the table's unit after each item
        top_c = s_cost[bounds[1:] - 1]  # survivors stay sorted by cost within an item
        reach_hi = hi - base_cost
        if reach_hi < 0 or lo - base_cost > int(top_c.sum()):
            return None
        # rest[k]: the most the free items k.. can still add (cells below lo - rest can never reach the window).
        rest = np.append(np.cumsum(top_c[::-1])[::-1], 0)
        if prune is not None:
            # Per cell after free item k: den * (latency - fixed) + num * (cost) - (least reduced costs) is the
            # reduced cost spent so far; with the fixed items' it must stay within the slack.
            shift = self.cost[first[free]]
            shift_pre = np.concatenate(([0], np.cumsum(shift)))
            least_pre = np.concatenate(([0], np.cumsum(prune.least[free])))
            fixed_rc = int(prune.rc[first[alive == 1]].sum())
            room_rc = prune.slack - fixed_rc
        work = 0
        best = np.full(1, base_lat, dtype=np.int64)  # cells a .. a + len(best) - 1, in units of g
        a, g = 0, int(unit[0]) or 1
        rows: list[tuple[int, int, np.ndarray]] = []
        cells = 1
        pick_dtype = np.uint8 if int(lens.max()) < 256 else np.uint16
        for k in range(len(free)):
            b0, b1 = int(bounds[k]), int(bounds[k + 1])
            g_new = int(unit[k]) or 1
            if g_new != g:  # refine the grid: g_new divides g
                r = g // g_new
                fine = np.full((len(best) - 1) * r + 1, _INF, dtype=np.int64)
                fine[::r] = best
                best, a, g = fine, a * r, g_new
            cc, tt = s_cost[b0:b1] // g, s_t[b0:b1]
            new_a = max(a, -((int(rest[k + 1]) - (lo - base_cost)) // g))  # ceil((lo - base - rest) / g)
            new_b = min(a + len(best) - 1 + int(cc[-1]), reach_hi // g)
            if new_b < new_a:
                return None
            width = new_b - new_a + 1
            stack = np.full((len(cc), width), _INF, dtype=np.int64)
            for j, (c, t) in enumerate(zip(cc.tolist(), tt.tolist())):
                # candidate j moves cell x to x + c: targets new_a .. new_b from sources new_a - c ..
                src_lo = max(a, new_a - c)
                src_hi = min(a + len(best) - 1, new_b - c)
                if src_hi < src_lo:
                    continue
                stack[j, src_lo + c - new_a : src_hi + c - new_a + 1] = best[src_lo - a : src_hi - a + 1] + t
            work += width * len(cc)
            if work > DENSE_WORK_LIMIT:
                raise WindowTooLarge(f"dense DP past {DENSE_WORK_LIMIT} cell updates at free item {k + 1} of {len(free)}")
            arg = np.argmin(stack, axis=0)
            best = stack[arg, np.arange(width)]
            if prune is not None:
                spent = prune.den * (best - base_lat) + prune.num * (int(shift_pre[k + 1]) + g * np.arange(new_a, new_b + 1)) - int(least_pre[k + 1])
                live = np.flatnonzero((spent <= room_rc) & (best < _INF))
                if not len(live):
                    return None
                l0, l1 = int(live[0]), int(live[-1])
                best = best[l0 : l1 + 1].copy()
                best[spent[l0 : l1 + 1] > room_rc] = _INF
                arg = arg[l0 : l1 + 1]
                new_a, width = new_a + l0, l1 - l0 + 1
            rows.append((new_a, g, arg.astype(pick_dtype)))
            a = new_a
            cells = max(cells, width)
        # The window's cells: the least latency, ties by cost.
        w_lo = max(-((base_cost - lo) // g), a)
        window = best[w_lo - a : reach_hi // g - a + 1]
        if not len(window):
            return None
        m = int(window.min())
        if m >= _INF:
            return None
        hits = np.flatnonzero(window == m)
        spent_cost = (w_lo + int(hits[-1] if prefer_cost else hits[0])) * g  # above base_cost
        out = picks.copy()
        for k in range(len(free) - 1, -1, -1):
            row_a, row_g, row = rows[k]
            j = int(row[spent_cost // row_g - row_a])
            p = int(s_pos[bounds[k] + j])
            out[int(free[k])] = p - int(st[free[k]])
            spent_cost -= int(s_cost[bounds[k] + j])
        chosen = st[:-1] + out
        cost = int(self.cost[chosen].sum())
        return out, m, cost, self.n - len(free), cells
