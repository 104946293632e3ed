"""The Lagrangian dual of gac.solver.tradeoff over both side constraints, the budget and the importance.

Its value bounds the latency of every choice from below; at the best multipliers, the reduced
costs fix most items for the closing DP (gac.solver.tradeoff.closing), and each item's argmin makes
a first incumbent.
"""

from __future__ import annotations

import math

import numpy as np

from gac.solver.tradeoff.problem import Flat, Hulls, Problem, segmented_min


class Dual:
    """L(lam, mu) = sum_i min_j (t + lam c - mu v) - lam R + mu W: a lower bound on the latency for any lam, mu >= 0."""

    def __init__(self, f: Flat, hulls: Hulls, room: int, need: int) -> None:
        self.f, self.h, self.room, self.need = f, hulls, room, need
        self._cf = f.cost.astype(np.float64)
        self._vf = f.value.astype(np.float64)
        self._tf = f.lat.astype(np.float64)

    def reduced(self, lam: float, mu: float) -> np.ndarray:
        return self._tf + lam * self._cf - mu * self._vf

    def value(self, lam: float, mu: float) -> tuple[float, int]:
        """(L, kept importance of the per-item argmin): the second is the subgradient's part."""
        r = self.reduced(lam, mu)
        best = segmented_min(r, self.f.starts)
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


def lagrangian_picks(p: Problem, dual: Dual, lam: float, mu: float) -> np.ndarray:
    r = dual.reduced(lam, mu)
    best = segmented_min(r, p.f.starts)
    at = np.flatnonzero(r <= best[p.f.item])
    first = at[np.searchsorted(at, p.f.starts[:-1])]
    return first - p.f.starts[:-1]
