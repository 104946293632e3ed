"""The one entry point: manifest (+ a latency lookup) -> AlignmentResult.

The knapsack is solved on integers: parameter counts are integers already,
and importances are taken exactly where a small common scale holds them, else
resolved to 2^-importance_bits of the largest one (importance_units), so our
optimum and OR-Tools' can be compared by equality. The reported objective is
recomputed in floats from the manifest's own importances and dims.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gac.contracts.alignment import (
    AlignedWeight,
    AlignedWorkload,
    AlignmentResult,
    Baseline,
    Candidate,
    CrossCheck,
    FrontierPoint,
    MissingCurve,
    PredictedLatency,
    SolverInfo,
    TokenLatency,
)
from gac.contracts.goal import DEFAULT_EPSILON, DEFAULT_MIN_GAIN, Objective, Window, valid_epsilon
from gac.contracts.manifest import Manifest, kept_params
from gac.solver import baselines as bl
from gac.solver.candidates import (
    PAPER_RADIUS,
    CandidateOptions,
    Item,
    ItemCandidates,
    LatencyModel,
    build_items,
    candidate_notes,
    later_points,
    missing_curves,
    paper_window,
    rule_candidates,
)
from gac.solver.crosscheck import CrossCheckDisagreement, CrossCheckResult, compare, crosscheck_point, solve_ortools
from gac.solver.kinds import original_params, row_count, unit_params
from gac.solver.lookup import LatencyLookup
from gac.solver.mckp import InfeasibleBudget, solve_mckp
from gac.solver.model_cache import candidates_of
from gac.solver.no_slower import hold_no_slower, totals_by_tokens
from gac.solver.profile_time import estimate as estimate_profile
from gac.solver.sparse_needs import FIRST_PASS
from gac.solver.ties import Nearest, closest_optimum, nearest_split, swapped_nearer, worth_per_dim
from gac.solver.tradeoff import Fastest, Point, Tradeoff, TradeoffItem

RULES_ONLY = "rules only"
_RULE_NOTE = "use rule candidates"  # in each warning that says some items' candidates are rules


class BudgetBelowFeasible(InfeasibleBudget):
    """The budget cannot hold even the smallest candidate of every weight.

    Raised only once every weight has a candidate at or below its compressor's dim (rounded down),
    measured or not: then the budget itself is the cause, and `own_params` (what the compressor's
    dims take, rounded down) says by how much the manifest's budget undercuts its own dims."""

    def __init__(self, budget: int, smallest_feasible: int, own_params: int | None = None) -> None:
        super().__init__(budget, smallest_feasible)
        self.own_params = own_params
        own = (
            f" (the compressor's own dims, each rounded down, take {own_params:,} params)"
            if own_params is not None and own_params > budget
            else ""
        )
        self.args = (
            f"budget {budget:,} params is below the smallest feasible total {smallest_feasible:,} params "
            f"(every weight at its smallest candidate); raise the budget to at least {smallest_feasible:,} "
            f'({{"params": {smallest_feasible}}}){own}',
        )


@dataclass(frozen=True)
class AlignOptions:
    candidates: CandidateOptions = field(default_factory=CandidateOptions)
    method: str = "auto"  # our solver: "auto", "dense" or "core"
    cross_check: str = "auto"  # "auto" (SCIP up to cross_check_max_items), "cp-sat", "scip" or "none"
    cross_check_max_items: int = 2_000
    cross_check_time_limit_s: float = 60.0
    baselines: bool = True
    paper_dp_max_items: int = 600  # the paper's DP is O(items x candidates x budget/u): skipped above (70B: 560)
    importance_bits: int = 20
    # What to solve for, each replacing the manifest's own field when given (resolve_goal reconciles them):
    objective: Objective | None = None  # None: the manifest's, else latency when measured
    window: Window | None = None  # the latency objective's candidates; None: the manifest's, else gac
    epsilon: float | None = None  # None: the manifest's, else DEFAULT_EPSILON; at most EPSILON_MAX, may be negative
    no_slower: bool | None = None  # the latency objective: no token count slower (gac.solver.no_slower); None: the manifest's
    frontier_points: int = 50  # for objective "frontier"; "latency" reports a few around its choice
    # The latency objective gives up importance only for a predicted gain at least this large (a share of the
    # priced total; 0: any gain); None: the manifest's, else DEFAULT_MIN_GAIN.
    min_gain: float | None = None
    # The service answers first and checks after: above this many items the OR-Tools cross-check and
    # the paper-DP baselines are not run; the result lists them in `pending` (cross-check status
    # "pending"), and the caller runs align() again without this option to fill them in. None: inline.
    defer_above: int | None = None

    def __post_init__(self) -> None:
        # The words a caller may still spell ("latency", "paper") become the types; a bad one raises ValueError.
        if self.objective is not None:
            object.__setattr__(self, "objective", Objective(self.objective))
        if self.window is not None:
            object.__setattr__(self, "window", Window(self.window))
        if self.epsilon is not None:
            valid_epsilon(self.epsilon, below_zero=True)
        if self.min_gain is not None and not 0.0 <= self.min_gain < 1.0:  # NaN fails too
            raise ValueError(f"min_gain must be in [0, 1), not {self.min_gain!r}")


LATENCY_UNITS = 1 << 24  # integer latency resolution: the slowest total maps to about this many units
PAPER_OWN = "paper-dp-64"  # the baseline: the paper's DP over its own window
POINT_CHECK_TIME_LIMIT_S = 20.0  # CP-SAT on the chosen two-resource point; past it the check proves nothing
PENDING = "pending"  # a cross-check's status while it waits to run (AlignOptions.defer_above)


def align(
    manifest: Manifest, lookup: LatencyLookup | None = None, options: AlignOptions | None = None, model: LatencyModel | None = None
) -> AlignmentResult:
    """Re-select one cliff-free dimension per weight (or group) under the manifest's budget.

    With no lookup, candidates come from the alignment rule alone and the result
    says so (platform "rules only"). Raises BudgetBelowFeasible naming the
    smallest feasible budget, and CrossCheckDisagreement if OR-Tools finds a
    different optimum. model: the manifest's latency model over this lookup, when the caller keeps
    one (gac.solver.model_cache: curve models and candidates computed once per curve version).
    """
    result = _align(manifest, lookup, options or AlignOptions(), model or LatencyModel(lookup, manifest))
    w = manifest.workload
    result.workload = AlignedWorkload(dtype=str(w.dtype), tokens=list(w.tokens), token_weights=w.token_weights)
    return result


