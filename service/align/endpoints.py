"""POST /v1/align, GET /v1/alignments[/{id}].

A manifest of up to PROCESS_ABOVE_WEIGHTS weights is parsed by FastAPI and aligned on its thread
pool, as any route. A larger one never is: its body goes unparsed to a worker process (parsing
100,000 weights holds the GIL for about a second), which answers 201 as usual up to
ASYNC_ABOVE_WEIGHTS, while above that (or when asked, `Prefer: respond-async`) the service
answers 202 at once with the alignment's URL to poll (service/align/limits.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from gac.contracts.manifest import Manifest
from service.align import limits, service
from service.align.schemas import AlignmentJobStatus, AlignmentSummary, CandidateLists, StoredAlignment
from service.auth.tokens import Scope
from service.deps import Credentials, Reader, SessionDep, SettingsDep, require
from service.errors import PayloadTooLarge, Unprocessable, errors, field_errors
from service.platforms.service import get_platform
from service.schemas import NO_NUL, Offset, Page

log = logging.getLogger("gac.service")

_JSON = "application/json"
CANDIDATES_DOC = (
    "every candidate of every weight (full), or each weight's chosen one (compact); "
    f"default: full up to {limits.COMPACT_ABOVE_WEIGHTS:,} weights, compact above"
)
ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {
        "model": AlignmentJobStatus,
        "description": "A large manifest (or `Prefer: respond-async`): being aligned; GET the Location (`poll`) after "
        "Retry-After seconds until it answers 200 with the stored alignment, or the error this request would have had.",
    },
}


class _AlignRoute(APIRoute):
    """POST /v1/align: a large body goes to a worker process unparsed; anything else is FastAPI's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.method == "POST":
                request.state.received = time.perf_counter()
                body = await request.body()  # read once: FastAPI's handler is given the same request
                weights = limits.estimate_weights(body)
                respond_async = "respond-async" in request.headers.get("prefer", "").lower()
                if weights > limits.PROCESS_ABOVE_WEIGHTS or (respond_async and body):
                    return await _post_off_loop(request, body, weights, respond_async or weights > limits.ASYNC_ABOVE_WEIGHTS)
            return await handler(request)

        return route


router = APIRouter(prefix="/v1", tags=["align"], route_class=_AlignRoute)


@router.post(
    "/align", status_code=status.HTTP_201_CREATED, response_model=StoredAlignment,
    responses={**errors(401, 403, 413, 422, 429, 500), **ACCEPTED},
)
def post_align(
    manifest: Manifest,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    creds: Credentials,
    platform: Annotated[str | None, Query(
        max_length=64, pattern=NO_NUL, description="platform to align for; overrides the manifest's target",
    )] = None,
    enqueue_missing: Annotated[bool, Query(description="queue a profiling job for the curves the platform lacks (ingest token)")] = False,
    candidates: Annotated[CandidateLists | None, Query(description=CANDIDATES_DOC)] = None,
) -> Response:
    """Re-select one cliff-free dimension per weight under the manifest's budget; the result is stored.

    Alignments spend the service's CPU: they need a token (read scope or above) unless the
    operator opened them (GAC_OPEN_ALIGN=true), and each token runs a bounded number at once.
    Above 64 items the OR-Tools cross-check and the paper-DP baselines run after the answer: the
    result lists them in `pending`, and GET /v1/alignments/{id} shows them once done."""
    parsed = time.perf_counter() - getattr(request.state, "received", time.perf_counter())
    token = None if settings.open_align and creds is None else require(Scope.read, session, settings, creds)
    if enqueue_missing:
        require(Scope.ingest, session, settings, creds)
    if len(manifest.weights) > settings.align_max_weights:
        raise PayloadTooLarge(
            f"{len(manifest.weights)} weights: this service aligns at most {settings.align_max_weights} per request (GAC_ALIGN_MAX_WEIGHTS)"
        )
    with request.app.state.align_slots.slot(token.id if token else None):
        answer = service.align_and_store(
            session, settings, manifest, platform, enqueue_missing, candidates=candidates, timings={"parse": parsed},
        )
    if answer.pending:
        _complete_later(request.app, answer.alignment_id)
    return _respond(answer)


class _Query(BaseModel):
    """POST /v1/align's query, for the bodies FastAPI does not see (the same names and limits)."""

    model_config = ConfigDict(extra="ignore")

    platform: Annotated[str | None, Field(max_length=64, pattern=NO_NUL)] = None
    enqueue_missing: bool = False
    candidates: CandidateLists | None = None


_bearer = HTTPBearer(auto_error=False)


