"""The database schema as SQLAlchemy models. Alembic (migrations/) owns the real DDL;
tests check that the two agree."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from uuid import UUID  # `uuid` is also a column name below

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every backend (SQLite would hand back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Platform(Base):
    """One exact hardware + software stack, identified by its fingerprint."""

    __tablename__ = "platforms"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    device_kind: Mapped[str] = mapped_column(String(16))
    device_name: Mapped[str] = mapped_column(String(200))
    compute_capability: Mapped[str | None] = mapped_column(String(200))
    isa: Mapped[str | None] = mapped_column(String(200))
    sm_count: Mapped[int | None] = mapped_column(Integer)
    cores: Mapped[int | None] = mapped_column(Integer)
    threads: Mapped[int | None] = mapped_column(Integer)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    l2_bytes: Mapped[int | None] = mapped_column(BigInteger)
    driver_version: Mapped[str | None] = mapped_column(String(200))
    cuda_runtime: Mapped[str | None] = mapped_column(String(200))
    cublas_version: Mapped[str | None] = mapped_column(String(200))
    cudnn_version: Mapped[str | None] = mapped_column(String(200))
    torch_version: Mapped[str | None] = mapped_column(String(200))
    triton_version: Mapped[str | None] = mapped_column(String(200))
    flash_attn_version: Mapped[str | None] = mapped_column(String(200))
    mkl_version: Mapped[str | None] = mapped_column(String(200))
    onednn_version: Mapped[str | None] = mapped_column(String(200))
    tf32_allowed: Mapped[bool | None] = mapped_column(Boolean)
    timing: Mapped[str | None] = mapped_column(String(200))
    # What its agents last measured about dtypes (not identity: the fingerprint leaves them out).
    native_dtypes: Mapped[list | None] = mapped_column(JSON)
    fast_dtype: Mapped[str | None] = mapped_column(String(16))
    dtype_speed: Mapped[dict | None] = mapped_column(JSON)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ApiToken(Base):
    """A machine or user credential; only a keyed hash of the token is kept."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # first characters, to recognise a token in listings
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Agent(Base):
    """A profiler agent as it names itself, and the token it last used."""

    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))
    agent_version: Mapped[str | None] = mapped_column(String(200))
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Run(Base):
    """One agent session on one platform."""

    __tablename__ = "runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id"), index=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id"), index=True)
    plan: Mapped[str] = mapped_column(String(200))
    agent_version: Mapped[str | None] = mapped_column(String(200))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class UploadBatch(Base):
    """One received batch: its id makes a re-send recognisable, its hash a changed re-send."""

    __tablename__ = "batches"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("runs.id"), index=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id"))
    # The agent that sent it: a job's run takes the points of every attempt, each perhaps another
    # agent's. NULL for batches stored before it was kept (their run's agent sent them).
    agent_id: Mapped[int | None] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(String(64))
    rows: Mapped[int] = mapped_column(Integer)
    inserted: Mapped[int] = mapped_column(Integer, default=0)
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Curve(Base):
    """One latency curve: platform, op, dtype, the fixed shape and the swept axis.

    Measurements point here, so reading a curve is one index range scan.
    """

    __tablename__ = "curves"
    __table_args__ = (UniqueConstraint("platform_id", "op", "dtype", "axis", "fixed_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id"))
    op: Mapped[str] = mapped_column(String(16))
    dtype: Mapped[str] = mapped_column(String(16))
    axis: Mapped[str] = mapped_column(String(32))
    fixed_key: Mapped[str] = mapped_column(String(200))  # e.g. "k=128,m=2048"
    # A fresh random tag from every batch that adds to the curve: caches of its points and
    # cliffs key on it (random, so a tag is never reused even if a curve id is).
    version: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Measurement(Base):
    """One timed point."""

    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_curve_id_x", "curve_id", "x"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    uuid: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)  # client-made: the per-row idempotency key
    # curve_id and the provenance ids are written in the same transaction as the curve, run
    # and batch rows they name (curves are never deleted). Not foreign keys on purpose: their
    # per-row trigger checks cost Postgres 40 % of a COPY (migration 0004) and guard nothing
    # the ingest transaction does not already guarantee.
    curve_id: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[UUID] = mapped_column(Uuid, index=True)
    batch_id: Mapped[UUID] = mapped_column(Uuid)
    x: Mapped[int] = mapped_column(Integer)  # the swept dimension's value; the rest of the shape is the curve's
    median_us: Mapped[float] = mapped_column(Float)
    p10_us: Mapped[float] = mapped_column(Float)
    p90_us: Mapped[float] = mapped_column(Float)
    mean_us: Mapped[float] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer)
    timer: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str | None] = mapped_column(String(200))
    kernel: Mapped[str | None] = mapped_column(String(200))
    measured_at: Mapped[datetime] = mapped_column(UtcDateTime())
    stop: Mapped[str | None] = mapped_column(String(16))
    samples_discarded: Mapped[int | None] = mapped_column(Integer)
    sm_clock_mhz: Mapped[int | None] = mapped_column(Integer)
    throttle_reasons: Mapped[int | None] = mapped_column(BigInteger)
    # The agent's quality flags (gac.contracts.measurements.Quality); NULL for a trusted row. A flagged row
    # stays visible but never feeds a curve's points, an alignment or a resume's "already stored".
    quality: Mapped[str | None] = mapped_column(String(64))
    # Cores other work kept busy while the point was timed (gac.contracts.measurements.BusyCores); NULL where
    # the agent could not read it (a GPU's points) or predates it. The dashboard's "load while profiling".
    busy_cores: Mapped[float | None] = mapped_column(Float)


