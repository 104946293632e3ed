from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gac.contracts.api import Job as JobOut
from gac.contracts.api import JobStatus
from gac.contracts.measurements import PRINTABLE, PlatformDescriptor
from gac.contracts.plans import SweepPlan
from gac.service.schemas import MAX_ID

__all__ = [
    "AgentName",
    "ClaimRequest",
    "CompleteRequest",
    "FailRequest",
    "HeartbeatRequest",
    "JobCreate",
    "JobMatch",
    "JobOut",
    "JobStatus",
    "ReleaseRequest",
]

# Text that reaches a String column: no NUL (Postgres refuses it), no more than the column holds.
AgentName = Annotated[str, Field(min_length=1, max_length=200, pattern=PRINTABLE)]
LeaseSeconds = Annotated[int, Field(ge=5, le=86_400)]


class _In(BaseModel):
    # Each field's docstring is its description in the OpenAPI document.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class JobMatch(_In):
    """Which platforms may run the job; every given field must match (none given: any platform)."""

    fingerprint: Annotated[str | None, Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")] = None
    """Only the platform with this fingerprint."""
    device_kind: Literal["cuda", "cpu", "rocm"] | None = None
    """Only platforms of this device kind."""
    device_name: Annotated[str | None, Field(min_length=1, max_length=200, pattern=PRINTABLE, description="case-insensitive substring")] = (
        None
    )


class JobCreate(_In):
    """A job to queue (POST /v1/jobs)."""

    plan: SweepPlan
    """The sweep plan to time."""
    match: JobMatch = Field(default_factory=JobMatch)
    """Which platforms may run it; empty: any."""
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    """Agents claim the highest priority first."""
    max_attempts: Annotated[int | None, Field(ge=1, le=100)] = None
    """Leases it may take before it fails for good; null: the service's default (GAC_JOB_MAX_ATTEMPTS)."""


class ClaimRequest(_In):
    """An agent asks for work (POST /v1/jobs/claim)."""

    platform: PlatformDescriptor
    """The agent's platform: only jobs that match it are leased."""
    agent: AgentName
    """The agent's stable name: the lease's owner."""
    lease_seconds: LeaseSeconds | None = None
    """How long the lease lasts without a heartbeat; null: the service's default (GAC_JOB_LEASE_SECONDS)."""
    skip: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]], Field(max_length=1000)] = []
    """Jobs this agent will not take (it cannot time them whole, e.g. its --dtype leaves out one they need): left to others."""


class HeartbeatRequest(_In):
    """The lease holder says it is still at work (POST /v1/jobs/{id}/heartbeat)."""

    agent: AgentName
    """The agent that holds the lease."""
    lease_seconds: LeaseSeconds | None = None
    """The lease's new length from now; null: the service's default (GAC_JOB_LEASE_SECONDS)."""
    points_done: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    """The job's points measured so far; null: unchanged."""


class CompleteRequest(_In):
    """The lease holder reports the job done (POST /v1/jobs/{id}/complete)."""

    agent: AgentName
    """The agent that holds the lease."""
    points: Annotated[int, Field(ge=0, le=10_000_000)]
    """The points stored."""
    run_id: uuid.UUID | None = None
    """The run the points were stored under."""
    failures: Annotated[str | None, Field(min_length=1, max_length=2000, pattern=PRINTABLE)] = None
    """The points the agent could not time (out of memory, a dtype its device lacks), in its words, naming the device
    and kernels: kept as the done job's error, since another attempt on that device fails too."""


class FailRequest(_In):
    """The lease holder gives up (POST /v1/jobs/{id}/fail): queued again while attempts remain, else failed."""

    agent: AgentName
    """The agent that holds the lease."""
    error: Annotated[str, Field(min_length=1, max_length=2000, pattern=PRINTABLE)]
    """Why it failed: kept as the job's error."""


class ReleaseRequest(_In):
    """The agent gives the job back unfinished (it is stopping): not a failure."""

    agent: AgentName
    """The agent that holds the lease."""
    reason: Annotated[str | None, Field(min_length=1, max_length=2000, pattern=PRINTABLE)] = None
    """Why it stops: kept where a failure's error would be, so the queue shows why the job is back."""
    points_done: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    """The job's points measured so far (this attempt's and its earlier ones'): what the queue shows done; null: unchanged."""
