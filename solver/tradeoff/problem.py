"""One instance of gac.solver.tradeoff in flat arrays, and its points.

The caller's items become candidates in flat arrays, item by item, each item sorted by dim and
offset to its smallest, so that the smallest choice costs, keeps and takes nothing; Problem adds
the budget left above that, the hulls the dual needs and the window DPs, built when first asked.
A Point is a choice in the caller's candidate order with its totals in the caller's units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gac.solver.mckp import InfeasibleBudget
from gac.solver.tradeoff.dp import WindowSolver, hull_vertices


@dataclass(frozen=True)
class TradeoffItem:
    unit: int  # parameters per unit of d
    worth: int  # kept importance per unit of d (integer-scaled)
    dims: tuple[int, ...]
    latency: tuple[int, ...]  # integer latency units, one per dim

    def __post_init__(self) -> None:
        if not self.dims or len(self.dims) != len(self.latency):
            raise ValueError("an item needs at least one dim and one latency per dim")
        if self.unit <= 0 or self.worth < 0 or min(self.dims) < 0:
            raise ValueError("unit must be positive, worth and dims non-negative")


@dataclass(frozen=True)
class Point:
    """One solution: the chosen index per item and its totals."""

    choice: tuple[int, ...]
    latency: int
    value: int
    cost: int


@dataclass
class TradeoffStats:
    fixed_items: int = 0
    max_states: int = 0
    rounds: int = 0  # target raises until the DP proved its answer
    bound: float = 0.0  # the Lagrangian lower bound on latency
    optimum_tie_proven: bool = True  # False: the importance optimum is not proven the fastest of its ties


@dataclass
class Flat:
    """All candidates in flat arrays, item by item, each item sorted by dim and offset to its smallest."""

    starts: np.ndarray
    item: np.ndarray  # item index per position
    orig: np.ndarray  # index into the caller's dims of that item
    dd: np.ndarray  # d - smallest d of the item
    cost: np.ndarray  # unit * dd
    value: np.ndarray  # worth * dd
    lat: np.ndarray  # latency - smallest latency of the item
    unit: np.ndarray
    worth: np.ndarray
    base_cost: int
    base_value: int
    base_lat: int

    @property
    def n(self) -> int:
        return len(self.starts) - 1

    def span(self, i: int) -> slice:
        return slice(int(self.starts[i]), int(self.starts[i + 1]))


def _flatten(items: Sequence[TradeoffItem]) -> Flat:
    lens = np.array([len(it.dims) for it in items], dtype=np.int64)
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    item = np.repeat(np.arange(len(items)), lens)
    dims = np.concatenate([np.asarray(it.dims, dtype=np.int64) for it in items])
    lat = np.concatenate([np.asarray(it.latency, dtype=np.int64) for it in items])
    local = np.arange(len(dims)) - starts[item]
    order = np.lexsort((local, lat, dims, item))  # per item by dim; equal dims: the faster first
    dims, lat, local = dims[order], lat[order], local[order]
    # An equal dim twice: the slower copy can never be better.
    keep = np.ones(len(dims), dtype=bool)
    keep[1:] = (dims[1:] != dims[:-1]) | (item[1:] != item[:-1])
    dims, lat, local, item = dims[keep], lat[keep], local[keep], item[keep]
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.bincount(item, minlength=len(items)), out=starts[1:])
    unit = np.array([it.unit for it in items], dtype=np.int64)
    worth = np.array([it.worth for it in items], dtype=np.int64)
    d0 = dims[starts[:-1]]
    t0 = np.minimum.reduceat(lat, starts[:-1])
    dd = dims - d0[item]
    return Flat(
        starts=starts,
        item=item,
        orig=local,
        dd=dd,
        cost=unit[item] * dd,
        value=worth[item] * dd,
        lat=lat - t0[item],
        unit=unit,
        worth=worth,
        base_cost=int(sum(int(u) * int(d) for u, d in zip(unit, d0))),
        base_value=int(sum(int(w) * int(d) for w, d in zip(worth, d0))),
        base_lat=int(sum(int(t) for t in t0)),
    )


def segmented_min(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.minimum.reduceat(x, starts[:-1])


@dataclass
class Hulls:
    """Lower convex hull segments of each item's (d, latency) points, for the dual."""

    item: np.ndarray
    slope: np.ndarray  # latency per unit of d along the segment (increasing within an item)
    width: np.ndarray  # d span of the segment


