"""Our exact multiple-choice knapsack solver (one candidate per item, total cost <= budget, max value).

Integers in, integers out, so the optimum can be compared with OR-Tools by
equality. Two exact methods share one normalization (docs/architecture.md, "The solver"):

- dense: a DP table over the normalized budget, for small tables;
- core: LP relaxation -> exact Lagrangian fixing of the items whose bound rules
  out any change -> a Pareto DP over the remaining items, each state pruned by
  the LP relaxation of the items still to come at the room still left.

Tied slopes (uniform importance makes value = constant * params for every
item) are the hard case for a value-tracking DP: every reachable total cost is
its own Pareto state and no bound can tell them apart. Items whose surviving
candidates all lie exactly on the LP's slope are therefore merged into one
subset-sum over their costs (a bitset), which only asks "which totals are
reachable", and filled last.

Exactness: every decision that proves optimality (the upper bound, fixing,
the tie class, the final values) is made in integers; floats only prune DP
states, with an error margin that keeps more states than needed, never fewer.
Numbers too large for int64 arithmetic switch the arrays to Python ints.

Ties: among optimal solutions the solver returns the one using the fewest
parameters. The rest of the order is fixed by the input order, so equal inputs
always give equal answers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DENSE_CELL_LIMIT = 200_000  # candidates x budget cells; above this the core method wins by far
STATE_MIN = 2_000  # Pareto states above this and above room/4: a dense table over the free items is cheaper
DENSE_FALLBACK_CELLS = 400_000_000  # ... if it has at most this many cells (about 1-3 s)
TIE_BITS_LIMIT = 1 << 29  # tie items x reachable-sum bits kept for the back-trace (64 MB)
INT64_SAFE = 1 << 62  # sums and products below this cannot overflow int64
_FLOAT_ERR = 2.0**-50  # 8 x the double rounding unit: per-operation error allowance of a float bound


class InfeasibleBudget(ValueError):
    """Even the cheapest candidate of every item exceeds the budget."""

    def __init__(self, budget: int, smallest_feasible: int) -> None:
        super().__init__(f"budget {budget} is below the smallest feasible total {smallest_feasible}")
        self.budget = budget
        self.smallest_feasible = smallest_feasible


@dataclass
class MckpSolution:
    choice: list[int]  # per item, the index into its candidate list as given
    value: int
    cost: int
    method: str  # "trivial", "dense" or "core"
    fixed_items: int = 0
    max_states: int = 0
    stats: dict[str, float] = field(default_factory=dict)


@dataclass
class _Items:
    """All items' candidates in flat arrays, item by item, each item sorted by cost.

    After normalization an item's cheapest candidate costs 0 and is worth 0,
    and value strictly increases with cost (dominated candidates are gone).
    cost and value are int64 when every total fits, else Python ints (dtype object).
    """

    starts: np.ndarray  # item i owns positions starts[i]:starts[i+1]
    orig: np.ndarray  # the candidate's index in the caller's list for its item
    cost: np.ndarray
    value: np.ndarray

    @property
    def n(self) -> int:
        return len(self.starts) - 1

    def cost_of(self, i: int) -> np.ndarray:
        return self.cost[self.starts[i] : self.starts[i + 1]]

    def value_of(self, i: int) -> np.ndarray:
        return self.value[self.starts[i] : self.starts[i + 1]]

    def top_cost(self) -> np.ndarray:
        return self.cost[self.starts[1:] - 1]

    def top_value(self) -> np.ndarray:
        return self.value[self.starts[1:] - 1]


@dataclass
class _Normalized:
    items: _Items
    capacity: int
    flat_cost: np.ndarray  # the caller's numbers, flat, in input order
    flat_value: np.ndarray
    input_starts: np.ndarray


def _exact_dtype(largest: int) -> type | np.dtype:
    """int64 when no intermediate can reach `largest`'s magnitude range, else Python ints."""
    return np.dtype(np.int64) if largest < INT64_SAFE else object


def _exact_total(arr: np.ndarray) -> int:
    """The exact sum as a Python int, however many int64 terms (a 5,000-item total can leave the int64 range)."""
    return int(arr.astype(object).sum())


def _flatten(rows: Sequence[Sequence[int]], total: int) -> np.ndarray:
    try:
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
    except OverflowError:
        flat = None
    if flat is None or (total and (int(flat.max()) >= INT64_SAFE or int(flat.min()) <= -INT64_SAFE)):
        # Differences of such numbers overflow int64: keep them as exact Python ints.
        flat = np.array([int(x) for x in itertools.chain.from_iterable(rows)], dtype=object)
    return flat


