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
    model_config = ConfigDict(extra="forbid")


class JobMatch(_In):
    """Which platforms may run the job; every given field must match (none given: any platform)."""

    fingerprint: Annotated[str | None, Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")] = None
    device_kind: Literal["cuda", "cpu", "rocm"] | None = None
    device_name: Annotated[str | None, Field(min_length=1, max_length=200, pattern=PRINTABLE, description="case-insensitive substring")] = (
        None
    )


class JobCreate(_In):
    plan: SweepPlan
    match: JobMatch = Field(default_factory=JobMatch)
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    max_attempts: Annotated[int | None, Field(ge=1, le=100)] = None


class ClaimRequest(_In):
    platform: PlatformDescriptor
    agent: AgentName
    lease_seconds: LeaseSeconds | None = None
    # Jobs this agent will not take (it cannot time them whole, e.g. its --dtype leaves out one they need): left to others.
    skip: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]], Field(max_length=1000)] = []


class HeartbeatRequest(_In):
    agent: AgentName
    lease_seconds: LeaseSeconds | None = None
    points_done: Annotated[int, Field(ge=0, le=10_000_000)] | None = None  # the job's points measured so far


class CompleteRequest(_In):
    agent: AgentName
    points: Annotated[int, Field(ge=0, le=10_000_000)]
    run_id: uuid.UUID | None = None
    # The points the agent could not time (out of memory, a dtype its device lacks), in its words, naming
    # the device and kernels: kept as the done job's error, since another attempt on that device fails too.
    failures: Annotated[str | None, Field(min_length=1, max_length=2000, pattern=PRINTABLE)] = None


class FailRequest(_In):
    agent: AgentName
    error: Annotated[str, Field(min_length=1, max_length=2000, pattern=PRINTABLE)]


class ReleaseRequest(_In):
    """The agent gives the job back unfinished (it is stopping): not a failure."""

    agent: AgentName
    reason: Annotated[str | None, Field(min_length=1, max_length=2000, pattern=PRINTABLE)] = None
