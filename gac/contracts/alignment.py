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
    # Each field's docstring is its description in the JSON Schema (and the service's OpenAPI document).
    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)


class Candidate(_Model):
    """One dimension a weight may take, with its predicted latency and where that figure comes from."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # immutable: one rule candidate serves every weight

    dim: int
    """The dimension."""
    latency_us: float | None = None
    """The predicted latency in µs: a workload-weighted sum over the item's kernels; null for rule candidates."""
    source: Source
    """Where the latency figure comes from: measured curves, or the alignment rule alone (no figure)."""


class AlignedWeight(_Model):
    """One weight (or a group sharing one dimension): the compressor's dim, the chosen one and its candidates."""

    name: str
    """The weight's name, or the group's name when several weights share one dimension."""
    dim_before: float
    """The compressor's dimension (a group: the mean of its members')."""
    dim: int
    """The chosen dimension."""
    params: int
    """The parameters at the chosen dim."""
    candidates: list[Candidate]
    """The dims it could take (compact results: only the chosen one)."""
    # Extras
    kind: str
    """The manifest's kind of the weight (lowrank, linear_out, mlp_width, head_dim)."""
    members: list[str] = Field(default_factory=list)
    """The weights of a group; empty for a single weight."""
    params_before: float = 0.0
    """The parameters at dim_before (fractional when dim_before is)."""
    importance: float = 0.0
    """The per-parameter importance (a group: the parameter-weighted mean)."""
    latency_us: float | None = None
    """The predicted latency at the chosen dim, in µs; null without measurements."""
    aligned: bool = False
    """Whether dim % align == 0."""
    latency_before_us: float | None = None
    """The predicted latency at the compressor's dim (rounded), in µs: beside latency_us, what the choice saves; null if unmeasured."""


class CrossCheck(_Model):
    """The independent solver's verdict on our optimum (OR-Tools), or why it did not run."""

    method: str
    """The checking solver: "cp-sat", "scip", or "none"."""
    objective: float | None = None
    """The checking solver's optimum, scored as ours is; null when it found none."""
    agrees: bool | None = None
    """Whether it agrees with ours; null when the check did not run or did not prove optimality."""
    status: str = "not run"
    """The checking solver's status (e.g. "OPTIMAL"), "pending" while it waits to run, or "not run"."""
    seconds: float | None = None
    """The time it took, in seconds; null when it did not run."""


class SolverInfo(_Model):
    """How the answer was solved: method, time, instance size and the cross-check."""

    method: str
    """The solver used, e.g. "mckp-dense" or "mckp-core"."""
    seconds: float
    """The time it took to solve, in seconds."""
    cross_check: CrossCheck
    """The independent solver's verdict."""
    items: int = 0
    """The knapsack items: weights, with each group counted once."""
    fixed_items: int = 0
    """Items settled by the Lagrangian bound before the DP."""
    states: int = 0
    """The largest DP state set."""


class Baseline(_Model):
    """Another way of choosing the dims (nearest-8, the paper's DP, ...), scored on the same budget and curves."""

    method: str
    """The baseline: "paper-dp", "nearest-8", "round-down-8", ..."""
    objective: float
    """Its importance objective, as the result's objective counts it."""
    total_params: int
    """The parameters its dims take."""
    within_budget: bool
    """Whether its dims fit the budget."""
    aligned_share: float
    """The share of weights whose dim is a multiple of align."""
    gap_to_optimum: float | None = None
    """(ours - theirs) / |ours|, when within budget."""
    importance_kept: float | None = None
    """The importance it keeps as a share of what importance-only GAC keeps (latency.importance_kept's measure), within budget."""
    latency_us: float | None = None
    """Its predicted latency in µs, when every item is measured at its dims."""
    speedup: float | None = None
    """The predicted unaligned latency / this baseline's."""
    raw_total_params: int | None = None
    """The paper DP's total params before repair."""
    raw_budget_violation: int | None = None
    """The paper DP's params above budget before repair (0 if none)."""
    seconds: float | None = None
    """The time it took, in seconds."""


class TokenLatency(_Model):
    """One token count's share of the prediction, unweighted: where a faster total may hide a slower decode."""

    tokens: int
    """The token count."""
    unaligned_us: float
    """The predicted latency at the compressor's dims, in µs."""
    aligned_us: float
    """The predicted latency at the chosen dims, in µs."""


class PredictedLatency(_Model):
    """Sum of the compressed weights' kernel latencies (µs), workload-weighted; not the whole model."""

    original_us: float | None = None
    """At the weights' original (uncompressed) dims; null when not complete."""
    unaligned_us: float | None = None
    """At the compressor's dims; null when not complete."""
    aligned_us: float | None = None
    """At the chosen dims; null when not complete."""
    complete: bool = False
    """False when some item lacked measurements (the figures are then null)."""
    importance_only_us: float | None = None
    """At the importance-only optimum's dims (the paper's objective); latency and frontier objectives only."""
    speedup: float | None = None
    """unaligned_us / aligned_us."""
    importance_kept: float | None = None
    """Kept importance / the importance-only optimum's (1.0 = all of it); latency and frontier objectives only."""
    proven_gap: float | None = None
    """Latency objective: how far above the least latency possible the answer is, at most."""
    missing_points: int = 0
    """Curve points the alignment lacks: the dims `missing` lists, each once."""
    by_tokens: list[TokenLatency] = Field(default_factory=list)
    """Per token count, where the workload has several."""


