"""What the service answers on its read routes: one definition for the service and its clients.

The service builds these from its rows (from_attributes); readers ignore fields they do not
know, so a newer service that adds optional fields does not break an older client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from gac.contracts.alignment import AlignmentResult
from gac.contracts.measurements import PlatformDescriptor

JobStatus = Literal["queued", "leased", "done", "failed", "cancelled"]
DeviceKind = Literal["cuda", "cpu", "rocm"]


class _Out(BaseModel):
    # Each field's docstring is its description in the OpenAPI document (and any JSON Schema of these models).
    model_config = ConfigDict(extra="ignore", frozen=True, from_attributes=True, use_attribute_docstrings=True)


class Platform(_Out):
    """A platform as the service stores it (GET /v1/platforms[/{ref}])."""

    id: int
    """The service's id of the platform."""
    fingerprint: str
    """The SHA-256 of the descriptor's identity fields (hex): the platform's stable name."""
    label: str
    """A short readable name: device, compute capability, torch version, timing, threads."""
    descriptor: PlatformDescriptor
    """Everything the agents reported about its hardware and software stack."""
    first_seen: datetime
    """When the service first heard of it from an agent (a batch or a job claim)."""
    last_seen: datetime
    """When the service last heard of it from an agent (kept to within about 30 s)."""
    curves: int = 0
    """Curves stored for it."""
    runs: int = 0
    """Agent runs stored for it."""
    agents: int = 0
    """Distinct agents that measured it."""
    dtypes: list[str] = []
    """The dtypes its curves were measured in: what it was profiled in (its fast dtype, unless an agent was told
    otherwise). What its agents measured about dtypes is in the descriptor (fast_dtype, dtype_speed)."""


class RunQuality(_Out):
    """One run's share of a platform's profile quality."""

    run_id: UUID
    """The run's id (the agent's)."""
    agent: str
    """The agent that began the run."""
    agents: list[str] = []
    """Every agent that sent its points, the first first (a job's run has each attempt's)."""
    plan: str
    """The name of the plan the run timed ("adhoc" when none was named)."""
    started_at: datetime
    """When the run began, by the agent's clock."""
    measurements: int
    """Its stored points, flagged ones included."""
    flagged: int
    """Its points the agent's quality gate flagged."""
    load_read: int
    """Its points with a load reading (CPU points, from agents that send one)."""
    busy_cores_mean: float | None = None
    """Cores other work kept busy while its points were timed, on average; null without a load reading."""
    busy_cores_max: float | None = None
    """The most cores other work kept busy while one of its points was timed; null without a load reading."""


class PlatformQuality(_Out):
    """How far a platform's profile can be trusted (GET /v1/platforms/{ref}/quality): the points the agents'
    quality gate flagged, the timing threads, and how busy the machine was with other work meanwhile."""

    platform_id: int
    """The platform's id."""
    threads: int | None = None
    """The CPU threads the points were timed with (part of the fingerprint); null on a GPU."""
    cores: int | None = None
    """The CPU cores the agent reported; null when it did not."""
    measurements: int = 0
    """Stored points, flagged ones included."""
    flagged: int = 0
    """Points the quality gate flagged: kept out of curves and alignments."""
    flagged_by_reason: dict[str, int] = {}
    """Flagged points per reason (bimodal, isolated, busy); a point flagged for two reasons counts under both."""
    load_read: int = 0
    """Points with a load reading (CPU points, from agents that send one)."""
    busy_cores_median: float | None = None
    """The median of the runs' mean busy cores; null without a load reading."""
    busy_cores_max: float | None = None
    """The most busy cores any point saw; null without a load reading."""
    runs: list[RunQuality] = []
    """The latest runs, newest first (the service lists the latest few; the totals above count every run)."""


