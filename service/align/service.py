"""Align a manifest against a platform's measured curves, store the result, queue what was missing.

Results are stored and served as JSON text, never rebuilt as Python objects on the way: a
100,000-weight result is tens of MB. Large ones are stored twice: compact in `result` (each
weight's chosen candidate; served by default) and whole, compressed, in `result_full`.

What runs in the worker processes (service/align/limits.py) is here too, as plain functions of
picklable arguments: run_task (parse, align, store a manifest body) and complete_pending (the
cross-check and paper-DP baselines a stored alignment still lacks).
"""

from __future__ import annotations

import codecs
import json
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gac.contracts.alignment import AlignmentResult, CrossCheck
from gac.contracts.manifest import Manifest, explained
from gac.contracts.measurements import Dtype
from gac.contracts.plans import plan_for_points
from gac.service.align import limits
from gac.service.align import repository as repo
from gac.service.align.cost import estimate as estimate_cost
from gac.service.align.db_lookup import DbLookup
from gac.service.align.memo import AnswerFiles, answer_key
from gac.service.align.schemas import AlignmentJobStatus, AlignmentSummary, StoredAlignment, StoredHead
from gac.service.db import begin_write, make_engine, make_sessionmaker
from gac.service.errors import (
    BadRequest,
    GacError,
    NotFound,
    PayloadTooLarge,
    SolverDisagreement,
    TooManyRequests,
    Unprocessable,
    error_body,
    error_json,
    field_errors,
    is_outage,
)
from gac.service.errors import ValidationError as BodyInvalid
from gac.service.jobs.schemas import JobMatch
from gac.service.jobs.service import enqueue
from gac.service.models import Alignment, AlignmentJob, Platform, utcnow
from gac.service.platforms import repository as platforms
from gac.service.schemas import Page
from gac.service.settings import Settings
from gac.solver.align import AlignOptions, BudgetBelowFeasible, Completed, align
from gac.solver.align import complete_pending as solver_complete
from gac.solver.candidates import CandidateOptions
from gac.solver.crosscheck import CrossCheckDisagreement
from gac.solver.curve_cache import CURVES
from gac.solver.model_cache import MODELS, model_key

log = logging.getLogger("gac.service")
T = TypeVar("T")
OUTAGE_RETRY_S = 2.0  # a finished alignment tries to store its result this often while the database is away


def resolve_platform(session: Session, manifest: Manifest, override: str | None, where: str = "on this service") -> Platform | None:
    """The platform to align for: ?platform= beats the manifest's target; neither means rules only.
    `where`: the database, as the message names it (`gac align` without --server: the local one)."""
    ref = override or (manifest.target.platform if manifest.target else None)
    if ref is None:
        return None
    platform = platforms.find(session, ref)
    if platform is None:
        field = "query.platform" if override else "body.target.platform"
        said = f"no platform {ref!r} {where} (give its id, fingerprint, or a unique fingerprint prefix of 8+ characters)"
        raise Unprocessable([{"field": field, "message": said}])
    return platform


def run_alignment(
    session: Session,
    manifest: Manifest,
    platform: Platform | None,
    defer_above: int | None = None,
    exhaustive: bool = False,
    timings: dict[str, float] | None = None,
) -> AlignmentResult:
    """align() over the platform's curves. defer_above: leave the checks of larger instances pending
    (the service answers first; complete_pending runs them). What is missing comes in passes, each
    window's lattice and a sample first (CandidateOptions.sparse: whoever measures it aligns again);
    exhaustive: every dim of each window at once (`gac align --exhaustive`). The latency model is
    shared (gac.solver.model_cache): in memory, and in the directory MODELS has attached, where it is
    stored once the alignment filled it. timings: gets "model_load" (read from that directory) and
    "model_store" (written there), in seconds, when they happened."""
    lookup = DbLookup(session, platform) if platform is not None else None
    try:
        options = AlignOptions(defer_above=defer_above, candidates=CandidateOptions(sparse=not exhaustive))
        t0 = time.perf_counter()
        model, origin = MODELS.model_from(manifest, lookup)
        if origin == "disk" and timings is not None:
            timings["model_load"] = time.perf_counter() - t0
        result = align(manifest, lookup, options, model)
        t1 = time.perf_counter()
        if MODELS.store(model) and timings is not None:
            timings["model_store"] = time.perf_counter() - t1
        return result
    except BudgetBelowFeasible as exc:
        raise Unprocessable([{"field": "body.budget", "message": str(exc)}]) from exc
    except CrossCheckDisagreement as exc:
        raise SolverDisagreement(str(exc)) from exc