def _hulls(f: Flat, on_hull: np.ndarray) -> Hulls:
    """The segments between consecutive lower-hull vertices (on_hull, from dp.hull_vertices) of each item."""
    vert = np.flatnonzero(on_hull)
    same = f.item[vert[1:]] == f.item[vert[:-1]]
    a, b = vert[:-1][same], vert[1:][same]
    width = f.dd[b] - f.dd[a]
    return Hulls(f.item[a], (f.lat[b] - f.lat[a]) / width, width)


@dataclass
class Problem:
    f: Flat
    hulls: Hulls
    room: int  # budget minus every item's smallest cost
    on_hull: np.ndarray  # per candidate: a vertex of its item's lower convex hull of (cost, latency)
    stats: TradeoffStats = field(default_factory=TradeoffStats)
    # (W, U) when every item keeps W / U importance per parameter (value = W / U * cost exactly), else None.
    ratio: tuple[int, int] | None = None
    _window: WindowSolver | None = None
    _value_window: WindowSolver | None = None

    @property
    def window(self) -> WindowSolver:
        """The window DP over (cost, latency): the proportional case and the weighted solves' hulls."""
        if self._window is None:
            self._window = WindowSolver(self.f.starts, self.f.cost, self.f.lat, self.on_hull)
        return self._window

    @property
    def value_window(self) -> WindowSolver:
        """The same over (importance, latency): the Lagrangian of the importance constraint alone."""
        if self._value_window is None:
            f = self.f
            self._value_window = WindowSolver(f.starts, f.value, f.lat, hull_vertices(f.starts, f.value, f.lat))
        return self._value_window


def _proportional(f: Flat) -> tuple[int, int] | None:
    """(W, U) in lowest terms when worth_i / unit_i == W / U for every item with a choice to make."""
    multi = np.flatnonzero(np.diff(f.starts) > 1)
    if len(multi) == 0:
        return 0, 1
    w0, u0 = int(f.worth[multi[0]]), int(f.unit[multi[0]])
    g = math.gcd(w0, u0) or 1
    w, u = w0 // g, u0 // g
    worth, unit = f.worth[multi].astype(object), f.unit[multi].astype(object)
    if all(int(x) == 0 for x in worth * u - unit * w):
        return w, u
    return None


def prepare(items: Sequence[TradeoffItem], budget: int) -> Problem:
    if not items:
        raise ValueError("no items")
    f = _flatten(items)
    room = budget - f.base_cost
    if room < 0:
        raise InfeasibleBudget(budget, f.base_cost)
    on_hull = hull_vertices(f.starts, f.cost, f.lat)
    return Problem(f, _hulls(f, on_hull), room, on_hull, ratio=_proportional(f))


def to_point(p: Problem, picks: np.ndarray) -> Point:
    f = p.f
    pos = f.starts[:-1] + picks
    return Point(
        choice=tuple(int(x) for x in f.orig[pos]),
        latency=f.base_lat + int(f.lat[pos].sum()),
        value=f.base_value + int(sum(int(x) for x in f.value[pos])),
        cost=f.base_cost + int(sum(int(x) for x in f.cost[pos])),
    )


def better(a: Point, b: Point | None) -> bool:
    """Lexicographic: less latency, then more importance, then fewer parameters."""
    return b is None or (a.latency, -a.value, a.cost) < (b.latency, -b.value, b.cost)


def is_feasible(p: Problem, picks: np.ndarray, need: int) -> bool:
    f = p.f
    pos = f.starts[:-1] + picks
    return int(f.cost[pos].sum()) <= p.room and int(sum(int(x) for x in f.value[pos])) >= need


def picks_of(p: Problem, pt: Point) -> np.ndarray:
    """Local (sorted) picks of a point given in the caller's candidate order."""
    f = p.f
    out = np.empty(f.n, dtype=np.int64)
    for i, j in enumerate(pt.choice):
        s = f.span(i)
        out[i] = int(np.flatnonzero(f.orig[s] == j)[0])
    return out
