"""Candidate dimensions per knapsack item: the measured cliff-free frontier near d*, or a rule.

An item is one weight, or a group of weights that must share one dimension.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from gac.contracts.alignment import Candidate, MissingCurve
from gac.contracts.manifest import Manifest, Weight, shared_dim
from gac.contracts.measurements import Op
from gac.solver import sparse_needs
from gac.solver.curve_cache import shared_model_curve
from gac.solver.curve_model import (
    MIN_POINTS,
    SMOOTH_NOTE,
    CliffOptions,
    CurveModel,
    Step,
    frontier_from_estimates,
    frontier_of_sum,
    model_curve,
)
from gac.solver.curve_model import Point as CurveModelPoint
from gac.solver.frontier import cliff_free_frontier
from gac.solver.kinds import Kernel, kernels, original_points, shape_key, unit_params
from gac.solver.lattice import LatticeFit, fit_lattice, is_lattice, model_by_class, relative_noise
from gac.solver.lookup import LatencyLookup, PointLatency
from gac.solver.sparse_needs import FIRST_PASS

PAPER_RADIUS = 8  # the paper's reference code searches +/- this many multiples of 8 (+/- 64 dims)
LATTICE_BLOCK = 64  # LatencyModel.lattice: a span's fit takes the measured dims of the blocks it touches


@dataclass(frozen=True)
class CandidateOptions:
    # Scan d* +/- max(window, window_rel * d*): the compressor's allocation is trusted to
    # within a few percent and GAC moves each dim locally. (An absolute +/-64 let a weight at
    # d* = 97 drop to 56 while another rose from 114 to 176: the knapsack's value is linear in
    # parameters, so its optimum sits at the window's edges.)
    window: int = 16
    window_rel: float = 0.05
    max_window: int = 4096  # hard cap on dims scanned per item, whatever the options say
    # ... and never below this share of d*: the +/-16 floor exists so that a window holds a tile
    # edge, not so that a small rank can collapse, which kept importance (linear in the dim) prices
    # as a small loss (docs/results/evidence.md).
    min_keep: float = 0.5
    align: int = 8  # the rule fallback: d % align == 0
    rel_tol: float = 0.0  # a larger d within this relative latency counts as "as fast"
    # Also compare against measured dims this far above the window: otherwise the
    # window's top always looks cliff-free, even when it sits right on a cliff.
    lookahead: int | None = None  # default: the window's half width
    # Only dims on the cliff-free frontier; when those cannot meet the budget, align() retries
    # with the frontier at no tolerance plus the compressor's own dim (rounded): a weight then
    # moves to a dim that no larger one beats, or stays where the compressor put it.
    cliff_free_only: bool = True
    # The importance objective's frontier over the item's denoised latency: "noise" keeps a dim only
    # when every larger one is slower beyond the noise of the difference, each curve's share as its
    # model says (curve_model.frontier_of_sum: a line's dims all stay, a plateau split by noise
    # keeps only its top); "independent" takes the estimates as independent (frontier_from_estimates:
    # on a smooth curve it drops all dims but the window's top); "exact" compares them as they are.
    frontier: str = "noise"
    # Latency priced (every_dim): also the multiples of align within this many steps of d* (the
    # paper's window is PAPER_RADIUS = 8, +/- 64 dims). Off by default: kept importance is linear in
    # the dim, a proxy that holds near the compressor's choice only (docs/results/evidence.md).
    paper_radius: int = 0
    # What `missing` asks for: every dim of each span (False), or in passes (gac.solver.sparse_needs):
    # the span's lattice and a sample of its other dims first, then only the dims its lattice
    # cannot rule out; on a GPU a fraction of them. For callers that align again after measuring
    # (the service: `gac align --profile-missing`, profiling jobs); one that profiles `missing`
    # once (proof/profile.py) needs every dim.
    sparse: bool = False

    def half_width(self, d_star: float) -> int:
        return min(self.max_window // 2, max(self.window, math.ceil(self.window_rel * d_star)))


@dataclass
class Item:
    """One knapsack item: the weights that share one dimension."""

    name: str
    members: list[Weight]
    # Read per candidate and per point: computed once, from the whole member list.
    d_star: float = field(init=False)  # the window centre: a group's dims may differ (shared_dim weighs them by params)
    max_dim: int = field(init=False)
    unit: int = field(init=False)  # parameters per unit of d
    shapes: tuple = field(init=False)  # its members' kinds and shapes: items of equal shapes run the same kernels

    def __post_init__(self) -> None:
        members = self.members
        self.d_star = shared_dim(members)
        self.max_dim = min(w.max_dim for w in members)
        self.unit = sum(unit_params(w) for w in members)
        self.shapes = tuple(map(shape_key, members))

    @property
    def compressor_dim(self) -> int:
        """The whole dim the compressor's stands for, the unaligned model's: rounded down, as a budget taken from
        fractional dims holds it (a group's mean, at least 1)."""
        return max(1, math.floor(self.d_star))

    @property
    def kind(self) -> str:
        kinds = {w.kind for w in self.members}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def window(self, opts: CandidateOptions) -> tuple[int, int]:
        half = opts.half_width(self.d_star)
        lo = max(1, math.floor(self.d_star) - half, math.ceil(opts.min_keep * self.d_star))
        hi = min(self.max_dim, math.ceil(self.d_star) + half)
        return lo, hi


def build_items(manifest: Manifest) -> list[Item]:
    """One item per ungrouped weight, one per group, in manifest order of first appearance."""
    groups: dict[str, list[Weight]] = {}
    order: list[tuple[str, list[Weight]]] = []
    for w in manifest.weights:
        if w.group is None:
            order.append((w.name, [w]))
        elif w.group in groups:
            groups[w.group].append(w)
        else:
            groups[w.group] = [w]
            order.append((w.group, groups[w.group]))
    return [Item(name, members) for name, members in order]


@dataclass
class NeededPoints:
    """Points one kernel's curve lacks for an item, in runs (ranges or lists) each with why."""

    kernel: Kernel
    runs: list[tuple[Sequence[int], str]]
    first_pass: bool = False  # the span's skeleton (gac.solver.sparse_needs): its fit may call for more ...
    span: range | None = None  # ... of these axis values (the whole span), at most

    def has(self, x: int) -> bool:
        return any(x in xs for xs, _ in self.runs)

    @property
    def size(self) -> int:
        return sum(len(xs) for xs, _ in self.runs)


@dataclass
class ItemCandidates:
    item: Item
    candidates: list[Candidate]
    measured: bool
    missing: list[NeededPoints] = field(default_factory=list)  # what its prediction lacks, per kernel
    notes: list[str] = field(default_factory=list)  # what the item's curves say (e.g. SMOOTH_NOTE)


class LatencyModel:
    """Workload-weighted item latencies from a lookup, with curves cached (one query per curve)."""

    def __init__(self, lookup: LatencyLookup | None, manifest: Manifest) -> None:
        self.lookup = lookup
        self.dtype = manifest.workload.dtype
        tokens = manifest.workload.weighted_tokens()
        total = sum(w for _, w in tokens)
        self.tokens = [(m, w / total) for m, w in tokens]  # normalized: one token count = plain latency
        self._curves: dict[tuple, Mapping[int, PointLatency]] = {}
        self._models: dict[tuple, CurveModel] = {}
        self._own: dict[tuple, CurveModel] = {}  # each curve modelled on its own data alone
        self._terms: dict[tuple, list[tuple[Kernel, float]]] = {}  # per item's members' shapes: kernel_terms
        self._original: dict[tuple, list[tuple[Kernel, int, float]]] = {}  # ... and original_terms
        self._arrays: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # per curve: dims, medians, noise
        self._lattices: dict[tuple, LatticeFit] = {}  # per curve and span
        self._is_lattices: dict[tuple, bool] = {}  # per curve: modelled class by class?
        self._wanted: dict[tuple, tuple[list[int] | None, bool]] = {}  # per shapes, span and own dims: sparse_needs.wanted
        self._step_tops: dict[tuple, np.ndarray] = {}  # per curve: the last dim before each upward step
        # Every curve the manifest's weights use: a tile size one of them shows is a hypothesis
        # for the others of the same op and axis (the platform's kernels tile them alike).
        shapes = list({shape_key(w): w for w in manifest.weights}.values())  # one weight per shape
        self._kernels = {k.curve_key: k for w in shapes for m, _ in self.tokens for k in kernels(w, m)}
        for w in shapes:  # a dense original may run a curve no compressed kernel does
            for m, _ in self.tokens:
                for k, _x in original_points(w, m):
                    self._kernels.setdefault(k.curve_key, k)

    def reweighted(self, manifest: Manifest) -> LatencyModel:
        """This model at the manifest's token weights: the curves and their models, which the weights
        do not change, are shared, not modelled again; what sums them with the weights starts afresh.
        A new model where the token counts or the dtype differ."""
        tokens = manifest.workload.weighted_tokens()
        if [m for m, _ in tokens] != [m for m, _ in self.tokens] or manifest.workload.dtype != self.dtype:
            return LatencyModel(self.lookup, manifest)
        other = LatencyModel.__new__(LatencyModel)  # a plain model: a shared one's kept candidates are weighted
        vars(other).update(vars(self))
        total = sum(w for _, w in tokens)
        other.tokens = [(m, w / total) for m, w in tokens]
        other._terms, other._original, other._wanted = {}, {}, {}
        return other

    def any_measured(self) -> bool:
        """Whether any curve the manifest's kernels run on has a measured point."""
        return any(self.curve(k) for k in self._kernels.values())

    def curve(self, k: Kernel) -> Mapping[int, PointLatency]:
        key = k.curve_key
        if key not in self._curves:
            self._curves[key] = {} if self.lookup is None else self.lookup.curve(k.op, self.dtype, k.fixed_shape, k.axis)
        return self._curves[key]

    def model(self, k: Kernel) -> CurveModel:
        """The curve's noise-aware model: candidates and predictions use its denoised estimates,
        so timing noise can neither invent a cliff nor make a dim look faster than it is.

        A curve that shows no period of its own is modelled again with the periods its siblings
        (the manifest's other curves of the same op and axis) show, each tested on it alone: a
        small GEMM whose steps hide in its noise still steps where the platform's tiles end."""
        key = k.curve_key
        if key not in self._models:
            own = self._own_model(key)
            siblings = (
                sorted(
                    {
                        p.m
                        for other in self._kernels.values()
                        if (other.op, other.axis) == (k.op, k.axis)
                        and other.curve_key != key
                        and (p := self._own_model(other.curve_key).period) is not None
                    }
                )
                if own.period is None and len(own.estimates) >= MIN_POINTS and not self._is_lattice(key)
                else []
            )
            self._models[key] = model_curve(self._points(key), CliffOptions(periods=tuple(siblings))) if siblings else own
        return self._models[key]

    def _points(self, key: tuple) -> list[CurveModelPoint]:
        k = self._kernels.get(key) or Kernel(*key)
        return [CurveModelPoint(x, p.latency_us, p.p10_us, p.p90_us, p.n or 1) for x, p in sorted(self.curve(k).items())]

    def _own_model(self, key: tuple) -> CurveModel:
        """The curve modelled on its own data: class by class when it is a lattice (gac.solver.lattice)."""
        if key not in self._own:
            self._own[key] = model_by_class(self._points(key)) if self._is_lattice(key) else shared_model_curve(self._points(key))
        return self._own[key]

    def _is_lattice(self, key: tuple) -> bool:
        if (lattice := self._is_lattices.get(key)) is None:
            xs, medians, noise = self.curve_arrays(self._kernels.get(key) or Kernel(*key))
            lattice = self._is_lattices[key] = is_lattice(fit_lattice(xs.tolist(), medians, noise))
        return lattice

    def wanted(self, item: Item, span: tuple[int, int, int], align: int) -> tuple[list[int] | None, bool]:
        """gac.solver.sparse_needs.wanted, once per item shapes, span and compressor's dims (thousands of
        weights share a few)."""
        key = (item.shapes, span, math.floor(item.d_star), math.ceil(item.d_star), align)
        if (got := self._wanted.get(key)) is None:
            got = self._wanted[key] = sparse_needs.wanted(item, self, span, align)
        return got

    def step_top(self, item: Item, d: int, limit: int) -> int:
        """The top of the step d stands on: the largest dim up to `limit` that no kernel of the item
        steps up before (d itself when one steps up right after it, or none steps up by `limit`)."""
        top = None
        for k, _ in self.kernel_terms(item):
            if not self.curve(k):
                return d
            key = k.curve_key
            if (tops := self._step_tops.get(key)) is None:
                tops = self._step_tops[key] = _step_tops(self.model(k).steps)
            i = int(np.searchsorted(tops, k.scale * d))  # the first upward step at or after d
            if i == len(tops) or tops[i] // k.scale > limit:
                continue
            top = tops[i] // k.scale if top is None else min(top, tops[i] // k.scale)
        return d if top is None else max(d, int(top))

    def lattice(self, k: Kernel, lo: int, hi: int) -> LatticeFit:
        """The curve's lattice (gac.solver.lattice) fitted on its measured dims around lo..hi: local,
        so that the trend is nearly straight and a class's factor is the span's own. The span is
        widened to whole blocks of LATTICE_BLOCK dims, which the items of a large manifest share."""
        lo, hi = lo // LATTICE_BLOCK * LATTICE_BLOCK, -(-hi // LATTICE_BLOCK) * LATTICE_BLOCK
        key = (k.curve_key, lo, hi)
        if (fit := self._lattices.get(key)) is None:
            xs, medians, noise = self.curve_arrays(k)
            i, j = np.searchsorted(xs, [lo, hi + 1])
            fit = self._lattices[key] = fit_lattice(xs[i:j].tolist(), medians[i:j], noise[i:j])
        return fit

    def curve_arrays(self, k: Kernel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The curve's measured dims (ascending), their medians and relative_noise()."""
        key = k.curve_key
        if key not in self._arrays:
            pts = sorted(self.curve(k).items())
            self._arrays[key] = (
                np.array([x for x, _ in pts], dtype=np.int64),
                np.array([p.latency_us for _, p in pts]),
                np.array([relative_noise(p.latency_us, p.p10_us, p.p90_us, p.n) for _, p in pts]),
            )
        return self._arrays[key]

    def estimate(self, k: Kernel, x: int) -> float | None:
        return self.model(k).estimates.get(x) if x in self.curve(k) else None

    def sigma(self, item: Item, d: int) -> float:
        """The standard error of latency(item, d): the kernels' curves are measured apart."""
        return math.sqrt(math.fsum((weight * self.model(k).sigma.get(k.scale * d, 0.0)) ** 2 for k, weight in self.kernel_terms(item)))

    def smooth(self, item: Item) -> bool:
        """No measured curve of the item steps anywhere: any dim is as fast as its size."""
        terms = self.kernel_terms(item)
        return bool(terms) and all(self.curve(k) and self.model(k).smooth for k, _ in terms)

    def kernel_terms(self, item: Item) -> list[tuple[Kernel, float]]:
        """(kernel, weight) pairs: the item's latency is sum weight * count * curve[scale * d]."""
        key = item.shapes  # items of one shape share them (thousands of weights, a few shapes)
        if (terms := self._terms.get(key)) is None:
            terms = self._terms[key] = [(k, tw * k.count) for w in item.members for m, tw in self.tokens for k in kernels(w, m)]
        return terms

    def original_terms(self, item: Item) -> list[tuple[Kernel, int, float]]:
        """(kernel, axis value, weight) of the uncompressed weights (gac.solver.kinds.original_points)."""
        key = item.shapes
        if (terms := self._original.get(key)) is None:
            terms = self._original[key] = [
                (k, x, tw * k.count) for w in item.members for m, tw in self.tokens for k, x in original_points(w, m)
            ]
        return terms

    def original_latency(self, item: Item) -> float | None:
        """The uncompressed weights' predicted latency, or None when a point is missing."""
        total = 0.0
        for k, x, weight in self.original_terms(item):
            est = self.estimate(k, x)
            if est is None:
                return None
            total += weight * est
        return total

    def latency_by_tokens(self, item: Item, d: int) -> dict[int, float] | None:
        """The item's predicted latency at d at each token count M of the workload, unweighted (None: a point is missing)."""
        out: dict[int, float] = {}
        for w in item.members:
            for m, _ in self.tokens:
                for k in kernels(w, m):
                    est = self.estimate(k, k.scale * d)
                    if est is None:
                        return None
                    out[m] = out.get(m, 0.0) + k.count * est
        return out

    def latency(self, item: Item, d: int) -> float | None:
        """The item's predicted latency at d (denoised), or None when a kernel lacks the point."""
        total = 0.0
        for k, weight in self.kernel_terms(item):
            est = self.estimate(k, k.scale * d)
            if est is None:
                return None
            total += weight * est
        return total


SPIKE_NET_RISE = 1.0  # % : a lone slow dim whose fall lands at least this far above where it rose is a step too


def _step_tops(steps: Sequence[Step]) -> np.ndarray:
    """The last dim before each upward step, but a lone slow dim's (a spike: up, then down at once)
    unless the dim after it is still slower than the one before it: a tile edge under a comb's tooth."""
    tops = []
    for s, after in zip(steps, [*steps[1:], None]):
        if s.size_pct <= 0:
            continue
        spike = after is not None and after.x_before == s.x and after.size_pct < 0
        net = ((1 + s.size_pct / 100) * (1 + after.size_pct / 100) - 1) * 100 if spike and after is not None else s.size_pct
        if net >= SPIKE_NET_RISE:
            tops.append(s.x_before)
    return np.array(tops, dtype=np.int64)


def build_candidates(item: Item, model: LatencyModel, opts: CandidateOptions, every_dim: bool = False) -> ItemCandidates:
    """Measured candidates in the item's window, else the rule.

    every_dim=False (the importance objective, latency only a filter): a dim that a larger one is
    as fast as (by the item's denoised latency) holds fewer parameters for no speed, so it is
    dropped: the cliff-free frontier, judged against measured dims up to the look-ahead above the
    window, a larger dim having to be slower beyond the noise (opts.frontier); when the whole
    window sits on one plateau whose top lies above it, the window's top is the one candidate
    (of the dims as fast as its fastest: plateau_top).
    every_dim=True (latency priced): every measured dim of the window (and of the paper's window
    when opts.paper_radius > 0) competes; the solver weighs latency, importance and parameters.
    """
    lo, hi = item.window(opts)
    top = min(item.max_dim, hi + lookahead(item, model, opts))
    needed = needed_points(item, model, opts, (lo, hi, top))
    if model.lookup is None:  # rules only: nothing to look up (most of a 100,000-weight manifest's time)
        return ItemCandidates(item, rule_candidates(lo, hi, opts.align), False, needed)
    wide = set(paper_window(item, opts.align, opts.paper_radius)) if every_dim and opts.paper_radius > 0 else set()
    reach = _window_reach(item, model, opts, hi, top)
    choices = set(range(lo, reach + 1)) | wide
    terms = model.kernel_terms(item)
    dims = _measured_dims(model, terms, choices | set(range(hi + 1, top + 1)))
    notes = [SMOOTH_NOTE] if model.smooth(item) else []
    if dims and any(lo <= d <= hi for d in dims):
        lat: dict[int, float] = {d: model.latency(item, d) for d in sorted(dims)}  # type: ignore[misc]
        keep = _kept_dims(item, model, opts, every_dim, (lat, terms), (choices, lo, hi, reach))
        cands = [Candidate(dim=d, latency_us=lat[d], source="measured") for d in keep]
        return ItemCandidates(item, cands, True, needed, notes)
    return ItemCandidates(item, rule_candidates(lo, hi, opts.align), False, needed, notes)


def _window_reach(item: Item, model: LatencyModel, opts: CandidateOptions, hi: int, top: int) -> int:
    """The window's top, or the top of the step it falls inside (within the half width above it)."""
    # A window whose top falls inside a step reaches the step's top, as fast for more parameters
    # (102.8 +/- 16 ends at 119 on a step that ends at 120); within the window's half width, so
    # that a long step (tiles of 96) never moves a dim far beyond what the compressor chose.
    return model.step_top(item, hi, min(top, hi + opts.half_width(item.d_star))) if hi < top else hi


def _measured_dims(model: LatencyModel, terms: Sequence[tuple[Kernel, float]], wanted: set[int]) -> set[int] | None:
    """The wanted dims every kernel's curve has measured (None without kernels)."""
    dims: set[int] | None = None
    for k, _ in terms:
        curve = model.curve(k)
        have = {d for d in wanted if k.scale * d in curve}
        dims = have if dims is None else dims & have
    return dims


def _kept_dims(
    item: Item,
    model: LatencyModel,
    opts: CandidateOptions,
    every_dim: bool,
    measured: tuple[dict[int, float], Sequence[tuple[Kernel, float]]],
    window: tuple[set[int], int, int, int],
) -> list[int]:
    """The measured candidates: the frontier's dims among the choices (else the plateau's top), with the compressor's own.

    measured: the dims' latencies and the item's kernel terms; window: the choices, lo, hi and reach."""
    lat, terms = measured
    choices, lo, hi, reach = window
    keep = [d for d in _frontier(item, model, opts, every_dim, lat, terms) if d in choices]
    if not keep:  # one plateau over the whole window, its top above it: the window's share of it
        keep = [plateau_top(item, model, {d: v for d, v in lat.items() if d <= reach})]
    owns = _own_dims(item, opts, every_dim, lo, hi)
    return sorted(set(keep) | {d for d in owns if d in lat and d <= hi})


def _frontier(
    item: Item, model: LatencyModel, opts: CandidateOptions, every_dim: bool, lat: dict[int, float], terms: Sequence[tuple[Kernel, float]]
) -> list[int]:
    """The measured dims that compete: all of them when latency is priced, else the frontier opts.frontier names."""
    if every_dim:
        # Latency priced: every measured choice competes. A larger dim as fast does not beat a
        # smaller one here: it costs parameters the budget may not have (dropping 2110 for an
        # equally fast 2112 left a pruned decoder at a slower 2102 when 2112 did not fit).
        return list(lat)
    if opts.frontier == "noise" and opts.rel_tol == 0.0:
        return frontier_of_sum(list(lat), [(model.model(k), w, k.scale) for k, w in terms])
    if opts.frontier == "independent" and opts.rel_tol == 0.0:
        return frontier_from_estimates(lat, {d: model.sigma(item, d) for d in lat}, CliffOptions())
    return cliff_free_frontier(lat, opts.rel_tol)


def _own_dims(item: Item, opts: CandidateOptions, every_dim: bool, lo: int, hi: int) -> set[int]:
    """The compressor's own dims kept beside the frontier (the budget's escape)."""
    # The budget's escape: the compressor's own dim rounded down always fits a budget taken
    # from its fractional dims (every_dim, and the importance objective's fallback); the
    # fallback keeps the nearest dim too.
    owns: set[int] = set()
    if every_dim or not opts.cliff_free_only:
        owns.add(max(lo, min(hi, math.floor(item.d_star))))
    if not every_dim and not opts.cliff_free_only:
        owns.add(round(item.d_star))
    return owns


def plateau_top(item: Item, model: LatencyModel, lat: Mapping[int, float]) -> int:
    """The largest dim as fast as the fastest within the noise of the two (CliffOptions.frontier_z
    sigmas): the top of a flat window, and on a lattice its top multiple of 8, not a slower width
    above it (its window's top dim may be odd)."""
    best = min(lat, key=lambda d: (lat[d], -d))
    z, s_best = CliffOptions().frontier_z, model.sigma(item, best)
    return max(d for d, v in lat.items() if v - lat[best] <= z * math.hypot(model.sigma(item, d), s_best))


def candidate_notes(results: list[ItemCandidates]) -> list[str]:
    """What the candidates' curves say that the result should tell (a warning each)."""
    smooth = [r.item.name for r in results if SMOOTH_NOTE in r.notes]
    if not smooth:
        return []
    names = ", ".join(smooth[:3]) + (" ..." if len(smooth) > 3 else "")
    return [f"{len(smooth)} of {len(results)} items ({names}): {SMOOTH_NOTE}; their curves show no step, "
            "so every dim of their windows is a candidate"]  # fmt: skip


def lookahead(item: Item, model: LatencyModel, opts: CandidateOptions) -> int:
    """How far above the window to compare: at least the half width, and at least one step of the
    period measured on the item's curves (a window top can sit just below a step otherwise)."""
    if opts.lookahead is not None:
        return opts.lookahead
    ahead = opts.half_width(item.d_star)
    if model.lookup is None:
        return ahead
    for k, _ in model.kernel_terms(item):
        period = model.model(k).period if model.curve(k) else None
        if period is not None:
            ahead = max(ahead, -(-period.m // k.scale))
    return ahead


def needed_points(item: Item, model: LatencyModel, opts: CandidateOptions, span: tuple[int, int, int]) -> list[NeededPoints]:
    """Per kernel, every point the alignment and its prediction need but lack, in runs each with
    why: the window lo..hi, the look-ahead above it up to top (span), the paper's window (the latency
    objective's wider choices and the paper-DP baseline's), the original dim and the compressor's
    (floor and ceil). Without a lookup every one of them is missing: profiling them is what a first
    alignment asks for. With opts.sparse, only the span's dims gac.solver.sparse_needs wants: its
    skeleton first, then the dims its lattice cannot rule out."""
    lo, _, top = span
    runs, first = _needed_runs(item, model, opts, span)
    out: list[NeededPoints] = []
    for k, _ in model.kernel_terms(item):
        s = k.scale
        kept = _missing_runs(runs, model.curve(k), s)
        if kept:
            out.append(NeededPoints(k, kept, first, range(s * lo, s * (top + 1), s) if first else None))
    _add_original_dims(item, model, out)
    return out


def _needed_runs(
    item: Item, model: LatencyModel, opts: CandidateOptions, span: tuple[int, int, int]
) -> tuple[list[tuple[Sequence[int], str]], bool]:
    """The dims an item needs, in non-empty runs each with why, and whether they are a first pass (opts.sparse)."""
    lo, hi, top = span
    runs: list[tuple[Sequence[int], str]] = [(range(lo, hi + 1), "window"), (range(hi + 1, top + 1), "look-ahead")]
    first = False
    if opts.sparse:
        dims, first = model.wanted(item, span, opts.align)
        if dims is not None:
            cut = bisect.bisect_right(dims, hi)
            runs = [(dims[:cut], "window"), (dims[cut:], "look-ahead")]
    beyond = [d for d in paper_window(item, opts.align, max(PAPER_RADIUS, opts.paper_radius)) if not lo <= d <= top]
    own = {max(1, math.floor(item.d_star)), min(item.max_dim, math.ceil(item.d_star))}
    runs += [(beyond, "paper's window"), (sorted(d for d in own if not lo <= d <= top and d not in beyond), "compressor's dim")]
    return [(xs, why) for xs, why in runs if len(xs)], first


def _missing_runs(runs: list[tuple[Sequence[int], str]], curve: Mapping[int, PointLatency], s: int) -> list[tuple[Sequence[int], str]]:
    """The runs' points (dims times the kernel's scale s) that the curve lacks, runs left empty dropped."""
    if not curve:  # nothing measured (rules only): every run, without a lookup per point
        if s == 1:
            return runs
        return [(range(s * r.start, s * r.stop, s) if isinstance(r, range) else [s * d for d in r], why) for r, why in runs]
    return [(xs, why) for r, why in runs if (xs := [s * d for d in r if s * d not in curve])]


def _add_original_dims(item: Item, model: LatencyModel, out: list[NeededPoints]) -> None:
    """Append to out each original dim's point that its curve lacks and no need of that curve already has."""
    for k, x, _ in model.original_terms(item):  # a few per item: the dense weights' kernels
        if x not in model.curve(k) and not any(need.has(x) for need in out if need.kernel.curve_key == k.curve_key):
            out.append(NeededPoints(k, [([x], "original dim")]))


def paper_window(item: Item, align: int = 8, radius: int = PAPER_RADIUS) -> list[int]:
    """The paper's own candidates: multiples of align within radius steps of round(d*/align)*align."""
    return list(_paper_window(round(item.d_star / align) * align, item.max_dim, align, radius))


@lru_cache(maxsize=65_536)
def _paper_window(centre: int, max_dim: int, align: int, radius: int) -> tuple[int, ...]:
    dims = [centre + off * align for off in range(-radius, radius + 1)]
    return tuple(d for d in dims if align <= d <= max_dim) or (max(align, min(max_dim, centre)),)


def rule_candidates(lo: int, hi: int, align: int) -> list[Candidate]:
    """Multiples of align in [lo, hi]; the window's top when none falls inside (tiny dims)."""
    first = -(-lo // align) * align
    dims = list(range(first, hi + 1, align)) or [hi]
    return [_rule_candidate(d) for d in dims]


@lru_cache(maxsize=65_536)
def _rule_candidate(d: int) -> Candidate:
    """One (immutable) rule candidate per dim, shared: thousands of weights list the same ones."""
    return Candidate(dim=d, latency_us=None, source="rule")


def missing_curves(results: list[ItemCandidates], model: LatencyModel, opts: CandidateOptions) -> list[MissingCurve]:
    """What to profile, merged by curve: every point some item needs and the platform lacks."""
    merged: dict[tuple, tuple[Kernel, list[Sequence[int]], dict[str, None], set[str]]] = {}  # kernel, runs, item names, whys
    for r in results:
        for need in r.missing:
            entry = merged.get(need.kernel.curve_key)
            if entry is None:
                entry = merged[need.kernel.curve_key] = (need.kernel, [], {}, set())
            entry[1].extend(xs for xs, _ in need.runs)
            entry[2][r.item.name] = None
            entry[3].update(why for _, why in need.runs)
            if need.first_pass:
                entry[3].add(FIRST_PASS)
    return [
        MissingCurve(
            op=k.op.value,
            dtype=model.dtype.value,
            fixed_shape=k.fixed_shape,
            axis=k.axis,
            dims=union(runs),
            items=list(names),
            reasons=sorted(whys),
        )
        for k, runs, names, whys in merged.values()
    ]


def later_points(results: list[ItemCandidates], model: LatencyModel, missing: list[MissingCurve]) -> list[int]:
    """Per missing curve, how many more points the later passes may ask for at most: the dims of
    the first passes' spans that are neither measured nor asked for now (0 without a first pass)."""
    spans: dict[tuple, tuple[Kernel, list[range]]] = {}
    for r in results:
        for need in r.missing:
            if need.span is not None:
                spans.setdefault(need.kernel.curve_key, (need.kernel, []))[1].append(need.span)
    out = []
    for mc in missing:
        k, runs = spans.get((Op(mc.op), tuple(sorted(mc.fixed_shape.items())), mc.axis), (None, []))
        out.append(len(set(union(runs)).difference(mc.dims, model.curve(k))) if k is not None else 0)
    return out


def union(runs: Iterable[Sequence[int]]) -> list[int]:
    """The sorted values of many runs, each once (an alignment of thousands of weights lists a few
    hundred points per weight, mostly in overlapping windows): marked on a line as far as the
    largest value, the contiguous runs as intervals."""
    starts: list[int] = []
    stops: list[int] = []
    loose: list[Sequence[int]] = []
    for xs in runs:
        if isinstance(xs, range) and xs.step == 1:
            if len(xs):
                starts.append(xs.start)
                stops.append(xs.stop)
        elif len(xs):
            loose.append(xs)
    points = np.fromiter(itertools.chain.from_iterable(loose), dtype=np.int64) if loose else np.zeros(0, np.int64)
    top = max(max(stops, default=0), int(points.max()) + 1 if len(points) else 0)
    if top > _LINE_MAX:  # values too large for a line: sort them instead
        spans = [np.arange(a, b) for a, b in zip(starts, stops)]
        return np.unique(np.concatenate([points, *spans])).tolist()
    depth = np.zeros(top + 1, dtype=np.int32)  # +1 at each interval's start, -1 past its end
    np.add.at(depth, np.asarray(starts, dtype=np.int64), 1)
    np.add.at(depth, np.asarray(stops, dtype=np.int64), -1)
    covered = np.cumsum(depth[:top]) > 0
    covered[points] = True
    return np.flatnonzero(covered).tolist()


_LINE_MAX = 1 << 24  # union(): the largest value marked on a line (its counts take 64 MB at most)