def answer_key_of(session: Session, manifest: Manifest, platform: Platform | None) -> str | None:
    """The name the complete answer to this request is kept under (gac.service.align.memo): the
    manifest and its latency model's key (every curve version it reads), which is read from the
    database without the model. None: no platform, so no curve versions to name."""
    if platform is None:
        return None
    key = model_key(manifest, DbLookup(session, platform))
    return None if key is None else answer_key(key, manifest, exhaustive=False)


# -- the stored forms


def compact_json(result: AlignmentResult) -> str:
    """The result with each weight's chosen candidate only (the result object is left as it was)."""
    weights = result.weights
    saved = [w.candidates for w in weights]
    try:
        for w, cands in zip(weights, saved):
            w.candidates = [c for c in cands if c.dim == w.dim][:1]
        compact = result.model_copy(update={"candidate_lists": "compact", "candidates_total": sum(map(len, saved))})
        return compact.model_dump_json(by_alias=True)
    finally:
        for w, cands in zip(weights, saved):
            w.candidates = cands


@dataclass
class Texts:
    """A result as stored: `result` as served by default, `full` (compressed) when that is compact."""

    result: str
    full: bytes | None = None

    @classmethod
    def of(cls, result: AlignmentResult, weights: int, compact_above: int | None = None) -> Texts:
        if weights <= (limits.COMPACT_ABOVE_WEIGHTS if compact_above is None else compact_above):
            return cls(result.model_dump_json(by_alias=True))
        whole = result.__pydantic_serializer__.to_json(result, by_alias=True)
        with ThreadPoolExecutor(1) as deflate:  # zlib lets go of the GIL: compress while the compact form is made
            full = deflate.submit(zlib.compress, whole, 1)
            return cls(compact_json(result), full.result())

    def served(self, candidates: str | None, result: AlignmentResult) -> Part:
        """The result text in the form asked for ("full", "compact"; None: as stored)."""
        if candidates == "full" and self.full is not None:
            return Deflated(self.full)
        if candidates == "compact" and self.full is None:
            return compact_json(result)
        return self.result


@dataclass
class StoredRow:
    """What store() wrote: the row's own fields, the result object and its stored texts."""

    id: uuid.UUID
    created_at: datetime
    platform_id: int | None
    weights: int
    result: AlignmentResult
    texts: Texts


def store(
    session: Session,
    manifest: Manifest,
    platform: Platform | None,
    result: AlignmentResult,
    *,
    alignment_id: uuid.UUID | None = None,
    texts: Texts | None = None,
    owner: int | None = None,
    settings: Settings | None = None,
) -> StoredRow:
    """Insert the alignment; texts: the result serialized already (else Texts.of, by size). With
    settings, results past their keep time go, and the owner's oldest while the owner's stored
    results are above its quota (413 when this one alone is)."""
    texts = texts or Texts.of(result, len(manifest.weights))
    row = StoredRow(alignment_id or uuid.uuid4(), utcnow(), platform.id if platform else None, len(manifest.weights), result, texts)
    size = len(texts.result.encode()) + len(texts.full or b"")
    quota = settings.align_storage_mb_per_token * 2**20 if settings is not None else None
    if quota is not None and owner is not None and size > quota:
        raise PayloadTooLarge(
            f"this result is {size / 2**20:.1f} MB, above the {settings.align_storage_mb_per_token} MB "  # type: ignore[union-attr]
            "a token may keep (GAC_ALIGN_STORAGE_MB_PER_TOKEN)"
        )
    begin_write(session)
    repo.insert_alignment(
        session, row.id, row.created_at, manifest, row.platform_id, result, texts.result, texts.full, owner=owner, stored_bytes=size
    )
    if settings is not None:
        repo.expire(session, row.created_at - timedelta(days=settings.align_keep_days), owner, quota)
    session.commit()
    return row


