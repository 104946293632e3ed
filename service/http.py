"""HTTP helpers shared by read endpoints."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from gac.service.cache import ResponseCache
from gac.service.curves.service import curve_row
from gac.service.metrics import READ_CACHE
from gac.service.models import Curve

_ETAG = {"ETag": {"description": "the curve's version: send it back as If-None-Match", "required": True, "schema": {"type": "string"}}}
# The OpenAPI responses of a versioned read (below): 200 with its ETag, or 304 when the caller holds it already.
VERSIONED: dict[int | str, dict] = {
    200: {"headers": _ETAG},
    304: {"description": "Not modified: the If-None-Match sent is this version's ETag (no body).", "headers": _ETAG},
}


def holds(request: Request, etag: str) -> bool:
    """Whether If-None-Match names this ETag: one of a list, compared weakly (W/ aside, as RFC 9110 says for
    GET), or `*`."""
    asked = {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}
    return "*" in asked or etag.removeprefix("W/") in asked


def _etag_response(request: Request, tag: str, body: Callable[[], bytes]) -> Response:
    """A JSON body with an ETag; a client that already holds this version gets 304 and no body."""
    etag = f'W/"{tag}"'
    if holds(request, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(body(), media_type="application/json", headers={"ETag": etag})


def cached_body(request: Request, kind: str, session: Session, row: Curve, build: Callable[[Session, Curve], bytes]) -> bytes:
    """The rendered body for this version of the curve: from the cache, else built and cached."""
    cache: ResponseCache = request.app.state.responses
    now = time.monotonic()
    body = cache.confirm((kind, row.id), row.version, now)
    READ_CACHE.labels(kind, "confirmed" if body is not None else "built").inc()
    return body if body is not None else cache.put((kind, row.id), row.version, build(session, row), now)


def versioned_json(request: Request, kind: str, session: Session, row: Curve, build: Callable[[Session, Curve], bytes]) -> Response:
    return _etag_response(request, f"{kind}-{row.id}-{row.version}", lambda: cached_body(request, kind, session, row, build))


async def per_curve_json(request: Request, kind: str, curve_id: int, build: Callable[[Session, Curve], bytes]) -> Response:
    """A read that depends only on one curve's data, served from the response cache when its
    version was confirmed recently; otherwise the version is read (and the body rebuilt only if
    it moved) on the thread pool. The hot path stays on the event loop: no thread hop, no I/O."""
    cache: ResponseCache = request.app.state.responses
    hit = cache.fresh((kind, curve_id), time.monotonic())
    if hit is None:

        def load() -> tuple[int, bytes]:
            with request.app.state.sessionmaker() as session:
                row = curve_row(session, curve_id)
                return row.version, cached_body(request, kind, session, row, build)

        hit = await run_in_threadpool(load)
    else:
        READ_CACHE.labels(kind, "fresh").inc()
    version, body = hit
    return _etag_response(request, f"{kind}-{curve_id}-{version}", lambda: body)
