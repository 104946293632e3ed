"""Least latency keeping at least W importance, the budget left out: a core DP joined with the periphery.

Why. At a typical question (the epsilon point, most of the frontier) the budget does not bind:
the answer keeps well below it. What is left is a one-constraint knapsack over importance,
whose Lagrangian bound lies some hundred latency units below the optimum: integral choices
overshoot W, and only combinations of near-tied changes tune the importance down to just
above it. A DP over every item with such a slack keeps thousands of Pareto states, because
the changes with a large reduced cost (a dim or two inside a latency step) combine with
everything else.

Method (exact; reduced costs in integers, scaled as in gac.solver.tradeoff.dp):

1. The Lagrangian of "importance >= W" (dp.WindowSolver over importance instead of
   cost) gives a bound L and per candidate a reduced cost rc >= 0; a choice with latency
   <= T has sum rc <= slack = T - L (scaled), which fixes every candidate above the slack.
2. Per item its best candidate (least rc) is its base; an item whose other survivors all
   cost more than slack / 3 is peripheral: any such choice changes at most two of them.
3. The core (the other items) runs a Pareto DP: states (importance, latency, params), a state
   dropped when another is at least as good in the final order (latency, then importance,
   then params) and keeps at least as much importance, or when its reduced cost passes the slack.
4. The periphery's choices are enumerated: every base, each single change, each pair of
   changes of two items, within the slack. For each, the core state completing it best
   (importance enough, then the final order) comes from a binary search over the core
   states sorted by importance with a running best from the top.

The answer is the best pair in the final order; with T at or above the optimum it is exact,
ties included. The caller checks the budget afterwards (gac.solver.tradeoff.fastest): an answer within
it answers the budgeted question too. A round that ends without a choice at or below T
proves that none exists: the caller keeps T + 1 as a lower bound even when a later round fails.

Near-tied importance (scores within a fraction of a percent of one ratio) makes the Lagrangian
nearly degenerate: the gap to the integral optimum is real integrality, and the Pareto states grow
with the slack. So the quick search stops on work (WORK_PER_ITEM per item over all rounds), not on a
state count; when it stops, gac.solver.tradeoff runs it again exhaustively (Effort.exhaustive: no work
cap, a time limit, memory caps on states), from the beam's point down: exact, for the price of a
subset sum. The measurements behind this are in docs/results/tradeoff-near-ties.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

CORE_STATES = 100_000  # the core DP gives up here (the caller falls back)
CHUNK = 4_000_000  # expansions formed at once (about 40 bytes each)
EXPAND_FACTOR = 8  # ... or when one item's expansion passes this many times that
WORK_PER_ITEM = 10_000  # expanded states over all rounds of one search, per item of the instance, before giving up
WORK_FLOOR = 2_000_000  # ... but at least this many: a few items with hundreds of dims each need ~300k (one layer)
PERIPHERY_PAIRS = 2_000_000  # pairs of peripheral changes enumerated at most
EXHAUSTIVE_STATES = 1_000_000  # an exhaustive search's states after one item
EXHAUSTIVE_EXPANSIONS = 50_000_000  # ... and its expansions of one item (formed CHUNK at a time)
TRAIL_BYTES = 200_000_000  # the trace-back's memory over all items (4 bytes a state, 8 where a layer's codes pass 32 bits)


@dataclass(frozen=True)
class Effort:
    """How far one search may go before it raises CoreTooLarge: work and states (quick), or time (exhaustive)."""

    work: int | None  # states expanded over all rounds; None: no cap
    states: int  # states after one core item
    expansions: int  # states times candidates at one core item
    deadline: float | None = None  # time.monotonic() past which the search stops

    @classmethod
    def quick(cls, items: int) -> Effort:
        return cls(max(WORK_FLOOR, WORK_PER_ITEM * items), CORE_STATES, EXPAND_FACTOR * CORE_STATES)

    @classmethod
    def exhaustive(cls, seconds: float) -> Effort:
        """Until proven or out of time (or of memory: EXHAUSTIVE_STATES, EXHAUSTIVE_EXPANSIONS, TRAIL_BYTES)."""
        return cls(None, EXHAUSTIVE_STATES, EXHAUSTIVE_EXPANSIONS, time.monotonic() + seconds)


class CoreTooLarge(RuntimeError):
    """The core DP or the periphery's pairs passed their caps: the caller falls back."""


