"""Gomory's group relaxation for the window DP of gac.solver.tradeoff.dp: the total cost modulo a period.

Why. Staircase latency puts the step tops of every item on one LP line, so the Lagrangian
bound of a window [lo, hi] cannot tell a window that a step-top total reaches from one that
falls between two such totals: there, only dims inside a latency step (each paying its
reduced cost) or a total above lo (paying lam per parameter) get into the window. The gap
is a few hundred latency units, and every unit of it lets more candidates through the
fixing and more cells through the DP. Costs kept modulo M grid cells see it exactly:

    every choice x in the window has c(x) = r (mod M g) for r = its residue, so
    den (t(x) - bound) = sum_i rc_i(x_i) + dt (c(x) - lo) >= G(r) + dt ((r - lo) mod M g),

with G(r) the least reduced cost of a choice whose cost has residue r: a DP over M
residues per item (cyclic min-plus products). The least right side over r is a lower bound
on the latency of the window (within a unit of the optimum on Llama-like staircases), and
the same products with one item left out bound every candidate (fixing) and, from the
items still to come, every cell of the window DP (pruning).

All in integers (reduced costs scaled by den, as in dp); INF marks "no choice".
"""

from __future__ import annotations

from functools import cache

import numpy as np

MAX_PERIOD = 64  # residues kept: the relaxation costs n M^2 per use
INF = np.int64(1) << np.int64(60)


def period(cost: np.ndarray, rc: np.ndarray, starts: np.ndarray, item: np.ndarray, grid: int, near: int) -> int:
    """M: the step of the cost totals that hull-like candidates (reduced cost <= near) make, in grid units.

    The gcd of those candidates' cost differences within each item, divided by the grid; capped at
    MAX_PERIOD by its largest divisor below the cap (any M gives a valid bound; the natural one is tightest).
    """
    ok = rc <= near
    first = np.minimum.reduceat(np.where(ok, cost, np.iinfo(np.int64).max), starts[:-1])
    rel = (cost - first[item])[ok]
    step = int(np.gcd.reduce(rel)) if len(rel) else 0
    m = step // grid if step else 1
    if m <= MAX_PERIOD:
        return max(m, 1)
    return max(d for d in range(1, MAX_PERIOD + 1) if m % d == 0)


@cache
def _differences(m: int) -> np.ndarray:
    """[r, s] -> (r - s) mod m: made once per period (the products below run once per item)."""
    return (np.arange(m)[:, None] - np.arange(m)[None, :]) % m


def _cyclic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[..., r] = min_s a[..., s] + b[..., (r - s) mod M], batched over the leading axes."""
    return np.minimum(np.min(a[..., None, :] + b[..., _differences(a.shape[-1])], axis=-1), INF)


class GroupBound:
    """Per item, the least reduced cost of each cost residue; prefix and suffix products over the items.

    cost, rc: per candidate (flat, item by item), rc scaled integers; keep: the candidates that
    may still matter (the others count as absent); grid: the gcd of every cost; m: the period.
    """

    def __init__(self, cost: np.ndarray, rc: np.ndarray, starts: np.ndarray, item: np.ndarray, keep: np.ndarray, grid: int, m: int) -> None:
        self.grid, self.m, self.n = grid, m, len(starts) - 1
        self.residue = (cost // grid) % m
        self.rc = rc
        per = np.full(self.n * m, INF, dtype=np.int64)
        np.minimum.at(per, (item * m + self.residue)[keep], rc[keep])
        self.per = per.reshape(self.n, m)
        self.item = item
        unit = np.full(m, INF, dtype=np.int64)
        unit[0] = 0
        self.prefix = np.empty((self.n + 1, m), dtype=np.int64)
        self.prefix[0] = unit
        for i in range(self.n):
            self.prefix[i + 1] = _cyclic(self.prefix[i], self.per[i])
        self.suffix = np.empty((self.n + 1, m), dtype=np.int64)
        self.suffix[self.n] = unit
        for i in range(self.n - 1, -1, -1):
            self.suffix[i] = _cyclic(self.suffix[i + 1], self.per[i])

    def distance(self, lo: int, hi: int, num: int) -> np.ndarray:
        """Per final residue r: the least window term dt (c - lo) (lam >= 0) or -dt (hi - c) a cost c = r can pay."""
        span = self.m * self.grid
        c = np.arange(self.m, dtype=np.int64) * self.grid
        if num <= 0:
            return -num * ((c - lo) % span)
        return num * ((hi - c) % span)

    def bound(self, dist: np.ndarray) -> int:
        """The least reduced cost plus window term of any choice in the window (scaled by den)."""
        return int(np.min(self.prefix[self.n] + dist))

    def candidate_bounds(self, dist: np.ndarray) -> np.ndarray:
        """Per candidate: the least reduced cost plus window term of a choice that takes it."""
        others = _cyclic(self.prefix[:-1], self.suffix[1:])  # (n, M): every item but i
        # with[i, a] = min_r others[i, (r - a) mod M] + dist[r]: the rest when item i's cost has residue a.
        m = self.m
        shift = (np.arange(m)[None, :] - np.arange(m)[:, None]) % m  # [a, r] -> r - a
        with_ = np.minimum(np.min(others[:, shift] + dist[None, None, :], axis=-1), INF)
        return self.rc + with_[self.item, self.residue]

    def completions(self, free: np.ndarray, keep: np.ndarray, dist: np.ndarray) -> np.ndarray:
        """H[k, a]: the least reduced cost plus window term the free items after the k-th (in this order) add
        to a partial choice whose cost so far has residue a. Rows 0 .. len(free)."""
        m = self.m
        per = np.full(self.n * m, INF, dtype=np.int64)
        np.minimum.at(per, (self.item * m + self.residue)[keep], self.rc[keep])
        per = per.reshape(self.n, m)[free]
        rest = np.empty((len(free) + 1, m), dtype=np.int64)
        rest[-1] = INF
        rest[-1, 0] = 0
        for k in range(len(free) - 1, -1, -1):
            rest[k] = _cyclic(rest[k + 1], per[k])
        shift = (np.arange(m)[:, None] + np.arange(m)[None, :]) % m  # [a, r] -> a + r
        return np.minimum(np.min(rest[:, None, :] + dist[shift][None, :, :], axis=-1), INF)[1:]
