"""Alignment queries: the stored alignments, and the jobs making large ones off the request."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, Row, Text, cast, delete, func, insert, literal, select, update
from sqlalchemy.orm import Session, load_only

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.service.align.schemas import AlignmentSummary
from gac.service.models import Alignment, AlignmentJob, utcnow
from gac.service.repository import Slice, offset_page


def _json_text(session: Session, text: str):
    """A JSON document serialized already, bound as it is (the JSON type would encode it again)."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(literal(text, Text), JSON)
    return literal(text, Text)


def insert_alignment(
    session: Session,
    alignment_id: uuid.UUID,
    created_at: datetime,
    manifest: Manifest,
    platform_id: int | None,
    result: AlignmentResult,
    result_text: str,
    result_full: bytes | None,
    owner: int | None = None,
    stored_bytes: int | None = None,
) -> None:
    """result_text: the result as served by default; result_full: the whole result compressed, when that text is compact;
    owner: the token that asked (its storage quota counts stored_bytes)."""
    session.execute(
        insert(Alignment).values(
            id=alignment_id,
            model=manifest.model,
            compressor=manifest.compressor,
            platform_id=platform_id,
            weights=len(manifest.weights),
            budget=result.budget,
            total_params=result.total_params,
            objective=result.objective,
            aligned_share_before=result.aligned_share_before,
            aligned_share_after=result.aligned_share_after,
            predicted_unaligned_us=result.latency.unaligned_us,
            predicted_aligned_us=result.latency.aligned_us,
            dtype=str(manifest.workload.dtype),
            tokens=list(manifest.workload.tokens),
            manifest=_json_text(session, manifest.model_dump_json(by_alias=True)),
            result=_json_text(session, result_text),
            result_full=result_full,
            created_at=created_at,
            token_id=owner,
            stored_bytes=stored_bytes,
        )
    )


def expire(session: Session, before: datetime, owner: int | None, quota_bytes: int | None) -> int:
    """Delete the alignments (and their jobs) stored before `before`, then the owner's oldest while
    its stored bytes are above quota_bytes (the newest is always kept). Returns how many went."""
    gone = list(session.scalars(select(Alignment.id).where(Alignment.created_at < before)))
    if owner is not None and quota_bytes is not None:
        rows = session.execute(
            select(Alignment.id, func.coalesce(Alignment.stored_bytes, 0))
            .where(Alignment.token_id == owner, Alignment.created_at >= before)
            .order_by(Alignment.created_at.desc(), Alignment.id)
        ).all()
        total = 0
        for i, (aid, size) in enumerate(rows):
            total += size
            if i and total > quota_bytes:
                gone.append(aid)
    if gone:
        session.execute(delete(AlignmentJob).where(AlignmentJob.id.in_(gone)))
        session.execute(delete(Alignment).where(Alignment.id.in_(gone)))
    return len(gone)


_ADMISSION_LOCK = 0x6761635F616C  # "gac_al": one advisory lock key for the alignments' global budget


def lock_admission(session: Session) -> None:
    """Serialize admissions until the transaction ends (Postgres; SQLite's writer lock does it)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_ADMISSION_LOCK)))


def active_jobs(session: Session, news_since: datetime) -> int:
    """Alignments queued or running, with news since then."""
    return (
        session.scalar(
            select(func.count())
            .select_from(AlignmentJob)
            .where(AlignmentJob.status.in_(("queued", "running")), AlignmentJob.updated_at >= news_since)
        )
        or 0
    )


def write_result(session: Session, alignment_id: uuid.UUID, result_text: str, result_full: bytes | None) -> None:
    """A stored alignment's result replaced (result_full only when given: None leaves it as it is)."""
    values: dict[str, object] = {"result": _json_text(session, result_text)}
    if result_full is not None:
        values["result_full"] = result_full
    session.execute(update(Alignment).where(Alignment.id == alignment_id).values(**values))


def head(session: Session, alignment_id: uuid.UUID) -> Row | None:
    """A stored alignment without its manifest: (id, created_at, platform_id, weights, result as text,
    has_full, profiling_jobs, timings), the last two its job's (None when it had none)."""
    has_full = Alignment.result_full.is_not(None).label("has_full")
    return session.execute(
        select(
            Alignment.id,
            Alignment.created_at,
            Alignment.platform_id,
            Alignment.weights,
            cast(Alignment.result, Text),
            has_full,
            AlignmentJob.profiling_jobs,
            AlignmentJob.timings,
        )
        .outerjoin(AlignmentJob, AlignmentJob.id == Alignment.id)
        .where(Alignment.id == alignment_id)
    ).one_or_none()


def result_full(session: Session, alignment_id: uuid.UUID) -> bytes:
    """The whole result, compressed, of an alignment stored with one (head's has_full)."""
    full = session.scalar(select(Alignment.result_full).where(Alignment.id == alignment_id))
    assert full is not None  # asked for only when head() found one
    return full


_SUMMARY = tuple(AlignmentSummary.model_fields)


def page(session: Session, platform_id: int | None, offset: int, limit: int) -> Slice[Alignment]:
    """Newest first, with only the summary's columns loaded: a stored manifest and result can be tens of MB each."""
    query = select(Alignment)
    if platform_id is not None:
        query = query.where(Alignment.platform_id == platform_id)
    summary = query.options(load_only(*(getattr(Alignment, f) for f in _SUMMARY)))
    return offset_page(session, summary, key=Alignment.id, order_by=(Alignment.created_at.desc(),), offset=offset, limit=limit)


def update_job(session: Session, alignment_id: uuid.UUID, values: dict[str, object]) -> None:
    session.execute(update(AlignmentJob).where(AlignmentJob.id == alignment_id).values(**values, updated_at=utcnow()))