class StoredMeasurement(_Out):
    """One stored point (GET /v1/measurements); id is the service's, uuid the agent's."""

    id: int
    """The service's id of the row (the cursor of GET /v1/measurements)."""
    uuid: UUID
    """The agent's id of the row: a re-sent row with the same uuid is recognised."""
    platform_id: int
    """The platform it was measured on."""
    curve_id: int
    """The curve it belongs to."""
    run_id: UUID
    """The agent run that stored it."""
    op: str
    """The kernel family timed (gemm, gemv, sdpa, lowrank, mlp)."""
    dtype: str
    """The element type it was timed in."""
    shape: dict[str, int]
    """The kernel's shape: exactly the op's shape fields, by name."""
    sweep_axis: str
    """The shape field this point's curve sweeps."""
    median_us: float
    """The median latency of one kernel call, in µs."""
    p10_us: float
    """The 10th percentile of the samples, in µs."""
    p90_us: float
    """The 90th percentile of the samples, in µs."""
    mean_us: float
    """The mean of the samples, in µs."""
    n: int
    """The samples taken."""
    timer: str
    """How it was timed, e.g. "cpu-perf-counter" or "cuda-events+l2-flush"."""
    backend: str | None = None
    """The implementation that actually ran (e.g. SDPA "flash"); null when the agent did not say."""
    kernel: str | None = None
    """What the agent's kernel called, for the record; null when it did not say."""
    measured_at: datetime
    """When it was timed, by the agent's clock (UTC)."""
    stop: str | None = None
    """Why sampling stopped (spread, median_ci, time_cap, max_samples); null when the timer did not say."""
    samples_discarded: int | None = None
    """Samples the timer threw away (e.g. preempted off-CPU); null when it did not say."""
    sm_clock_mhz: int | None = None
    """The GPU's SM clock during the point (NVML), in MHz; null when not read."""
    throttle_reasons: int | None = None
    """NVML's clocks-throttle bitmask during the point; null when not read."""
    quality: str | None = None
    """The agent's quality flags (comma-separated); a flagged row is left out of curves and alignments. Null: trusted."""
    busy_cores: float | None = None
    """Cores other work kept busy while it was timed; null where it was not read (a GPU's points, older agents)."""


class CurveSummary(_Out):
    """A stored curve without its points: what it sweeps and at which fixed shape (GET /v1/curves)."""

    id: int
    """The curve's id."""
    platform_id: int
    """The platform it was measured on."""
    op: str
    """The kernel family (gemm, gemv, sdpa, lowrank, mlp)."""
    dtype: str
    """The element type."""
    axis: str
    """The swept shape field."""
    fixed: dict[str, int]
    """The other shape fields and their values."""
    fixed_key: str
    """The fixed shape as canonical text, e.g. "k=128,m=2048"."""
    points: int
    """Distinct values of the swept axis."""
    measurements: int
    """Stored measurements, flagged ones included."""
    x_min: int
    """The smallest swept value measured."""
    x_max: int
    """The largest swept value measured."""
    updated_at: datetime
    """When a batch last added to it."""
    version: int
    """A tag that changes whenever the curve gains data (what ETags and caches key on)."""
    flagged: int = 0
    """Measurements the agent's quality gate flagged: stored, left out of points and alignments."""


class CurvePoint(_Out):
    """All measurements of one dimension on one curve, combined."""

    x: int
    """The swept dimension's value."""
    median_us: float
    """The median latency in µs (the median of its measurements' medians)."""
    p10_us: float
    """The 10th percentile in µs (the median of its measurements' p10s)."""
    p90_us: float
    """The 90th percentile in µs (the median of its measurements' p90s)."""
    mean_us: float
    """The mean in µs (the median of its measurements' means)."""
    n: int
    """Samples behind it, over all its measurements."""
    measurements: int
    """The measurements combined into it."""


class Curve(_Out):
    """Latency against the swept dimension (GET /v1/platforms/{ref}/curve, /v1/curves/{id})."""

    curve: CurveSummary
    """What the curve sweeps, and its counts."""
    points: list[CurvePoint]
    """One point per measured dimension, ascending; flagged measurements left out."""


class Step(_Out):
    """An upward step of a curve: latency jumps from before_us at x_before to after_us at x."""

    x_before: int
    """The last dimension before the jump."""
    x: int
    """The first dimension after it."""
    before_us: float
    """The denoised latency at x_before, in µs."""
    after_us: float
    """The denoised latency at x, in µs."""
    size_pct: float
    """(after - before) / before * 100; below 0 the curve drops."""
    z: float
    """How far the right segment starts beyond where the left one was heading, in noise units."""
    confidence: float
    """In (0, 1): how far beyond the detection threshold the jump is."""


class Modulus(_Out):
    """A period the curve's fast dims follow, and how many of them it explains."""

    m: int
    """The period: the rule d % m == 0."""
    agreement: float
    """The Jaccard similarity between the dims the frontier (or the steps) marks and the measured multiples of m."""


class CombLevel(_Out):
    """Multiples of m run faster (another kernel): by this share of the time of the dims around them."""

    m: int
    """The multiple."""
    pct_faster: float
    """82.0: multiples take 82 % less time than the dims around them; below 0: slower."""


class CurveCliffs(_Out):
    """One curve's analysis: steps, cliff-free frontier, the modulus that explains it."""

    curve: CurveSummary
    """The curve analysed."""
    steps: list[Step]
    """Significant jumps, up (size_pct > 0) and down."""
    frontier: list[int]
    """The cliff-free dims: those no larger dim beats or ties within the noise, ascending."""
    modulus: Modulus | None = None
    """The period the frontier follows; null when no simple one explains it."""
    noise_pct: float
    """A point's typical relative noise of its median, in % (the median over the curve)."""
    tolerance: float
    """The typical relative margin a larger dim must be slower by to keep a smaller one on the frontier."""
    notes: list[str] = Field(default_factory=list)
    """What the analysis noticed, in words."""
    comb: list[CombLevel] = Field(default_factory=list)
    """The multiples that run faster, shallowest first."""


