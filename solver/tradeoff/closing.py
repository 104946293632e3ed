"""The closing DP of gac.solver.tradeoff: the best choice whose latency is at or below a target.

The dual's reduced costs (gac.solver.tradeoff.dual) fix every item with one candidate within the
slack, target minus the bound. A DP over the rest keeps (params, importance, latency) states,
pruned by the same bound, by what the items still to come can reach, and by dominance. With a
state cap it raises TooManyStates past the cap, or, as a beam, keeps the most promising states
and gives a good choice without a proof.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gac.solver.tradeoff.dual import Dual
from gac.solver.tradeoff.problem import Flat, Point, Problem, better, segmented_min, to_point

REL_TOL = 1e-9  # float slack on bounds: pruning only ever keeps more than it must
EXPAND_FACTOR = 8  # the DP also gives up when one item's expansion passes this many times its state cap (time, not memory)
BEAM_STATES = 2_000  # the widest beam
BEAM_WORK = 400_000  # beam width times items (5,000 items at the full width took 140 s)


class TooManyStates(RuntimeError):
    """The closing DP passed its state cap: the caller reports a proven gap instead."""


def bounded_dp(
    p: Problem,
    dual: Dual,
    lam: float,
    mu: float,
    need: int,
    target: float,
    state_cap: int | None = None,
    beam: bool = False,
) -> np.ndarray | None:
    """The lexicographically best solution among those with latency <= target, or None.

    beam: past state_cap, keep only the state_cap states with the least latency bound instead of
    raising; the answer is then a good feasible solution, not a proven best one.
    """
    reduced = dual.reduced(lam, mu)
    fixed = _fix(p, _within_slack(p, reduced, lam, mu, need, target), need, target)
    return None if fixed is None else _ClosingDP(p, fixed, _rest_bounds(p.f, reduced, fixed), lam, mu, state_cap, beam).run()


@dataclass
class _Fixed:
    """What the reduced-cost fixing leaves to the DP: the free items and their share of budget, importance and latency."""

    picks: np.ndarray  # local picks: per item its first candidate within the slack (a fixed item's only one)
    free: np.ndarray  # the items with more than one candidate within the slack, fewest candidates first
    keeps: list[np.ndarray]  # per free item: the local indices of those candidates
    room: int  # the budget less the fixed items' costs
    need: int  # the importance the free items must still add
    target: float  # the latency the free items may still add


@dataclass
class _Rest:
    """Row k: bounds on what the free items k.. can still add (the last row: nothing left)."""

    reduced: np.ndarray  # the least reduced latency
    lat: np.ndarray  # the least latency
    cost: np.ndarray  # the most parameters
    value: np.ndarray  # the least importance
    ratios: np.ndarray  # q, and caps[q, k]: the most importance within room r is min over q of q r + caps[q, k]
    caps: np.ndarray


@dataclass
class _States:
    """The DP's states after some free items: their totals over the free items."""

    cost: np.ndarray
    value: np.ndarray
    lat: np.ndarray


def _within_slack(p: Problem, reduced: np.ndarray, lam: float, mu: float, need: int, target: float) -> np.ndarray:
    """Per candidate: whether its reduced cost stays within target minus the dual bound (any choice at or below target does)."""
    f = p.f
    best = segmented_min(reduced, f.starts)
    lower = float(best.sum()) - lam * p.room + mu * need
    slack = target - lower
    return (reduced - best[f.item]) <= slack + REL_TOL * (abs(target) + abs(lower) + 1.0)


def _fix(p: Problem, ok: np.ndarray, need: int, target: float) -> _Fixed | None:
    """Fix each item with one candidate within the slack (ok) to it; None when an item has none or the fixed overrun the budget."""
    f = p.f
    alive = np.add.reduceat(ok.astype(np.int64), f.starts[:-1])
    if (alive == 0).any():
        return None
    pos_ok = np.flatnonzero(ok)
    first = pos_ok[np.searchsorted(pos_ok, f.starts[:-1])]
    single = first[alive == 1]
    p.stats.fixed_items = len(single)
    room = p.room - int(f.cost[single].sum())
    if room < 0:
        return None
    free = np.flatnonzero(alive > 1)
    free = free[np.lexsort((free, alive[free]))]  # few candidates first: the state set grows late
    return _Fixed(
        picks=first - f.starts[:-1],
        free=free,
        keeps=[np.flatnonzero(ok[f.span(i)]) for i in free.tolist()],
        room=room,
        need=need - int(sum(int(x) for x in f.value[single])),
        target=target - int(f.lat[single].sum()),
    )


