"""/v1/jobs: admins queue sweeps, agents claim them with a lease and report back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from gac.service.deps import AdminToken, IngestToken, Reader, SessionDep, SettingsDep
from gac.service.errors import errors
from gac.service.jobs import service
from gac.service.jobs.schemas import (
    ClaimRequest,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    JobCreate,
    JobOut,
    JobStatus,
    ReleaseRequest,
)
from gac.service.json_body import JsonBodyRoute
from gac.service.schemas import AfterId, JobId, Page

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonBodyRoute)


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(401, 403, 413, 415, 422))
def create_job(body: JobCreate, session: SessionDep, settings: SettingsDep, _: AdminToken) -> JobOut:
    """Queue a profiling job (admin token)."""
    job, _created = service.enqueue(session, settings, body.plan, body.match, priority=body.priority, max_attempts=body.max_attempts)
    return service.to_out(job)


@router.get("", responses=errors(401, 422))
def list_jobs(
    session: SessionDep,
    reader: Reader,
    status: Annotated[list[JobStatus] | None, Query(description="only jobs in these states: ?status=queued&status=leased")] = None,
    cursor: AfterId = 0,
    limit: Annotated[int, Query(ge=1, le=500, description="the most jobs on this page")] = 100,
) -> Page[JobOut]:
    """The queue's jobs by id, oldest first; lease_owner is shown to callers with a token only."""
    # Open reads show the queue, not who holds which lease: lease_owner needs a token.
    return service.list_jobs(session, status or (), cursor, limit, show_owner=reader is not None)


@router.post(
    "/claim",
    response_model=JobOut,
    responses={204: {"description": "No job for this platform now."}, **errors(401, 403, 413, 415, 422)},
)
def claim_job(body: ClaimRequest, session: SessionDep, settings: SettingsDep, token: IngestToken):
    """Lease the most urgent job this platform may run; 204 when there is none. A platform the
    service has not seen is stored, so that work can be queued for it.

    The lease belongs to this token: another token's heartbeat, complete or fail gets 403. Jobs
    named in `skip` are passed over (an agent that cannot time them whole leaves them to others)."""
    job = service.claim(session, settings, body.platform, body.agent, body.lease_seconds, token.id, skip=body.skip)
    if job is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return service.to_out(job)


@router.get("/{job_id:int}", responses=errors(401, 404, 422))
def get_job(job_id: JobId, session: SessionDep, reader: Reader) -> JobOut:
    """One job; lease_owner is shown to callers with a token only."""
    return service.to_out(service.get(session, job_id), show_owner=reader is not None)


@router.post("/{job_id:int}/heartbeat", responses=errors(401, 403, 404, 409, 413, 415, 422))
def heartbeat(job_id: JobId, body: HeartbeatRequest, session: SessionDep, settings: SettingsDep, token: IngestToken) -> JobOut:
    """The lease holder extends its lease, and may say how many points it has measured so far."""
    return service.to_out(service.heartbeat(session, settings, job_id, body.agent, body.lease_seconds, token.id, body.points_done))


@router.post("/{job_id:int}/complete", responses=errors(401, 403, 404, 409, 413, 415, 422))
def complete(job_id: JobId, body: CompleteRequest, session: SessionDep, token: IngestToken) -> JobOut:
    """The lease holder reports the job done, with the points stored and those it could not time."""
    return service.to_out(service.complete(session, job_id, body.agent, body.points, body.run_id, token.id, body.failures))


@router.post("/{job_id:int}/fail", responses=errors(401, 403, 404, 409, 413, 415, 422))
def fail(job_id: JobId, body: FailRequest, session: SessionDep, token: IngestToken) -> JobOut:
    """The lease holder gives up: the job is queued again while attempts remain, else failed."""
    return service.to_out(service.fail(session, job_id, body.agent, body.error, token.id))


@router.post("/{job_id:int}/release", responses=errors(401, 403, 404, 409, 413, 415, 422))
def release(job_id: JobId, body: ReleaseRequest, session: SessionDep, token: IngestToken) -> JobOut:
    """The lease holder gives the job back unfinished: queued again, without using up an attempt."""
    return service.to_out(service.release(session, job_id, body.agent, body.reason, token.id, body.points_done))


@router.post("/{job_id:int}/requeue", responses=errors(401, 403, 404, 409, 413, 422))
def requeue(job_id: JobId, session: SessionDep, _: AdminToken) -> JobOut:
    """Take a leased job back from its agent (admin token), its attempt given back; 409 unless leased. An agent that
    reported within the last minute is asked for it (`requeue_asked_at`; the job stays leased): it stops and gives the
    job back, or its lease ends 90 s after the ask. Any other agent's job is queued again at once."""
    return service.to_out(service.requeue(session, job_id))


@router.delete("/{job_id:int}", responses=errors(401, 403, 404, 409, 413, 422))
def cancel(job_id: JobId, session: SessionDep, _: AdminToken) -> JobOut:
    """Cancel a job that has not finished (admin token); 409 for one that has."""
    return service.to_out(service.cancel(session, job_id))
