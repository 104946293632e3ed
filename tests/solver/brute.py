"""Exhaustive reference for tiny knapsack instances (the oracle the tests trust)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def brute_force(costs: Sequence[Sequence[int]], values: Sequence[Sequence[int]], budget: int) -> tuple[int, int] | None:
    """(best value, lowest cost among best) over all assignments within budget; None if none fits."""
    best: tuple[int, int] | None = None
    for choice in itertools.product(*(range(len(c)) for c in costs)):
        cost = sum(costs[i][j] for i, j in enumerate(choice))
        if cost > budget:
            continue
        value = sum(values[i][j] for i, j in enumerate(choice))
        if best is None or value > best[0] or (value == best[0] and cost < best[1]):
            best = (value, cost)
    return best


def brute_nearest(
    costs: Sequence[Sequence[int]], values: Sequence[Sequence[int]], distances: Sequence[Sequence[int]], budget: int
) -> tuple[int, int, int] | None:
    """(best value, lowest cost among those, least distance among those) over all assignments within budget."""
    best: tuple[int, int, int] | None = None
    for choice in itertools.product(*(range(len(c)) for c in costs)):
        cost = sum(costs[i][j] for i, j in enumerate(choice))
        if cost > budget:
            continue
        key = (-sum(values[i][j] for i, j in enumerate(choice)), cost, sum(distances[i][j] for i, j in enumerate(choice)))
        if best is None or key < best:
            best = key
    return None if best is None else (-best[0], best[1], best[2])
