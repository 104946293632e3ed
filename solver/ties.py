"""Ties in kept importance go to the compressor's own dims.

Kept importance is linear in parameters, so items of equal importance per parameter (every
item, when a manifest gives no importances) trade parameters one for one: every split of the
budget among them keeps the same importance. The MCKP solver breaks such ties by input order,
which moved one weight to the top of its window and the next to the bottom (on Llama-3-8B's
ASVD ranks with uniform importances, 87 dims on the median, up to 200). The compressor chose
its dims for reasons the manifest does not carry, so among the optima we keep the one that
moves them least: the two-resource solver's "fastest importance optimum", with the relative
distance from the compressor's dim in place of latency.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from math import gcd

import numpy as np

from gac.solver.candidates import ItemCandidates
from gac.solver.mckp import MckpSolution
from gac.solver.tradeoff import Tradeoff, TradeoffItem

DISTANCE_BITS = 20  # |d - d*| / d* in units of 2^-20: finer than any two candidates of a window differ


def tied_items(cands: Sequence[ItemCandidates], values: Sequence[Sequence[int]]) -> list[int]:
    """The items that can move and share their importance per parameter with another such item:
    only these can trade parameters at no cost in importance (unequal slopes would have to cancel
    exactly)."""
    by_slope: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, (ic, v) in enumerate(zip(cands, values)):
        if len(ic.candidates) > 1:
            worth, unit = v[0] // ic.candidates[0].dim, ic.item.unit
            g = gcd(worth, unit) or 1
            by_slope[(worth // g, unit // g)].append(i)
    return sorted(i for same in by_slope.values() if len(same) > 1 for i in same)


def distance_units(dims: Sequence[int], centre: float) -> tuple[int, ...]:
    """Each dim's distance from the compressor's dim (centre), relative to it, in integer units."""
    scaled = np.rint(np.abs(np.asarray(dims, dtype=np.float64) - centre) * ((1 << DISTANCE_BITS) / max(centre, 1.0)))
    return tuple(scaled.astype(np.int64).tolist())


def closest_optimum(
    cands: Sequence[ItemCandidates], costs: Sequence[Sequence[int]], values: Sequence[Sequence[int]], sol: MckpSolution
) -> list[int]:
    """The candidate index per item of the optimum nearest the compressor's dims among those that
    keep sol's importance in sol's parameters (sol's own choice where no tie can move a dim). Only
    the tied items are solved again; deterministic: no time limit decides it."""
    tied = tied_items(cands, values) if sol.method != "trivial" else []
    if not tied:
        return list(sol.choice)
    items = []
    for i in tied:
        ic = cands[i]
        dims = tuple(c.dim for c in ic.candidates)
        items.append(
            TradeoffItem(unit=ic.item.unit, worth=values[i][0] // dims[0], dims=dims, latency=distance_units(dims, ic.item.d_star))
        )
    # In what the tied items spend in sol, no more: sol spends the fewest parameters among the optima, and so does this.
    room = sum(costs[i][sol.choice[i]] for i in tied)
    nearest = Tradeoff(items, room, exact_seconds=0).importance_optimum
    # The optimum keeps what sol's tied items keep (sol is proven optimal); anything else would be a bug.
    if nearest.value != sum(values[i][sol.choice[i]] for i in tied):
        return list(sol.choice)
    choice = list(sol.choice)
    for i, j in zip(tied, nearest.choice):
        choice[i] = j
    return choice
