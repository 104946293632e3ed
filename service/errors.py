"""One error type for the whole service, rendered as {"error": ClassName, "detail": ...}, and the
OpenAPI declaration of that body for each status a route can answer (`responses=errors(404, 422)`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DataError, DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

log = logging.getLogger("gac.service")


class FieldError(BaseModel):
    """One bad input."""

    field: str = Field(description="where, as a dotted path: body.measurements.3.median_us, query.limit, path.job_id")
    message: str = Field(description="what is wrong with it, in words")
    type: str | None = Field(
        default=None,
        description="pydantic's error type (missing, greater_than, value_error, ...), when pydantic found it",
    )


class ErrorBody(BaseModel):
    """Every error the service answers, whatever its status."""

    error: str = Field(description="the kind of error: ValidationError, NotFound, Unauthorized, Conflict, DatabaseUnavailable, ...")
    detail: str | list[FieldError] = Field(description="a message, or for bad input the list of bad fields")


class OutageLog:
    """One line per outage: the first failed request after QUIET_S without one is logged (with how
    many failed quietly during the last outage); the rest are counted. The version poller logs when
    the database is back."""

    QUIET_S = 5.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: float | None = None
        self._quiet = 0

    def failed(self) -> str | None:
        """Record a failed request: the suffix of the line to log, or None to stay quiet."""
        now = self._clock()
        new = self._last is None or now - self._last > self.QUIET_S
        self._last = now
        if not new:
            self._quiet += 1
            return None
        suffix = f" (the last outage failed {self._quiet} more requests)" if self._quiet else ""
        self._quiet = 0
        return suffix


OUTAGE_LOG = OutageLog()  # this worker's


def error_body(kind: str, detail: Any) -> dict[str, Any]:
    """The envelope of every error answer (ErrorBody): {"error": kind, "detail": detail}."""
    return {"error": kind, "detail": detail}


def error_json(kind: str, detail: Any) -> bytes:
    """error_body as the bytes of a response, for answers built outside the exception handlers."""
    return json.dumps(error_body(kind, detail)).encode()


def error_response(kind: str, detail: Any, status_code: int, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(kind, detail), status_code=status_code, headers=headers)


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer", "minimum": 0}}}
# What each status means on any route that declares it.
ERROR_STATUSES: dict[int, dict[str, Any]] = {
    400: {"description": "The URL carries a NUL character, or the body is not JSON this service can parse."},
    401: {
        "description": "No API token where one is needed, or an unknown, malformed or revoked one.",
        "headers": {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}},
    },
    403: {"description": "The token's scope does not allow this (or another token holds the job's lease)."},
    404: {"description": "Nothing by that id, reference or key on this service."},
    409: {"description": "The request conflicts with what is stored."},
    410: {"description": "The alignment was stopped: its client disconnected before the answer (nothing stored)."},
    413: {
        "description": "The body is over GAC_MAX_BODY_BYTES (or the manifest over GAC_ALIGN_MAX_WEIGHTS, its estimated work over "
        "GAC_ALIGN_MAX_WORK with the estimate in the detail, or it needed more than GAC_ALIGN_MEMORY_MB)."
    },
    415: {"description": "The body is declared as another format than JSON (YAML, text, a multipart form)."},
    422: {"description": "The request does not validate: detail lists each bad field."},
    429: {
        "description": "This token runs its GAC_ALIGN_CONCURRENCY_PER_TOKEN alignments already, or the service its "
        "GAC_ALIGN_MAX_RUNNING, or this client failed to authenticate too often (GAC_AUTH_FAILURE_BURST): "
        "retry after Retry-After.",
        "headers": {"Retry-After": {**_RETRY_AFTER["Retry-After"], "required": True}},
    },
    500: {"description": "Our exact solver and OR-Tools disagree: a bug, reported, never hidden."},
    503: {"description": "The database is unavailable (retry after Retry-After) or not ready.", "headers": _RETRY_AFTER},
    504: {"description": "The alignment did not end within GAC_ALIGN_DEADLINE_SECONDS and was stopped (nothing stored)."},
}


def errors(*statuses: int, database: bool = True) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` for a route's error statuses, each an ErrorBody.

    Every route may also answer 400 (a NUL in the URL is refused before routing), when it checks
    tokens 429 (too many failed ones), and, when it reads the database, 503 (the database is
    briefly away): all are declared without asking."""
    # A route that checks tokens refuses a client that keeps failing them (service/auth/guard.py).
    codes = {400, *statuses, *((429,) if 401 in statuses else ()), *((503,) if database else ())}
    return {code: {"model": ErrorBody, **ERROR_STATUSES[code]} for code in sorted(codes)}


