"""One error type for the whole service, rendered as {"error": ClassName, "detail": ...}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("gac.service")


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


class Unprocessable(GacError):
    status_code = 422


class TooManyRequests(GacError):
    status_code = 429

    def __init__(self, detail: Any, retry_after_s: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after_s)})


class SolverDisagreement(GacError):
    """Our exact solver and OR-Tools found different optima: a bug, reported loudly, never hidden."""

    status_code = 500


class NotReady(GacError):
    status_code = 503


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


def field_errors(errors: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Pydantic errors as [{"field": "body.measurements.3.median_us", "message": ...}].

    Only strings go out: pydantic's ctx can hold exception objects that JSON cannot carry.
    """
    out = []
    for err in errors:
        loc = ".".join(str(part) for part in err.get("loc", ()))
        out.append({"field": loc, "message": str(err.get("msg", "invalid")), "type": str(err.get("type", ""))})
    return out


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GacError)
    async def _gac_error(_: Request, exc: GacError) -> JSONResponse:
        return JSONResponse(
            {"error": type(exc).__name__, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(DataError)
    async def _unstorable(_: Request, exc: DataError) -> JSONResponse:
        # The database refused a value (out of range for its column, say): the request's fault,
        # and the transaction was rolled back, so nothing was written.
        return JSONResponse({"error": "Unprocessable", "detail": f"a value cannot be stored: {exc.orig}"}, status_code=422)

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if not is_outage(exc):
            return await _unexpected(request, exc)
        # Not our bug and not the client's: one line in the log, and a retryable answer on a
        # connection that stays open (the transaction was rolled back, nothing half-written).
        log.warning("database unavailable (%s %s): %s", request.method, request.url.path, str(exc.orig).splitlines()[0][:200])
        return JSONResponse(
            {"error": "DatabaseUnavailable", "detail": "the database is unavailable; retry shortly"},
            status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input: log it whole, answer without internals.
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse({"error": "InternalError", "detail": "an internal error occurred; it has been logged"}, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The framework's own refusals (unknown route, wrong method, a body it cannot parse)
        # in the same shape as ours.
        kind = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, f"HTTP{exc.status_code}")
        detail = exc.detail
        if detail == "There was an error parsing the body":
            detail = "the request body is not JSON this service can parse (malformed, or nested too deeply)"
        return JSONResponse({"error": kind, "detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "ValidationError", "detail": field_errors(exc.errors())}, status_code=422)
