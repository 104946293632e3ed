"""Align a manifest against a platform's measured curves, store the result, queue what was missing."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.contracts.plans import plan_for_points
from service.align.db_lookup import DbLookup
from service.align.schemas import AlignmentSummary, StoredAlignment
from service.db import begin_write
from service.errors import NotFound, SolverDisagreement, Unprocessable
from service.jobs.schemas import JobMatch
from service.jobs.service import enqueue
from service.models import Alignment, Platform
from service.platforms import repository as platforms
from service.schemas import Page
from service.settings import Settings
from solver.align import BudgetBelowFeasible, align
from solver.crosscheck import CrossCheckDisagreement


def resolve_platform(session: Session, manifest: Manifest, override: str | None) -> Platform | None:
    """The platform to align for: ?platform= beats the manifest's target; neither means rules only."""
    ref = override or (manifest.target.platform if manifest.target else None)
    if ref is None:
        return None
    platform = platforms.find(session, ref)
    if platform is None:
        field = "query.platform" if override else "body.target.platform"
        raise Unprocessable([{"field": field, "message": f"no platform {ref!r} on this service (id, fingerprint or unique prefix)"}])
    return platform


def run_alignment(session: Session, manifest: Manifest, platform: Platform | None) -> AlignmentResult:
    lookup = DbLookup(session, platform) if platform is not None else None
    try:
        return align(manifest, lookup)
    except BudgetBelowFeasible as exc:
        raise Unprocessable([{"field": "body.budget", "message": str(exc)}]) from exc
    except CrossCheckDisagreement as exc:
        raise SolverDisagreement(str(exc)) from exc


def store(session: Session, manifest: Manifest, platform: Platform | None, result: AlignmentResult) -> Alignment:
    begin_write(session)
    row = Alignment(
        id=uuid.uuid4(), model=manifest.model, compressor=manifest.compressor,
        platform_id=platform.id if platform else None, weights=len(manifest.weights), budget=result.budget,
        total_params=result.total_params, objective=result.objective,
        aligned_share_before=result.aligned_share_before, aligned_share_after=result.aligned_share_after,
        predicted_unaligned_us=result.latency.unaligned_us, predicted_aligned_us=result.latency.aligned_us,
        manifest=manifest.model_dump(mode="json", by_alias=True), result=result.model_dump(mode="json", by_alias=True),
    )
    session.add(row)
    session.commit()
    return row


def enqueue_missing(session: Session, settings: Settings, result: AlignmentResult, platform: Platform) -> list[int]:
    """One profiling job covering every curve point the alignment lacked, for this exact platform."""
    points = [
        (m.op, m.dtype, {**m.fixed_shape, m.axis: d}, m.axis)
        for m in result.missing
        for d in m.dims
    ]
    if not points:
        return []
    plan = plan_for_points(f"missing for {result.model}"[:200], points)
    job, _ = enqueue(
        session, settings, plan, JobMatch(fingerprint=platform.fingerprint), source="align-missing", dedupe=True
    )
    return [job.id]


def to_stored(row: Alignment, jobs: list[int] | None = None) -> StoredAlignment:
    return StoredAlignment(
        id=row.id, created_at=row.created_at, platform_id=row.platform_id, jobs=jobs or [],
        result=AlignmentResult.model_validate(row.result),
    )


def get(session: Session, alignment_id: uuid.UUID) -> Alignment:
    row = session.get(Alignment, alignment_id)
    if row is None:
        raise NotFound(f"no alignment {alignment_id}")
    return row


def list_alignments(session: Session, platform_id: int | None, offset: int, limit: int) -> Page[AlignmentSummary]:
    query = select(Alignment)
    if platform_id is not None:
        query = query.where(Alignment.platform_id == platform_id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Alignment.created_at.desc()).offset(offset).limit(limit)).all()
    items = [AlignmentSummary.model_validate(r, from_attributes=True) for r in rows]
    return Page[AlignmentSummary](items=items, total=total, next_cursor=str(offset + limit) if offset + limit < total else None)