def _align(manifest: Manifest, lookup: LatencyLookup | None, opts: AlignOptions, model: LatencyModel) -> AlignmentResult:
    """align() with the latency model given: the latency objective's reference and the budget's
    retry share it, so each curve is modelled once (on a large platform most of an alignment's time)."""
    warnings: list[str] = []
    # A platform with nothing measured for these kernels (another dtype, say) prices nothing either.
    measured = lookup is not None and model.any_measured()
    goal = resolve_goal(manifest, opts, measured, warnings, lookup.platform if lookup is not None else None)
    if goal.objective is Objective.IMPORTANCE:
        return _align_for_importance(manifest, lookup, opts, warnings, model)
    try:
        if not goal.no_slower:
            return _align_for_latency(manifest, lookup, opts, goal, model)

        def solve(m: Manifest, o: AlignOptions = opts) -> AlignmentResult:  # one solve at the token weights m carries
            return _align_for_latency(m, lookup, o, goal, model if m is manifest else model.reweighted(m))

        # The rounds only read the choice: no cross-check, no baselines until the answer's own solve.
        search = replace(opts, baselines=False, cross_check="none")
        result = hold_no_slower(manifest, model, solve, lambda m: solve(m, search))
        result.no_slower = True
        return result
    except _NothingPriced as nothing:
        # Curves of these kernels exist, but none near any item's dims: nothing to trade latency for.
        warnings.append(
            f"objective {goal.objective.value!r} needs latency data: no item's window is measured in "
            f"{manifest.workload.dtype} on platform {nothing.platform!r} ({nothing.items} items): solved for importance only"
        )
        result = _align_for_importance(manifest, lookup, replace(opts, objective=Objective.IMPORTANCE), warnings, model)
        result.warnings = [w for w in result.warnings if _RULE_NOTE not in w]  # said above, of every item
        return result


class _NothingPriced(Exception):
    """The latency objective found no item with measured candidates (the platform measured other shapes)."""

    def __init__(self, platform: str, items: int) -> None:
        super().__init__(platform, items)
        self.platform, self.items = platform, items


@dataclass(frozen=True)
class Goal:
    """What to solve for: the objective, its epsilon, and the latency objective's candidate window."""

    objective: Objective
    epsilon: float
    window: Window
    no_slower: bool = False
    min_gain: float = DEFAULT_MIN_GAIN


def with_goal(manifest: Manifest, opts: AlignOptions) -> Manifest:
    """The manifest with the options' objective, epsilon, window, no_slower and min_gain in place of its own, where given.

    The one place the two carriers of each (AlignOptions' and the manifest's public fields) meet:
    resolve_goal reads the manifest through it, and `gac align` sends a service (which takes a
    manifest) the manifest it makes of its flags."""
    given = {
        "objective": opts.objective,
        "epsilon": opts.epsilon,
        "window": opts.window,
        "no_slower": opts.no_slower,
        "min_gain": opts.min_gain,
    }
    update = {k: v for k, v in given.items() if v is not None}
    return manifest.model_copy(update=update) if update else manifest


def resolve_goal(manifest: Manifest, opts: AlignOptions, measured: bool, warnings: list[str], platform: str | None = None) -> Goal:
    """The options' choices, else the manifest's (with_goal), else the defaults; without latency data
    (measured False: no lookup, or a platform that measured none of these kernels), importance only."""
    if not measured:
        if platform is not None:
            where = f" in {manifest.workload.dtype} for platform {platform!r}: none of these kernels' curves is measured there"
        elif manifest.target is not None and manifest.target.platform:
            where = f" for target {manifest.target.platform!r}"
        else:
            where = " (no platform named: the manifest's target.platform, or ?platform= / --platform, names one)"
        warnings.append(f"no latency data{where}: candidates from the rule d % {opts.candidates.align} == 0 only, none measured")
    asked = with_goal(manifest, opts)
    kind = Objective(asked.objective) if asked.objective else Objective.LATENCY if measured else Objective.IMPORTANCE
    epsilon = DEFAULT_EPSILON if asked.epsilon is None else asked.epsilon
    if not measured and kind is not Objective.IMPORTANCE:
        warnings.append(f"objective {kind.value!r} needs latency data: solved for importance only")
        kind = Objective.IMPORTANCE
    window = Window(asked.window or Window.GAC)
    if window is Window.PAPER and kind is Objective.IMPORTANCE:
        warnings.append(
            "window 'paper' widens the latency objective's candidates: the importance objective's answer "
            "over the paper's window is the paper-dp-64 baseline"
        )
    no_slower = bool(asked.no_slower)
    if no_slower and kind is not Objective.LATENCY:
        warnings.append(f"no_slower holds the latency objective's token counts: objective {kind.value!r} is solved without it")
        no_slower = False
    min_gain = DEFAULT_MIN_GAIN if asked.min_gain is None else asked.min_gain
    return Goal(kind, epsilon, window, no_slower, min_gain)


@dataclass(frozen=True)
class _Instance:
    """One objective's knapsack: the items, their candidates and the latency model, under the budget."""

    manifest: Manifest
    lookup: LatencyLookup | None
    opts: AlignOptions
    model: LatencyModel
    items: list[Item]
    cands: list[ItemCandidates]
    budget: int


def _instance(
    manifest: Manifest, lookup: LatencyLookup | None, opts: AlignOptions, model: LatencyModel, every_dim: bool = False
) -> _Instance:
    items = build_items(manifest)
    cands = [candidates_of(it, model, opts.candidates, every_dim) for it in items]
    return _Instance(manifest, lookup, opts, model, items, cands, budget_params(manifest))