class JobMatch(_Out):
    """Which agents may take a job: a platform's fingerprint, or a device kind and name."""

    fingerprint: str | None = None
    """Only the platform with this fingerprint; null: any."""
    device_kind: DeviceKind | None = None
    """Only platforms of this device kind; null: any."""
    device_name: str | None = None
    """Only platforms whose device name contains this (case-insensitive); null: any."""


class Job(_Out):
    """A profiling job of the queue (GET /v1/jobs[/{id}]); plan is a gac.plan/v1 document."""

    id: int
    """The job's id."""
    plan: dict[str, Any]
    """The sweep plan to time, a gac.plan/v1 document."""
    plan_name: str
    """The plan's name."""
    points: int
    """Points in the plan (its full grid)."""
    match: JobMatch
    """Which platforms may run it."""
    priority: int
    """Agents claim the highest priority first (within it, expired leases, then the oldest job)."""
    status: JobStatus
    """Where it stands: queued, leased, done, failed or cancelled."""
    attempts: int
    """Leases taken so far (a released lease gives its attempt back)."""
    max_attempts: int
    """Leases it may take before it fails for good."""
    lease_owner: str | None = None
    """The agent that holds (or, on a done job, held) the lease; shown to callers with a token only."""
    lease_expires_at: datetime | None = None
    """When the current lease runs out unless the agent heartbeats; null when not leased."""
    requeue_asked_at: datetime | None = None
    """When an operator asked the agent for the leased job back (a requeue while the agent reports): the agent stops and
    gives it back, or its lease ends 90 s after the ask (the attempt is given back unless it completes or fails); null otherwise."""
    source: str
    """Who queued it: "api", "align-missing", ..."""
    points_done: int | None = None
    """Done: the points stored. Leased: the points measured so far, as of the agent's last heartbeat (null before
    it, and from agents older than the field)."""
    points_flagged: int | None = None
    """Done: the points its agent stored only flagged by its quality gate (stalls, a busy machine), every try. They
    stay out of curves and alignments, so the next alignment asks for them again. Null while the job is open, and
    when its agent reported no run."""
    run_id: UUID | None = None
    """The run its points were stored under, as the agent reported on completion."""
    error: str | None = None
    """Why it failed or was given back; on a done job, the points its agent could not time (device and kernels)."""
    created_at: datetime
    """When it was queued."""
    updated_at: datetime
    """When it last changed (claim, heartbeat, report, cancel)."""
    finished_at: datetime | None = None
    """When it ended (done, failed or cancelled); null while it is open."""


class StoredAlignment(_Out):
    """An alignment as stored: its id, when, the jobs queued for missing data, and the gac.alignment/v1 result."""

    id: UUID
    """The alignment's id."""
    created_at: datetime
    """When it was stored."""
    platform_id: int | None = None
    """The platform it was aligned for; null when aligned by rules only."""
    jobs: list[int] = Field(default_factory=list)
    """Profiling jobs queued for the points it lacked (enqueue_missing)."""
    result: AlignmentResult
    """The gac.alignment/v1 result."""


class AlignmentSummary(_Out):
    """A line of GET /v1/alignments; fetch the whole result with Client.alignment(id)."""

    id: UUID
    """The alignment's id."""
    created_at: datetime
    """When it was stored."""
    model: str
    """The manifest's model."""
    compressor: str | None = None
    """The manifest's compressor; null when it named none."""
    platform_id: int | None = None
    """The platform it was aligned for; null when aligned by rules only."""
    weights: int
    """The manifest's weights."""
    budget: int
    """The parameters the manifest's budget allows (a ratio resolved to a count)."""
    total_params: int
    """The parameters the chosen dims keep."""
    aligned_share_before: float
    """The share of the manifest's weights whose compressor's dim is a multiple of the result's align."""
    aligned_share_after: float
    """The share of the manifest's weights whose chosen dim is a multiple of the result's align."""
    predicted_unaligned_us: float | None = None
    """The predicted latency at the compressor's dims, in µs; null without complete measurements."""
    predicted_aligned_us: float | None = None
    """The predicted latency at the chosen dims, in µs; null without complete measurements."""
    dtype: str | None = None
    """The dtype the predictions are for (null: stored before it was kept)."""
    tokens: list[int] | None = None
    """The token counts the predictions are for (null: stored before they were kept)."""