@dataclass
class _States:
    v: np.ndarray
    t: np.ndarray
    c: np.ndarray
    rc: np.ndarray
    parent: np.ndarray  # index into the previous states
    pick: np.ndarray  # flat candidate position taken at this item
    # Both in one number, once the layer is done: parent * (the item's candidates) + the candidate's
    # place in its item; uint32 whenever that fits, which halves the trace-back's memory.
    code: np.ndarray | None = None


def _pareto(v: np.ndarray, t: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Indices of the states no other beats, by ascending t: in the order (t, -v, c), kept while v rises above every earlier one.

    The expansions arrive as runs already sorted by t (each candidate added to states sorted by t),
    so a stable argsort merges them in near-linear time; states of equal t are settled per group
    (the most v, then the least c), which is what a sort on (t, -v, c) would keep.
    """
    if not len(t):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    ts, vs = t[order], v[order]
    new = np.ones(len(ts), dtype=bool)
    new[1:] = ts[1:] != ts[:-1]
    starts = np.flatnonzero(new)
    top = np.maximum.reduceat(vs, starts)  # per latency, the most value
    earlier = np.maximum.accumulate(top)
    rises = np.ones(len(top), dtype=bool)
    rises[1:] = top[1:] > earlier[:-1]
    group = np.cumsum(new) - 1
    pick = np.flatnonzero(rises[group] & (vs == top[group]))
    if len(pick) > int(rises.sum()):  # the same (t, v) twice: the least c of each
        pick = pick[np.lexsort((c[order[pick]], group[pick]))]
        first = np.ones(len(pick), dtype=bool)
        first[1:] = group[pick][1:] != group[pick][:-1]
        pick = pick[first]
    return order[pick]


class UnbudgetedSearch:
    """One Lagrangian of "importance >= need", many targets (the caller raises the slack until one holds).

    starts, item, value, lat, cost: flat per candidate, item by item; rc: per candidate the
    reduced cost above its item's least (integers, any positive scale; the least is 0); price:
    what one `unit` of value above need adds to the reduced cost (the multiplier on that scale):
    a choice at latency T spends sum rc + price * (value - need) / unit <= slack.
    """

    def __init__(
        self,
        starts: np.ndarray,
        item: np.ndarray,
        value: np.ndarray,
        lat: np.ndarray,
        cost: np.ndarray,
        rc: np.ndarray,
        price: int,
        unit: int,
        effort: Effort | None = None,
    ) -> None:
        self.starts, self.item, self.value, self.lat, self.cost, self.rc = starts, item, value, lat, cost, rc
        self.price, self.unit = price, unit
        # Base per item: least rc, then the final order (latency, -value, cost).
        zero = np.flatnonzero(rc == 0)  # every item has one (rc is above its item's least); ties are few
        zero = zero[np.lexsort((cost[zero], -value[zero], lat[zero], item[zero]))]
        self.base = zero[np.searchsorted(item[zero], np.arange(len(starts) - 1))]
        self.other = np.ones(len(rc), dtype=bool)
        self.other[self.base] = False
        b = self.base[item]
        self.dv, self.dt, self.dc = value - value[b], lat - lat[b], cost - cost[b]
        big = np.iinfo(np.int64).max
        self.alt = np.minimum.reduceat(np.where(self.other, rc, big), starts[:-1])  # an item's least other rc
        # Work or time, rarely memory, limits the search: near ties make every round dearer (see the module docstring).
        self.effort = effort or Effort.quick(len(starts) - 1)
        self.work_left = self.effort.work

    def best(self, slack: int, need: int, target: int) -> np.ndarray | None:
        """Flat positions (one per item) of the best choice keeping value >= need among those within slack
        (sum of rc), in the order (latency, -value, cost); None when none of them has latency <= target.

        Every choice within slack and target is in reach, so an answer at or below target is exact;
        one above it is a real choice all the same. Raises CoreTooLarge past its effort or PERIPHERY_PAIRS.
        """
        third = slack // 3
        core = np.flatnonzero(self.alt <= third)
        core = core[np.argsort(-self.alt[core], kind="stable")]  # near-ties last: the states grow late
        periph = np.flatnonzero((self.alt > third) & (self.alt <= slack))
        changes = _periphery(self, periph, slack)
        base_v, base_t = int(self.value[self.base].sum()), int(self.lat[self.base].sum())
        short = need - base_v  # the value core and periphery must add to the bases
        # Overshoot is priced from need rounded up to the value unit (the Lagrangian's own window start).
        anchor = -(-need // self.unit) * self.unit - base_v
        layers = _core_dp(self, core, slack, short, anchor, changes, target - base_t - int(changes.t.min()))
        if layers is None:
            return None
        return _join(self, core, layers, changes, short)


def _core_dp(u: UnbudgetedSearch, core: np.ndarray, room: int, short: int, anchor: int, ch: _Changes, late: int) -> list[_States] | None:
    """Pareto states over the core items (values relative to the bases), one list per item; None if none lives.

    A state is dropped when it cannot end within room: its reduced cost plus the price of its
    value above anchor (need rounded up to the value unit, less the bases), which the items to
    come and the periphery can only shed at their least reduced cost per unit of value lost;
    when even the most value they can add leaves it below short; or when even their least
    latency leaves it above late.
    """
    st = u.starts
    spans = [np.flatnonzero(u.rc[st[i] : st[i + 1]] <= room) + st[i] for i in core.tolist()]
    gain = np.array([int(u.dv[p].max()) for p in spans] + [0], dtype=np.int64)
    fall = np.array([int(u.dt[p].min()) for p in spans] + [0], dtype=np.int64)
    v_up = np.cumsum(gain[::-1])[::-1] + int(ch.v.max())  # the most value core items k.. and the periphery add
    t_rest = np.cumsum(fall[::-1])[::-1]  # the least latency core items k.. add
    # Shedding value above short: each unit costs the price, or the least rc per unit of value lost of a
    # change to come (core items k.., the periphery), whichever is less (the LP of shedding it).
    shed = np.array([_cheapest_loss(u.rc[p], u.dv[p]) for p in spans] + [_cheapest_loss(ch.rc, ch.v)])
    per_unit = np.minimum(np.minimum.accumulate(shed[::-1])[::-1], u.price / u.unit) * (1.0 - 1e-9)
    zero = np.zeros(1, dtype=np.int64)
    cur = _States(zero, zero, zero, zero, zero.copy(), zero.copy())
    if short > v_up[0] or late < t_rest[0]:
        return None
    layers: list[_States] = []
    kept = 0  # bytes the layers so far keep for the trace-back
    for k, pos in enumerate(spans):
        _check_effort(u, len(cur.v), len(pos), kept, f"at core item {k + 1} of {len(core)}")
        # Candidates a chunk at a time (memory), each chunk's survivors cut to their Pareto states at once.
        step = max(1, CHUNK // len(cur.v))
        parts = [
            _grow(u, cur, pos[a : a + step], room + 1.0, per_unit[k + 1], anchor, short - v_up[k + 1], late - t_rest[k + 1])
            for a in range(0, len(pos), step)
        ]
        grown = parts[0] if len(parts) == 1 else _merged(parts)
        if not len(grown.v):
            return None
        if len(grown.v) > u.effort.states:
            raise CoreTooLarge(f"{len(grown.v)} core states at core item {k + 1} of {len(core)}")
        if layers:  # earlier layers keep only what the trace-back reads
            layers[-1].v = layers[-1].t = layers[-1].c = layers[-1].rc = zero
        i = int(core[k])
        size = int(st[i + 1] - st[i])
        narrow = len(cur.v) * size <= np.iinfo(np.uint32).max
        grown.code = (grown.parent * size + (grown.pick - st[i])).astype(np.uint32 if narrow else np.int64)
        grown.parent = grown.pick = zero
        kept += grown.code.nbytes
        cur = grown
        layers.append(cur)
    return layers


def _grow(
    u: UnbudgetedSearch, cur: _States, pos: np.ndarray, room: float, per_unit: float, anchor: int, least_v: int, most_t: int
) -> _States:
    """The states times the candidates pos that can still end within room, keep enough value and be fast
    enough (least_v, most_t: what the items to come leave), cut to their Pareto states."""
    # One run per candidate, each sorted by latency as the states are: _pareto merges them.
    nv = (u.dv[pos][:, None] + cur.v[None, :]).ravel()
    nrc = (u.rc[pos][:, None] + cur.rc[None, :]).ravel()
    # nrc + floor(per_unit * max(0, nv - anchor)) <= room, in place: one float array, not four
    spent = np.subtract(nv, anchor, dtype=np.float64)
    np.maximum(spent, 0.0, out=spent)
    spent *= per_unit
    np.floor(spent, out=spent)
    spent += nrc
    ok = spent <= room
    del spent
    ok &= nv >= least_v
    live = np.flatnonzero(ok)
    # Latency and params only for the survivors (most expansions die on the reduced cost).
    parent, pick = live % len(cur.v), pos[live // len(cur.v)]
    nt = cur.t[parent] + u.dt[pick]
    fast = np.flatnonzero(nt <= most_t)
    live, parent, pick, nt = live[fast], parent[fast], pick[fast], nt[fast]
    nc = cur.c[parent] + u.dc[pick]
    keep = _pareto(nv[live], nt, nc)
    live = live[keep]
    return _States(nv[live], nt[keep], nc[keep], nrc[live], parent[keep], pick[keep])


def _merged(parts: list[_States]) -> _States:
    """The Pareto states of several chunks' (a union's Pareto states are those of its parts' Pareto states)."""
    v, t, c, rc, parent, pick = (np.concatenate([getattr(q, name) for q in parts]) for name in ("v", "t", "c", "rc", "parent", "pick"))
    keep = _pareto(v, t, c)
    return _States(v[keep], t[keep], c[keep], rc[keep], parent[keep], pick[keep])


def _check_effort(u: UnbudgetedSearch, states: int, candidates: int, kept: int, where: str) -> None:
    """Raise CoreTooLarge when expanding states x candidates would pass the search's effort."""
    effort = u.effort
    if states * candidates > effort.expansions:
        raise CoreTooLarge(f"{states} core states x {candidates} candidates {where}")
    if kept + 4 * states > TRAIL_BYTES:  # the next layer, were it as large as this one
        raise CoreTooLarge(f"{kept + 4 * states:,} bytes kept for the trace-back {where}")
    if u.work_left is not None:
        u.work_left -= states * candidates
        if u.work_left < 0:
            raise CoreTooLarge(f"the search's work budget ran out {where}")
    if effort.deadline is not None and time.monotonic() > effort.deadline:
        raise CoreTooLarge(f"the search's time ran out {where}")


def _cheapest_loss(rc: np.ndarray, dv: np.ndarray) -> float:
    """The least reduced cost per unit of value among the changes that lose value (inf if none)."""
    down = dv < 0
    return float(np.min(rc[down] / -dv[down])) if down.any() else np.inf


@dataclass
class _Changes:
    """The periphery's choices: value, latency, params relative to the bases, and the changed positions."""

    v: np.ndarray
    t: np.ndarray
    c: np.ndarray
    rc: np.ndarray
    first: np.ndarray  # flat position taken instead of its item's base, -1: none
    second: np.ndarray


def _periphery(u: UnbudgetedSearch, periph: np.ndarray, room: int) -> _Changes:
    """Every choice of the peripheral items with at most two changes from their bases, within room (rc)."""
    is_periph = np.zeros(len(u.base), dtype=bool)
    is_periph[periph] = True
    pos = np.flatnonzero(u.other & is_periph[u.item] & (u.rc <= room))
    pos = pos[np.argsort(u.rc[pos], kind="stable")]
    dv, dt, dc, drc = u.dv[pos], u.dt[pos], u.dc[pos], u.rc[pos]
    # Pairs of changes of two different items within the room: partners j < fits[a] keep it.
    fits = np.searchsorted(drc, room - drc, side="right")
    counts = np.minimum(fits, np.arange(len(drc)))
    if int(counts.sum()) > PERIPHERY_PAIRS:
        raise CoreTooLarge(f"{int(counts.sum())} pairs of peripheral changes")
    ia = np.repeat(np.arange(len(drc)), counts)
    ib = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    distinct = u.item[pos[ia]] != u.item[pos[ib]]
    ia, ib = ia[distinct], ib[distinct]
    none = np.array([-1])
    return _Changes(
        v=np.concatenate(([0], dv, dv[ia] + dv[ib])),
        t=np.concatenate(([0], dt, dt[ia] + dt[ib])),
        c=np.concatenate(([0], dc, dc[ia] + dc[ib])),
        rc=np.concatenate(([0], drc, drc[ia] + drc[ib])),
        first=np.concatenate((none, pos, pos[ia])),
        second=np.concatenate((none, np.full(len(pos), -1), pos[ib])),
    )


def _join(u: UnbudgetedSearch, core: np.ndarray, layers: list[_States], ch: _Changes, short: int) -> np.ndarray | None:
    """The best (core state, periphery choice) pair adding at least short value to the bases, as flat positions.

    Core states sorted by value; for the k-th smallest, best[k] is the state with at least its value
    that comes first in the final order (latency, -value, cost). Each periphery choice takes the
    best among the core states with value enough; the pair first in the final order wins.
    """
    zero = np.zeros(1, dtype=np.int64)
    last = layers[-1] if layers else None
    cv, ct, cc = (last.v, last.t, last.c) if last is not None else (zero, zero, zero)
    by_v = np.argsort(cv, kind="stable")
    rank = np.empty(len(cv), dtype=np.int64)
    rank[np.lexsort((cc, -cv, ct))] = np.arange(len(cv))
    best_rank = np.minimum.accumulate(rank[by_v][::-1])[::-1]
    by_rank = np.argsort(rank)
    k = np.searchsorted(cv[by_v], short - ch.v, side="left")
    feasible = np.flatnonzero(k < len(cv))
    if not len(feasible):
        return None
    partner = by_rank[best_rank[k[feasible]]]
    win = int(np.lexsort((cc[partner] + ch.c[feasible], -(cv[partner] + ch.v[feasible]), ct[partner] + ch.t[feasible]))[0])
    p_idx, s_idx = int(feasible[win]), int(partner[win])
    picks = u.base.copy()
    for pos in (int(ch.first[p_idx]), int(ch.second[p_idx])):
        if pos >= 0:
            picks[int(u.item[pos])] = pos
    for layer, i in zip(layers[::-1], core[::-1].tolist()):
        assert layer.code is not None
        s_idx, place = divmod(int(layer.code[s_idx]), int(u.starts[i + 1] - u.starts[i]))
        picks[i] = int(u.starts[i]) + place
    return picks