def _align_for_importance(
    manifest: Manifest, lookup: LatencyLookup | None, opts: AlignOptions, warnings: list[str], model: LatencyModel
) -> AlignmentResult:
    """The importance objective: the most kept importance within the budget over the cliff-free dims (gac.solver.mckp)."""
    inst = _instance(manifest, lookup, opts, model)
    warnings.extend(candidate_notes(inst.cands))  # e.g. "no cliffs": the platform's curves are smooth
    costs, values = integer_instance(inst.cands, opts.importance_bits)
    t0 = time.perf_counter()
    try:
        sol = solve_mckp(costs, values, inst.budget, method=opts.method)
    except InfeasibleBudget as exc:  # found by the solver before any work: a feasible instance pays nothing for the fallbacks
        if lookup is not None and opts.candidates.cliff_free_only:
            return _widened_for_budget(manifest, lookup, opts, inst.budget, exc.smallest_feasible, model)
        inst = _own_dims_for_budget(inst, warnings)
        costs, values = integer_instance(inst.cands, opts.importance_bits)
        t0 = time.perf_counter()
        try:
            sol = solve_mckp(costs, values, inst.budget, method=opts.method)
        except InfeasibleBudget as again:  # _own_dims_for_budget checked the total: the solver's own word, kept
            raise BudgetBelowFeasible(inst.budget, again.smallest_feasible, _own_params(inst)) from None
    nearest = closest_optimum(inst.cands, costs, values, sol)  # ties: the compressor's dims, not input order
    choice = nearest.choice
    warnings.extend(_unproven_ties(nearest.unproven))
    seconds = time.perf_counter() - t0
    chosen = [ic.candidates[j].dim for ic, j in zip(inst.cands, choice)]
    cost = sum(c[j] for c, j in zip(costs, choice))
    cross = _importance_cross_check(inst, costs, values, sol.value)
    warnings.extend(_importance_notes(inst))
    solver = SolverInfo(
        method=f"mckp-{sol.method}",
        seconds=round(seconds, 6),
        cross_check=cross,
        items=len(inst.items),
        fixed_items=sol.fixed_items,
        states=sol.max_states,
    )
    return _result(inst, chosen, cost, solver, _predicted(inst.cands, chosen, inst.model), warnings)


def _latency_ties(cands: list[ItemCandidates], titems: list[TradeoffItem], choice: Sequence[int]) -> Nearest:
    """Ties among items whose latency is the same at every candidate (the unmeasured ones): the compressor's dims."""
    movable = [min(t.latency) == max(t.latency) for t in titems]
    costs = [[t.unit * d for d in t.dims] if m else [] for t, m in zip(titems, movable)]
    values = [[t.worth * d for d in t.dims] if m else [] for t, m in zip(titems, movable)]
    return nearest_split(cands, costs, values, choice, movable)


def _unproven_ties(unproven: int) -> list[str]:
    if not unproven:
        return []
    return [
        f"{unproven} weights share their importance per parameter with too many others to search: "
        "their split of the budget is the solver's own order, not the one nearest the compressor's dims"
    ]


def _widened_for_budget(
    manifest: Manifest, lookup: LatencyLookup, opts: AlignOptions, budget: int, smallest: int, model: LatencyModel
) -> AlignmentResult:
    """The budget is below every cliff-free choice: with measured curves, solve again over wider candidates."""
    copts = opts.candidates
    # Measured cliffs (or plateaus) can leave every frontier dim of a window above the
    # compressor's choice; the budget is hard, so a weight may keep the compressor's dim.
    # (Letting every measured dim compete ignores latency: the value is linear in params.)
    relaxed = replace(opts, candidates=replace(copts, cliff_free_only=False))
    result = _align(manifest, lookup, relaxed, model)
    result.warnings.insert(
        0,
        (
            f"the cliff-free dims of the windows need at least {smallest:,} params, over the budget: "
            "candidates widened to every dim no larger one beats (no tolerance) and the compressor's own dim, "
            "which may sit on a cliff"
        ),
    )
    return result


def _smallest_total(inst: _Instance) -> int:
    """The fewest parameters the candidates allow: every item at its smallest candidate."""
    return sum(ic.item.unit * min(c.dim for c in ic.candidates) for ic in inst.cands)


def _own_dim(item: Item, copts: CandidateOptions) -> int:
    """The compressor's dim rounded down, within the item's window: a budget taken from the
    compressor's (fractional) dims always holds every item there."""
    lo, hi = item.window(copts)
    return max(lo, min(hi, math.floor(item.d_star)))


def _own_params(inst: _Instance) -> int:
    return sum(ic.item.unit * _own_dim(ic.item, inst.opts.candidates) for ic in inst.cands)


def _own_dims_for_budget(inst: _Instance, warnings: list[str]) -> _Instance:
    """The candidates cannot meet the budget: each item with no candidate at or below its own dim
    (the platform never measured that dim, or its whole window) falls back to rule candidates and
    its own dim, unpriced, so that a lack of data never makes an alignment infeasible; the result
    names these items (`rule_items`, a warning) and `missing` lists what would price them. Raises
    BudgetBelowFeasible when even that does not fit: then the budget is the cause."""
    copts = inst.opts.candidates
    cands: list[ItemCandidates] = []
    fell: list[str] = []
    for ic in inst.cands:
        own = _own_dim(ic.item, copts)
        if min(c.dim for c in ic.candidates) <= own:
            cands.append(ic)
            continue
        lo, hi = ic.item.window(copts)
        dims = sorted({c.dim for c in rule_candidates(lo, hi, copts.align)} | {own})
        cands.append(replace(ic, candidates=[Candidate(dim=d, latency_us=None, source="rule") for d in dims], measured=False))
        fell.append(ic.item.name)
    out = replace(inst, cands=cands)
    smallest = _smallest_total(out)
    if smallest > inst.budget:
        raise BudgetBelowFeasible(inst.budget, smallest, _own_params(out))
    if fell:
        names = ", ".join(fell[:3]) + (" ..." if len(fell) > 3 else "")
        note = (
            f"{len(fell)} of {len(cands)} items ({names}) need a dim at or below the compressor's to meet the budget, "
            f"and this platform has not measured one: they {_RULE_NOTE} (d % {copts.align} == 0) and the "
            "compressor's own dim, unpriced (--profile-missing measures them)"
        )
        if note not in warnings:
            warnings.append(note)
    return out


def _importance_cross_check(inst: _Instance, costs: list[list[int]], values: list[list[int]], ours: int) -> CrossCheck:
    """OR-Tools on the same integer knapsack (or pending, or not run), its optimum scored like ours."""
    check = _cross_check(inst.opts, costs, values, inst.budget, ours, len(inst.items))
    cross = CrossCheck(method=check.method if check else "none", status=check.status if check else "not run")
    if check is not None and check.status != PENDING:
        cross.seconds = round(check.seconds, 6)
        cross.agrees = check.agrees
        if check.choice is not None:
            cross.objective = objective(inst.items, [ic.candidates[j].dim for ic, j in zip(inst.cands, check.choice)])
    return cross