async def _post_off_loop(request: Request, body: bytes, weights: int, respond_async: bool) -> Response:
    """A large manifest: checked like any (token, query), then parsed, aligned and stored in a worker process."""
    app: FastAPI = request.app
    settings = app.state.settings
    try:
        query = _Query.model_validate(dict(request.query_params))
    except ValidationError as exc:
        raise Unprocessable(field_errors([{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)])) from None
    creds = await _bearer(request)

    def authorize() -> int | None:
        with app.state.sessionmaker() as session:
            token = None if settings.open_align and creds is None else require(Scope.read, session, settings, creds)
            if query.enqueue_missing:
                require(Scope.ingest, session, settings, creds)
            return token.id if token else None

    holder = await run_in_threadpool(authorize)
    slots = app.state.align_slots
    slots.acquire(holder)
    try:
        job = None
        if respond_async:
            job = await run_in_threadpool(_create_job, app, weights)
        task = service.AlignTask(
            settings, body, query.platform, query.enqueue_missing, query.candidates, job.id if job else None,
            limits.INLINE_CHECK_MAX_ITEMS, limits.COMPACT_ABOVE_WEIGHTS,
        )
        # From a thread: the first submission starts the worker processes.
        future = await run_in_threadpool(slots.workers.submit, service.run_task, task)
    except BaseException:
        slots.release(holder)
        if job is not None:
            lost = service.Answer(500, b'{"error": "InternalError", "detail": "the alignment could not be started"}')
            await run_in_threadpool(_fail_job, app, job.id, lost)
        raise
    if job is not None:
        future.add_done_callback(functools.partial(_job_finished, app, holder, job.id))
        headers = {"Location": job.poll, "Retry-After": str(limits.POLL_AFTER_S)}
        return Response(job.model_dump_json().encode(), status.HTTP_202_ACCEPTED, headers, media_type=_JSON)
    try:
        answer: service.Answer = await asyncio.wrap_future(future)
    finally:
        slots.release(holder)
    if answer.pending:
        await run_in_threadpool(_complete_later, app, answer.alignment_id)
    return _respond(answer)


def _respond(answer: service.Answer) -> Response:
    """The answer; a large one streamed in pieces as they are encoded (or inflated), so that no
    step holds the GIL over tens of MB (uvicorn buffers what a slow reader has not taken yet)."""
    parts = (answer.body,) if isinstance(answer.body, bytes) else answer.body
    ready = [p for p in parts if isinstance(p, bytes)]
    if len(ready) == len(parts) and sum(map(len, ready)) <= service.CHUNK:
        return Response(b"".join(ready), answer.status, answer.headers, media_type=_JSON)
    return StreamingResponse(service.chunks(parts), answer.status, answer.headers, media_type=_JSON)


def _create_job(app: FastAPI, weights: int) -> AlignmentJobStatus:
    with app.state.sessionmaker() as session:
        return service.create_job(session, uuid.uuid4(), weights)


def _fail_job(app: FastAPI, job_id: uuid.UUID, answer: service.Answer) -> None:
    with app.state.sessionmaker() as session:
        service.fail_job(session, job_id, answer)


def _job_finished(app: FastAPI, holder: int | None, job_id: uuid.UUID, future: Future) -> None:
    """A 202's alignment ended (in the pool's thread): free the token's slot, check what it left pending."""
    app.state.align_slots.release(holder)
    try:
        answer: service.Answer = future.result()
    except BaseException as exc:  # the worker process died (killed, out of memory): the job says so
        log.error("alignment %s: its worker process stopped: %r", job_id, exc)
        body = b'{"error": "InternalError", "detail": "the worker process running this alignment stopped"}'
        _fail_job(app, job_id, service.Answer(500, body))
        return
    if answer.pending:
        _complete_later(app, answer.alignment_id)


def _complete_later(app: FastAPI, alignment_id: uuid.UUID | None) -> None:
    """The cross-check and baselines an answered alignment left pending, in a worker process."""
    if alignment_id is None:
        return

    def done(future: Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("alignment %s: its pending checks did not run: %r", alignment_id, future.exception())

    app.state.align_slots.checkers.submit(service.complete_pending, app.state.settings, alignment_id).add_done_callback(done)


@router.get("/alignments", responses=errors(401, 404, 422))
def list_alignments(
    session: SessionDep, _: Reader,
    platform: Annotated[str | None, Query(max_length=64, pattern=NO_NUL)] = None,
    cursor: Offset = 0, limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Page[AlignmentSummary]:
    pid = get_platform(session, platform).id if platform else None
    return service.list_alignments(session, pid, cursor, limit)


@router.get("/alignments/{alignment_id}", response_model=StoredAlignment, responses={**errors(401, 404, 413, 422, 500), **ACCEPTED})
def get_alignment(
    alignment_id: uuid.UUID, session: SessionDep, _: Reader,
    candidates: Annotated[CandidateLists | None, Query(description=CANDIDATES_DOC)] = None,
) -> Response:
    """A stored alignment; 202 while a large one is still being aligned (POST answered 202), or the
    error its alignment ended with (what the POST would have answered; 500 AlignmentLost when the
    process running it stopped)."""
    answer = service.read(session, alignment_id, candidates)
    return _respond(answer)