def enqueue_missing(session: Session, settings: Settings, result: AlignmentResult, platform: Platform) -> list[int]:
    """One profiling job covering every curve point the alignment lacked, for this exact platform."""
    points = [(m.op, m.dtype, {**m.fixed_shape, m.axis: d}, m.axis) for m in result.missing for d in m.dims]
    if not points:
        return []
    plan = plan_for_points(f"missing for {result.model}"[:200], points)
    job, _ = enqueue(session, settings, plan, JobMatch(fingerprint=platform.fingerprint), source="align-missing", dedupe=True)
    return [job.id]


def to_stored(row: StoredRow, jobs: list[int] | None = None) -> StoredAlignment:
    return StoredAlignment(id=row.id, created_at=row.created_at, platform_id=row.platform_id, jobs=jobs or [], result=row.result)


@dataclass(frozen=True)
class Deflated:
    """zlib-compressed bytes, inflated piece by piece as they are sent."""

    data: bytes


Part = bytes | str | Deflated
CHUNK = 1 << 20


def response_body(head: StoredHead, result: Part) -> tuple[Part, ...]:
    """A StoredAlignment document in parts, its result as the stored text is: no parse, and no
    tens of MB encoded, inflated or copied in one go (each holds the GIL): see chunks()."""
    return head.model_dump_json()[:-1].encode() + b',"result":', result, b"}"