def _segmented_running_max(v: np.ndarray, item: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running max of v restarting at each item (v sorted item by item)."""
    lo = np.minimum.reduceat(v, starts[:-1])
    rel = v - lo[item]  # >= 0 within each item
    span = int(rel.max()) + 1 if len(rel) else 1
    n = len(starts) - 1
    if v.dtype != object and span * n < (1 << 62):  # lift item k above all earlier items so one accumulate does it all
        lifted = rel + item.astype(np.int64) * span
        return np.maximum.accumulate(lifted) - item.astype(np.int64) * span + lo[item]
    out = np.empty_like(v)
    for i in range(n):
        a, b = starts[i], starts[i + 1]
        out[a:b] = np.maximum.accumulate(v[a:b])
    return out


def _normalize(costs: Sequence[Sequence[int]], values: Sequence[Sequence[int]], budget: int) -> _Normalized:
    if len(costs) != len(values) or len(costs) == 0:
        raise ValueError("costs and values need one (non-empty) entry per item")
    lens = np.fromiter((len(c) for c in costs), dtype=np.int64, count=len(costs))
    if (lens == 0).any() or not np.array_equal(lens, np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))):
        raise ValueError("every item needs at least one candidate and as many values as costs")
    if lens.max() > np.iinfo(np.uint16).max:
        raise ValueError("at most 65535 candidates per item")
    n, total = len(lens), int(lens.sum())
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    fc, fv = _flatten(costs, total), _flatten(values, total)
    if (fc < 0).any():
        raise ValueError("costs must be non-negative")
    if fc.dtype != fv.dtype:  # one side is huge: both exact, so mixed arithmetic stays exact
        fc, fv = fc.astype(object), fv.astype(object)
    item = np.repeat(np.arange(n), lens)
    local = np.arange(total) - starts[item]
    rising = np.ones(total, dtype=bool)  # each candidate costs more than the one before it in its item
    rising[1:] = fc[1:] > fc[:-1]
    rising[starts[:-1]] = True
    # Per item: cost asc, value desc, input order. Candidates listed by dim already are (the sort of
    # millions of them took a fifth of a 100,000-weight alignment).
    order = np.arange(total) if rising.all() else np.lexsort((local, -fv, fc, item))
    c, v, o = fc[order], fv[order], local[order]
    run = _segmented_running_max(v, item, starts)
    keep = np.ones(total, dtype=bool)
    inner = np.ones(total, dtype=bool)
    inner[starts[:-1]] = False  # an item's first (cheapest) candidate always stays
    keep[1:] = v[1:] > run[:-1]
    keep |= ~inner
    # Dropped: a cheaper-or-equal candidate of the same item is worth as much.
    c, v, o, item = c[keep], v[keep], o[keep], item[keep]
    new_starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(item, minlength=n), out=new_starts[1:])
    base_c, base_v = c[new_starts[:-1]], v[new_starts[:-1]]
    smallest = _exact_total(base_c)
    if budget < smallest:
        raise InfeasibleBudget(budget, smallest)
    # Offsetting by each item's cheapest candidate and dividing by the gcd keeps
    # only the reachable range in the table (7-74x smaller on real instances).
    c = c - base_c[item]
    v = v - base_v[item]
    g = int(np.gcd.reduce(c)) or 1
    gv = int(np.gcd.reduce(v)) or 1
    c, v = c // g, v // gv
    # Every DP sum is at most the sum of the items' top candidates: if that fits, int64 is exact.
    tops = new_starts[1:] - 1
    largest = max(_exact_total(c[tops]), _exact_total(v[tops]))
    dtype = _exact_dtype(largest)
    items = _Items(new_starts, o, c.astype(dtype), v.astype(dtype))
    return _Normalized(items, (budget - smallest) // g, fc, fv, starts)


def solve_mckp(
    costs: Sequence[Sequence[int]],
    values: Sequence[Sequence[int]],
    budget: int,
    method: str = "auto",
) -> MckpSolution:
    """Maximize the total value with one candidate per item and total cost <= budget.

    method: "auto" (dense when the table is small, else core), "dense" or "core".
    Raises InfeasibleBudget naming the smallest feasible budget.
    """
    if method not in ("auto", "dense", "core"):
        raise ValueError(f"unknown method {method!r}")
    norm = _normalize(costs, values, budget)
    items = norm.items
    top = int(items.top_cost().sum())
    fixed = states = 0
    stats: dict[str, float] = {}
    if top <= norm.capacity:  # every item's best fits: nothing to decide
        picks, used = (np.diff(items.starts) - 1).tolist(), "trivial"
        fixed = items.n
    else:
        cap = min(norm.capacity, top)
        cells = cap * len(items.cost)
        if method == "dense" or (method == "auto" and cells <= DENSE_CELL_LIMIT):
            picks, used, states = _dense(items, cap), "dense", cap + 1
        else:
            picks, fixed, states, stats = _core(items, cap)
            used = "core"
    local = items.orig[items.starts[:-1] + np.asarray(picks, dtype=np.int64)]
    flat = norm.input_starts[:-1] + local
    # Python ints: a 5,000-item total can come near the int64 range.
    cost = _exact_total(norm.flat_cost[flat])
    value = _exact_total(norm.flat_value[flat])
    if cost > budget:  # cannot happen; a wrong answer must never leave this function
        raise AssertionError(f"solver produced cost {cost} above budget {budget}")
    return MckpSolution(local.tolist(), value, cost, used, fixed, states, stats)


def _dense(items: _Items, cap: int) -> list[int]:
    """Table over exact normalized cost; max value, then lowest cost."""
    n = items.n
    best = np.full(cap + 1, -1, dtype=items.value.dtype)  # -1: cost not reachable (values are >= 0)
    best[0] = 0
    pick = np.zeros((n, cap + 1), dtype=np.uint16)
    reach = 0
    for i in range(n):
        ci, vi = items.cost_of(i), items.value_of(i)
        reach = min(cap, reach + int(ci[-1]))
        new = np.full(cap + 1, -1, dtype=best.dtype)
        row = pick[i]
        for j, (c, v) in enumerate(zip(ci.tolist(), vi.tolist())):
            if c > reach:
                break
            src = best[: reach + 1 - c]
            cand = np.where(src >= 0, src + v, -1)
            dst = new[c : reach + 1]
            better = cand > dst  # strict: on ties the cheaper candidate (lower j) stays
            dst[better] = cand[better]
            row[c : reach + 1][better] = j
        best = new
    b = int(np.argmax(best))  # first maximum: the lowest cost among optimal totals
    picks = [0] * n
    for i in range(n - 1, -1, -1):
        j = int(pick[i, b])
        picks[i] = j
        b -= int(items.cost_of(i)[j])
    return picks


def _dense_subset(items: _Items, free: np.ndarray, keeps: list[np.ndarray], room: int) -> list[int]:
    """The dense DP over the free items' surviving candidates (indices into each keep list)."""
    lens = np.array([len(jj) for jj in keeps], dtype=np.int64)
    starts = np.zeros(len(keeps) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    cost = np.concatenate([items.cost_of(i)[jj] - items.cost_of(i)[jj[0]] for i, jj in zip(free.tolist(), keeps)])
    value = np.concatenate([items.value_of(i)[jj] - items.value_of(i)[jj[0]] for i, jj in zip(free.tolist(), keeps)])
    base = sum(int(items.cost_of(i)[jj[0]]) for i, jj in zip(free.tolist(), keeps))
    sub = _Items(starts, np.zeros(len(cost), dtype=np.int64), cost, value)
    cap = min(room - base, int(sub.top_cost().sum()))
    return _dense(sub, cap)


def _upper_hull(c: list[int], v: list[int]) -> list[int]:
    """Indices of the upper convex hull (slopes strictly decreasing), from the cheapest candidate."""
    hull: list[int] = []
    for j in range(len(c)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b when it lies on or below the segment a -> j
            if (v[b] - v[a]) * (c[j] - c[a]) <= (v[j] - v[a]) * (c[b] - c[a]):
                hull.pop()
            else:
                break
        hull.append(j)
    return hull


def _straight_items(items: _Items) -> np.ndarray:
    """Per item: are all its candidates exactly on one line (the usual case: value = s * params)?

    Exact integer test: the LP bounds built on it must never be below the truth.
    """
    st = items.starts
    item = np.repeat(np.arange(items.n), np.diff(st))
    span_c, span_v = items.top_cost()[item], items.top_value()[item]
    dtype = _exact_dtype(2 * max(1, int(items.value.max())) * max(1, int(items.cost.max())))
    # From (0, 0) to the top candidate: v / c == span_v / span_c for every point.
    resid = items.value.astype(dtype) * span_c.astype(dtype) - span_v.astype(dtype) * items.cost.astype(dtype)
    off = np.zeros(items.n, dtype=bool)
    np.logical_or.at(off, item, resid != 0)
    return ~off


def _segments(items: _Items, straight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """LP hull segments of all items: (item, from, to, slope), from/to local indices.

    Straight items give one segment without a Python loop.
    """
    starts = items.starts
    last = starts[1:] - 1
    several = np.flatnonzero(np.diff(starts) > 1)  # items with a choice to make
    line = several[straight[several]]
    seg_item = [line]
    seg_from = [np.zeros(len(line), dtype=np.int64)]
    seg_to = [last[line] - starts[line]]
    hull_item: list[int] = []
    hull_from: list[int] = []
    hull_to: list[int] = []
    for i in several[~straight[several]].tolist():
        hull = _upper_hull(items.cost_of(i).tolist(), items.value_of(i).tolist())
        for a, b in zip(hull, hull[1:]):
            hull_item.append(i)
            hull_from.append(a)
            hull_to.append(b)
    seg_item.append(np.array(hull_item, dtype=np.int64))
    seg_from.append(np.array(hull_from, dtype=np.int64))
    seg_to.append(np.array(hull_to, dtype=np.int64))
    owner, lo, hi = np.concatenate(seg_item), np.concatenate(seg_from), np.concatenate(seg_to)
    first = starts[owner]
    delta_cost = (items.cost[first + hi] - items.cost[first + lo]).astype(np.float64)
    delta_value = (items.value[first + hi] - items.value[first + lo]).astype(np.float64)
    return owner, lo, hi, delta_value / delta_cost


@dataclass
class _LpResult:
    slope_num: int  # the LP multiplier lambda = slope_num / slope_den: the break segment's exact slope
    slope_den: int
    picks: np.ndarray  # greedy integer picks
    near: np.ndarray  # the items around the break


def _lp_greedy(items: _Items, cap: int, straight: np.ndarray, core_size: int = 16) -> _LpResult:
    """LP relaxation by slope order: its multiplier, greedy integer picks and the items around the break."""
    owner, lo, hi, slope = _segments(items, straight)
    order = np.lexsort((lo, owner, -slope))  # steepest first; an item's segments stay in order
    owner, lo, hi = owner[order], lo[order], hi[order]
    starts, cost, value = items.starts, items.cost, items.value
    seg_cost = cost[starts[owner] + hi] - cost[starts[owner] + lo]
    taken = int(np.searchsorted(np.cumsum(seg_cost), cap, side="right"))  # the LP takes this prefix whole
    picks = np.zeros(items.n, dtype=np.int64)
    picks[owner[:taken]] = hi[:taken]  # later segments of an item overwrite earlier ones
    room = cap - int(seg_cost[:taken].sum())
    # The caller only gets here when the top candidates overflow cap, so a break segment exists.
    brk = starts[owner[taken]]
    slope_num = int(value[brk + hi[taken]] - value[brk + lo[taken]])
    slope_den = int(cost[brk + hi[taken]] - cost[brk + lo[taken]])
    half = core_size // 2
    around = np.unique(owner[max(0, taken - half) : taken + half])  # the LP's marginal items
    if room > 0:
        _spend_leftover(items, owner[taken:].tolist(), picks, room)
    return _LpResult(slope_num, slope_den, picks, around)


def _spend_leftover(items: _Items, by_slope: list[int], picks: np.ndarray, room: int) -> None:
    """Spend what the LP rounding left over (in place): the best affordable upgrade per item, steepest first."""
    seen: set[int] = set()
    for i in by_slope:
        if room == 0:
            break
        if i in seen:
            continue
        seen.add(i)
        item_cost = items.cost_of(i)
        upgrade = int(np.searchsorted(item_cost, int(item_cost[picks[i]]) + room, side="right")) - 1
        if upgrade > picks[i]:
            room -= int(item_cost[upgrade] - item_cost[picks[i]])
            picks[i] = upgrade


def _improve_on_core(items: _Items, cap: int, near: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """A better incumbent: re-solve exactly the items around the LP's break.

    The LP rounding leaves a little budget unused; the items around the break
    can usually spend it exactly, and an incumbent at the bound ends the search.
    """
    st = items.starts
    counts = np.diff(st)
    if len(near) == 0:
        return picks
    used = int(items.cost[st[:-1] + picks].sum())
    room = cap - used + int(items.cost[st[near] + picks[near]].sum())
    keeps = [np.arange(counts[i]) for i in near.tolist()]
    if room * int(counts[near].sum()) > 2_000_000:
        return picks
    sub = _dense_subset(items, near, keeps, room)
    out = picks.copy()
    out[near] = sub
    return out


def _total_value(items: _Items, picks: np.ndarray) -> int:
    return int(items.value[items.starts[:-1] + picks].sum())  # within the total of the tops: no overflow


@dataclass
class _Reduced:
    """Exact Lagrangian data at lambda = num / den, scaled by den so everything stays an integer.

    For any solution x: den * (bound - value(x)) = sum of its candidates' loss + num * (cap - cost(x)),
    so a solution worth >= target only uses candidates with loss <= bound_num - den * target.
    """

    num: int
    den: int
    loss: np.ndarray  # per candidate: den * (its item's best reduced value - its reduced value) >= 0
    bound_num: int  # den * (the LP upper bound on the optimum)


def _reduce(items: _Items, cap: int, num: int, den: int) -> _Reduced:
    st = items.starts
    dtype = _exact_dtype(den * int(items.value.max()) + num * int(items.cost.max()))
    reduced = den * items.value.astype(dtype) - num * items.cost.astype(dtype)
    best = np.maximum.reduceat(reduced, st[:-1])
    loss = np.repeat(best, np.diff(st)) - reduced
    return _Reduced(num, den, loss, num * cap + _exact_total(best))


def _core(items: _Items, cap: int) -> tuple[list[int], int, int, dict[str, float]]:
    """LP -> exact bound -> bounded DP, with an optimistic target lowered until it holds.

    Pruning against a guessed target T instead of the incumbent is exact
    whenever the DP then finds a solution worth >= T (nothing that good was
    pruned); otherwise T is lowered geometrically, ending at the incumbent,
    where success is certain. The first target is the LP bound itself.
    """
    straight = _straight_items(items)
    lp = _lp_greedy(items, cap, straight)
    incumbent = _improve_on_core(items, cap, lp.near, lp.picks)
    reduced = _reduce(items, cap, lp.slope_num, lp.slope_den)
    z_inc = _total_value(items, incumbent)
    stats: dict[str, float] = {"dp_runs": 0}
    if z_inc * reduced.den >= reduced.bound_num:
        # At the bound: no loss and no unused room, so every optimum costs exactly cap (this one is the cheapest).
        return incumbent.tolist(), items.n, 0, stats
    search = _Search(items, cap, straight, reduced)
    upper = reduced.bound_num // reduced.den  # the optimum is an integer <= the bound
    step = 1  # the optimum is usually within a hair of the bound, however poor the incumbent
    target = upper
    max_states = 0
    while True:
        found = search.run(target, incumbent)
        stats["dp_runs"] += 1
        max_states = max(max_states, found.states)
        for key in ("tie_items", "dense_fallback"):
            stats[key] = max(stats.get(key, 0), found.stats.get(key, 0))
        if found.picks is not None and found.value >= target:
            return found.picks, found.fixed, max_states, stats
        if found.picks is not None and found.value > z_inc:
            z_inc, incumbent = found.value, np.asarray(found.picks, dtype=np.int64)
        if target <= z_inc:  # cannot happen: the incumbent itself survives every bound
            raise AssertionError("the bounded DP lost the incumbent")
        target = max(z_inc, target - step)
        step *= 8


@dataclass
class _Found:
    picks: list[int] | None  # None: no solution worth >= the target exists
    value: int = 0
    fixed: int = 0
    states: int = 0
    stats: dict[str, float] = field(default_factory=dict)


def _shift_union(reach: int, offsets: list[int], mask: int) -> int:
    """The union of reach shifted by each offset (the sums reachable after one more item), cut by mask."""
    step = offsets[1] - offsets[0] if len(offsets) > 1 else 0
    if len(offsets) > 2 and offsets[0] == 0 and all(b - a == step for a, b in zip(offsets, offsets[1:])):
        # Every dim of a window gives evenly spaced costs: doubling covers them in log2(len) shifts.
        have = 1  # reach now holds the shifts 0 .. (have - 1) * step
        while have < len(offsets):
            more = min(have, len(offsets) - have)
            reach = (reach | (reach << (more * step))) & mask
            have += more
        return reach
    out = 0
    for offset in offsets:
        out |= reach << offset
    return out & mask


class _TieClass:
    """Free items whose every surviving candidate lies exactly on the LP slope num/den.

    For them value = num/den * cost (from each item's cheapest survivor), so
    only their total cost matters: one subset-sum bitset over the cost offsets
    replaces a value-tracking DP whose states would span the whole cost range.
    """

    def __init__(self, offsets: list[list[int]], room: int) -> None:
        self.offsets = offsets
        self.size = min(room, sum(o[-1] for o in offsets)) + 1
        mask = (1 << self.size) - 1
        self.layers = [1]  # layers[t]: sums reachable by the tie items before t (bit s set: s reachable)
        for item_offsets in offsets:
            self.layers.append(_shift_union(self.layers[-1], item_offsets, mask))
        raw = np.frombuffer(self.layers[-1].to_bytes((self.size + 7) // 8, "little"), dtype=np.uint8)
        reachable = np.unpackbits(raw, bitorder="little")[: self.size].astype(bool)
        # fill[r]: the largest reachable sum <= r (0 is always reachable)
        self.fill = np.maximum.accumulate(np.where(reachable, np.arange(self.size), -1))

    def best_fill(self, rooms: np.ndarray) -> np.ndarray:
        return self.fill[np.minimum(rooms, self.size - 1).astype(np.int64)]

    def split(self, total: int) -> list[int]:
        """Per tie item, the index of the offset it takes so that they sum to total."""
        picks = [0] * len(self.offsets)
        for t in range(len(self.offsets) - 1, -1, -1):
            before = self.layers[t]
            picks[t] = next(j for j, o in enumerate(self.offsets[t]) if o <= total and (before >> (total - o)) & 1)
            total -= self.offsets[t][picks[t]]
        return picks


class _RestBound:
    """The LP relaxation of the items the DP has not reached yet, at any room they get.

    Items are numbered by their DP position; the tie items all have position
    `count` (they come last). The LP of positions k.. at room r is the base
    (every item at its cheapest survivor) plus the steepest hull segments that
    fit in r - base cost: concave and piecewise linear, so np.interp gives it.
    """

    def __init__(self, owner: list[int], seg_cost: list[int], seg_value: list[int], base_cost: list[int], base_value: list[int]) -> None:
        order = sorted(range(len(owner)), key=lambda s: (-seg_value[s] / seg_cost[s], s))
        self.owner = np.array([owner[s] for s in order], dtype=np.int64)
        self.seg_cost = np.array([float(seg_cost[s]) for s in order])
        self.seg_value = np.array([float(seg_value[s]) for s in order])
        # Suffix sums over positions: the bases of positions k.. (exact ints for the feasibility test).
        self.base_cost = list(itertools.accumulate(reversed(base_cost), initial=0))[::-1]
        self.base_value = [float(x) for x in itertools.accumulate(reversed(base_value), initial=0)][::-1]

    def value_at(self, k: int, rooms: np.ndarray) -> np.ndarray:
        """LP value of the positions k.. for each room; -inf where even their cheapest survivors do not fit."""
        mask = self.owner >= k
        xs = np.concatenate(([0.0], np.cumsum(self.seg_cost[mask])))
        ys = np.concatenate(([0.0], np.cumsum(self.seg_value[mask])))
        free_room = rooms - self.base_cost[min(k, len(self.base_cost) - 1)]
        out = np.interp(free_room.astype(np.float64), xs, ys) + self.base_value[min(k, len(self.base_value) - 1)]
        out[free_room < 0] = -np.inf
        return out


@dataclass
class _Fixing:
    """What a target fixes: items left with one candidate are settled, the rest stay free."""

    picks: np.ndarray  # settled items' picks (the others keep the incumbent's for now)
    room: int  # cap minus the settled items' cost
    value: int  # the settled items' value
    free: np.ndarray  # items with two or more surviving candidates
    keeps: dict[int, np.ndarray]  # per free item, its surviving local indices (by cost)
    ok: np.ndarray  # per candidate: survives
    alive: np.ndarray  # per item: how many candidates survive


@dataclass
class _Frontier:
    """The Pareto DP's final states over the regular items, and how to trace each back."""

    cost: np.ndarray
    value: np.ndarray
    trail: list[tuple[np.ndarray, np.ndarray]]  # per item: (parent state, local candidate) of each state
    max_states: int
    too_dense: bool = False  # stopped: the states approach the whole cost range, a dense table is cheaper


def _add_item(
    state_cost: np.ndarray,
    state_value: np.ndarray,
    cand_cost: np.ndarray,
    cand_value: np.ndarray,
    rest: _RestBound,
    next_position: int,
    room: int,
    floor: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Pareto DP step: every state with every candidate of one more item, then pruned twice.

    Kept: states whose value plus the LP of the items still to come (positions `next_position`..,
    at the room their cost leaves) reaches `floor`, and of those the Pareto frontier (by cost ascending, strictly more value).
    Returns (cost, value, source), source indexing candidate-major pairs: candidate = source // len(state_cost),
    parent state = source % len(state_cost); empty when no state can reach the floor.
    """
    new_cost = (state_cost[None, :] + cand_cost[:, None]).ravel()
    new_value = (state_value[None, :] + cand_value[:, None]).ravel()
    bound = rest.value_at(next_position, room - new_cost) + new_value.astype(np.float64)
    source = np.flatnonzero(bound >= floor)  # -inf (does not fit) never passes
    if len(source) == 0:
        return new_cost[:0], new_value[:0], source
    new_cost, new_value = new_cost[source], new_value[source]
    order = np.lexsort((-new_value, new_cost))  # stable: equal states keep generation order
    new_cost, new_value, source = new_cost[order], new_value[order], source[order]
    if len(new_value) > 1:
        best_so_far = np.maximum.accumulate(new_value)
        dominated = np.zeros(len(new_value), dtype=bool)
        dominated[1:] = new_value[1:] <= best_so_far[:-1]  # a cheaper state is worth at least as much
        new_cost, new_value, source = new_cost[~dominated], new_value[~dominated], source[~dominated]
    return new_cost, new_value, source


class _Search:
    """One bounded DP per target, sharing what does not depend on the target."""

    def __init__(self, items: _Items, cap: int, straight: np.ndarray, reduced: _Reduced) -> None:
        self.items, self.cap, self.straight, self.reduced = items, cap, straight, reduced
        self.zero_loss = reduced.loss == 0
        self.total_value = float(items.top_value().sum())

    def run(self, target: int, incumbent: np.ndarray) -> _Found:
        """The best solution among those the bounds cannot exclude from reaching target."""
        items = self.items
        fixing = self._fix(target, incumbent)
        fixed = items.n - len(fixing.free)
        if fixing.room < 0:
            return _Found(None, fixed=fixed)
        if len(fixing.free) == 0:
            return _Found(fixing.picks.tolist(), fixing.value, fixed)
        keeps = fixing.keeps

        tie_items, regular = self._split_ties(fixing)
        tie_base_cost = sum(int(items.cost_of(i)[keeps[i][0]]) for i in tie_items.tolist())
        tie_base_value = sum(int(items.value_of(i)[keeps[i][0]]) for i in tie_items.tolist())
        room = fixing.room - tie_base_cost  # what the regular items and the ties' offsets may spend
        need = target - fixing.value - tie_base_value  # what they must be worth together
        stats: dict[str, float] = {"tie_items": len(tie_items)}
        if room < 0:
            return _Found(None, fixed=fixed, stats=stats)

        rest = self._rest_bound(regular, tie_items, keeps)
        margin = _FLOAT_ERR * (len(rest.owner) + 16) * self.total_value + 1e-6
        dense_cells = fixing.room * sum(len(keep) for keep in keeps.values())
        frontier = self._pareto(regular, keeps, room, need - margin, rest, dense_cells)
        if frontier is None:
            return _Found(None, fixed=fixed, stats=stats)
        if frontier.too_dense:
            stats["dense_fallback"] = 1
            return self._dense_fallback(fixing, fixed, stats)

        # Fill the room each state leaves with the tie items: more is always worth more (num > 0).
        red = self.reduced
        ties = _TieClass(self._tie_offsets(tie_items, keeps), room) if len(tie_items) else None
        if ties is not None:
            extra = ties.best_fill(room - frontier.cost)
            dtype = _exact_dtype(red.num * ties.size + int(frontier.value.max()))
            total_value = frontier.value.astype(dtype) + (red.num * extra.astype(dtype)) // red.den  # exact: see _TieClass
        else:
            extra, total_value = np.zeros(len(frontier.cost), dtype=np.int64), frontier.value
        best = int(np.lexsort((frontier.cost + extra, -total_value))[0])  # max value, then fewest params

        out = fixing.picks.tolist()
        state = best
        for k in range(len(regular) - 1, -1, -1):
            parent, cand = frontier.trail[k]
            out[int(regular[k])] = int(cand[state])
            state = int(parent[state])
        if ties is not None:
            for i, j in zip(tie_items.tolist(), ties.split(int(extra[best]))):
                out[i] = int(keeps[i][j])
        value = int(total_value[best]) + fixing.value + tie_base_value
        return _Found(out, value, fixed, frontier.max_states, stats)

    def _fix(self, target: int, incumbent: np.ndarray) -> _Fixing:
        """Exact fixing: a candidate whose loss alone exceeds the slack cannot be in a solution worth >= target."""
        items, st, red = self.items, self.items.starts, self.reduced
        ok = red.loss <= red.bound_num - red.den * target
        alive = np.add.reduceat(ok.astype(np.int64), st[:-1])  # >= 1: every item's best candidate has loss 0
        picks = incumbent.copy()
        single = np.flatnonzero(alive == 1)
        pos = np.flatnonzero(ok)
        first_alive = pos[np.searchsorted(pos, st[:-1])]  # first surviving position of each item
        picks[single] = first_alive[single] - st[single]
        room = self.cap - int(items.cost[first_alive[single]].sum())
        value = int(items.value[first_alive[single]].sum())
        free = np.flatnonzero(alive > 1)
        keeps = {i: np.flatnonzero(ok[st[i] : st[i + 1]]) for i in free.tolist()}
        return _Fixing(picks, room, value, free, keeps, ok, alive)

    def _split_ties(self, fixing: _Fixing) -> tuple[np.ndarray, np.ndarray]:
        """(tie items, regular items in DP order). Tie items have every survivor exactly on the LP slope."""
        st, free, alive = self.items.starts, fixing.free, fixing.alive
        zero_alive = np.add.reduceat((fixing.ok & self.zero_loss).astype(np.int64), st[:-1])
        tie_items = free[zero_alive[free] == alive[free]]
        span = sum(int(self.items.cost_of(i)[fixing.keeps[i][-1]] - self.items.cost_of(i)[fixing.keeps[i][0]]) for i in tie_items.tolist())
        if len(tie_items) * (min(fixing.room, span) + 1) > TIE_BITS_LIMIT:
            tie_items = tie_items[:0]  # too large to keep: the DP takes them like any item
        regular = np.setdiff1d(free, tie_items)
        # Items with few surviving candidates first: the state set grows late.
        return tie_items, regular[np.lexsort((regular, alive[regular]))]

    def _tie_offsets(self, tie_items: np.ndarray, keeps: dict[int, np.ndarray]) -> list[list[int]]:
        return [(self.items.cost_of(i)[keeps[i]] - self.items.cost_of(i)[keeps[i][0]]).tolist() for i in tie_items.tolist()]

    def _rest_bound(self, regular: np.ndarray, tie_items: np.ndarray, keeps: dict[int, np.ndarray]) -> _RestBound:
        """Hull segments of each item's survivors, owned by its DP position (tie items: after the last)."""
        items = self.items
        owner: list[int] = []
        seg_cost: list[int] = []
        seg_value: list[int] = []
        base_cost: list[int] = []
        base_value: list[int] = []
        count = len(regular)
        positions = list(enumerate(regular.tolist())) + [(count, i) for i in tie_items.tolist()]
        for k, i in positions:
            cost = items.cost_of(i)[keeps[i]].tolist()
            value = items.value_of(i)[keeps[i]].tolist()
            if k < count:  # the tie items' bases were taken off the room already
                base_cost.append(cost[0])
                base_value.append(value[0])
            # Survivors of a straight item are on its line; otherwise their own upper hull.
            hull = [0, len(cost) - 1] if self.straight[i] else _upper_hull(cost, value)
            for a, b in zip(hull, hull[1:]):
                owner.append(k)
                seg_cost.append(cost[b] - cost[a])
                seg_value.append(value[b] - value[a])
        base_cost.append(0)  # the position of the tie items
        base_value.append(0)
        return _RestBound(owner, seg_cost, seg_value, base_cost, base_value)

    def _pareto(
        self, regular: np.ndarray, keeps: dict[int, np.ndarray], room: int, floor: float, rest: _RestBound, dense_cells: int
    ) -> _Frontier | None:
        """Pareto DP over the regular items: a state survives while its value plus the LP of the rest >= floor.

        None when no state survives (nothing reaches the target).
        """
        items = self.items
        state_cost = np.zeros(1, dtype=items.cost.dtype)
        state_value = np.zeros(1, dtype=items.value.dtype)
        trail: list[tuple[np.ndarray, np.ndarray]] = []
        max_states = 1
        for position, i in enumerate(regular.tolist()):
            if len(state_cost) > STATE_MIN and 4 * len(state_cost) > room and dense_cells <= DENSE_FALLBACK_CELLS:
                # Slopes tied off the LP's leave the bound nothing to tell the states apart by.
                return _Frontier(state_cost, state_value, trail, max_states, too_dense=True)
            keep = keeps[i]
            new_cost, new_value, source = _add_item(
                state_cost, state_value, items.cost_of(i)[keep], items.value_of(i)[keep], rest, position + 1, room, floor
            )
            if len(source) == 0:
                return None
            n_states = len(state_cost)
            trail.append((source % n_states, keep[source // n_states]))  # (parent state, local candidate)
            state_cost, state_value = new_cost, new_value
            max_states = max(max_states, len(state_cost))
        return _Frontier(state_cost, state_value, trail, max_states)

    def _dense_fallback(self, fixing: _Fixing, fixed: int, stats: dict[str, float]) -> _Found:
        """The exact optimum over all free items' survivors, as one dense table."""
        items = self.items
        free_keeps = [fixing.keeps[i] for i in fixing.free.tolist()]
        sub = _dense_subset(items, fixing.free, free_keeps, fixing.room)
        out = fixing.picks.tolist()
        value = fixing.value
        for i, keep, j in zip(fixing.free.tolist(), free_keeps, sub):
            out[i] = int(keep[j])
            value += int(items.value_of(i)[keep[j]])
        return _Found(out, value, fixed, fixing.room + 1, stats)