def _importance_notes(inst: _Instance) -> list[str]:
    """Warnings on what the importance answer rests on: rule candidates, importances all 0."""
    notes = []
    rules = [ic.item.name for ic in inst.cands if not ic.measured]
    # Where nothing is measured at all, resolve_goal's warning said so already.
    if inst.lookup is not None and rules and inst.model.any_measured():
        notes.append(f"{len(rules)} of {len(inst.items)} items lack measurements and {_RULE_NOTE} (d % {inst.opts.candidates.align} == 0)")
    if all(w.importance == 0 for w in inst.manifest.weights):
        notes.append("every importance is 0: any allocation is optimal; the solver keeps the fewest parameters")
    return notes


def _reference_options(opts: AlignOptions) -> AlignOptions:
    """The options of the latency objective's reference: the importance objective over GAC's window, alone."""
    return replace(opts, objective=Objective.IMPORTANCE, baselines=False, window=Window.GAC, no_slower=False)


def _align_for_latency(
    manifest: Manifest, lookup: LatencyLookup | None, opts: AlignOptions, goal: Goal, model: LatencyModel
) -> AlignmentResult:
    """Latency priced: among every measured dim of each window, the fastest choice keeping at least
    (1 - epsilon) of the importance objective's kept importance (exact, gac.solver.tradeoff); epsilon 0
    keeps at least as much as that answer and is never slower. The frontier and the reference beside it."""
    # The reference: the importance objective's own answer (cliff-free candidates, the paper's).
    reference = _align(manifest, lookup, _reference_options(opts), model)
    if lookup is not None and len(reference.rule_items) == len(reference.weights):
        raise _NothingPriced(lookup.platform, len(reference.weights))
    if goal.window is Window.PAPER:
        opts = replace(opts, candidates=replace(opts.candidates, paper_radius=max(opts.candidates.paper_radius, PAPER_RADIUS)))
    # The reference's notes on rule candidates are about its own candidates, not this answer's.
    warnings = [f"importance-only GAC: {w}" if _RULE_NOTE in w else w for w in reference.warnings]
    inst = _instance(manifest, lookup, opts, model, every_dim=True)
    ref_dims = [w.dim for w in reference.weights]
    try:
        titems = _tradeoff_items(inst.cands, opts.importance_bits)
        ref_value = sum(t.worth * d for t, d in zip(titems, ref_dims))
        trade, best, front, seconds = _solve_tradeoff(inst, titems, goal, ref_value, warnings)
    except BudgetBelowFeasible:  # raised before any search: the instance's smallest total is over the budget
        inst = _own_dims_for_budget(inst, warnings)
        titems = _tradeoff_items(inst.cands, opts.importance_bits)
        ref_value = sum(t.worth * d for t, d in zip(titems, ref_dims))
        trade, best, front, seconds = _solve_tradeoff(inst, titems, goal, ref_value, warnings)
    nearest = _latency_ties(inst.cands, titems, best.point.choice)
    warnings.extend(_unproven_ties(nearest.unproven))
    chosen = [ic.candidates[j].dim for ic, j in zip(inst.cands, swapped_nearer(inst.cands, titems, nearest.choice))]
    cross = _cross_check_point(opts, titems, inst.budget, best)  # the reference's knapsack was checked in its own align()
    if not best.optimal:
        warnings.append(
            f"latency objective: the closing search stopped at its state limit; the choice is within "
            f"{best.gap:.2e} of the least latency possible (proven bound)"
        )
    latency = _predicted(inst.cands, chosen, inst.model)
    # Beside the others only: a total over the measured items alone would read as the whole model's.
    latency.importance_only_us = _total_latency(inst.cands, ref_dims, inst.model) if latency.complete else None
    latency.importance_kept = best.point.value / ref_value if ref_value else 1.0
    latency.proven_gap = best.gap
    solver = SolverInfo(
        method=f"tradeoff-{'exact' if best.optimal else 'bounded'}",
        seconds=round(seconds, 6),
        cross_check=cross,
        items=len(inst.items),
        fixed_items=trade.stats.fixed_items,
        states=trade.stats.max_states,
    )
    result = _result(
        inst,
        chosen,
        best.point.cost,
        solver,
        latency,
        warnings,
        reference,
        objective_kind=goal.objective,
        epsilon=goal.epsilon,
        frontier=_frontier_points(inst, front, best, ref_value),
    )
    result.window = goal.window
    return result


def _tradeoff_items(cands: list[ItemCandidates], importance_bits: int) -> list[TradeoffItem]:
    """The two-resource items: integer_instance's costs and values, latencies in integer units."""
    _, values = integer_instance(cands, importance_bits)
    return [
        TradeoffItem(unit=ic.item.unit, worth=worth_per_dim(ic, v), dims=tuple(x.dim for x in ic.candidates), latency=tuple(t))
        for ic, v, t in zip(cands, values, _latency_units(cands))
    ]


def _solve_tradeoff(
    inst: _Instance, titems: list[TradeoffItem], goal: Goal, ref_value: int, warnings: list[str]
) -> tuple[Tradeoff, Fastest, list[Point], float]:
    """The fastest choice keeping (1 - epsilon) of the reference's importance, a few frontier points, and the seconds taken.

    Importance is given up only for a gain the measurements can show: when the fastest choice that keeps
    all of the reference's importance is within the goal's min_gain of the epsilon point, it is the answer."""
    t0 = time.perf_counter()
    try:
        trade = Tradeoff(titems, inst.budget)
    except InfeasibleBudget as exc:
        raise BudgetBelowFeasible(inst.budget, exc.smallest_feasible, _own_params(inst)) from None
    best: Fastest = trade.fastest(min(trade.max_value, math.ceil((1 - Fraction(goal.epsilon)) * ref_value)))
    if best.point.value < ref_value <= trade.max_value and goal.min_gain > 0:
        keeping = trade.fastest(ref_value)
        gain = 1 - best.point.latency / keeping.point.latency if keeping.point.latency else 0.0
        if gain < goal.min_gain:
            given_up = 1 - best.point.value / ref_value
            warnings.append(
                f"latency objective: giving up {given_up:.2%} of the importance would take {gain:.2%} off the predicted "
                f"time, under the {goal.min_gain:.1%} it must save (min_gain): kept all of "
                "importance-only GAC's importance (the frontier shows the trade)"
            )
            best = keeping
    n_points = inst.opts.frontier_points if goal.objective is Objective.FRONTIER else min(12, inst.opts.frontier_points)
    front = trade.frontier(n_points) if n_points > 0 else []
    return trade, best, front, time.perf_counter() - t0


