"""Job use cases: enqueue, claim with a lease, heartbeat, complete, fail, release, cancel."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, object_session

from gac.contracts.measurements import PlatformDescriptor
from gac.contracts.plans import SweepPlan
from gac.service.db import begin_write
from gac.service.errors import Conflict, Forbidden, NotFound, Unprocessable
from gac.service.ingest.known import IdResolver, platform_key
from gac.service.ingest.repository import upsert_platform
from gac.service.jobs import repository as repo
from gac.service.jobs.schemas import JobMatch, JobOut
from gac.service.models import Job
from gac.service.schemas import Page
from gac.service.settings import Settings


def _now() -> datetime:
    return datetime.now(UTC)


# Agents beat at least every 30 s (gac.agent.jobs.HEARTBEAT_AT_MOST_S): one that beat within two of those is alive, and a
# requeue asks it for the job rather than taking it (it would go on timing until its next beat, storing the points the
# next agent stores too). The job is anyone's once the agent gives it back, or REQUEUE_GRACE after the ask: three of the
# slowest beats (one may fail), and time for a long point to end (a short lease is lengthened to it: no beat extends it).
# The ask gives the claim's attempt back; the agent's complete or fail takes it again (a failure counts, a done job
# shows its tries), its release or silence leaves it given back.
ALIVE_WITHIN = timedelta(seconds=60)
REQUEUE_GRACE = timedelta(seconds=90)


def to_out(job: Job, *, show_owner: bool = True, flagged: dict[uuid.UUID, int] | None = None) -> JobOut:
    """The API view; without show_owner (an anonymous reader) the lease holder's name is left out.
    flagged: repo.flagged_points of the done jobs' runs, when the caller read them for many (else read here)."""
    if flagged is None and job.status == "done" and job.run_id is not None and (session := object_session(job)) is not None:
        flagged = repo.flagged_points(session, [job.run_id])
    match = {"fingerprint": job.match_fingerprint, "device_kind": job.match_device_kind, "device_name": job.match_device_name}
    return JobOut.model_validate(
        {  # the stored strings are checked against the view's literals
            "id": job.id,
            "plan": job.plan,
            "plan_name": job.plan_name,
            "points": job.points,
            "match": match,
            "priority": job.priority,
            "status": job.status,
            "attempts": job.attempts,
            "max_attempts": job.max_attempts,
            "lease_owner": job.lease_owner if show_owner else None,
            "lease_expires_at": job.lease_expires_at,
            "requeue_asked_at": job.requeue_asked_at,
            "source": job.source,
            "points_done": job.points_done,
            "points_flagged": (flagged or {}).get(job.run_id, 0) if job.status == "done" and job.run_id is not None else None,
            "run_id": job.run_id,
            "error": job.error,
            "created_at": job.created_at,
            "updated_at": job.updated_at,
            "finished_at": job.finished_at,
        }
    )


