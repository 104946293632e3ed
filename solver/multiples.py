"""The multiples of many periods among a curve's measured dims, all at once: for every period m
and every multiple of it between the first and the last dim, where it falls among the dims and
whether it is one of them.

A scan that tests each m against every dim costs n * (number of m), about n * span; listing
the multiples costs the sum of span / m over the m, about span * log(span). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BATCH = 1_000_000  # multiples listed at once, at most about (bounded memory on a wide, sparse curve)


@dataclass(frozen=True)
class Multiples:
    """Every multiple k * ms[j] from xs[0] to xs[-1], ordered by j, then k."""

    j: np.ndarray  # which period (index into ms)
    k: np.ndarray  # which multiple of it
    above: np.ndarray  # index of the first dim above it (len(xs) when none is)
    measured: np.ndarray  # whether it is a measured dim (then xs[above - 1])


def _range_of_k(xs: np.ndarray, ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per m, the first k with k * m >= xs[0], and how many k * m are within xs[0]..xs[-1]."""
    first = -(-xs[0] // ms)
    return first, np.maximum(xs[-1] // ms - first + 1, 0)


def multiples(xs: np.ndarray, ms: np.ndarray) -> Multiples:
    """The multiples of each m in ms between xs[0] and xs[-1] (xs ascending, distinct integers)."""
    xs, ms = np.asarray(xs, dtype=np.int64), np.asarray(ms, dtype=np.int64)
    first, count = _range_of_k(xs, ms)
    j = np.repeat(np.arange(len(ms)), count)
    k = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - first, count)
    value = k * ms[j]
    above = np.searchsorted(xs, value, side="right")
    return Multiples(j, k, above, xs[above - 1] == value)


def batches(xs: np.ndarray, ms: np.ndarray) -> list[slice]:
    """Consecutive slices of ms, each with about BATCH multiples at most (and one m at least)."""
    _, count = _range_of_k(np.asarray(xs, dtype=np.int64), np.asarray(ms, dtype=np.int64))
    batch = np.cumsum(count) // BATCH
    cuts = [0, *(np.flatnonzero(batch[1:] != batch[:-1]) + 1).tolist(), len(ms)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def measured_counts(xs: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Per m in ms, how many of the dims xs are its multiples."""
    if len(xs) == 0 or len(ms) == 0:
        return np.zeros(len(ms), dtype=int)
    counts = []
    for part in batches(xs, ms):
        found = multiples(xs, ms[part])
        counts.append(np.bincount(found.j[found.measured], minlength=len(ms[part])))
    return np.concatenate(counts)
