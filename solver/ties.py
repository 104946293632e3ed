"""Ties in kept importance go to the compressor's own dims.

Kept importance is linear in parameters, so items of equal importance per parameter (every
item, when a manifest gives no importances) trade parameters one for one: every split of what
they spend among them keeps the same importance. The MCKP solver breaks such ties by input
order, which moved one weight to the top of its window and the next to the bottom (on
Llama-3-8B's ASVD ranks with uniform importances, 87 dims on the median, up to 200). The
compressor chose its dims for reasons the manifest does not carry, so each class of items with
equal importance per parameter splits what it spends in the solver's optimum the way that moves
its dims least (the least sum of |d - d*| / d*).

The latency objective has the same ties among items whose latency does not depend on their dim
(items the platform has not measured count 0 at every candidate): it spends what it must on them
and no more, and which of them get it was input order too. Their classes are split the same way,
which keeps the answer's latency, importance and parameters. Its measured items tie exactly too,
where their latencies sum the same (swapped_nearer): two of one class trade dims toward the
compressor's.

Per class, not jointly: one class is a proportional instance, which the two-resource solver's
window DP answers quickly (with distance in place of latency), and a class of a few items is
enumerated; solved jointly, three classes of 1,000 weights took minutes. The limit: an optimum
that moves items of different slopes whose changes cancel exactly (rare with real importances,
found with small integer ones) is not looked for.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd, prod

import numpy as np

from gac.contracts.measurements import MAX_DIM
from gac.solver.candidates import ItemCandidates
from gac.solver.mckp import MckpSolution
from gac.solver.tradeoff import Tradeoff, TradeoffItem

DISTANCE_BITS = 20  # |d - d*| / d* in units of 2^-20: finer than any two candidates of a window differ
FAR = MAX_DIM  # the largest relative move counted: a centre of 1 or more never moves further
ENUMERATE_LIMIT = 4_096  # a class with at most this many combinations is enumerated (a Tradeoff costs milliseconds)


@dataclass(frozen=True)
class Nearest:
    choice: list[int]  # per item, the index into its candidates
    tied: int  # items in classes of equal importance per parameter
    unproven: int  # of those, items whose class the window DP could not search (left in the solver's order)


def worth_per_dim(ic: ItemCandidates, values: Sequence[int]) -> int:
    """integer_instance's importance per unit of d (its values are that times d)."""
    return values[0] // ic.candidates[0].dim


