"""An exact fill of the budget for proportional importance (gac.solver.tradeoff.optimum.importance_optimum).

When importance is proportional to parameters, a choice costing the largest multiple of the
costs' gcd within the room keeps the most importance; a greedy head and a small subset-sum DP
over the narrowest items usually find one, sparing the MCKP solver thousands of tied items.
"""

from __future__ import annotations

import math

import numpy as np

from gac.solver.tradeoff.problem import Flat

FILL_TAIL = 24  # items whose subset-sum DP finishes the exact fill of the budget


def fill_budget(f: Flat, room: int) -> np.ndarray | None:
    """Local picks whose cost is the largest multiple of the costs' gcd within room, or None if not found.

    Greedy on the items with the widest cost ranges (each takes its dearest candidate that still
    fits), then an exact reachability DP (in gcd units) over the FILL_TAIL narrowest items for
    what is left. None when the DP cannot hit it (the caller then runs the MCKP solver).
    """
    g = int(np.gcd.reduce(f.cost)) or 1
    top = f.cost[f.starts[1:] - 1]
    left = room // g * g
    if int(top.sum()) <= left:
        return np.diff(f.starts) - 1  # every item at its dearest candidate fits
    head, tail = _fill_split(f, top, g)
    picks = np.zeros(f.n, dtype=np.int64)
    tail_top = int(top[tail].sum())
    reserve = tail_top // 2  # left to the tail: about half its range, where its totals are dense
    for i in head.tolist():
        c = f.cost[f.span(i)]
        j = max(0, int(np.searchsorted(c, left - reserve, side="right")) - 1)  # the dearest that keeps the reserve
        picks[i] = j
        left -= int(c[j])
    if not 0 <= left <= tail_top:
        return None
    return _fill_tail(f, tail, left // g, g, picks)


def _fill_split(f: Flat, top: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """(head by widest cost range first, tail): the FILL_TAIL narrowest items, plus the narrowest item that
    lowers the gcd of the tail's costs while it is above g (else some remainders are out of the tail's reach)."""
    own = np.gcd.reduceat(f.cost, f.starts[:-1])
    in_tail = np.zeros(f.n, dtype=bool)
    common, taken = 0, 0
    for i in np.argsort(top, kind="stable").tolist():
        lower = math.gcd(common, int(own[i]))
        if taken < FILL_TAIL or lower < common:
            in_tail[i] = True
            common, taken = lower, taken + 1
        elif common == g:
            break
    order = np.argsort(-top, kind="stable")
    return order[~in_tail[order]], order[in_tail[order]]


def _fill_tail(f: Flat, tail: np.ndarray, target: int, g: int, picks: np.ndarray) -> np.ndarray | None:
    """Picks of the tail items summing to exactly target (gcd units) by a reachability DP, or None."""
    reach = np.zeros(target + 1, dtype=bool)
    reach[0] = True
    rows: list[np.ndarray] = []  # per tail item: the candidate that first reached each total
    for i in tail.tolist():
        c = (f.cost[f.span(i)] // g).tolist()
        came = np.full(target + 1, -1, dtype=np.int64)
        for j in range(len(c) - 1, -1, -1):
            if c[j] <= target:
                src = reach[: target + 1 - c[j]]
                fresh = src & (came[c[j] :] < 0)
                came[c[j] :][fresh] = j
        rows.append(came)
        reach = came >= 0
    if not reach[target]:
        return None
    out = picks.copy()
    at = target
    for i, came in zip(tail.tolist()[::-1], rows[::-1]):
        j = int(came[at])
        out[i] = j
        at -= int(f.cost[f.starts[i] + j] // g)
    return out