def chunks(parts: tuple[Part, ...], size: int = CHUNK) -> Iterator[bytes]:
    """The parts' bytes in pieces of about `size`."""
    for part in parts:
        if isinstance(part, Deflated):
            inflate = zlib.decompressobj()
            for start in range(0, len(part.data), size // 8):
                if out := inflate.decompress(part.data[start : start + size // 8]):
                    yield out
            if out := inflate.flush():
                yield out
        else:
            for start in range(0, len(part), size):
                piece = part[start : start + size]
                yield piece.encode() if isinstance(piece, str) else piece


def server_timing(timings: dict[str, float] | None) -> dict[str, str]:
    """Where the alignment's time went, as a Server-Timing header (milliseconds per phase)."""
    if not timings:
        return {}
    return {"Server-Timing": ", ".join(f"{k};dur={1000 * v:.1f}" for k, v in timings.items())}


def align_timings(result: AlignmentResult, seconds: float) -> dict[str, float]:
    """align()'s wall time split: our solve, the inline cross-check and paper-DP baselines, and the
    rest ("candidates": items, candidates, missing points and the result's assembly)."""
    solve = result.solver.seconds
    check = result.solver.cross_check.seconds or 0.0
    baselines = sum(b.seconds or 0.0 for b in result.baselines)
    return {"candidates": max(0.0, seconds - solve - check - baselines), "solve": solve, "check": check, "baselines": baselines}


# -- reading


@dataclass
class Answer:
    """An HTTP answer made off the request's thread (a worker process, say): status, JSON body, headers."""

    status: int
    body: bytes | tuple[Part, ...]  # in parts: a large result is sent as it is read (chunks())
    headers: dict[str, str] = field(default_factory=dict)
    alignment_id: uuid.UUID | None = None
    pending: bool = False  # the stored alignment awaits complete_pending
    recorded: bool = True  # False: its job row could not be brought up to date (the database was away)
    answer_key: str | None = None  # under which the answer is kept once complete (gac.service.align.memo)


def error_answer(exc: GacError) -> Answer:
    return Answer(exc.status_code, error_json(type(exc).__name__, exc.detail), dict(exc.headers or {}))


def read(session: Session, alignment_id: uuid.UUID, candidates: str | None) -> Answer:
    """GET /v1/alignments/{id}: the stored alignment (200), the job still making it (202), the
    error that job ended with, or 404."""
    found = repo.head(session, alignment_id)
    if found is None:
        return _job_answer(session, alignment_id)
    aid, created_at, platform_id, weights, text, has_full, jobs, timings = found
    if has_full and candidates == "full":
        text = Deflated(repo.result_full(session, aid))
    elif not has_full and (candidates == "compact" or (candidates is None and weights > limits.COMPACT_ABOVE_WEIGHTS)):
        text = compact_json(AlignmentResult.model_validate_json(text))  # small, or stored before compact forms
    head = StoredHead(id=aid, created_at=created_at, platform_id=platform_id, jobs=jobs or [])
    return Answer(200, response_body(head, text), server_timing(timings))


def _job_answer(session: Session, alignment_id: uuid.UUID) -> Answer:
    job = session.get(AlignmentJob, alignment_id)
    if job is None or job.status == "done":  # done: the alignment was stored, and since deleted
        raise NotFound(f"no alignment {alignment_id}")
    if job.status == "failed":
        error = job.error or {}
        return Answer(int(error.get("status", 500)), json.dumps(error.get("body", {})).encode(), dict(error.get("headers") or {}))
    if job.updated_at < utcnow() - timedelta(seconds=limits.JOB_STALE_S):
        detail = f"no news of this alignment for over {limits.JOB_STALE_S} s: the process running it stopped; post the manifest again"
        return Answer(500, error_json("AlignmentLost", detail))
    poll = f"/v1/alignments/{alignment_id}"
    status = AlignmentJobStatus(id=job.id, status=job.status, weights=job.weights, created_at=job.created_at, poll=poll)  # type: ignore[arg-type]
    return Answer(202, status.model_dump_json().encode(), {"Location": poll, "Retry-After": str(limits.POLL_AFTER_S)})


def list_alignments(session: Session, platform_id: int | None, offset: int, limit: int) -> Page[AlignmentSummary]:
    found = repo.page(session, platform_id, offset, limit)
    items = [AlignmentSummary.model_validate(r, from_attributes=True) for r in found.rows]
    return Page[AlignmentSummary](items=items, total=found.total, next_cursor=str(offset + limit) if found.more else None)


# -- jobs: a large alignment off the request


def create_job(session: Session, alignment_id: uuid.UUID, weights: int) -> AlignmentJobStatus:
    begin_write(session)
    now = utcnow()
    session.add(AlignmentJob(id=alignment_id, status="queued", weights=weights, created_at=now, updated_at=now))
    session.commit()
    poll = f"/v1/alignments/{alignment_id}"
    return AlignmentJobStatus(id=alignment_id, status="queued", weights=weights, created_at=now, poll=poll)


def admit(session: Session, alignment_id: uuid.UUID, limit: int, stale_after_s: float) -> AlignmentJobStatus:
    """The alignment's job row (queued), if fewer than `limit` alignments are queued or running on
    the whole service (every worker, every replica: they share the database); else 429. Rows with
    no news for stale_after_s are not counted: their process is gone (no task outlives its deadline)."""
    begin_write(session)  # SQLite: one writer at a time, so the count and the insert are one step
    repo.lock_admission(session)  # Postgres: the same, by an advisory lock held to the commit
    active = repo.active_jobs(session, utcnow() - timedelta(seconds=stale_after_s))
    if active >= limit:
        session.rollback()
        raise TooManyRequests(
            f"the service already runs {active} alignments (GAC_ALIGN_MAX_RUNNING={limit}); retry shortly",
            limits.RETRY_AFTER_S,
        )
    now = utcnow()
    session.add(AlignmentJob(id=alignment_id, status="queued", created_at=now, updated_at=now))
    session.commit()
    poll = f"/v1/alignments/{alignment_id}"
    return AlignmentJobStatus(id=alignment_id, status="queued", created_at=now, poll=poll)


def update_job(session: Session, alignment_id: uuid.UUID, **values: object) -> None:
    begin_write(session)
    repo.update_job(session, alignment_id, values)
    session.commit()


def fail_job(session: Session, alignment_id: uuid.UUID, answer: Answer) -> None:
    assert isinstance(answer.body, bytes)  # an error's answer is one JSON document
    error = {"status": answer.status, "body": json.loads(answer.body), "headers": answer.headers}
    update_job(session, alignment_id, status="failed", error=error)


# -- in a worker process


@dataclass(frozen=True)
class AlignTask:
    """One manifest body to align in a worker process, as POST /v1/align received it."""

    settings: Settings
    body: bytes
    platform: str | None = None
    enqueue_missing: bool = False  # the caller's token was checked for it already
    candidates: str | None = None  # the form to answer in (synchronous tasks)
    job_id: uuid.UUID | None = None  # its job row: kept up to date, and the alignment's id
    defer_above: int | None = None  # limits.INLINE_CHECK_MAX_ITEMS
    compact_above: int | None = None  # limits.COMPACT_ABOVE_WEIGHTS
    token_id: int | None = None  # whose storage quota the result counts against
    dtype: Dtype | None = None  # ?dtype=: in place of the manifest's workload.dtype


_ENGINES: dict[str, Engine] = {}


def _engine(url: str) -> Engine:
    if url not in _ENGINES:
        _ENGINES[url] = make_engine(url)
    return _ENGINES[url]


def parse_manifest(body: bytes, settings: Settings) -> Manifest:
    """A manifest body, with the errors FastAPI's own parsing would name (body.weights.3.dim, ...)."""
    from gac.documents import GIVEN_TWICE, duplicate_key

    body = body.removeprefix(codecs.BOM_UTF8)  # JSON's RFC lets a parser skip one; a file saved by some editors starts so
    # JSON parsers keep the last of a key given twice; which one the compressor meant is not ours to guess.
    if (twice := duplicate_key(body)) is not None:
        field = ".".join(str(part) for part in ("body", *twice))
        raise BodyInvalid([{"field": field, "message": GIVEN_TWICE, "type": "duplicate_key"}])
    try:
        manifest = Manifest.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(e["type"] == "json_invalid" and "recursion limit" in e["msg"] for e in errors):  # as the framework answers it
            raise BadRequest("the request body is not JSON this service can parse (malformed, or nested too deeply)") from None
        for e in errors:
            e["msg"], e["loc"] = explained(e), ("body", *e["loc"])
        raise BodyInvalid(field_errors(errors)) from None
    if len(manifest.weights) > settings.align_max_weights:
        raise PayloadTooLarge(
            f"{len(manifest.weights)} weights: this service aligns at most {settings.align_max_weights} per request (GAC_ALIGN_MAX_WEIGHTS)"
        )
    return manifest


def align_and_store(
    session: Session,
    settings: Settings,
    manifest: Manifest,
    platform_ref: str | None,
    enqueue: bool,
    *,
    candidates: str | None = None,
    job_id: uuid.UUID | None = None,
    timings: dict[str, float] | None = None,
    defer_above: int | None = None,
    compact_above: int | None = None,
    respond: bool = True,
    owner: int | None = None,
) -> Answer:
    """Align, queue the missing points (enqueue: the token was checked for it), store: the 201 answer
    (respond: with its body; for a job, whose id the alignment takes, the job row brought up to date
    too). A database outage after the alignment is waited out until the task's deadline.
    Raises GacError for what the caller answers as an error."""
    timings = dict(timings or {})
    target = resolve_platform(session, manifest, platform_ref)
    if enqueue and target is None:
        raise Unprocessable([{"field": "query.enqueue_missing", "message": "needs a target platform (manifest target or ?platform=)"}])
    MODELS.attach(settings.models_dir)
    CURVES.attach(settings.models_dir / "curves")
    answers = AnswerFiles(settings.models_dir / "answers")
    t0, shared = time.perf_counter(), dict[str, float]()
    key = answer_key_of(session, manifest, target)
    result = answers.load(key) if key is not None else None
    if result is not None:  # the same request against the same curve versions, answered whole before
        timings |= shared | {"recalled": time.perf_counter() - t0 - sum(shared.values())}
    else:
        defer = limits.INLINE_CHECK_MAX_ITEMS if defer_above is None else defer_above
        result = run_alignment(session, manifest, target, defer, timings=shared)
        timings |= align_timings(result, time.perf_counter() - t0 - sum(shared.values())) | shared
        if key is not None:
            answers.save(key, result)  # complete answers only; one with checks pending is kept by complete_pending
    what = f"alignment {job_id or 'done'}: storing its result"
    jobs = []
    if enqueue and target is not None:
        jobs = _while_database_away(session, what, lambda: enqueue_missing(session, settings, result, target))
    t1 = time.perf_counter()
    texts = Texts.of(result, len(manifest.weights), compact_above)
    timings["serialize"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    row = _while_database_away(
        session,
        what,
        lambda: store(
            session,
            manifest,
            target,
            result,
            alignment_id=job_id,
            texts=texts,
            owner=owner,
            settings=settings,
        ),
    )
    timings["store"] = time.perf_counter() - t2
    body: tuple[Part, ...] = ()
    if respond:
        head = StoredHead(id=row.id, created_at=row.created_at, platform_id=row.platform_id, jobs=jobs)
        body = response_body(head, texts.served(candidates, result))
    if job_id is not None:
        _while_database_away(session, what, lambda: update_job(session, job_id, status="done", timings=timings, profiling_jobs=jobs))
    return Answer(201, body, server_timing(timings), row.id, bool(result.pending), answer_key=key)


def run_task(task: AlignTask) -> Answer:
    """Parse, align and store one manifest body (in a worker process): the answer POST /v1/align
    gives, and the job row (task.job_id) brought up to date (done, or failed with it). Once parsed,
    its cost is estimated and refused above the setting (413), else reported to the service, which
    replies whether anyone waits for the answer (no: it answered 202)."""
    t0 = time.perf_counter()
    with make_sessionmaker(_engine(task.settings.url))() as session:
        try:
            manifest = parse_manifest(task.body, task.settings)
            if task.dtype is not None:  # the stored manifest is the one aligned: its workload names the dtype
                manifest = manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"dtype": task.dtype})})
            cost = estimate_cost(manifest)
            if cost.work > task.settings.align_max_work:
                raise PayloadTooLarge(
                    {
                        "message": f"this alignment's estimated work {cost.work:,} is above this service's limit of "
                        f"{task.settings.align_max_work:,} (GAC_ALIGN_MAX_WORK)",
                        "estimate": cost.describe(),
                    }
                )
            reply = limits.report({"weights": len(manifest.weights), "cost": cost.describe()})
            respond = reply is None or bool(reply.get("respond", True))
            if (job_id := task.job_id) is not None:
                _while_database_away(
                    session,
                    f"alignment {job_id}: recording its start",
                    lambda: update_job(session, job_id, status="running", weights=len(manifest.weights)),
                )
            return align_and_store(
                session,
                task.settings,
                manifest,
                task.platform,
                task.enqueue_missing,
                candidates=task.candidates,
                job_id=task.job_id,
                timings={"parse": time.perf_counter() - t0},
                defer_above=task.defer_above,
                compact_above=task.compact_above,
                respond=respond,
                owner=task.token_id,
            )
        except MemoryError:
            session.rollback()
            detail = (
                f"this alignment needed more than the {task.settings.align_memory_mb} MB a worker process may use (GAC_ALIGN_MEMORY_MB)"
            )
            answer = error_answer(PayloadTooLarge(detail))
        except GacError as exc:
            session.rollback()
            answer = error_answer(exc)
        except DBAPIError as exc:
            session.rollback()
            if not is_outage(exc):
                answer = _internal(exc)
            else:
                log.warning("alignment failed, the database is unavailable: %s", str(exc.orig).splitlines()[0][:200])
                body = error_body("DatabaseUnavailable", "the database is unavailable; retry shortly")
                answer = Answer(503, json.dumps(body).encode(), {"Retry-After": "2"})
        except Exception as exc:  # a bug: logged whole, answered without internals
            session.rollback()
            answer = _internal(exc)
        if (failed := task.job_id) is not None:
            try:
                _while_database_away(
                    session, f"alignment {failed}: recording that it failed ({answer.status})", lambda: fail_job(session, failed, answer)
                )
            except DBAPIError:  # still away at the deadline: the service records it once the database returns
                answer.recorded = False
        return answer