def _frontier_points(inst: _Instance, front: list[Point], best: Fastest, ref_value: int) -> list[FrontierPoint]:
    """The frontier in predicted µs and kept importance (relative to the reference), the chosen point marked."""
    cands = inst.cands
    # The chosen point is a frontier point, though a sample of a few may pass it by.
    if all(pt.choice != best.point.choice for pt in front):
        front = sorted([*front, best.point], key=lambda pt: pt.value)
    points = [
        FrontierPoint(
            latency_us=_total_latency(cands, [ic.candidates[j].dim for ic, j in zip(cands, pt.choice)], inst.model) or 0.0,
            importance_kept=pt.value / ref_value if ref_value else 1.0,
            params=pt.cost,
            chosen=pt.choice == best.point.choice,
        )
        for pt in front
    ]
    return _pareto(points)


def _result(
    inst: _Instance,
    chosen: list[int],
    params: int,
    solver: SolverInfo,
    latency: PredictedLatency,
    warnings: list[str],
    reference: AlignmentResult | None = None,
    **by_objective: Any,
) -> AlignmentResult:
    """The result around one objective's answer: what every objective reports alike, then its own fields.
    reference: the importance objective's answer, beside another objective's (its dims and candidates
    are the importance-only and paper-dp baselines').

    The baselines run last among the warnings' writers: they add theirs (skipped, failed) at the end.
    """
    opts, copts, n = inst.opts, inst.opts.candidates, len(inst.items)
    obj = objective(inst.items, chosen)
    missing = _missing(inst.cands, inst.model, copts)
    # Counted from the merged list: items on one curve ask for some points alike, and a rules-only
    # alignment (no prediction at all) still lists what would price it.
    latency = latency.model_copy(update={"missing_points": sum(len(mc.dims) for mc in missing)})
    # The latency objective's reference said these too.
    warnings.extend(w for w in [*_budget_note(inst), *_first_pass_note(missing)] if w not in warnings)
    return AlignmentResult(
        model=inst.manifest.model,
        budget=inst.budget,
        total_params=params,
        objective=obj,
        weights=[_aligned_weight(ic, d, inst.model, copts.align) for ic, d in zip(inst.cands, chosen)],
        solver=solver,
        **_shared_fields(inst.manifest, inst.lookup, inst.items, chosen, copts.align),
        latency=latency,
        baselines=_baselines(
            inst.items,
            inst.cands,
            inst.budget,
            obj,
            copts.align,
            warnings,
            inst.model,
            reference,
            opts.paper_dp_max_items,
            defer=_deferred(opts, n),
        )
        if opts.baselines
        else [],
        missing=missing,
        warnings=warnings,
        rule_items=[ic.item.name for ic in inst.cands if not ic.measured],
        pending=_pending(opts, n, solver.cross_check),
        **by_objective,
    )


BUDGET_NOTE_ABOVE = 0.01  # a budget this far from the compressor's own total is said to move every dim


def _budget_note(inst: _Instance) -> list[str]:
    """Where the budget is not what the compressor's dims take, the dims move for the budget, not only for
    alignment: say so, and which budget aligns them alone."""
    own = _unaligned_params(inst.manifest)
    if own <= 0 or abs(inst.budget - own) <= BUDGET_NOTE_ABOVE * own:
        return []
    below = inst.budget < own
    return [
        f"the budget ({inst.budget:,} params) is {abs(inst.budget - own) / own:.1%} {'below' if below else 'above'} what the "
        f"compressor's dims take ({round(own):,}): the dims {'shrink to fit it' if below else 'grow into the difference'}; "
        f'a budget of {{"params": {round(own)}}} aligns them alone'
    ]


def _missing(cands: list[ItemCandidates], model: LatencyModel, copts: CandidateOptions) -> list[MissingCurve]:
    """The points to profile, each curve with the time profiling it should take on this platform."""
    missing = missing_curves(cands, model, copts)
    later = later_points(cands, model, missing)
    estimate = estimate_profile(missing, model.lookup, later=later)
    for mc, seconds, capped, more in zip(missing, estimate.per_curve, estimate.capped_per_curve, later):
        mc.estimated_seconds = round(seconds, 3)
        mc.capped_dims = capped
        mc.later_dims = more if FIRST_PASS in mc.reasons else None
    return missing


def _first_pass_note(missing: list[MissingCurve]) -> list[str]:
    """What a first pass of sparse profiling is, when the missing points are one (gac.solver.sparse_needs)."""
    first = sum(len(mc.dims) for mc in missing if FIRST_PASS in mc.reasons)
    if not first:
        return []
    return [
        f"{first:,} of the missing points are a first pass: each window's multiples of 8, the compressor's dims and a "
        "sample of the rest; aligned again with them, the solver asks for the dims their lattice cannot rule out (on a GPU "
        "a few; where the curves are no lattice, as on a CPU, the rest of each window); `gac align --exhaustive` asks for "
        "every dim at once"
    ]


def _latency_units(cands: list[ItemCandidates]) -> list[list[int]]:
    """Candidate latencies as integers; rule candidates count 0.

    The unit is a power of ten near slowest total / LATENCY_UNITS: latencies given to a few
    decimals then convert exactly, so choices whose sums tie in µs also tie in units (a scale
    that is not a power of ten would break such ties by rounding noise)."""
    slowest = math.fsum(max((c.latency_us or 0.0) for c in ic.candidates) for ic in cands)
    if slowest <= 0:
        return [[0 for _ in ic.candidates] for ic in cands]
    exponent = math.floor(math.log10(slowest / LATENCY_UNITS))
    scale = 10.0**-exponent
    return [[round((c.latency_us or 0.0) * scale) for c in ic.candidates] for ic in cands]


