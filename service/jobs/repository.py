"""Job queries. Claiming uses SELECT ... FOR UPDATE SKIP LOCKED on Postgres; on SQLite the
write transaction (BEGIN IMMEDIATE) already serializes claimers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from sqlalchemy import ColumnElement, and_, func, literal, or_, select, update
from sqlalchemy.orm import Session

from gac.contracts.measurements import PlatformDescriptor
from gac.service.models import Job, Measurement
from gac.service.repository import Slice, keyset_page

ACTIVE = ("queued", "leased")


def _fits(platform: PlatformDescriptor, skip: Sequence[int] = ()) -> tuple:
    """The conditions under which this platform may run a job (and the job has attempts left, and is not one to skip)."""
    name = platform.device_name.lower()
    return (
        *((Job.id.not_in(skip),) if skip else ()),
        Job.attempts < Job.max_attempts,
        or_(Job.match_fingerprint.is_(None), Job.match_fingerprint == platform.fingerprint()),
        or_(Job.match_device_kind.is_(None), Job.match_device_kind == platform.device_kind),
        or_(Job.match_device_name.is_(None), literal(name).like(_containing(func.lower(Job.match_device_name)), escape="\\")),
    )


def _containing(text: ColumnElement[str]) -> ColumnElement[str]:
    """A LIKE pattern (escape character backslash) for any text containing `text` as it is: a job
    for "H_00" must not go to an "H200", nor one for "%" to every platform."""
    for char in ("\\", "%", "_"):
        text = func.replace(text, char, "\\" + char)
    return literal("%") + text + literal("%")


def claimable(session: Session, platform: PlatformDescriptor, now: datetime, skip: Sequence[int] = ()) -> Job | None:
    """The best job this platform may take now, locked for this transaction.

    Best: the highest priority; within it a job whose lease expired (it has waited longest),
    then the oldest queued job. One priority level at a time, so that Postgres walks the
    (status, priority, id) index from the head of the queue and stops at the first free job
    that fits: a claim reads a few rows, not the whole queue (one query sorting every queued
    row by priority DESC, id ASC, an order that index cannot give, took 38 ms at 10,000 queued
    jobs on the 2-core VM, 1 ms this way). Rows other claims hold are skipped (SKIP LOCKED),
    never waited for. Jobs in `skip` are passed over."""
    fits = _fits(platform, skip)
    expired = and_(Job.status == "leased", Job.lease_expires_at < now)
    below: tuple = ()
    while True:
        # The next priority level down that holds a queued job or an expired lease (any platform's).
        top_queued = select(func.max(Job.priority)).where(Job.status == "queued", *below).scalar_subquery()
        top_expired = select(func.max(Job.priority)).where(expired, *below).scalar_subquery()
        queued_at, expired_at = session.execute(select(top_queued, top_expired)).one()
        if queued_at is None and expired_at is None:
            return None
        level = max(p for p in (queued_at, expired_at) if p is not None)
        for state, top in ((expired, expired_at), (Job.status == "queued", queued_at)):
            if top != level:
                continue  # nothing in this state at this level: no query
            query = select(Job).where(state, Job.priority == level, *fits).order_by(Job.id).limit(1).with_for_update(skip_locked=True)
            if (job := session.scalar(query)) is not None:
                return job
        below = (Job.priority < level,)


def lock_key(session: Session, key: str) -> None:
    """Hold the dedupe key (a hex digest) until this transaction ends, so that its check for an active
    job with the key and its insert are one step. Postgres: a transaction-scoped advisory lock on the
    key's first 60 bits; SQLite's write transaction (BEGIN IMMEDIATE) already serializes writers."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(int(key[:15], 16))))


def fail_exhausted(session: Session, now: datetime) -> None:
    """Leases that expired on their last attempt: the job has failed.

    A row another transaction holds is skipped, not waited for (a later claim fails it): a
    plain UPDATE would queue this claim behind whichever claim or report holds that row."""
    free = (
        select(Job.id)
        .where(Job.status == "leased", Job.lease_expires_at < now, Job.attempts >= Job.max_attempts)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    session.execute(
        update(Job)
        .where(Job.id.in_(free))
        .values(status="failed", error="lease expired on the last attempt", finished_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )


def active_with_key(session: Session, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.dedupe_key == key, Job.status.in_(ACTIVE)).order_by(Job.id).limit(1))


def flagged_points(session: Session, run_ids: Sequence[UUID]) -> dict[UUID, int]:
    """{run id: the points of the run stored only flagged (every row of the point has quality set)}."""
    if not run_ids:
        return {}
    per_point = (
        select(Measurement.run_id)
        .where(Measurement.run_id.in_(run_ids))
        .group_by(Measurement.run_id, Measurement.curve_id, Measurement.x)
        .having(func.count(Measurement.quality) == func.count())
        .subquery()
    )
    return {run_id: n for run_id, n in session.execute(select(per_point.c.run_id, func.count()).group_by(per_point.c.run_id))}


def page(session: Session, statuses: Sequence[str], after_id: int, limit: int) -> Slice[Job]:
    """Jobs after `after_id` in any of `statuses` (every job when none)."""
    query = select(Job)
    if statuses:
        query = query.where(Job.status.in_(statuses))
    return keyset_page(session, query, key=Job.id, after=after_id, limit=limit)


def queue_counts(session: Session, now: datetime) -> tuple[dict[str, int], int]:
    """Jobs by status, and how many leased ones have a lease that ran out (their agent stopped reporting)."""
    by_status = {str(status): int(n) for status, n in session.execute(select(Job.status, func.count()).group_by(Job.status))}
    expired = session.scalar(select(func.count()).where(Job.status == "leased", Job.lease_expires_at < now)) or 0
    return by_status, int(expired)
