"""The cliff-free frontier of a latency curve (pure; reused by the dashboard's cliff analytics)."""

from __future__ import annotations

from collections.abc import Mapping


def cliff_free_frontier(curve: Mapping[int, float], rel_tol: float = 0.0) -> list[int]:
    """Dimensions worth choosing: d stays only if every larger d in the curve is slower.

    A larger dimension that is as fast or faster (within rel_tol) holds more
    parameters at no latency cost, so d sits on a cliff's wrong side and is
    dropped. The largest d is always kept. Returns the kept dims ascending.
    """
    if rel_tol < 0:
        raise ValueError("rel_tol must be >= 0")
    kept: list[int] = []
    best_above = float("inf")  # fastest latency among the dims larger than the current one
    for d in sorted(curve, reverse=True):
        lat = curve[d]
        if best_above > lat * (1.0 + rel_tol):
            kept.append(d)
        best_above = min(best_above, lat)
    kept.reverse()
    return kept


def dominated_dims(curve: Mapping[int, float], rel_tol: float = 0.0) -> list[int]:
    """The complement: dimensions some larger dimension beats or ties (the cliff points)."""
    keep = set(cliff_free_frontier(curve, rel_tol))
    return sorted(d for d in curve if d not in keep)