def _pareto(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """Drop points another one beats in predicted µs and kept importance (ties in units can differ in µs)."""

    def beaten(p: FrontierPoint) -> bool:
        return any(
            q is not p
            and q.latency_us <= p.latency_us
            and q.importance_kept >= p.importance_kept
            and (q.latency_us < p.latency_us or q.importance_kept > p.importance_kept)
            for q in points
        )

    return [p for p in points if p.chosen or not beaten(p)]


def _cross_check_point(
    opts: AlignOptions, titems: list[TradeoffItem], budget: int, best: Fastest, notes: list[str] | None = None
) -> CrossCheck:
    """CP-SAT re-solves the chosen point with both constraints; a proven disagreement is an error.
    notes: where said, what the check proved (the instance it solved, or that it proved nothing in time)."""
    if opts.cross_check == "none" or (opts.cross_check == "auto" and len(titems) > opts.cross_check_max_items):
        return CrossCheck(method="none", status="not run")
    if _deferred(opts, len(titems)):
        return CrossCheck(method="cp-sat", status=PENDING)
    limit = min(opts.cross_check_time_limit_s, POINT_CHECK_TIME_LIMIT_S)
    stats: dict = {}
    agrees, theirs, status, seconds = crosscheck_point(titems, budget, best.point, time_limit_s=limit, stats=stats)
    if notes is not None:
        notes.append(_point_check_note(status, stats, limit, seconds))
    if agrees is False and best.optimal:
        raise CrossCheckDisagreement(
            f"two-resource cross-check: CP-SAT ({status}) found least latency {theirs} units, our solver {best.point.latency}"
        )
    return CrossCheck(method="cp-sat", status=status, seconds=round(seconds, 6), agrees=agrees if best.optimal else None)


def _point_check_note(status: str, stats: dict, limit: float, seconds: float) -> str:
    """What the chosen point's cross-check proved, in words."""
    where = (
        f"on the {stats['kept']:,} of {stats['candidates']:,} candidates an exact LP reduced-cost bound leaves "
        "(every choice as fast as ours is among them)"
        if stats
        else "on the whole instance"
    )
    if status == "OPTIMAL":
        return f"cross-check: CP-SAT proved the least latency {where} in {seconds:.1f} s"
    return f"cross-check: CP-SAT proved nothing {where} within {limit:g} s (status {status})"


def _total_latency(cands: list[ItemCandidates], dims: list[int], model: LatencyModel) -> float | None:
    """Predicted latency of the measured items at these dims; None without data or when a point is missing."""
    if model.lookup is None:
        return None
    total = 0.0
    for ic, d in zip(cands, dims):
        if not ic.measured:
            continue
        lat = model.latency(ic.item, d)
        if lat is None:
            return None
        total += lat
    return total


def _shared_fields(manifest: Manifest, lookup: LatencyLookup | None, items: list[Item], chosen: list[int], align: int) -> dict:
    """The result fields every objective reports the same way."""
    return {
        "platform": lookup.platform if lookup is not None else RULES_ONLY,
        "align": align,
        "aligned_share_before": _share([w.dim for w in manifest.weights], align),
        "aligned_share_after": _share([d for it, d in zip(items, chosen) for _ in it.members], align),
        "original_params": sum(original_params(w) for w in manifest.weights),
        "unaligned_params": _unaligned_params(manifest),
    }


def _unaligned_params(manifest: Manifest) -> float:
    """What the compressor's own dims take (fractional where its dims are)."""
    return math.fsum(unit_params(w) * w.dim for w in manifest.weights)


def budget_params(manifest: Manifest) -> int:
    """The budget in parameters: B = floor((1 - rho) * original params of the listed weights)."""
    if manifest.budget.params is not None:
        return manifest.budget.params
    assert manifest.budget.ratio is not None  # the manifest gives one of the two
    return kept_params(manifest.budget.ratio, sum(original_params(w) for w in manifest.weights))


def integer_instance(cands: list[ItemCandidates], bits: int = 20) -> tuple[list[list[int]], list[list[int]]]:
    """Costs = params(d); values = sum over members of q_k * params_k(d), q_k = importance_units' integer for s_k.

    The constant -s_k * params_k(d*) of the objective is left out: it does not
    change which choice is best, and keeping it would force fractions.
    """
    units = importance_units({w.importance for ic in cands for w in ic.item.members}, bits)
    costs: list[list[int]] = []
    values: list[list[int]] = []
    for ic in cands:
        unit = ic.item.unit
        per_dim = sum(units[w.importance] * unit_params(w) for w in ic.item.members)
        dims = [c.dim for c in ic.candidates]
        costs.append([unit * d for d in dims])
        values.append([per_dim * d for d in dims])
    return costs, values


def importance_units(importances: set[float], bits: int = 20) -> dict[float, int]:
    """Each importance as an integer, in proportion: exactly where the decimals written share a scale at which the largest
    is at most 2^bits (3 and 2 stay 3 and 2, 0.3 and 0.2 become 3 and 2), else rounded to 2^-bits of the largest.

    Exact ties must stay ties: rounded, 2 / 3 of 2^20 broke one, and the solver took 128 params more for the same importance."""
    s_max = max(importances, default=0.0)
    if s_max <= 0:
        return dict.fromkeys(importances, 0)
    (top, top_den), scale = _as_written(s_max), 1
    written: dict[float, tuple[int, int]] = {}
    for s in importances:  # their common denominator, while the largest stays within 2^bits (most stop at the first)
        written[s] = _as_written(s)
        scale = math.lcm(scale, written[s][1])
        if top * scale > top_den << bits:
            # importance / s_max first: (1 << bits) / s_max overflows for a subnormal s_max.
            return {s: round(s / s_max * (1 << bits)) for s in importances}
    return {s: num * (scale // den) for s, (num, den) in written.items()}


def _as_written(x: float) -> tuple[int, int]:
    """The decimal a number was written as, as a reduced fraction (0.3 is 3/10, not the binary float nearest it)."""
    return Decimal(repr(float(x))).as_integer_ratio()  # float(): a numpy float's repr names its type


def objective(items: list[Item], dims: list[int]) -> float:
    """sum_i s_i * (params_i(d_i) - params_i(d_i*)), over every weight of every item."""
    return math.fsum(w.importance * unit_params(w) * (d - w.dim) for it, d in zip(items, dims) for w in it.members)


def _cross_check(
    opts: AlignOptions, costs: list[list[int]], values: list[list[int]], budget: int, ours: int, n: int
) -> CrossCheckResult | None:
    backend = opts.cross_check
    if backend == "none" or (backend == "auto" and n > opts.cross_check_max_items):
        return None
    if backend == "auto":
        backend = "scip"
    if _deferred(opts, n):
        return CrossCheckResult(backend, PENDING, None, None, 0.0)
    res = solve_ortools(costs, values, budget, backend=backend, time_limit_s=opts.cross_check_time_limit_s)
    return compare(ours, res)


def _deferred(opts: AlignOptions, n: int) -> bool:
    """Whether this instance's checks wait for later (AlignOptions.defer_above)."""
    return opts.defer_above is not None and n > opts.defer_above


def _pending(opts: AlignOptions, n: int, cross: CrossCheck) -> list[str]:
    """What the result still lacks and a later align() without defer_above fills in."""
    out = ["cross_check"] if cross.status == PENDING else []
    if opts.baselines and _deferred(opts, n) and n <= opts.paper_dp_max_items:
        out.append("baselines")
    return out


def _aligned_weight(ic: ItemCandidates, d: int, model: LatencyModel, align: int) -> AlignedWeight:
    it = ic.item
    unit = it.unit
    if len(it.members) == 1:
        w = it.members[0]
        params_before, importance = float(unit * w.dim), float(w.importance)
    else:
        params_before = math.fsum(unit_params(w) * w.dim for w in it.members)
        importance = math.fsum(w.importance * unit_params(w) for w in it.members) / unit
    lat = next((c.latency_us for c in ic.candidates if c.dim == d), None) if ic.measured else None
    # At the compressor's dim, as the unaligned total counts it (a dim it lacks is a missing point: null).
    before = model.latency(it, it.compressor_dim) if ic.measured else None
    # Built unvalidated: every field is computed here from validated input (a 100,000-weight result
    # spent a fifth of its time validating them again).
    return AlignedWeight.model_construct(
        name=it.name,
        dim_before=it.d_star,
        dim=d,
        params=unit * d,
        candidates=ic.candidates,
        kind=it.kind,
        members=[w.name for w in it.members] if len(it.members) > 1 or it.members[0].name != it.name else [],
        params_before=params_before,
        importance=importance,
        latency_us=lat,
        aligned=d % align == 0,
        latency_before_us=before,
    )


def _share(dims: list[float], align: int) -> float:
    if not dims:
        return 0.0
    return sum(1 for d in dims if float(d).is_integer() and int(d) % align == 0) / len(dims)


def _predicted(cands: list[ItemCandidates], chosen: list[int], model: LatencyModel) -> PredictedLatency:
    if model.lookup is None:
        return PredictedLatency()
    orig = unal = alig = 0.0
    complete = True
    for ic, d in zip(cands, chosen):
        it = ic.item
        o, un, al = model.original_latency(it), model.latency(it, it.compressor_dim), model.latency(it, d)
        if o is None or un is None or al is None:
            complete = False
            continue
        orig += o
        unal += un
        alig += al
    if not complete:
        return PredictedLatency(complete=False)
    return PredictedLatency(
        original_us=orig,
        unaligned_us=unal,
        aligned_us=alig,
        complete=True,
        speedup=unal / alig if alig > 0 else None,
        by_tokens=_by_tokens(cands, chosen, model),
    )


def _by_tokens(cands: list[ItemCandidates], chosen: list[int], model: LatencyModel) -> list[TokenLatency]:
    """Each token count's unweighted totals at the unaligned and the chosen dims, where there are several."""
    if len(model.tokens) < 2:
        return []
    items = [ic.item for ic in cands]
    unal = totals_by_tokens(model, items, {it.name: it.compressor_dim for it in items})
    alig = totals_by_tokens(model, items, {it.name: d for it, d in zip(items, chosen)})
    if unal is None or alig is None:
        return []
    return [TokenLatency(tokens=m, unaligned_us=unal[m], aligned_us=alig[m]) for m in sorted(unal, reverse=True)]


@dataclass(frozen=True)
class _Context:
    """What every baseline is scored against: our objective, the importance-only optimum's, the budget,
    and the latency model."""

    items: list[Item]
    cands: list[ItemCandidates]
    budget: int
    ours: float
    align: int
    model: LatencyModel | None
    reference: float | None = None  # importance-only GAC's objective (None: ours, an importance answer's)

    def kept(self, obj: float) -> float | None:
        """The importance an objective value keeps, as a share of what importance-only GAC keeps: the summary's
        'GAC keeps K %' measure (the objective is the gain over the compressor's dims, a difference)."""
        own = math.fsum(w.importance * unit_params(w) * w.dim for it in self.items for w in it.members)
        whole = own + (self.ours if self.reference is None else self.reference)
        return (own + obj) / whole if whole > 0 else 1.0  # every importance 0: all of nothing, as latency.importance_kept says

    def unaligned_us(self) -> float | None:
        if self.model is None:
            return None
        return _total_latency(self.cands, [it.compressor_dim for it in self.items], self.model)


def _baselines(
    items: list[Item],
    cands: list[ItemCandidates],
    budget: int,
    ours: float,
    align: int,
    warnings: list[str],
    model: LatencyModel | None = None,
    reference: AlignmentResult | None = None,
    max_paper_items: int = AlignOptions.paper_dp_max_items,
    defer: bool = False,
) -> list[Baseline]:
    importance_dims = [w.dim for w in reference.weights] if reference is not None else None
    ctx = _Context(items, cands, budget, ours, align, model, objective(items, importance_dims) if importance_dims else None)
    out = [
        _baseline(ctx, name, [rounder(it.d_star, 8, it.max_dim) for it in items])
        for name, rounder in (("nearest-8", bl.round_nearest), ("round-down-8", bl.round_down))
    ]
    if importance_dims is not None:
        out.append(_baseline(ctx, "importance-only", importance_dims))
    if len(items) > max_paper_items:
        warnings.append(
            f"paper-dp baselines skipped: {len(items)} items is over {max_paper_items} "
            "(the paper's DP grows with items x candidates x budget)"
        )
        return out
    if defer:  # run later, by complete_pending (listed in the result's `pending`)
        return out
    return out + _paper_dp_baselines(ctx, _candidates_of(reference, items) if reference is not None else cands, warnings)


def _candidates_of(result: AlignmentResult, items: list[Item]) -> list[ItemCandidates]:
    """An answer's candidate sets (its full form), per item."""
    rules = set(result.rule_items)
    return [ItemCandidates(it, list(w.candidates), it.name not in rules) for it, w in zip(items, result.weights)]


def _beyond_our_window(items: list[Item], our_windows: list[list[int]], dims: list[int]) -> list[str]:
    """Why the paper's own window can keep more importance than GAC: it moves dims farther than GAC's window
    goes, where importance linear in the dim says little about quality. Nothing when it stays inside."""
    outside = [(abs(d - it.d_star) / it.d_star, it, d) for it, ours, d in zip(items, our_windows, dims) if not min(ours) <= d <= max(ours)]
    if not outside:
        return []
    move, it, d = max(outside, key=lambda o: o[0])
    return [
        f"{PAPER_OWN} keeps more importance than GAC by moving {len(outside)} of {len(items)} dims beyond GAC's window, by up "
        f"to {move:.0%} of the compressor's dim ({it.name}: {it.d_star:g} -> {d}); so far from the compressor's choice, "
        "importance linear in the dim says little about quality (judge both on the model); the latency objective with --window paper "
        "chooses there too"
    ]


def _paper_dp_baseline(
    ctx: _Context, name: str, windows: list[list[int]], u: int, warnings: list[str]
) -> tuple[Baseline, list[int]] | None:
    """The paper's Algorithm 1 over these candidate dims per item, with float values as in the paper; its dims."""
    costs = [[it.unit * d for d in dims] for it, dims in zip(ctx.items, windows)]
    values = [
        [math.fsum(w.importance * unit_params(w) * (d - w.dim) for w in it.members) for d in dims] for it, dims in zip(ctx.items, windows)
    ]
    try:
        res = bl.paper_dp(costs, values, ctx.budget, u)
    except bl.TooLarge as exc:
        warnings.append(f"{name} baseline skipped: {exc}")
        return None
    except ValueError as exc:
        warnings.append(f"{name} baseline failed: {exc}")
        return None
    chosen = [dims[j] for dims, j in zip(windows, res.picks)]
    b = _baseline(ctx, name, chosen)
    b.raw_total_params = res.raw_cost
    b.raw_budget_violation = max(0, res.raw_cost - ctx.budget)
    b.seconds = round(res.seconds, 6)
    return b, chosen


def _baseline(ctx: _Context, name: str, dims: list[int]) -> Baseline:
    total = sum(it.unit * d for it, d in zip(ctx.items, dims))
    obj = objective(ctx.items, dims)
    within = total <= ctx.budget
    latency = _total_latency(ctx.cands, dims, ctx.model) if ctx.model is not None else None
    unaligned = ctx.unaligned_us()
    return Baseline(
        method=name,
        objective=obj,
        total_params=total,
        within_budget=within,
        aligned_share=_share([d for it, d in zip(ctx.items, dims) for _ in it.members], ctx.align),
        gap_to_optimum=(ctx.ours - obj) / abs(ctx.ours) if within and ctx.ours != 0 else None,
        importance_kept=ctx.kept(obj) if within else None,
        latency_us=latency,
        speedup=unaligned / latency if latency and unaligned else None,
    )


@dataclass
class Completed:
    """What complete_pending filled in: the cross-check and the baselines (the answer's, then the paper-DP ones)."""

    cross_check: CrossCheck
    baselines: list[Baseline]
    warnings: list[str]


def complete_pending(
    manifest: Manifest,
    result: AlignmentResult,
    lookup: LatencyLookup | None = None,
    options: AlignOptions | None = None,
    model: LatencyModel | None = None,
) -> Completed:
    """The checks an answer left pending (AlignOptions.defer_above), run on the answer's own items
    and candidates (its full form: every weight's candidate list) instead of aligning again: the
    OR-Tools cross-check of its knapsack (importance) or of its chosen point (latency), and the
    paper-DP baselines. The latency model prices only the baselines' dims beyond the candidates.
    Raises CrossCheckDisagreement as align() does."""
    opts = replace(options or AlignOptions(), defer_above=None)
    items = build_items(manifest)
    if [it.name for it in items] != [w.name for w in result.weights]:
        raise ValueError("the result's weights are not this manifest's items")
    cands = _candidates_of(result, items)
    if any(not any(c.dim == w.dim for c in ic.candidates) for ic, w in zip(cands, result.weights)):
        raise ValueError("the result lists its chosen candidates only: complete its full form")
    model = model or LatencyModel(lookup, manifest)
    inst = _Instance(manifest, lookup, opts, model, items, cands, result.budget)
    chosen = [w.dim for w in result.weights]
    cross = result.solver.cross_check
    notes: list[str] = []
    if "cross_check" in result.pending:
        if result.objective_kind == Objective.IMPORTANCE:
            costs, values = integer_instance(cands, opts.importance_bits)
            ours = sum(v[[c.dim for c in ic.candidates].index(d)] for ic, v, d in zip(cands, values, chosen))
            cross = _importance_cross_check(inst, costs, values, ours)
        else:
            titems = _tradeoff_items(cands, opts.importance_bits)
            units = _latency_units(cands)
            choice = tuple(t.dims.index(d) for t, d in zip(titems, chosen))
            point = Point(
                choice,
                sum(u[j] for u, j in zip(units, choice)),
                sum(t.worth * d for t, d in zip(titems, chosen)),
                sum(t.unit * d for t, d in zip(titems, chosen)),
            )
            optimal = result.solver.method != "tradeoff-bounded"
            best = Fastest(point, point.latency if optimal else 0, optimal)
            cross = _cross_check_point(opts, titems, inst.budget, best, notes)
    warnings = notes
    baselines = list(result.baselines)
    if "baselines" in result.pending:
        reference_objective = next((b.objective for b in baselines if b.method == "importance-only"), None)
        ctx = _Context(
            items, cands, inst.budget, result.objective, result.align, model if lookup is not None else None, reference_objective
        )
        paper_cands = cands
        if result.objective_kind != Objective.IMPORTANCE:
            # The paper's knapsack is importance-only GAC's: its candidates as that answer ends up with them
            # (widened, or with the compressor's own dims, where the budget asks), aligned again as inline.
            reference = _align(manifest, lookup, replace(_reference_options(opts), cross_check="none"), model)
            paper_cands = _candidates_of(reference, items)
        baselines += _paper_dp_baselines(ctx, paper_cands, warnings)
    return Completed(cross, baselines, warnings)


def _paper_dp_baselines(ctx: _Context, cands: list[ItemCandidates], warnings: list[str]) -> list[Baseline]:
    """The paper's DP over importance-only GAC's candidate sets (`cands`: the knapsack the paper solves, whatever
    the answer's objective), then over its own window (the pending part of _baselines)."""
    items = ctx.items
    u = 8 * min(row_count(w) for it in items for w in it.members)
    out = []
    for name, windows in (("paper-dp", [[c.dim for c in ic.candidates] for ic in cands]), (PAPER_OWN, [paper_window(it) for it in items])):
        found = _paper_dp_baseline(ctx, name, windows, u, warnings)
        if found is not None:
            out.append(found[0])
            if name == PAPER_OWN and found[0].objective > ctx.ours:  # beyond the answer's own windows
                warnings.extend(_beyond_our_window(items, [[c.dim for c in ic.candidates] for ic in ctx.cands], found[1]))
    return out
