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
    model_config = ConfigDict(extra="ignore", frozen=True, from_attributes=True)


class Platform(_Out):
    """A platform as the service stores it (GET /v1/platforms[/{ref}])."""

    id: int
    fingerprint: str
    label: str
    descriptor: PlatformDescriptor
    first_seen: datetime
    last_seen: datetime
    curves: int = 0
    runs: int = 0
    agents: int = 0  # distinct agents that measured it
    # The dtypes its curves were measured in: what it was profiled in (its fast dtype, unless an agent
    # was told otherwise). What its agents measured about dtypes is in the descriptor (fast_dtype, dtype_speed).
    dtypes: list[str] = []


class RunQuality(_Out):
    """One run's share of a platform's profile quality."""

    run_id: UUID
    agent: str  # the agent that began the run
    agents: list[str] = []  # every agent that sent its points, the first first (a job's run has each attempt's)
    plan: str
    started_at: datetime
    measurements: int
    flagged: int
    load_read: int  # its points with a load reading (CPU points, from agents that send one)
    busy_cores_mean: float | None = None  # cores other work kept busy while its points were timed, on average
    busy_cores_max: float | None = None


class PlatformQuality(_Out):
    """How far a platform's profile can be trusted (GET /v1/platforms/{ref}/quality): the points the agents'
    quality gate flagged, the timing threads, and how busy the machine was with other work meanwhile."""

    platform_id: int
    threads: int | None = None  # the CPU threads the points were timed with (part of the fingerprint)
    cores: int | None = None
    measurements: int = 0  # stored points, flagged ones included
    flagged: int = 0  # kept out of curves and alignments
    flagged_by_reason: dict[str, int] = {}  # a point flagged for two reasons counts under both
    load_read: int = 0
    busy_cores_median: float | None = None  # the median of the runs' means
    busy_cores_max: float | None = None  # the most any point saw
    runs: list[RunQuality] = []  # the newest first (the service lists the latest few)


class StoredMeasurement(_Out):
    """One stored point (GET /v1/measurements); id is the service's, uuid the agent's."""

    id: int
    uuid: UUID
    platform_id: int
    curve_id: int
    run_id: UUID
    op: str
    dtype: str
    shape: dict[str, int]
    sweep_axis: str
    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    n: int
    timer: str
    backend: str | None = None
    kernel: str | None = None
    measured_at: datetime
    stop: str | None = None
    samples_discarded: int | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: int | None = None
    quality: str | None = None  # the agent's quality flags; a flagged row is left out of curves and alignments
    busy_cores: float | None = None  # cores other work kept busy while it was timed


class CurveSummary(_Out):
    """A stored curve without its points: what it sweeps and at which fixed shape (GET /v1/curves)."""

    id: int
    platform_id: int
    op: str
    dtype: str
    axis: str
    fixed: dict[str, int]
    fixed_key: str
    points: int  # distinct values of the swept axis
    measurements: int
    x_min: int
    x_max: int
    updated_at: datetime
    version: int  # changes whenever the curve gains data
    flagged: int = 0  # measurements the agent's quality gate flagged: stored, left out of points and alignments


class CurvePoint(_Out):
    """All measurements of one dimension on one curve, combined."""

    x: int
    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    n: int
    measurements: int


class Curve(_Out):
    """Latency against the swept dimension (GET /v1/platforms/{ref}/curve, /v1/curves/{id})."""

    curve: CurveSummary
    points: list[CurvePoint]


class Step(_Out):
    """An upward step of a curve: latency jumps from before_us at x_before to after_us at x."""

    x_before: int
    x: int
    before_us: float
    after_us: float
    size_pct: float
    z: float
    confidence: float


class Modulus(_Out):
    """A period the curve's fast dims follow, and how many of them it explains."""

    m: int
    agreement: float


class CombLevel(_Out):
    """Multiples of m run faster (another kernel): by this share of the time of the dims around them."""

    m: int
    pct_faster: float  # 82.0: multiples take 82 % less time than the dims around them; < 0: slower


class CurveCliffs(_Out):
    """One curve's analysis: steps, cliff-free frontier, the modulus that explains it."""

    curve: CurveSummary
    steps: list[Step]
    frontier: list[int]
    modulus: Modulus | None = None
    noise_pct: float
    tolerance: float
    notes: list[str] = Field(default_factory=list)
    comb: list[CombLevel] = Field(default_factory=list)  # the multiples that run faster, shallowest first


class JobMatch(_Out):
    """Which agents may take a job: a platform's fingerprint, or a device kind and name."""

    fingerprint: str | None = None
    device_kind: DeviceKind | None = None
    device_name: str | None = None


class Job(_Out):
    """A profiling job of the queue (GET /v1/jobs[/{id}]); plan is a gac.plan/v1 document."""

    id: int
    plan: dict[str, Any]
    plan_name: str
    points: int
    match: JobMatch
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    lease_owner: str | None = None  # shown to callers with a token only
    lease_expires_at: datetime | None = None
    source: str
    # Done: the points stored. Leased: the points measured so far, as of the agent's last heartbeat (null
    # before it, and from agents older than the field).
    points_done: int | None = None
    run_id: UUID | None = None
    # Why it failed or was given back; on a done job, the points its agent could not time (device and kernels).
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class StoredAlignment(_Out):
    """An alignment as stored: its id, when, the jobs queued for missing data, and the gac.alignment/v1 result."""

    id: UUID
    created_at: datetime
    platform_id: int | None = None
    jobs: list[int] = Field(default_factory=list)
    result: AlignmentResult


class AlignmentSummary(_Out):
    """A line of GET /v1/alignments; fetch the whole result with Client.alignment(id)."""

    id: UUID
    created_at: datetime
    model: str
    compressor: str | None = None
    platform_id: int | None = None
    weights: int
    budget: int
    total_params: int
    aligned_share_before: float
    aligned_share_after: float
    predicted_unaligned_us: float | None = None
    predicted_aligned_us: float | None = None
    dtype: str | None = None  # the dtype and token counts the predictions are for (None: stored before they were kept)
    tokens: list[int] | None = None