def tie_classes(cands: Sequence[ItemCandidates], values: Sequence[Sequence[int]], movable: Sequence[bool] | None = None) -> list[list[int]]:
    """Items that can move (of those movable, by default all), grouped by importance per parameter; only groups of two or more."""
    by_slope: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, (ic, v) in enumerate(zip(cands, values)):
        if len(ic.candidates) > 1 and (movable is None or movable[i]):
            worth, unit = worth_per_dim(ic, v), ic.item.unit
            g = gcd(worth, unit) or 1
            by_slope[(worth // g, unit // g)].append(i)
    return [members for members in by_slope.values() if len(members) > 1]


def distance_units(dims: Sequence[int], centre: float) -> tuple[int, ...]:
    """Each dim's distance from the compressor's dim (centre), relative to it (|d - d*| / d*, below 1 too), in integer units."""
    moves = np.abs(np.asarray(dims, dtype=np.float64) - centre)
    # Capped where only a centre below 1 reaches (dims are at most MAX_DIM): the units' sums stay in int64.
    relative = np.minimum(moves / centre, FAR) if centre > 0 else np.full(moves.shape, float(FAR))
    return tuple(np.rint(relative * (1 << DISTANCE_BITS)).astype(np.int64).tolist())


def closest_optimum(
    cands: Sequence[ItemCandidates], costs: Sequence[Sequence[int]], values: Sequence[Sequence[int]], sol: MckpSolution
) -> Nearest:
    """sol with each tie class split, within what it spends in sol, as near the compressor's dims as it can be.

    Within a class importance is proportional to parameters, so the split keeps sol's importance and
    its parameters (the fewest among the optima). Deterministic: no time limit decides it."""
    if sol.method == "trivial":  # every item at its largest candidate: the one optimum
        return Nearest(list(sol.choice), 0, 0)
    return nearest_split(cands, costs, values, sol.choice)


def nearest_split(
    cands: Sequence[ItemCandidates],
    costs: Sequence[Sequence[int]],
    values: Sequence[Sequence[int]],
    choice: Sequence[int],
    movable: Sequence[bool] | None = None,
) -> Nearest:
    """choice with each tie class of the movable items (by default all) split, within what the class spends
    in choice, at the least distance from the compressor's dims; the importance and parameters stay choice's."""
    choice = list(choice)
    tied = unproven = 0
    for members in tie_classes(cands, values, movable):
        tied += len(members)
        room = sum(costs[i][choice[i]] for i in members)
        if room in (sum(min(costs[i]) for i in members), sum(max(costs[i]) for i in members)):
            continue  # every item at the same end of its window: the one split (most classes, past the LP's slope)
        dims = [[c.dim for c in cands[i].candidates] for i in members]
        distances = [distance_units(d, cands[i].item.d_star) for i, d in zip(members, dims)]
        picks: list[int] | None
        if prod(len(d) for d in dims) <= ENUMERATE_LIMIT:
            picks = _enumerated([costs[i] for i in members], distances, room)
        else:
            picks = _windowed(cands, values, members, dims, distances, room)
        if picks is None:
            unproven += len(members)
            continue
        for i, j in zip(members, picks):
            choice[i] = j
    return Nearest(choice, tied, unproven)


def _enumerated(costs: Sequence[Sequence[int]], distances: Sequence[Sequence[int]], room: int) -> list[int]:
    """Every combination of a small class: the least distance whose cost is exactly room (sol's is one)."""
    combos = np.array(list(itertools.product(*(range(len(c)) for c in costs))), dtype=np.int64)
    cost = np.zeros(len(combos), dtype=object)  # parameter counts may pass int64 once summed
    distance = np.zeros(len(combos), dtype=np.int64)
    for k, (c, d) in enumerate(zip(costs, distances)):
        cost += np.asarray(c, dtype=object)[combos[:, k]]
        distance += np.asarray(d, dtype=np.int64)[combos[:, k]]
    fits = np.flatnonzero(cost == room)
    return combos[fits[np.argmin(distance[fits])]].tolist()


def _windowed(
    cands: Sequence[ItemCandidates],
    values: Sequence[Sequence[int]],
    members: list[int],
    dims: list[list[int]],
    distances: list[tuple[int, ...]],
    room: int,
) -> list[int] | None:
    """A large class: the two-resource solver's fastest importance optimum within room, distance as latency.
    None where its window DP could not prove that optimum the nearest (the class then keeps sol's order)."""
    items = [
        TradeoffItem(unit=cands[i].item.unit, worth=worth_per_dim(cands[i], values[i]), dims=tuple(d), latency=t)
        for i, d, t in zip(members, dims, distances)
    ]
    trade = Tradeoff(items, room, exact_seconds=0)
    if not trade.stats.optimum_tie_proven:
        return None
    nearest = trade.importance_optimum
    if nearest.cost != room:  # the class reaches room in sol: an optimum that does not is a solver bug
        raise AssertionError(f"a tie class's optimum spends {nearest.cost} parameters, not its {room}")
    return list(nearest.choice)


SWAP_CLASS_LIMIT = 256  # a larger class is left as the solver chose (its pairs grow as the square)


def swapped_nearer(cands: Sequence[ItemCandidates], items: Sequence[TradeoffItem], choice: Sequence[int]) -> list[int]:
    """The latency objective's exact ties: two items of one class (equal parameters and importance per unit of d)
    trade d, one up and the other down by as much, where their latencies sum to the same, while that brings them
    nearer the compressor's dims. Latency, importance and parameters stay choice's.

    Items of one shape share a curve, and a curve model linear in d between its steps sums 120 + 88 as fast as
    104 + 104: the solver's input order chose, and moved dims by 20 % for nothing. Pairwise, so a tie needing
    three items to move at once is not found; classes above SWAP_CLASS_LIMIT are left as they are."""
    choice = list(choice)
    classes: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, t in enumerate(items):
        if len(t.dims) > 1:
            classes[(t.unit, t.worth)].append(i)
    for members in classes.values():
        if 2 <= len(members) <= SWAP_CLASS_LIMIT:
            _swap_class(cands, items, members, choice)
    return choice


def _swap_class(cands: Sequence[ItemCandidates], items: Sequence[TradeoffItem], members: list[int], choice: list[int]) -> None:
    # Per member, its candidates in ascending dim (with their indices), latencies and distances, as arrays.
    order = {i: np.argsort(items[i].dims, kind="stable") for i in members}
    dims = {i: np.asarray(items[i].dims, dtype=np.int64)[order[i]] for i in members}
    lat = {i: np.asarray(items[i].latency, dtype=np.int64)[order[i]] for i in members}
    far = {i: np.asarray(distance_units(items[i].dims, cands[i].item.d_star), dtype=np.int64)[order[i]] for i in members}
    at = {i: int(np.flatnonzero(order[i] == choice[i])[0]) for i in members}  # the chosen one, in that order
    moved = True
    while moved:  # each move shortens the total distance: it ends
        moved = False
        for x, a in enumerate(members):
            for b in members[x + 1 :]:
                ja, jb = at[a], at[b]
                target = dims[b][jb] - (dims[a] - dims[a][ja])  # b's dim for each of a's: the same sum
                k = np.minimum(np.searchsorted(dims[b], target), len(dims[b]) - 1)
                fits = (dims[b][k] == target) & (lat[a] + lat[b][k] == lat[a][ja] + lat[b][jb])
                gain = far[a][ja] + far[b][jb] - (far[a] + far[b][k])
                gain[~fits] = 0
                best = int(np.argmax(gain))
                if gain[best] > 0:
                    at[a], at[b] = best, int(k[best])
                    moved = True
    for i in members:
        choice[i] = int(order[i][at[i]])
