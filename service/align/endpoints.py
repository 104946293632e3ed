"""POST /v1/align, GET /v1/alignments[/{id}], POST /v1/alignments/{id}/checks.

No manifest is parsed or aligned in this process, at any size: a body goes unparsed to a process
of its own (parsing 100,000 weights holds the GIL for about a second; aligning, for minutes),
which parses it, estimates its cost (413 above GAC_ALIGN_MAX_WORK) and reports its size. Up to
ASYNC_ABOVE_WEIGHTS the request waits for the answer (201), and a client that goes away stops the
work; above that (or when asked, `Prefer: respond-async`) the service answers 202 with the
alignment's URL to poll. Every alignment has a job row from the start (the global budget counts
them) that says how it ended, stopped ones included (service/align/limits.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from gac.contracts.manifest import Manifest, SpelledDtype
from gac.contracts.measurements import Dtype
from gac.service import errors as service_errors
from gac.service.align import limits, service
from gac.service.align.schemas import AlignmentJobStatus, AlignmentSummary, CandidateLists, StoredAlignment
from gac.service.auth.tokens import Scope
from gac.service.deps import Credentials, Reader, SessionDep, require
from gac.service.errors import error_json, errors, field_errors, require_json_body
from gac.service.platforms.service import get_platform
from gac.service.query import query_errors
from gac.service.schemas import NO_NUL, Offset, Page

log = logging.getLogger("gac.service")

_JSON = "application/json"
AlignmentId = Annotated[uuid.UUID, Path(description="the alignment's id")]
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
    """POST /v1/align: the body goes to a worker process unparsed; GETs are FastAPI's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.method == "POST" and request.url.path.endswith("/align"):
                body = await request.body()  # bounded by the body size limit
                return await _post(request, body, "respond-async" in request.headers.get("prefer", "").lower())
            return await handler(request)

        return route


router = APIRouter(prefix="/v1", tags=["align"], route_class=_AlignRoute)


@router.post(
    "/align",
    status_code=status.HTTP_201_CREATED,
    response_model=StoredAlignment,
    responses={**errors(401, 403, 410, 413, 415, 422, 429, 500, 504), **ACCEPTED},
)
def post_align(
    manifest: Manifest,
    request: Request,
    creds: Credentials,
    platform: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=64,
            pattern=NO_NUL,
            description="platform to align for; overrides the manifest's target",
        ),
    ] = None,
    enqueue_missing: Annotated[bool, Query(description="queue a profiling job for the curves the platform lacks (ingest token)")] = False,
    candidates: Annotated[CandidateLists | None, Query(description=CANDIDATES_DOC)] = None,
    dtype: Annotated[Dtype | None, Query(description="the dtype to align for; overrides the manifest's workload.dtype")] = None,
) -> Response:
    """Re-select one cliff-free dimension per weight under the manifest's budget; the result is stored.

    Alignments spend the service's CPU: they need a token (read scope or above) unless the
    operator opened them (GAC_OPEN_ALIGN=true); each token runs a bounded number at once, and the
    whole service a bounded number (429 with Retry-After past either). The cost is estimated from
    the manifest before any work (413 with the estimate above GAC_ALIGN_MAX_WORK); each alignment
    runs in a process of its own under a memory limit and a deadline (504 past it); a client that
    disconnects stops it (the stored job says so: 410). Above 64 items the OR-Tools cross-check
    and the paper-DP baselines run after the answer: the result lists them in `pending`, and GET
    /v1/alignments/{id} shows them once done.

    (This function documents the route: _AlignRoute serves it, the body unparsed.)"""
    raise AssertionError("POST /v1/align is served by _AlignRoute")


class _Query(BaseModel):
    """POST /v1/align's query, for the bodies FastAPI does not see (the same names and limits; no others,
    as every other route refuses a parameter it does not take)."""

    model_config = ConfigDict(extra="forbid")

    platform: Annotated[str | None, Field(min_length=1, max_length=64, pattern=NO_NUL)] = None
    enqueue_missing: bool = False
    candidates: CandidateLists | None = None
    dtype: SpelledDtype | None = None  # bf16, as a manifest may write it


_bearer = HTTPBearer(auto_error=False)