class Job(Base):
    """A profiling job: a sweep plan for the platforms that match, handed to one agent at a time."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_priority_id", "status", "priority", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan: Mapped[dict] = mapped_column(JSON)
    plan_name: Mapped[str] = mapped_column(String(200))
    points: Mapped[int] = mapped_column(Integer)  # points in the plan
    match_fingerprint: Mapped[str | None] = mapped_column(String(64))
    match_device_kind: Mapped[str | None] = mapped_column(String(16))
    match_device_name: Mapped[str | None] = mapped_column(String(200))  # case-insensitive substring
    priority: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16))  # queued | leased | done | failed | cancelled
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"))  # only this token reports on the lease
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # An operator asked the lease holder for the job back (a requeue while it beats): its heartbeats are refused.
    requeue_asked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    source: Mapped[str] = mapped_column(String(64))  # who asked: "api", "align-missing", ...
    dedupe_key: Mapped[str | None] = mapped_column(String(64), index=True)
    points_done: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    error: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Alignment(Base):
    """A stored alignment: the manifest as posted and the gac.alignment/v1 result."""

    __tablename__ = "alignments"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    model: Mapped[str] = mapped_column(String(300))
    compressor: Mapped[str | None] = mapped_column(String(100))
    platform_id: Mapped[int | None] = mapped_column(ForeignKey("platforms.id"), index=True)
    weights: Mapped[int] = mapped_column(Integer)
    budget: Mapped[int] = mapped_column(BigInteger)
    total_params: Mapped[int] = mapped_column(BigInteger)
    objective: Mapped[float] = mapped_column(Float)
    aligned_share_before: Mapped[float] = mapped_column(Float)
    aligned_share_after: Mapped[float] = mapped_column(Float)
    predicted_unaligned_us: Mapped[float | None] = mapped_column(Float)
    predicted_aligned_us: Mapped[float | None] = mapped_column(Float)
    # What the predictions are for (the manifest's workload as aligned); NULL: stored before they were kept apart.
    dtype: Mapped[str | None] = mapped_column(String(16))
    tokens: Mapped[list | None] = mapped_column(JSON)
    manifest: Mapped[dict] = mapped_column(JSON)
    result: Mapped[dict] = mapped_column(JSON)  # as served by default: compact when result_full is set
    # zlib-compressed JSON of the whole result (every weight's candidates) when `result` is compact
    result_full: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, index=True)
    # Who asked (its storage quota counts the stored texts' bytes); NULL: anonymous, or stored before quotas.
    # No foreign key: a revoked or deleted token's results expire as anyone's do.
    token_id: Mapped[int | None] = mapped_column(Integer, index=True)
    stored_bytes: Mapped[int | None] = mapped_column(BigInteger)


class AlignmentJob(Base):
    """A large alignment being computed off the request (POST /v1/align answered 202); the
    alignment it makes gets the same id. GET /v1/alignments/{id} answers 202 until it is stored."""

    __tablename__ = "alignment_jobs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # queued, running, done, failed
    weights: Mapped[int | None] = mapped_column(Integer)  # estimated from the body until it is parsed
    error: Mapped[dict | None] = mapped_column(JSON)  # failed: {"status": HTTP status, "body": {"error", "detail"}}
    timings: Mapped[dict | None] = mapped_column(JSON)  # seconds per phase: parse, candidates, solve, serialize, store
    profiling_jobs: Mapped[list | None] = mapped_column(JSON)  # ids queued for missing points (enqueue_missing)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
