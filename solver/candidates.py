"""Candidate dimensions per knapsack item: the measured cliff-free frontier near d*, or a rule.

An item is one weight, or a group of weights that must share one dimension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gac.contracts.alignment import Candidate, MissingCurve
from gac.contracts.manifest import Manifest, Weight
from solver.frontier import cliff_free_frontier
from solver.kinds import Kernel, kernels, unit_params
from solver.lookup import CurvePoint, LatencyLookup


@dataclass(frozen=True)
class CandidateOptions:
    # Scan d* +/- max(window, window_rel * d*): the compressor's allocation is trusted to
    # within a few percent and GAC moves each dim locally. (An absolute +/-64 let a weight at
    # d* = 97 drop to 56 while another rose from 114 to 176: the knapsack's value is linear in
    # parameters, so its optimum sits at the window's edges.)
    window: int = 16
    window_rel: float = 0.05
    max_window: int = 4096  # hard cap on dims scanned per item, whatever the options say
    align: int = 8  # the rule fallback: d % align == 0
    rel_tol: float = 0.0  # a larger d within this relative latency counts as "as fast"
    # Also compare against measured dims this far above the window: otherwise the
    # window's top always looks cliff-free, even when it sits right on a cliff.
    lookahead: int | None = None  # default: the window's half width
    # Only dims on the cliff-free frontier; when those cannot meet the budget, align() retries
    # with the frontier at no tolerance plus the compressor's own dim (rounded): a weight then
    # moves to a dim that no larger one beats, or stays where the compressor put it.
    cliff_free_only: bool = True

    def half_width(self, d_star: float) -> int:
        return min(self.max_window // 2, max(self.window, math.ceil(self.window_rel * d_star)))


@dataclass
class Item:
    """One knapsack item: the weights that share one dimension."""

    name: str
    members: list[Weight]

    @property
    def kind(self) -> str:
        kinds = {w.kind for w in self.members}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def d_star(self) -> float:
        # A group's compressor dims may differ slightly: take their mean as the window centre.
        return sum(w.dim for w in self.members) / len(self.members)

    @property
    def max_dim(self) -> int:
        return min(w.max_dim for w in self.members)

    @property
    def unit(self) -> int:
        return sum(unit_params(w) for w in self.members)

    def window(self, opts: CandidateOptions) -> tuple[int, int]:
        half = opts.half_width(self.d_star)
        lo = max(1, math.floor(self.d_star) - half)
        hi = min(self.max_dim, math.ceil(self.d_star) + half)
        return lo, hi


def build_items(manifest: Manifest) -> list[Item]:
    """One item per ungrouped weight, one per group, in manifest order of first appearance."""
    items: list[Item] = []
    by_group: dict[str, Item] = {}
    for w in manifest.weights:
        if w.group is None:
            items.append(Item(w.name, [w]))
        elif w.group in by_group:
            by_group[w.group].members.append(w)
        else:
            by_group[w.group] = Item(w.group, [w])
            items.append(by_group[w.group])
    return items


@dataclass
class ItemCandidates:
    item: Item
    candidates: list[Candidate]
    measured: bool
    missing: list[Kernel] = field(default_factory=list)


class LatencyModel:
    """Workload-weighted item latencies from a lookup, with curves cached (one query per curve)."""

    def __init__(self, lookup: LatencyLookup | None, manifest: Manifest) -> None:
        self.lookup = lookup
        self.dtype = manifest.workload.dtype
        tokens = manifest.workload.weighted_tokens()
        total = sum(w for _, w in tokens)
        self.tokens = [(m, w / total) for m, w in tokens]  # normalized: one token count = plain latency
        self._curves: dict[tuple, Mapping[int, CurvePoint]] = {}

    def curve(self, k: Kernel) -> Mapping[int, CurvePoint]:
        key = (k.op, k.fixed, k.axis)
        if key not in self._curves:
            self._curves[key] = {} if self.lookup is None else self.lookup.curve(k.op, self.dtype, k.fixed_shape, k.axis)
        return self._curves[key]

    def kernel_terms(self, item: Item) -> list[tuple[Kernel, float]]:
        """(kernel, weight) pairs: the item's latency is sum weight * count * curve[scale * d]."""
        return [(k, tw * k.count) for w in item.members for m, tw in self.tokens for k in kernels(w, m)]

    def latency(self, item: Item, d: int) -> float | None:
        total = 0.0
        for k, weight in self.kernel_terms(item):
            point = self.curve(k).get(k.scale * d)
            if point is None:
                return None
            total += weight * point.latency_us
        return total


def build_candidates(item: Item, model: LatencyModel, opts: CandidateOptions) -> ItemCandidates:
    """The cliff-free frontier of the item's measured latency in its window, else the rule."""
    lo, hi = item.window(opts)
    ahead = opts.half_width(item.d_star) if opts.lookahead is None else opts.lookahead
    top = min(item.max_dim, hi + ahead)
    terms = model.kernel_terms(item)
    dims: set[int] | None = None
    missing: list[Kernel] = []
    for k, _ in terms:
        curve = model.curve(k)
        have = {d for d in range(lo, top + 1) if k.scale * d in curve}
        if not any(d <= hi for d in have):
            missing.append(k)
        dims = have if dims is None else dims & have
    if model.lookup is not None and not missing and dims and min(dims) <= hi:
        lat = {d: sum(wt * model.curve(k)[k.scale * d].latency_us for k, wt in terms) for d in sorted(dims)}
        if opts.cliff_free_only:
            keep = [d for d in cliff_free_frontier(lat, opts.rel_tol) if d <= hi]
        else:  # the budget fallback: every dim no larger dim beats at all, and the compressor's own
            keep = [d for d in cliff_free_frontier(lat, 0.0) if d <= hi]
            own = round(item.d_star)
            if own in lat and own not in keep:
                keep = sorted([*keep, own])
        if keep:
            return ItemCandidates(item, [Candidate(dim=d, latency_us=lat[d], source="measured") for d in keep], True)
    if model.lookup is not None and not missing:
        # Curves exist but share no dimension in the window, or every measured
        # dim in it is beaten by a larger one above it: measure the window densely.
        missing = [k for k, _ in terms]
    return ItemCandidates(item, rule_candidates(lo, hi, opts.align), False, _unique(missing))


def rule_candidates(lo: int, hi: int, align: int) -> list[Candidate]:
    """Multiples of align in [lo, hi]; the window's top when none falls inside (tiny dims)."""
    first = -(-lo // align) * align
    dims = list(range(first, hi + 1, align)) or [hi]
    return [Candidate(dim=d, latency_us=None, source="rule") for d in dims]


def _unique(ks: list[Kernel]) -> list[Kernel]:
    seen: dict[tuple, Kernel] = {}
    for k in ks:
        seen.setdefault(k.curve_key, k)
    return list(seen.values())


def missing_curves(results: list[ItemCandidates], model: LatencyModel, opts: CandidateOptions) -> list[MissingCurve]:
    """What to profile so rule candidates become measured ones, merged by curve."""
    merged: dict[tuple, MissingCurve] = {}
    for r in results:
        lo, hi = r.item.window(opts)
        for k in r.missing:
            key = (k.op, k.fixed, k.axis)
            mc = merged.get(key)
            if mc is None:
                mc = merged[key] = MissingCurve(
                    op=k.op.value, dtype=model.dtype.value, fixed_shape=k.fixed_shape, axis=k.axis, dims=[], items=[]
                )
            mc.dims = sorted(set(mc.dims) | {k.scale * d for d in range(lo, hi + 1)})
            if r.item.name not in mc.items:
                mc.items.append(r.item.name)
    return list(merged.values())