async def _post(request: Request, body: bytes, respond_async: bool) -> Response:
    """Check the request (query, token, both budgets), then parse, align and store in a process of its own."""
    received = time.monotonic()
    app: FastAPI = request.app
    settings = app.state.settings
    if named := query_errors(request.query_params.multi_items(), dict.fromkeys(_Query.model_fields, False)):
        raise service_errors.ValidationError(field_errors(named))  # as every other route answers them
    try:
        query = _Query.model_validate(dict(request.query_params))
    except ValidationError as exc:
        # Named as FastAPI's own 422 on any other route's query ("ValidationError").
        named = [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        raise service_errors.ValidationError(field_errors(named)) from None
    hint = ": `gac align FILE` and Client.align(path) read a YAML manifest and send it as JSON"
    require_json_body(request.headers.get("content-type"), "a manifest", hint=hint)
    creds = await _bearer(request)

    def authorize() -> int | None:
        with app.state.sessionmaker() as session:
            token = None if settings.open_align and creds is None else require(Scope.read, session, settings, creds)
            if query.enqueue_missing:
                require(Scope.ingest, session, settings, creds)
            return token.id if token else None

    holder = await run_in_threadpool(authorize)
    slots: limits.AlignSlots = app.state.align_slots
    slots.acquire(holder)
    try:
        job = await run_in_threadpool(_admit, app, uuid.uuid4())
    except BaseException:
        slots.release(holder)
        raise
    task = service.AlignTask(
        settings,
        body,
        query.platform,
        query.enqueue_missing,
        query.candidates,
        job.id,
        limits.INLINE_CHECK_MAX_ITEMS,
        limits.COMPACT_ABOVE_WEIGHTS,
        holder,
        query.dtype,
    )

    def decide(report: dict) -> dict:
        """The task parsed the manifest: will anyone wait for its answer?"""
        return {"respond": not (respond_async or report["weights"] > limits.ASYNC_ABOVE_WEIGHTS)}

    running = slots.workers.submit(
        service.run_task,
        task,
        deadline_s=settings.align_deadline_seconds,
        memory_bytes=settings.align_memory_mb * 2**20,
        decide=decide,
    )
    running.answer.add_done_callback(functools.partial(_ended, app, holder, job.id))
    try:
        report = await _until_client_gone(request, running.estimate, running, received)
        if report is not None and not decide(report)["respond"]:
            status_ = job.model_copy(update={"weights": report["weights"]})
            headers = {"Location": job.poll, "Retry-After": str(limits.POLL_AFTER_S)}
            return Response(status_.model_dump_json().encode(), status.HTTP_202_ACCEPTED, headers, media_type=_JSON)
        answer: service.Answer = await _until_client_gone(request, running.answer, running, received)
    except limits.TaskStopped as exc:
        return _stopped_response(exc)
    except asyncio.CancelledError:  # the server stops (its grace period is over): so does the work
        running.stop(limits.SERVICE_STOPPING)
        raise
    return _respond(answer)


async def _until_client_gone(request: Request, future: Future, running: limits.Task, received: float) -> Any:
    """The future's result; if the client disconnects first, the task is stopped (and says so)."""
    waiting = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not waiting.done():
        running.stop(limits.client_gone(time.monotonic() - received))
    return await waiting


async def _disconnected(request: Request) -> None:
    """Returns once the client is gone (the body was read already: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _stopped_response(exc: limits.TaskStopped) -> Response:
    status_, body, headers = _stop_of(exc).answer_parts()
    return Response(json.dumps(body).encode(), status_, headers, media_type=_JSON)


def _stop_of(exc: limits.TaskStopped) -> limits.Stop:
    if exc.stop is not None:
        return exc.stop
    return limits.Stop(
        500, "AlignmentLost", f"the worker process running this alignment stopped (exit code {exc.exitcode}); post the manifest again"
    )


def _admit(app: FastAPI, alignment_id: uuid.UUID) -> AlignmentJobStatus:
    settings = app.state.settings
    with app.state.sessionmaker() as session:
        return service.admit(
            session, alignment_id, settings.align_max_running, settings.align_deadline_seconds + limits.STALE_AFTER_DEADLINE_S
        )


def _record_failure(app: FastAPI, job_id: uuid.UUID, answer: service.Answer) -> None:
    def write() -> None:
        with app.state.sessionmaker() as session:
            service.fail_job(session, job_id, answer)

    app.state.align_slots.ledger.write(f"alignment {job_id}: recording that it ended ({answer.status})", write)


def _ended(app: FastAPI, holder: int | None, job_id: uuid.UUID, future: Future) -> None:
    """An alignment's task ended (in its runner's thread): free the token's slot, record how it
    ended where its process could not (stopped, died, or the database was away), queue its checks."""
    app.state.align_slots.release(holder)
    exc = future.exception()
    if isinstance(exc, limits.TaskStopped):
        stop = _stop_of(exc)
        if exc.stop is None:
            log.error("alignment %s: %s", job_id, exc)
        else:
            log.warning("alignment %s stopped: %s", job_id, stop.detail)
        status_, body, headers = stop.answer_parts()
        _record_failure(app, job_id, service.Answer(status_, json.dumps(body).encode(), headers))
        return
    if exc is not None:  # the task raised past its own handlers: a bug
        log.error("alignment %s: failed: %r", job_id, exc)
        internal = error_json("InternalError", "the alignment failed; it has been logged")
        _record_failure(app, job_id, service.Answer(500, internal))
        return
    answer: service.Answer = future.result()
    if not answer.recorded:  # computed, but the database was away past its deadline: recorded once it returns
        assert isinstance(answer.body, bytes)
        _record_failure(app, job_id, answer)
    if answer.pending:
        _complete_later(app, answer.alignment_id, answer.answer_key)


def _respond(answer: service.Answer) -> Response:
    """The answer; a large one streamed in pieces as they are encoded (or inflated), so that no
    step holds the GIL over tens of MB (uvicorn buffers what a slow reader has not taken yet)."""
    parts = (answer.body,) if isinstance(answer.body, bytes) else answer.body
    ready = [p for p in parts if isinstance(p, bytes)]
    if len(ready) == len(parts) and sum(map(len, ready)) <= service.CHUNK:
        return Response(b"".join(ready), answer.status, answer.headers, media_type=_JSON)
    return StreamingResponse(service.chunks(parts), answer.status, answer.headers, media_type=_JSON)


def _complete_later(app: FastAPI, alignment_id: uuid.UUID | None, answer_key: str | None = None) -> None:
    """The cross-check and baselines an answered alignment left pending, in a process of their own;
    stopped (deadline, shutdown), they are marked "not run" and stay pending (POST .../checks runs them).
    answer_key: where the complete answer is kept for an identical request (gac.service.align.memo)."""
    if alignment_id is None:
        return
    settings = app.state.settings

    def done(future: Future) -> None:
        exc = future.exception()
        if isinstance(exc, limits.TaskStopped):
            why = {"ServiceStopping": "the service stopped before it ended", "AlignmentDeadline": "it ran past its deadline"}.get(
                exc.stop.error if exc.stop else "", f"its worker process stopped (exit code {exc.exitcode})"
            )
            log.warning("alignment %s: its pending checks were stopped (%s); they stay pending", alignment_id, why)

            def write() -> None:
                with app.state.sessionmaker() as session:
                    service.mark_not_run(session, alignment_id, f"{why}; POST /v1/alignments/{alignment_id}/checks runs it again")

            app.state.align_slots.ledger.write(f"alignment {alignment_id}: marking its checks not run", write)
        elif exc is not None:
            log.error("alignment %s: its pending checks did not run: %r", alignment_id, exc)

    running = app.state.align_slots.checkers.submit(
        service.complete_pending,
        settings,
        alignment_id,
        answer_key,
        deadline_s=settings.align_deadline_seconds,
        memory_bytes=settings.align_memory_mb * 2**20,
    )
    running.answer.add_done_callback(done)


@router.post("/alignments/{alignment_id}/checks", status_code=status.HTTP_202_ACCEPTED, responses=errors(401, 404, 413, 422))
def rerun_checks(alignment_id: AlignmentId, session: SessionDep, _: Reader, request: Request) -> dict[str, Any]:
    """Run a stored alignment's pending checks again (they were stopped: the service stopped, or
    their deadline passed). 202: they run after the answer; GET the alignment to see them."""
    pending = service.pending_of(session, alignment_id)
    if pending:
        _complete_later(request.app, alignment_id)
    return {"id": str(alignment_id), "pending": pending}


@router.get("/alignments", responses=errors(401, 404, 422))
def list_alignments(
    session: SessionDep,
    _: Reader,
    platform: Annotated[
        str | None,
        Query(min_length=1, max_length=64, pattern=NO_NUL, description="only alignments for this platform (id, fingerprint or prefix)"),
    ] = None,
    cursor: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=500, description="the most alignments on this page")] = 50,
) -> Page[AlignmentSummary]:
    """Stored alignments, newest first, without their results."""
    pid = get_platform(session, platform).id if platform else None
    return service.list_alignments(session, pid, cursor, limit)


@router.get("/alignments/{alignment_id}", response_model=StoredAlignment, responses={**errors(401, 404, 413, 422, 500), **ACCEPTED})
def get_alignment(
    alignment_id: AlignmentId,
    session: SessionDep,
    _: Reader,
    candidates: Annotated[CandidateLists | None, Query(description=CANDIDATES_DOC)] = None,
) -> Response:
    """A stored alignment; 202 while a large one is still being aligned (POST answered 202), or the
    error its alignment ended with (what the POST would have answered; 500 AlignmentLost when the
    process running it stopped)."""
    answer = service.read(session, alignment_id, candidates)
    return _respond(answer)