def _while_database_away(session: Session, what: str, write: Callable[[], T]) -> T:
    """write(), again every few seconds while the database is unavailable, until the task's deadline
    (then the outage is raised). The log says why, once when it starts and once when it ends."""
    waited, since = 0.0, time.monotonic()
    while True:
        try:
            done = write()
        except DBAPIError as exc:
            session.rollback()
            left = limits.seconds_left()
            if not is_outage(exc) or (left is not None and left < OUTAGE_RETRY_S + 1):
                if waited:
                    log.error("%s: the database is still unavailable after %.0f s; giving up here", what, time.monotonic() - since)
                raise
            if not waited:
                log.warning(
                    "%s: the database is unavailable (%s); trying again every %g s",
                    what,
                    str(exc.orig).splitlines()[0][:200],
                    OUTAGE_RETRY_S,
                )
            time.sleep(OUTAGE_RETRY_S)  # a worker process waiting for the database: nothing else to do
            waited += OUTAGE_RETRY_S
            continue
        if waited:
            log.warning("%s: done once the database returned, after %.0f s", what, time.monotonic() - since)
        return done


def _internal(exc: Exception) -> Answer:
    log.exception("alignment failed", exc_info=exc)
    return Answer(500, error_json("InternalError", "an internal error occurred; it has been logged"))