def _rest_bounds(f: Flat, reduced: np.ndarray, fixed: _Fixed) -> _Rest:
    """Suffix bounds over the free items, per item from its candidates within the slack.

    The most cost and the least importance bound the dominance test: a state's cost below
    room - cost[k] can never break the budget, and its importance above need - value[k] always
    suffices, so states compare as equals on that axis (exact: every completion stays feasible).
    """
    free = fixed.free.tolist()
    least_reduced = np.array([float(reduced[f.span(i)][jj].min()) for i, jj in zip(free, fixed.keeps)]) if free else np.zeros(0)
    least_lat = np.array([int(f.lat[f.span(i)][jj].min()) for i, jj in zip(free, fixed.keeps)], dtype=np.int64)
    most_cost = np.array([int(f.cost[f.span(i)][jj].max()) for i, jj in zip(free, fixed.keeps)], dtype=np.int64)
    least_value = np.array([int(f.value[f.span(i)][jj].min()) for i, jj in zip(free, fixed.keeps)], dtype=np.int64)
    ratios, caps = _value_caps(f, fixed.free, [0.0] + _value_ratios(f, fixed.free))
    return _Rest(_suffix_sums(least_reduced), _suffix_sums(least_lat), _suffix_sums(most_cost), _suffix_sums(least_value), ratios, caps)


def _suffix_sums(x: np.ndarray) -> np.ndarray:
    """out[k] = sum of x[k:], with out[len(x)] = 0."""
    return np.append(np.cumsum(x[::-1])[::-1], 0)