class GacError(Exception):
    status_code = 400

    def __init__(self, detail: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers


class BadRequest(GacError):
    status_code = 400


class Unauthorized(GacError):
    status_code = 401

    def __init__(self, detail: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(GacError):
    status_code = 403


class NotFound(GacError):
    status_code = 404


class Conflict(GacError):
    status_code = 409


class PayloadTooLarge(GacError):
    status_code = 413


class UnsupportedMediaType(GacError):
    status_code = 415


# Bodies read as JSON: a declared type that says so, none, or a form's (what `curl -d` sends unless told otherwise).
_READ_AS_JSON = ("application/json", "application/x-www-form-urlencoded", "text/json")


def require_json_body(content_type: str | None, what: str, also: Sequence[str] = (), hint: str = "") -> None:
    """415 for a body declared as another format (YAML, text, a multipart form) rather than reading it as JSON."""
    media = (content_type or "").split(";")[0].strip().lower()
    if not media or media in _READ_AS_JSON or media.endswith("+json") or media in also:
        return
    raise UnsupportedMediaType(f"{what} is read as JSON (Content-Type: application/json), not {media}{hint}")


class Unprocessable(GacError):
    status_code = 422


class ValidationError(Unprocessable):
    """A body that does not validate, parsed off the request (a worker process): named as FastAPI's own 422."""


class TooManyRequests(GacError):
    status_code = 429

    def __init__(self, detail: Any, retry_after_s: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after_s)})


class SolverDisagreement(GacError):
    """Our exact solver and OR-Tools found different optima: a bug, reported loudly, never hidden."""

    status_code = 500


class NotReady(GacError):
    status_code = 503

    def __init__(self, detail: Any) -> None:
        # A load balancer or client polling /readyz through a restart or an outage waits this long.
        super().__init__(detail, headers={"Retry-After": str(RETRY_AFTER_S)})


RETRY_AFTER_S = 2  # what a client is told to wait when the database is briefly away

# Messages of SQLite's OperationalError that mean "busy or away, try again", not a bug.
_SQLITE_TRANSIENT = ("database is locked", "unable to open database", "disk i/o error")


def is_outage(exc: DBAPIError) -> bool:
    """A database that is down, restarting or busy, as opposed to a bad statement (a bug)."""
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    module = type(orig).__module__
    if module.startswith("psycopg"):
        import psycopg

        # Connection failures, admin shutdown, "the database system is starting up", ...
        return isinstance(orig, psycopg.OperationalError)
    if module == "sqlite3":
        return any(m in str(orig).lower() for m in _SQLITE_TRANSIENT)
    return False


def field_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Pydantic errors as [{"field": "body.measurements.3.median_us", "message": ...}].

    Only strings go out: pydantic's ctx can hold exception objects that JSON cannot carry.
    """
    out = []
    for err in errors:
        loc = ".".join(str(part) for part in err.get("loc", ()))
        out.append({"field": loc, "message": str(err.get("msg", "invalid")), "type": str(err.get("type", ""))})
    return out


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this request's path (mounted static files aside), and HEAD
    wherever GET is (gac.service.head answers it)."""
    routes = [route for route in request.app.router.routes if not isinstance(route, Mount)]
    served = {method for method in _METHODS if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)}
    if "GET" in served:
        served.add("HEAD")
    return ", ".join(method for method in _METHODS if method in served)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GacError)
    async def _gac_error(_: Request, exc: GacError) -> JSONResponse:
        return error_response(type(exc).__name__, exc.detail, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(DataError)
    async def _unstorable(_: Request, exc: DataError) -> JSONResponse:
        # The database refused a value (out of range for its column, say): the request's fault,
        # and the transaction was rolled back, so nothing was written.
        return error_response("Unprocessable", f"a value cannot be stored: {exc.orig}", 422)

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if not is_outage(exc):
            return await _unexpected(request, exc)
        # Not our bug and not the client's: a retryable answer on a connection that stays open (the
        # transaction was rolled back, nothing half-written), and one log line per outage, not per request.
        if (first := OUTAGE_LOG.failed()) is not None:
            log.warning("database unavailable (%s %s): %s%s", request.method, request.url.path, str(exc.orig).splitlines()[0][:200], first)
        return error_response("DatabaseUnavailable", "the database is unavailable; retry shortly", 503, {"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input: log it whole, answer without internals.
        log.exception("unhandled error", exc_info=exc)
        return error_response("InternalError", "an internal error occurred; it has been logged", 500)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The framework's own refusals (unknown route, wrong method, a body it cannot parse)
        # in the same shape as ours.
        kind = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, f"HTTP{exc.status_code}")
        detail = exc.detail
        headers = getattr(exc, "headers", None)
        if detail == "There was an error parsing the body":
            detail = "the request body is not JSON this service can parse (malformed, or nested too deeply)"
        if exc.status_code == 404 and detail == "Not Found":  # no route: say which path, and where the routes are
            detail = f"no such path: {request.method} {request.url.path[:200]} (the API's paths are listed at /docs)"
        if exc.status_code == 405 and (allowed := _allowed_methods(request)):
            # Starlette names the methods of the first route on this path only; a path served by
            # several routes (GET and DELETE /v1/jobs/{id}) allows all of theirs.
            headers = {**(headers or {}), "Allow": allowed}
        return error_response(kind, detail, exc.status_code, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response("ValidationError", field_errors(exc.errors()), 422)
