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

This module (the package's one entry, gac.solver.tradeoff.Tradeoff) asks the questions and picks a
method for each; the methods live in its siblings: problem (the instance in flat arrays, its points),
dual (the Lagrangian dual), closing (the closing DP), fastest (the least-latency searches, in the
order tried), optimum (the importance optimum); dp, group, core and fill serve them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from gac.solver.mckp import solve_mckp
from gac.solver.tradeoff.closing import TooManyStates, beam_point
from gac.solver.tradeoff.core import Effort
from gac.solver.tradeoff.dp import WindowSolver, WindowTooLarge
from gac.solver.tradeoff.fastest import Unbudgeted, fastest_keeping, fastest_proportional, fastest_unbudgeted
from gac.solver.tradeoff.optimum import fastest_optimal, importance_optimum
from gac.solver.tradeoff.problem import Point, TradeoffItem, TradeoffStats, better, picks_of, prepare, segmented_min, to_point

__all__ = ["EXACT_SECONDS", "Fastest", "ImportanceOutOfReach", "Point", "Tradeoff", "TradeoffItem", "TradeoffStats"]


class ImportanceOutOfReach(ValueError):
    """No choice within the budget keeps the importance asked for."""

    def __init__(self, wanted: int, best: int) -> None:
        super().__init__(f"kept importance {wanted} is out of reach under the budget (at most {best})")
        self.wanted = wanted
        self.best = best


MAX_STATES = 30_000  # the closing DP gives up here and reports the proven gap instead
EXACT_SECONDS = 60.0  # fastest() searches this long for a proof the quick searches could not give
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
    the frontier is found by the closing DP (fastest.fastest_keeping).
    """

    def __init__(self, items: Sequence[TradeoffItem], budget: int, exact_seconds: float = EXACT_SECONDS) -> None:
        self.items = list(items)
        self.budget = budget
        self.exact_seconds = exact_seconds  # fastest()'s exhaustive search when the quick ones prove nothing (0: none)
        self._p = prepare(self.items, budget)
        f = self._p.f
        self._costs = [f.cost[f.span(i)].tolist() for i in range(f.n)]
        # Importance and latency in units of their gcds: the weighted scores stay small.
        self._vg = int(np.gcd.reduce(f.value)) or 1
        self._tg = int(np.gcd.reduce(f.lat)) or 1
        self._v_norm, self._t_norm = f.value // self._vg, f.lat // self._tg
        self._v_top = int(self._v_norm[f.starts[1:] - 1].sum())
        self._t_top = int(np.maximum.reduceat(self._t_norm, f.starts[:-1]).sum())
        imp = importance_optimum(self._p)
        self._imp_picks = imp
        # Among importance-optimal choices, the fastest (a DP at need = the optimum prunes hard).
        try:
            if self._p.ratio is not None:
                # Proportional: the window DP or nothing (the general DP cannot tell tied states apart).
                self.importance_optimum = fastest_proportional(self._p, to_point(self._p, imp).value - f.base_value, [imp])
            else:
                self.importance_optimum = fastest_optimal(self._p, imp)
        except (TooManyStates, WindowTooLarge):
            # Still importance-optimal; only its latency tie-break is unproven (stats say so).
            self.importance_optimum = to_point(self._p, imp)
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
        pt = to_point(self._p, picks)
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
            fast = np.flatnonzero(f.lat == segmented_min(f.lat, f.starts)[f.item])  # each item's fastest (few ties)
            fast = fast[np.lexsort((f.cost[fast], -f.value[fast], f.item[fast]))]
            first = fast[np.searchsorted(f.item[fast], np.arange(f.n))]  # per item, its best under (latency, -importance, cost)
            if int(f.cost[first].sum()) <= self._p.room:
                self._fast = to_point(self._p, first - f.starts[:-1])
                self._supported.setdefault(self._fast.value, self._fast)
            else:
                self._fast = self.weighted(1, max(1, min(self._v_top + 1, WEIGHT_LIMIT // max(1, self._t_top))))
        return self._fast

    def fastest(self, min_value: int) -> Fastest:
        """Least latency whose kept importance is >= min_value (then most importance, fewest params).

        The cheap answers first (the proportional DP, an end of the frontier, the best choice without
        the budget when it fits), then the closing DP between two supported points, and when that
        outgrows its cap the best point found with its proven gap.
        """
        if min_value > self.max_value:
            raise ImportanceOutOfReach(min_value, self.max_value)
        cheap = self._fastest_proportional(min_value) or self._fastest_at_an_end(min_value)
        if cheap is not None:
            return cheap
        base = self._p.f
        need = min_value - base.base_value
        # Most questions leave the budget slack: the best choice without it, when it fits, is the answer.
        unbudgeted = fastest_unbudgeted(self._p, need, self.importance_optimum.latency - base.base_lat)
        exact = unbudgeted.exact
        if exact is not None and self._fits(exact):
            return Fastest(exact, exact.latency, True)
        below, above = self._bracket(min_value)
        if below is None:  # the fast end already keeps enough
            return Fastest(above, above.latency, True)
        # The optimum's latency is not always proven the least of its ties: then search below it.
        above_proven = above is not self.importance_optimum or self.stats.optimum_tie_proven
        if above_proven and (above.value == min_value or below.latency == above.latency):
            return Fastest(above, above.latency, True)
        if not unbudgeted.too_large:  # else the closing DP would outgrow its cap too
            try:
                closed = fastest_keeping(self._p, need, [picks_of(self._p, above)], MAX_STATES, unbudgeted=False)
                return Fastest(closed, closed.latency, True)
            except TooManyStates:
                pass
        return self._fastest_unproven(min_value, above, unbudgeted)

    def _fits(self, point: Point) -> bool:
        """Whether a point found without the budget is within it."""
        return point.cost - self._p.f.base_cost <= self._p.room

    def _fastest_proportional(self, min_value: int) -> Fastest | None:
        """Proportional importance: one window DP, the importance optimum as the feasible ceiling."""
        if self._p.ratio is None:
            return None
        try:
            point = fastest_proportional(self._p, min_value - self._p.f.base_value, [self._imp_picks])
        except WindowTooLarge:
            return None
        return Fastest(point, point.latency, True)

    def _fastest_at_an_end(self, min_value: int) -> Fastest | None:
        """The importance optimum when all of it is asked for, the fast end when it keeps enough."""
        if min_value == self.max_value and self.stats.optimum_tie_proven:
            return Fastest(self.importance_optimum, self.importance_optimum.latency, True)
        fast = self._fastest_supported()
        return Fastest(fast, fast.latency, True) if fast.value >= min_value else None

    def _fastest_unproven(self, min_value: int, above: Point, unbudgeted: Unbudgeted) -> Fastest:
        """The closing DP gave up: the best of `above`, the unbudgeted search's fastest choice within the
        budget and a beam search below it, with the proven bound (the weighted solves' Lagrangian bound)."""
        base = self._p.f
        need = min_value - base.base_value
        bound = self._dual_bound(min_value)
        start = above
        seen = unbudgeted.seen
        if seen is not None and self._fits(seen) and better(seen, above):
            start = seen
        best = beam_point(self._p, need, picks_of(self._p, start))
        lower = max(math.ceil(bound), math.ceil(self._p.stats.bound - 1e-6))
        if best.latency <= lower:
            return Fastest(best, best.latency, True)
        unbudgeted_floor = unbudgeted.above
        if unbudgeted.too_large and self.exact_seconds > 0:
            # Near ties: the quick search ran out of work. Search without it, from below the beam's point.
            more = fastest_unbudgeted(self._p, need, best.latency - base.base_lat, Effort.exhaustive(self.exact_seconds))
            if more.exact is not None and self._fits(more.exact):
                return Fastest(more.exact, more.exact.latency, True)
            if more.seen is not None and self._fits(more.seen) and better(more.seen, best):
                best = more.seen
            unbudgeted_floor = max(unbudgeted_floor, more.above)
        # Without the budget no choice keeping min_value is faster than that floor, so with it neither.
        # Reaching it proves the latency only, not the tie-break (more importance, fewer params): not optimal.
        return Fastest(best, max(lower, min(best.latency, unbudgeted_floor + base.base_lat)), False)

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
            on_value, on_latency = self._weights(hi.latency - lo.latency, hi.value - lo.value)
            mid = self.weighted(on_value, on_latency)
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
            gaps = [
                (b.latency - a.latency, a, b) for a, b in zip(ordered, ordered[1:]) if a.value + 1 not in asked and b.latency > a.latency
            ]
            if not gaps:
                break
            _, a, b = max(gaps, key=lambda g: g[0])
            asked.add(a.value + 1)
            try:
                nxt = fastest_keeping(self._p, a.value + 1 - self._p.f.base_value, [picks_of(self._p, b)], MAX_STATES)
            except TooManyStates:
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
            return fastest_proportional(self._p, want - base, [self._imp_picks])

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


def _pareto(points: list[Point]) -> list[Point]:
    """Drop points another beats on both latency and importance; ascending latency."""
    out: list[Point] = []
    for q in sorted(points, key=lambda q: (q.latency, -q.value, q.cost)):
        if out and q.value <= out[-1].value:
            continue
        out.append(q)
    return out