class _ClosingDP:
    """One run over the free items: expand each item's candidates onto the states, prune, then trace the best back."""

    def __init__(self, p: Problem, fixed: _Fixed, rest: _Rest, lam: float, mu: float, state_cap: int | None, beam: bool) -> None:
        self.f, self.stats, self.fixed, self.rest = p.f, p.stats, fixed, rest
        self.lam, self.mu, self.cap, self.beam = lam, mu, state_cap, beam
        # The latency the free items may add, with the float slack of every bound on it.
        self.limit = fixed.target + REL_TOL * (abs(fixed.target) + 1.0)
        self.trail: list[tuple[np.ndarray, np.ndarray]] = []  # per free item: (parent state, local candidate) per state
        self.largest = 1  # the most states after any item

    def run(self) -> np.ndarray | None:
        states = self._states_after_every_item()
        return None if states is None else self._best_picks(states)

    def _states_after_every_item(self) -> _States | None:
        zero = np.zeros(1, dtype=np.int64)
        states: _States | None = _States(zero, zero.copy(), zero.copy())
        k = 0
        while states is not None and k < len(self.fixed.free):
            states = self._expand(states, k)
            k += 1
        if states is not None:
            self.stats.max_states = max(self.stats.max_states, self.largest)
        return states

    def _expand(self, states: _States, k: int) -> _States | None:
        """The states after free item k: each state with each of its candidates, pruned; None when none is left."""
        cand = self.fixed.keeps[k]
        s = self.f.span(int(self.fixed.free[k]))
        if self.cap is not None and not self.beam and len(states.cost) * len(cand) > EXPAND_FACTOR * self.cap:
            self.stats.max_states = max(self.stats.max_states, len(states.cost))
            raise TooManyStates(f"{len(states.cost)} states x {len(cand)} candidates at free item {k + 1} of {len(self.fixed.free)}")
        cost = (states.cost[None, :] + self.f.cost[s][cand][:, None]).ravel()
        value = (states.value[None, :] + self.f.value[s][cand][:, None]).ravel()
        lat = (states.lat[None, :] + self.f.lat[s][cand][:, None]).ravel()
        left, want = self.fixed.room - cost, self.fixed.need - value
        # Latency: what is spent plus the least the rest must add (two bounds) must stay within target.
        bound = lat + np.maximum(self.rest.reduced[k + 1] - self.lam * left + self.mu * want, self.rest.lat[k + 1])
        live = np.flatnonzero((left >= 0) & self._reachable(left, want, k) & (bound <= self.limit))
        return self._next_states(states, k, live, _States(cost, value, lat), bound) if len(live) else None

    def _reachable(self, left: np.ndarray, want: np.ndarray, k: int) -> np.ndarray:
        """Whether the items after the k-th can still add the importance wanted within the budget left."""
        rest = self.rest
        cap = np.min(rest.ratios[:, None] * np.maximum(left, 0)[None, :] + rest.caps[:, k + 1][:, None], axis=0)
        return want <= cap + 1e-9 * (np.abs(cap) + 1.0)

    def _next_states(self, states: _States, k: int, live: np.ndarray, grown: _States, bound: np.ndarray) -> _States:
        """The undominated expansions, recorded in the trail; past the state cap a beam keeps the lowest bounds."""
        cap, rest = self.cap, self.rest
        if self.beam and cap is not None and len(live) > 4 * cap:
            # Heuristic only: sorting every expansion costs more than the beam is worth.
            live = live[np.argpartition(bound[live], 4 * cap)[: 4 * cap]]
        c_eff = np.maximum(grown.cost[live], self.fixed.room - rest.cost[k + 1])
        v_eff = np.minimum(grown.value[live], self.fixed.need - rest.value[k + 1])
        live = live[_undominated(grown.cost[live], grown.value[live], grown.lat[live], c_eff, v_eff)]
        self.largest = max(self.largest, len(live))
        if cap is not None and len(live) > cap and self.beam:
            # Heuristic: keep the states whose completion bound is lowest.
            live = live[np.argpartition(bound[live], cap)[:cap]]
        elif cap is not None and len(live) > cap:
            self.stats.max_states = max(self.stats.max_states, self.largest)
            raise TooManyStates(f"{len(live)} states after {k + 1} of {len(self.fixed.free)} free items")
        n = len(states.cost)
        self.trail.append((live % n, self.fixed.keeps[k][live // n]))
        return _States(grown.cost[live], grown.value[live], grown.lat[live])

    def _best_picks(self, states: _States) -> np.ndarray | None:
        """The picks of the best final state (latency, then importance, then params) within budget, need and target."""
        done = np.flatnonzero((states.value >= self.fixed.need) & (states.cost <= self.fixed.room))
        best = done[np.lexsort((states.cost[done], -states.value[done], states.lat[done]))[:1]]
        best = best[states.lat[best] <= self.limit]
        return self._trace(int(best[0])) if len(best) else None

    def _trace(self, state: int) -> np.ndarray:
        """The picks that lead to this final state: the fixed items' own, the free items' from the trail."""
        out = self.fixed.picks.copy()
        for item, (parent, cand) in zip(self.fixed.free[::-1].tolist(), self.trail[::-1]):
            out[item] = int(cand[state])
            state = int(parent[state])
        return out


def beam_point(p: Problem, need: int, incumbent: np.ndarray) -> Point:
    """A good feasible point (no proof): the closing DP at the incumbent's latency, truncated to a beam."""
    f = p.f
    dual = Dual(f, p.hulls, p.room, need)
    _, lam, mu = dual.solve()
    inc = to_point(p, incumbent)
    target = float(inc.latency - f.base_lat)
    width = min(BEAM_STATES, max(64, BEAM_WORK // f.n))  # each item costs a pass over the beam: thousands of items, a narrow one
    found = bounded_dp(p, dual, lam, mu, need, target + 0.5, width, beam=True)
    if found is None:
        return inc
    pt = to_point(p, found)
    return pt if better(pt, inc) else inc


def _value_caps(f: Flat, order: np.ndarray, ratios: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Upper bounds on the importance items order[k:] can add within room r: min over ratio q of q r + S_k(q).

    S_k(q) = sum over those items of max(0, worth - q unit) * top dd; q = 0 gives the sum of their tops.
    """
    top_dd = f.dd[f.starts[1:] - 1].astype(np.float64)
    qs = np.asarray(ratios, dtype=np.float64)
    gains = np.maximum(0.0, f.worth[order][None, :] - qs[:, None] * f.unit[order][None, :]) * top_dd[order][None, :]
    suffix = np.zeros((len(qs), len(order) + 1))
    suffix[:, :-1] = np.cumsum(gains[:, ::-1], axis=1)[:, ::-1]
    return qs, suffix


def _value_ratios(f: Flat, free: np.ndarray) -> list[float]:
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
