"""Which dims of an item's span (its window and the look-ahead above it) must be measured: far
fewer than all of them on a GPU, whose curves are lattices (gac.solver.lattice).

Pass 1, while the span's skeleton is not measured yet: the skeleton only, i.e. every multiple of
the alignment (the paper's window, round-to-8 and most candidates are there anyway), the
compressor's own dims (the unaligned prediction is measured, never modelled), and a seeded
sample of the other dims with a few of each class (odd, 2 mod 4, 4 mod 8), so the lattice fit
has evidence for every class.

Pass 2, once the skeleton is in: the lattice is fitted per kernel on the measured dims around
the span. An unmeasured dim is left out only when it provably cannot matter: even its optimistic
latency (its lower bound) is slower than the pessimistic latency of some larger dim of the span,
which therefore beats it (such a dim is never on the cliff-free frontier); or, above the window,
it cannot beat any window dim still in play, which is all the look-ahead is for. Every other
dim is still needed. Candidates are thus always measured dims; the model only removes dims that
are dominated. Where a kernel's fit is unsure (the classes do not explain its dims, as on a
CPU's staircase), the item falls back to every dim, as without CandidateOptions.sparse.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from gac.solver.lattice import measured_bounds

if TYPE_CHECKING:
    from gac.solver.candidates import Item, LatencyModel

FIRST_PASS = "lattice and sample first (more points may follow)"  # a missing curve's reason in pass 1
SAMPLE_RATE = 1 / 16  # of the dims off the lattice, sampled in pass 1 ...
MIN_PER_CLASS = 3  # ... and at least this many of each class in every span
_SEED = 0x9E3779B97F4A7C15  # the sample is a fixed function of the dim: overlapping spans share it


def priority(dims: np.ndarray) -> np.ndarray:
    """A pseudo-random number in [0, 1) per dim (splitmix64 of the dim): the same dim always draws
    the same number, so the items whose spans overlap sample the same dims, and runs repeat."""
    z = dims.astype(np.uint64) + np.uint64(_SEED)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@lru_cache(maxsize=65_536)
def skeleton(lo: int, top: int, align: int, own: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Pass 1's dims of lo..top: the multiples of align, the compressor's own dims, and a sample of
    the rest (SAMPLE_RATE, and at least MIN_PER_CLASS of each class counting the own dims: the
    ones drawing the smallest numbers)."""
    dims = np.arange(lo, top + 1, dtype=np.int64)
    lattice = dims % align == 0
    draw = priority(dims)
    pick = lattice | (draw < SAMPLE_RATE) | np.isin(dims, own)
    classes = dims & -dims  # the largest power of two dividing each dim
    for c in np.unique(classes[~lattice]):
        members = np.flatnonzero(~lattice & (classes == c) & ~pick)
        short = MIN_PER_CLASS - int((~lattice & (classes == c) & pick).sum())
        if short > 0:  # the class's smallest draws: the spans around share most of them
            pick[members[np.argsort(draw[members], kind="stable")[:short]]] = True
    return tuple(dims[pick].tolist())


def wanted(item: Item, model: LatencyModel, span: tuple[int, int, int], align: int) -> tuple[list[int] | None, bool]:
    """The dims of the span lo..top still to measure, and whether they are pass 1's skeleton;
    None: every dim (a kernel's lattice is unsure)."""
    lo, hi, top = span
    own = tuple(sorted({d for d in (math.floor(item.d_star), math.ceil(item.d_star)) if lo <= d <= top}))
    first = list(skeleton(lo, top, align, own))
    terms = model.kernel_terms(item)
    if model.lookup is None or not all(k.scale * d in model.curve(k) for k, _ in terms for d in first):
        return first, True
    return _undecided(item, model, span), False


def _undecided(item: Item, model: LatencyModel, span: tuple[int, int, int]) -> list[int] | None:
    """Pass 2: the dims of the span that are unmeasured and not provably out (left_out)."""
    lo, hi, top = span
    dims = np.arange(lo, top + 1)
    bounds = item_bounds(item, model, dims)
    if bounds is None:
        return None
    low, high, measured = bounds
    return dims[~measured & ~left_out(dims, low, high, hi)].tolist()


def left_out(dims: np.ndarray, low: np.ndarray, high: np.ndarray, hi: int) -> np.ndarray:
    """Per dim of a span (ascending; the window is up to hi, the look-ahead above): whether it
    cannot matter, by the latency bounds low and high. Dominated: even its low is above the
    high of some larger dim of the span, which therefore beats it (transitively, that larger dim
    may itself be left out: whatever beats it beats this one too). Above the window: its low is
    above the high of every window dim still in play, so it can make none of them lose."""
    best_above = np.append(np.minimum.accumulate(high[::-1])[::-1][1:], np.inf)  # the best high of the larger dims
    dominated = low > best_above
    in_play = (dims <= hi) & ~dominated
    if not in_play.any():
        return dominated
    return dominated | ((dims > hi) & (low > high[in_play].max()))


def item_bounds(item: Item, model: LatencyModel, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per dim: the item's latency low and high (a workload-weighted sum over its kernels, each
    measured dim within its noise, each other one within its lattice bounds; 0 and inf where its
    class is not predicted), and whether every kernel measured it. None: a kernel's fit is unsure."""
    low, high = np.zeros(len(dims)), np.zeros(len(dims))
    measured = np.ones(len(dims), dtype=bool)
    for k, weight in model.kernel_terms(item):
        xs = k.scale * dims
        fit = model.lattice(k, int(xs[0]), int(xs[-1]))
        if not fit.sure:
            return None
        have, medians, noise = model.curve_arrays(k)
        at = np.minimum(np.searchsorted(have, xs), max(0, len(have) - 1))
        seen = (have[at] == xs) if len(have) else np.zeros(len(xs), dtype=bool)
        k_low, k_high = fit.bounds_of(xs)
        m_low, m_high = measured_bounds(medians[at[seen]], noise[at[seen]])
        k_low[seen], k_high[seen] = m_low, m_high
        measured &= seen
        low += weight * k_low
        high += weight * k_high
    return low, high, measured
