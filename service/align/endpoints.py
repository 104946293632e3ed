"""POST /v1/align, GET /v1/alignments[/{id}]."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from gac.contracts.manifest import Manifest
from service.align import service
from service.align.schemas import AlignmentSummary, StoredAlignment
from service.auth.tokens import Scope
from service.deps import Credentials, Reader, SessionDep, SettingsDep, require
from service.errors import PayloadTooLarge, Unprocessable
from service.platforms.service import get_platform
from service.schemas import Offset, Page

router = APIRouter(prefix="/v1", tags=["align"])


@router.post(
    "/align", status_code=status.HTTP_201_CREATED,
    responses={401: {"description": "no token (unless GAC_OPEN_ALIGN)"}, 413: {"description": "more weights than GAC_ALIGN_MAX_WEIGHTS"},
               429: {"description": "this token runs its GAC_ALIGN_CONCURRENCY_PER_TOKEN alignments already (Retry-After)"}},
)
def post_align(
    manifest: Manifest,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    creds: Credentials,
    platform: Annotated[str | None, Query(max_length=64, description="platform to align for; overrides the manifest's target")] = None,
    enqueue_missing: Annotated[bool, Query(description="queue a profiling job for the curves the platform lacks (ingest token)")] = False,
) -> StoredAlignment:
    """Re-select one cliff-free dimension per weight under the manifest's budget; the result is stored.

    Alignments spend the service's CPU: they need a token (read scope or above) unless the
    operator opened them (GAC_OPEN_ALIGN=true), and each token runs a bounded number at once."""
    token = None if settings.open_align and creds is None else require(Scope.read, session, settings, creds)
    if len(manifest.weights) > settings.align_max_weights:
        raise PayloadTooLarge(
            f"{len(manifest.weights)} weights: this service aligns at most {settings.align_max_weights} per request (GAC_ALIGN_MAX_WEIGHTS)"
        )
    with request.app.state.align_slots.slot(token.id if token else None):
        return _align(manifest, session, settings, creds, platform, enqueue_missing)


def _align(manifest: Manifest, session, settings, creds, platform: str | None, enqueue_missing: bool) -> StoredAlignment:  # noqa: ANN001
    target = service.resolve_platform(session, manifest, platform)
    result = service.run_alignment(session, manifest, target)
    jobs: list[int] = []
    if enqueue_missing:
        require(Scope.ingest, session, settings, creds)
        if target is None:
            raise Unprocessable([{"field": "query.enqueue_missing", "message": "needs a target platform (manifest target or ?platform=)"}])
        jobs = service.enqueue_missing(session, settings, result, target)
    row = service.store(session, manifest, target, result)
    return service.to_stored(row, jobs)


@router.get("/alignments")
def list_alignments(
    session: SessionDep, _: Reader,
    platform: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Offset = 0, limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Page[AlignmentSummary]:
    pid = get_platform(session, platform).id if platform else None
    return service.list_alignments(session, pid, cursor, limit)


@router.get("/alignments/{alignment_id}")
def get_alignment(alignment_id: uuid.UUID, session: SessionDep, _: Reader) -> StoredAlignment:
    return service.to_stored(service.get(session, alignment_id))