def dedupe_key(plan: SweepPlan, match: JobMatch) -> str:
    body = {"sweeps": plan.model_dump(mode="json")["sweeps"], "match": match.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def enqueue(
    session: Session,
    settings: Settings,
    plan: SweepPlan,
    match: JobMatch,
    *,
    priority: int = 0,
    max_attempts: int | None = None,
    source: str = "api",
    dedupe: bool = False,
) -> tuple[Job, bool]:
    """Queue a job; with dedupe, an identical queued or running job is returned instead. (job, created)"""
    begin_write(session)
    key = dedupe_key(plan, match)
    if dedupe:
        repo.lock_key(session, key)  # two alignments queueing the same points at once queue them once
        if (existing := repo.active_with_key(session, key)) is not None:
            session.commit()
            return existing, False
    now = _now()
    job = Job(
        plan=plan.to_document(),
        plan_name=plan.name,
        points=plan.n_points(),
        match_fingerprint=match.fingerprint,
        match_device_kind=match.device_kind,
        match_device_name=match.device_name,
        priority=priority,
        status="queued",
        attempts=0,
        max_attempts=max_attempts or settings.job_max_attempts,
        source=source,
        dedupe_key=key,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.commit()
    return job, True


def claim(
    session: Session,
    settings: Settings,
    platform: PlatformDescriptor,
    agent: str,
    lease_seconds: int | None,
    token_id: int,
    skip: Sequence[int] = (),
) -> Job | None:
    """Lease the best job for this platform to agent, on behalf of the token that asked. The
    platform is stored if it is new: an agent asking for work makes its platform known, so that
    work can be queued for it (an alignment's missing points) before it has measured anything."""
    begin_write(session)
    now = _now()
    ids = IdResolver(now)
    ids.resolve(platform_key(str(session.get_bind().engine.url), platform), lambda: upsert_platform(session, platform, now))
    repo.fail_exhausted(session, now)
    job = repo.claimable(session, platform, now, skip)
    if job is not None:
        job.status = "leased"
        job.lease_owner = agent
        job.lease_token_id = token_id
        job.lease_expires_at = now + timedelta(seconds=lease_seconds or settings.job_lease_seconds)
        job.attempts += 1
        job.requeue_asked_at = None
        job.updated_at = now  # points_done stays the earlier attempts' until this one's first heartbeat
    session.commit()
    ids.remember()
    return job


def _owned(session: Session, job_id: int, agent: str, token_id: int) -> Job:
    """The job, locked, if it is leased to agent under this token: 403 for another token's lease."""
    begin_write(session)
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        session.rollback()
        raise NotFound(f"no job {job_id}")
    holder = job.lease_token_id
    if job.status == "leased" and holder is not None and holder != token_id:
        session.rollback()  # whoever holds it is not this caller's business: no name in the answer
        raise Forbidden(f"job {job_id} is leased under another API token; only the token that claimed it may report on it")
    if job.status != "leased":
        by = f" (by agent {job.lease_owner!r})" if job.status == "done" and job.lease_owner else ""
        session.rollback()
        raise Conflict(f"job {job_id} is {job.status}{by}: it has no lease to report on")
    if job.lease_owner != agent:
        session.rollback()
        raise Conflict(f"job {job_id} is leased to agent {job.lease_owner!r}, not to {agent!r}")
    return job


def _within_plan(session: Session, job: Job, points: int | None, field: str) -> None:
    """A count of the job's points measured is at most the points in its plan (422 naming the field): the queue shows it."""
    if points is not None and points > job.points:
        session.rollback()
        said = f"{points} points measured is more than job {job.id}'s plan holds ({job.points})"
        raise Unprocessable([{"field": field, "message": said}])


def heartbeat(
    session: Session, settings: Settings, job_id: int, agent: str, lease_seconds: int | None, token_id: int, points_done: int | None = None
) -> Job:
    """Extend the lease; `points_done` (the points measured so far) is what the queue shows while the job runs.
    Refused (409) once an operator asked for the job back: the agent stops and gives it back."""
    job = _owned(session, job_id, agent, token_id)
    _within_plan(session, job, points_done, "body.points_done")
    if job.requeue_asked_at is not None:
        if points_done is not None:
            job.points_done = points_done
            session.commit()
        else:
            session.rollback()
        raise Conflict(f"job {job_id} was requeued by an operator: give it back (its lease is not extended)")
    now = _now()
    job.lease_expires_at = now + timedelta(seconds=lease_seconds or settings.job_lease_seconds)
    if points_done is not None:
        job.points_done = points_done
    job.updated_at = now
    session.commit()
    return job


def complete(
    session: Session, job_id: int, agent: str, points: int, run_id: uuid.UUID | None, token_id: int, failures: str | None = None
) -> Job:
    """Done; `failures`: the points the agent could not time, kept as the job's error (a done job with an error is partial)."""
    job = _owned(session, job_id, agent, token_id)
    _within_plan(session, job, points, "body.points")
    now = _now()
    if job.requeue_asked_at is not None:  # finished all the same: the attempt the ask gave back was taken
        job.attempts += 1
    job.status, job.points_done, job.run_id = "done", points, run_id
    job.lease_expires_at, job.finished_at, job.updated_at, job.error = None, now, now, failures
    job.lease_token_id, job.requeue_asked_at = None, None  # the lease is over (lease_owner stays: who did the job)
    session.commit()
    return job


def fail(session: Session, job_id: int, agent: str, error: str, token_id: int) -> Job:
    """The agent gave up: back to the queue while attempts remain, else failed."""
    job = _owned(session, job_id, agent, token_id)
    now = _now()
    if job.requeue_asked_at is not None:  # a failure counts, asked or not (on the last attempt, the job has failed)
        job.attempts += 1
    job.error = error
    job.lease_owner, job.lease_expires_at, job.updated_at = None, None, now
    job.lease_token_id, job.requeue_asked_at = None, None
    if job.attempts >= job.max_attempts:
        job.status, job.finished_at = "failed", now
    else:
        job.status = "queued"
    session.commit()
    return job


def release(session: Session, job_id: int, agent: str, reason: str | None, token_id: int, points_done: int | None = None) -> Job:
    """The agent gives the job back unfinished (stopped by Ctrl-C or SIGTERM, or asked by a requeue): queued
    again at once, and the attempt its claim counted is given back too, since nothing failed. The reason, if
    any, is kept where a failure's error would be, so the queue shows why it is back; points_done, the job's
    points measured so far, what it shows done."""
    job = _owned(session, job_id, agent, token_id)
    _within_plan(session, job, points_done, "body.points_done")
    now = _now()
    job.status = "queued"
    job.lease_owner, job.lease_expires_at, job.lease_token_id, job.updated_at = None, None, None, now
    if job.requeue_asked_at is not None:  # the ask gave the attempt back already
        reason = f"requeued by an operator; agent {agent} gave it back" + (f" ({reason})" if reason else "")
        job.requeue_asked_at = None
    else:
        job.attempts = max(0, job.attempts - 1)
    if points_done is not None:
        job.points_done = points_done
    if reason:
        job.error = reason
    session.commit()
    return job


def requeue(session: Session, job_id: int) -> Job:
    """An operator takes a leased job back from its agent before the lease runs out, the attempt given back (the
    job did not fail). An agent that beat within ALIVE_WITHIN is asked for it: its next heartbeat is refused, it
    stops and gives the job back, and the lease ends REQUEUE_GRACE after the ask if it does not. Any other (killed,
    or cut off) loses it at once: queued again, and refused (409) at its next report, as when its lease expires."""
    begin_write(session)
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        session.rollback()
        raise NotFound(f"no job {job_id}")
    if job.status != "leased":
        session.rollback()
        raise Conflict(f"job {job_id} is {job.status}: only a leased job is requeued")
    now = _now()
    owner = job.lease_owner
    expires = job.lease_expires_at
    if expires is not None and expires > now and now - job.updated_at <= ALIVE_WITHIN:
        if job.requeue_asked_at is None:
            # The attempt is given back now (its complete or fail takes it again): released or gone silent, the
            # operator's requeue never costs one, nor fails a job on its last.
            job.requeue_asked_at, job.attempts = now, max(0, job.attempts - 1)
            job.lease_expires_at = now + REQUEUE_GRACE
        session.commit()
        return job
    if job.requeue_asked_at is None:  # an asked job's attempt was given back with the ask
        job.attempts = max(0, job.attempts - 1)
    job.status, job.requeue_asked_at = "queued", None
    job.lease_owner, job.lease_expires_at, job.lease_token_id, job.updated_at = None, None, None, now
    job.error = f"requeued by an operator from agent {owner}"
    session.commit()
    return job


def cancel(session: Session, job_id: int) -> Job:
    begin_write(session)
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        session.rollback()
        raise NotFound(f"no job {job_id}")
    if job.status in ("done", "failed", "cancelled"):
        session.rollback()
        raise Conflict(f"job {job_id} has already finished ({job.status})")
    now = _now()
    job.status, job.lease_owner, job.lease_expires_at, job.finished_at, job.updated_at = "cancelled", None, None, now, now
    job.lease_token_id, job.requeue_asked_at = None, None
    session.commit()
    return job


def get(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def list_jobs(session: Session, statuses: Sequence[str], after_id: int, limit: int, *, show_owner: bool) -> Page[JobOut]:
    found = repo.page(session, statuses, after_id, limit)
    nxt = str(found.rows[-1].id) if found.more else None
    flagged = repo.flagged_points(session, [j.run_id for j in found.rows if j.status == "done" and j.run_id is not None])
    items = [to_out(j, show_owner=show_owner, flagged=flagged) for j in found.rows]
    return Page[JobOut](items=items, total=found.total, next_cursor=nxt)