def complete_pending(settings: Settings, alignment_id: uuid.UUID, answer_key: str | None = None) -> list[str]:
    """Run what a stored alignment left pending (the cross-check, the paper-DP baselines) and write
    it onto the stored result, in a worker process. The checks run on the stored answer's own items and
    candidates (gac.solver.align.complete_pending), not on a new alignment: they check that answer even
    if the platform's curves changed since, and the latency model (shared per curve version,
    gac.solver.model_cache) prices only the paper-DP baselines' dims. answer_key: where the alignment
    keeps its answer once complete (the key it was aligned under). Returns what it filled in."""
    with make_sessionmaker(_engine(settings.url))() as session:
        row = session.get(Alignment, alignment_id)
        if row is None:
            return []
        stored = AlignmentResult.model_validate(row.result)
        if not stored.pending:
            return []
        pending = list(stored.pending)
        manifest = Manifest.model_validate(row.manifest)
        platform = session.get(Platform, row.platform_id) if row.platform_id is not None else None
        whole_stored = AlignmentResult.model_validate_json(zlib.decompress(row.result_full)) if row.result_full is not None else None
        lookup = DbLookup(session, platform) if platform is not None else None
        MODELS.attach(settings.models_dir)
        CURVES.attach(settings.models_dir / "curves")
        try:
            model = MODELS.model(manifest, lookup)  # the alignment's, from disk in a process of its own
            checked: Completed | str = solver_complete(manifest, whole_stored or stored, lookup, model=model)
            MODELS.store(model)  # what the baselines' dims added
        except CrossCheckDisagreement as exc:
            log.error("alignment %s: the cross-check disagrees with our solver: %s", alignment_id, exc)
            checked = f"disagrees: {exc}"
        except Exception as exc:  # noqa: BLE001 - recorded on the alignment, logged whole
            log.exception("alignment %s: its pending checks failed", alignment_id, exc_info=exc)
            checked = f"failed: {type(exc).__name__}"

        def fill(result: AlignmentResult) -> AlignmentResult:
            result.pending = []
            if isinstance(checked, Completed):
                result.solver.cross_check = checked.cross_check
                result.baselines = checked.baselines
                result.warnings = [*result.warnings, *checked.warnings]
                return result
            method = result.solver.cross_check.method
            result.solver.cross_check = CrossCheck(method=method, status=checked, agrees=False if checked.startswith("disagrees") else None)
            result.warnings = [*result.warnings, f"cross-check {checked}"]
            return result

        text = fill(stored).model_dump_json(by_alias=True)
        full = None
        if whole_stored is not None:
            whole = fill(whole_stored)
            full = zlib.compress(whole.__pydantic_serializer__.to_json(whole, by_alias=True), 1)
        begin_write(session)
        repo.write_result(session, alignment_id, text, full)
        session.commit()
        if answer_key is not None and isinstance(checked, Completed):
            AnswerFiles(settings.models_dir / "answers").save(answer_key, whole_stored or stored)
        return pending


def mark_not_run(session: Session, alignment_id: uuid.UUID, why: str) -> None:
    """A stored alignment whose pending checks were stopped before they ended: the cross-check says
    "not run" and why; `pending` stays as it was, so that complete_pending can run them again."""
    row = session.get(Alignment, alignment_id)
    if row is None:
        return
    result = AlignmentResult.model_validate(row.result)
    if not result.pending:
        return
    method = result.solver.cross_check.method
    result.solver.cross_check = CrossCheck(method=method, status=f"not run: {why}", agrees=None)
    begin_write(session)
    repo.write_result(session, alignment_id, result.model_dump_json(by_alias=True), None)
    session.commit()


def pending_of(session: Session, alignment_id: uuid.UUID) -> list[str]:
    """What a stored alignment's checks still lack (404 if there is no such alignment)."""
    row = session.get(Alignment, alignment_id)
    if row is None:
        raise NotFound(f"no alignment {alignment_id}")
    return list(AlignmentResult.model_validate(row.result).pending)
