"""The align output (`gac.alignment/v1`): one cliff-free dimension per weight or group, with evidence.

Contract fields (other tools read them: never rename or drop): budget, total_params, objective,
weights[name, dim_before, dim, params, candidates[dim, latency_us, source]],
solver{method, seconds, cross_check{method, objective, agrees}}. The rest is
optional evidence; add freely, never rename the contract fields.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from gac.contracts.goal import Objective, Window

ALIGNMENT_SCHEMA: Final = "gac.alignment/v1"

# Where a candidate's latency figure came from.
Source = Literal["measured", "rule"]


class _Model(BaseModel):
    # Readers ignore fields they do not know: a newer service may add optional fields to v1.
    model_config = ConfigDict(extra="ignore")


class Candidate(_Model):
    """One dimension a weight may take, with its predicted latency and where that figure comes from."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # immutable: one rule candidate serves every weight

    dim: int
    latency_us: float | None = None  # workload-weighted sum over the item's kernels; None for rule candidates
    source: Source


class AlignedWeight(_Model):
    """One weight (or a group sharing one dimension): the compressor's dim, the chosen one and its candidates."""

    name: str  # the weight's name, or the group's name when several weights share one dimension
    dim_before: float  # the compressor's dimension (a group: the mean of its members')
    dim: int
    params: int
    candidates: list[Candidate]
    # Extras
    kind: str
    members: list[str] = Field(default_factory=list)  # weights of a group; empty for a single weight
    params_before: float = 0.0  # params at dim_before (fractional when dim_before is)
    importance: float = 0.0  # per-parameter importance (a group: parameter-weighted mean)
    latency_us: float | None = None  # at the chosen dim
    aligned: bool = False  # dim % align == 0


class CrossCheck(_Model):
    """The independent solver's verdict on our optimum (OR-Tools), or why it did not run."""

    method: str  # "cp-sat", "scip", or "none"
    objective: float | None = None
    agrees: bool | None = None  # None when the check did not run or did not prove optimality
    status: str = "not run"
    seconds: float | None = None


class SolverInfo(_Model):
    """How the answer was solved: method, time, instance size and the cross-check."""

    method: str  # e.g. "mckp-dense" or "mckp-core"
    seconds: float
    cross_check: CrossCheck
    items: int = 0
    fixed_items: int = 0  # items settled by the Lagrangian bound before the DP
    states: int = 0  # largest DP state set


class Baseline(_Model):
    """Another way of choosing the dims (nearest-8, the paper's DP, ...), scored on the same budget and curves."""

    method: str  # "paper-dp", "nearest-8", "round-down-8"
    objective: float
    total_params: int
    within_budget: bool
    aligned_share: float
    gap_to_optimum: float | None = None  # (ours - theirs) / |ours|, when within budget
    # The importance it keeps as a share of what importance-only GAC keeps (latency.importance_kept's measure), within budget
    importance_kept: float | None = None
    latency_us: float | None = None  # predicted, when every item is measured at its dims
    speedup: float | None = None  # predicted unaligned latency / this baseline's
    raw_total_params: int | None = None  # paper DP before repair
    raw_budget_violation: int | None = None  # params above budget before repair (0 if none)
    seconds: float | None = None


class TokenLatency(_Model):
    """One token count's share of the prediction, unweighted: where a faster total may hide a slower decode."""

    tokens: int
    unaligned_us: float
    aligned_us: float


class PredictedLatency(_Model):
    """Sum of the compressed weights' kernel latencies (µs), workload-weighted; not the whole model."""

    original_us: float | None = None
    unaligned_us: float | None = None
    aligned_us: float | None = None
    complete: bool = False  # False when some item lacked measurements
    importance_only_us: float | None = None  # the importance-only optimum (the paper's objective)
    speedup: float | None = None  # unaligned_us / aligned_us
    importance_kept: float | None = None  # kept importance / the importance-only optimum's (1.0 = all of it)
    proven_gap: float | None = None  # latency objective: how far above the least latency possible, at most
    missing_points: int = 0  # curve points the alignment lacks: the dims `missing` lists, each once
    by_tokens: list[TokenLatency] = Field(default_factory=list)  # per token count, where the workload has several


class FrontierPoint(_Model):
    """One Pareto-optimal choice under the budget: no other is both faster and keeps more importance."""

    latency_us: float  # predicted, workload-weighted kernel latency of the compressed weights
    importance_kept: float  # kept importance / the importance-only optimum's
    params: int
    chosen: bool = False


class MissingCurve(_Model):
    """A latency curve the platform lacks; profile it to replace rule candidates with measured ones."""

    op: str
    dtype: str
    fixed_shape: dict[str, int]
    axis: str
    dims: list[int] = Field(default_factory=list)  # the axis values the alignment needs and the platform lacks
    items: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)  # why: window, look-ahead, original dim, compressor's dim
    estimated_seconds: float | None = None  # profiling these dims, estimated from the platform's measured points
    capped_dims: int | None = None  # of dims, how many the estimate put at the time cap: nothing measured near them (a bound)
    # A first pass (each window's lattice and a sample): at most this many more dims of the curve may
    # follow once these are measured (all of them where the curve is no lattice, as on a CPU).
    later_dims: int | None = None


class AlignedWorkload(_Model):
    """What the predicted latencies are for: the manifest's workload as aligned (after --dtype or ?dtype=)."""

    dtype: str
    tokens: list[int]
    token_weights: list[float] | None = None  # the manifest's (None: equal)


class AlignmentResult(_Model):
    """A gac.alignment/v1 document: the chosen dims, what they cost and keep, and how they were found."""

    schema_: Literal["gac.alignment/v1"] = Field(default=ALIGNMENT_SCHEMA, alias="schema")
    model: str
    budget: int
    total_params: int
    objective: float
    weights: list[AlignedWeight]
    solver: SolverInfo
    # Extras
    platform: str  # the platform id used, or "rules only"
    workload: AlignedWorkload | None = None  # the dtype and token counts it was aligned for (None: from before it was said)
    align: int = 8  # the alignment the shares below are counted against
    aligned_share_before: float = 0.0
    aligned_share_after: float = 0.0
    original_params: int = 0
    unaligned_params: float = 0.0  # at the compressor's dims
    latency: PredictedLatency = Field(default_factory=PredictedLatency)
    baselines: list[Baseline] = Field(default_factory=list)
    missing: list[MissingCurve] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # What was optimized: "importance" (the paper's), "latency" (fastest keeping 1 - epsilon of the
    # importance-only optimum's kept importance) or "frontier" (the same point, and the whole trade-off).
    objective_kind: Objective = Objective.IMPORTANCE
    epsilon: float | None = None
    window: Window | None = None  # the latency objective's candidate window (the manifest's `window`)
    no_slower: bool = False  # every token count held to no slower than the compressor's dims (the manifest's `no_slower`)
    frontier: list[FrontierPoint] = Field(default_factory=list)
    rule_items: list[str] = Field(default_factory=list)  # items without measurements: rule candidates, no latency
    # What the service is still computing for this alignment and writes onto the stored one when done
    # ("cross_check", "baselines"): the answer came first; GET /v1/alignments/{id} shows them once empty.
    pending: list[str] = Field(default_factory=list)
    # "full": every weight lists all its candidates. "compact" (the default above 1,000 weights): each
    # weight lists only its chosen candidate; ?candidates=full on GET /v1/alignments/{id} gives them all.
    candidate_lists: Literal["full", "compact"] = "full"
    candidates_total: int | None = None  # how many candidates the full lists hold (set in the compact form)

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