class FrontierPoint(_Model):
    """One Pareto-optimal choice under the budget: no other is both faster and keeps more importance."""

    latency_us: float
    """The predicted, workload-weighted kernel latency of the compressed weights, in µs."""
    importance_kept: float
    """Kept importance / the importance-only optimum's."""
    params: int
    """The parameters its dims take."""
    chosen: bool = False
    """Whether it is the answer the result's weights hold."""


class MissingCurve(_Model):
    """A latency curve the platform lacks; profile it to replace rule candidates with measured ones."""

    op: str
    """The kernel family."""
    dtype: str
    """The element type."""
    fixed_shape: dict[str, int]
    """The other shape fields and their values."""
    axis: str
    """The swept shape field."""
    dims: list[int] = Field(default_factory=list)
    """The axis values the alignment needs and the platform lacks."""
    items: list[str] = Field(default_factory=list)
    """The weights (or groups) that need them."""
    reasons: list[str] = Field(default_factory=list)
    """Why: window, look-ahead, original dim, compressor's dim."""
    estimated_seconds: float | None = None
    """Profiling these dims, estimated from the platform's measured points, in seconds."""
    capped_dims: int | None = None
    """Of dims, how many the estimate put at the time cap: nothing measured near them (a bound)."""
    later_dims: int | None = None
    """A first pass (each window's lattice and a sample): at most this many more dims of the curve may follow once
    these are measured (all of them where the curve is no lattice, as on a CPU)."""


class AlignedWorkload(_Model):
    """What the predicted latencies are for: the manifest's workload as aligned (after --dtype or ?dtype=)."""

    dtype: str
    """The dtype the kernels were priced in."""
    tokens: list[int]
    """The token counts."""
    token_weights: list[float] | None = None
    """The manifest's token weights (null: equal)."""


class AlignmentResult(_Model):
    """A gac.alignment/v1 document: the chosen dims, what they cost and keep, and how they were found."""

    schema_: Literal["gac.alignment/v1"] = Field(default=ALIGNMENT_SCHEMA, alias="schema")
    """The document's schema name."""
    model: str
    """The manifest's model."""
    budget: int
    """The parameters the budget allows (a ratio resolved to a count)."""
    total_params: int
    """The parameters the chosen dims take."""
    objective: float
    """The importance objective of the chosen dims: the sum over weights of importance x (params(dim) - params(dim_before))."""
    weights: list[AlignedWeight]
    """One entry per weight, or per group of weights sharing one dimension."""
    solver: SolverInfo
    """How the answer was solved."""
    # Extras
    platform: str
    """The platform id used, or "rules only"."""
    workload: AlignedWorkload | None = None
    """The dtype and token counts it was aligned for (null: from before it was said)."""
    align: int = 8
    """The alignment the shares below are counted against."""
    aligned_share_before: float = 0.0
    """The share of the manifest's weights whose compressor's dim is a multiple of align."""
    aligned_share_after: float = 0.0
    """The share of the manifest's weights whose chosen dim is a multiple of align."""
    original_params: int = 0
    """The parameters of the listed weights uncompressed."""
    unaligned_params: float = 0.0
    """The parameters at the compressor's dims."""
    latency: PredictedLatency = Field(default_factory=PredictedLatency)
    """The predicted kernel latency of the compressed weights."""
    baselines: list[Baseline] = Field(default_factory=list)
    """Other ways of choosing the dims, scored on the same budget and curves."""
    missing: list[MissingCurve] = Field(default_factory=list)
    """The curve points the platform lacks for this alignment; profile them to replace rule candidates."""
    warnings: list[str] = Field(default_factory=list)
    """What the caller should know about this answer, in words."""
    objective_kind: Objective = Objective.IMPORTANCE
    """What was optimized: importance (the paper's), latency (fastest keeping 1 - epsilon of the importance-only
    optimum's kept importance) or frontier (the same point, and the whole trade-off)."""
    epsilon: float | None = None
    """The latency objective's epsilon; null for the importance objective."""
    window: Window | None = None
    """The latency objective's candidate window (the manifest's `window`)."""
    no_slower: bool = False
    """Every token count held to no slower than the compressor's dims (the manifest's `no_slower`)."""
    frontier: list[FrontierPoint] = Field(default_factory=list)
    """The frontier objective's Pareto points of latency against kept importance; empty for the others."""
    rule_items: list[str] = Field(default_factory=list)
    """Items without measurements: rule candidates, no latency."""
    pending: list[str] = Field(default_factory=list)
    """What the service is still computing and writes onto the stored alignment when done ("cross_check", "baselines");
    GET /v1/alignments/{id} shows them once this is empty."""
    candidate_lists: Literal["full", "compact"] = "full"
    """full: every weight lists all its candidates; compact (the default above 1,000 weights): only its chosen one
    (?candidates=full on GET /v1/alignments/{id} gives them all)."""
    candidates_total: int | None = None
    """How many candidates the full lists hold (set in the compact form)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
