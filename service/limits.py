"""The door of every request, before any route: a NUL in the URL, the token of a request that
carries a body (checked from its headers, before one byte of the body is read), the body's
size and the time it may take to arrive.

A request without a valid token can hold no memory: it is answered 401 (429 once its client
has failed too often, service/auth/guard.py) as soon as its headers are in, and its connection
closed if a body was on its way. A body is streamed through to the route as it arrives, never
buffered here; past GAC_MAX_BODY_BYTES it is refused (413), and one that has not arrived
whole within GAC_BODY_TIMEOUT_SECONDS of its headers is refused with 408. The header timeout
and the connection cap live in the HTTP protocol (service/server.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gac.service.auth.guard import AuthFailures
from gac.service.auth.tokens import find_active, well_formed
from gac.service.errors import RETRY_AFTER_S, error_json, is_outage, log
from gac.service.settings import Settings

_WITH_BODY = frozenset(("POST", "PUT", "PATCH", "DELETE"))
_COMPRESSED = frozenset(("gzip", "x-gzip", "deflate", "br", "compress", "x-compress", "zstd"))  # content codings not decoded here
_DISCONNECT: Message = {"type": "http.disconnect"}


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


def bearer_token(scope: Scope) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    raw = _header(scope, b"authorization")
    if raw is None:
        return None
    scheme, _, token = raw.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def client_of(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def _routed(scope: Scope) -> bool:
    """Whether a route serves this method at this path (else the router answers 404 or 405)."""
    return any(not isinstance(route, Mount) and route.matches(scope)[0] is Match.FULL for route in scope["app"].router.routes)


def _closing(send: Send) -> Send:
    async def send_closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return send_closing


class RequestGuard:
    def __init__(self, app: ASGIApp, settings: Settings, failures: AuthFailures) -> None:
        self.app = app
        self.settings = settings
        self.failures = failures
        self.max_bytes = settings.max_body_bytes

    async def _answer(self, send: Send, status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> None:
        body = error_json(error, detail)
        raw = [(b"content-type", b"application/json"), *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    def _open(self, scope: Scope, token: str | None) -> bool:
        """Routes that take a body without a token: POST /v1/align when the operator opened it."""
        return token is None and self.settings.open_align and scope["path"] == "/v1/align"

    async def _authenticate(self, scope: Scope, send: Send, closing: dict[str, str]) -> bool:
        """Check the token from the headers alone; False once the request was answered."""
        token = bearer_token(scope)
        if self._open(scope, token):
            return True
        client = client_of(scope)
        wait = self.failures.retry_after(client)
        if wait:
            await self._answer(
                send,
                429,
                "TooManyRequests",
                "too many failed authentications from this client; retry later",
                {"Retry-After": str(wait), **closing},
            )
            return False
        row = None
        if token is not None and well_formed(token):  # a mistyped token costs no database lookup
            try:
                row = await run_in_threadpool(self._find, scope, token)
            except DBAPIError as exc:
                if not is_outage(exc):
                    raise
                # As the routes answer an outage (service/errors.py): retryable, on a connection that stays open.
                log.warning("database unavailable (%s %s): %s", scope["method"], scope["path"], str(exc.orig).splitlines()[0][:200])
                await self._answer(
                    send,
                    503,
                    "DatabaseUnavailable",
                    "the database is unavailable; retry shortly",
                    {"Retry-After": str(RETRY_AFTER_S), **closing},
                )
                return False
        if row is None:
            self.failures.failed(client)
            detail = (
                "this endpoint needs an API token: send 'Authorization: Bearer <token>'"
                if token is None
                else "the API token is unknown, malformed or revoked"
            )
            await self._answer(send, 401, "Unauthorized", detail, {"WWW-Authenticate": "Bearer", **closing})
            return False
        # The route's token dependency (service/deps.py) takes this one instead of a second lookup.
        scope.setdefault("state", {})["token"] = (token, row)
        return True

    def _find(self, scope: Scope, token: str) -> Any:
        with scope["app"].state.sessionmaker() as session:
            return find_active(session, self.settings.token_key, token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if b"%00" in scope.get("query_string", b"") or "\x00" in scope.get("path", ""):
            # No database stores NUL in text; refuse it at the door.
            await self._answer(send, 400, "BadRequest", "the URL contains a NUL character")
            return
        if scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        # A body on its way that this answer will not read: close the connection rather than
        # read and discard it (or leave it half-read on a kept-alive connection).
        pending = _header(scope, b"transfer-encoding") is not None or (declared not in (None, b"0"))
        closing = {"Connection": "close"} if pending else {}
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._answer(send, 413, "PayloadTooLarge", f"request body is over the limit of {self.max_bytes} bytes", closing)
            return
        if not _routed(scope):
            # 404 or 405, answered without reading the body; the connection is not kept for the rest of it.
            await self.app(scope, receive, _closing(send) if pending else send)
            return
        if not await self._authenticate(scope, send, closing):
            return
        encoding = (_header(scope, b"content-encoding") or b"").decode("latin-1").strip().lower()
        if any(c.strip() in _COMPRESSED for c in encoding.split(",")):  # read as sent, a compressed body is malformed JSON
            detail = f"request bodies are read as sent, not decoded: send it without Content-Encoding ({encoding[:40]})"
            await self._answer(send, 415, "UnsupportedMediaType", detail, closing)
            return
        await self._stream(scope, receive, send)

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the body through as it arrives, refusing it (once) past the size or the time limit."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.body_timeout_seconds
        state = {"size": 0, "done": False, "refused": False, "started": False}

        async def refuse(status: int, error: str, detail: str) -> Message:
            state["refused"] = True
            if not state["started"]:
                await self._answer(send, status, error, detail, {"Connection": "close"})
            return _DISCONNECT  # the route stops reading; what it answers then is dropped below

        async def guarded_receive() -> Message:
            if state["refused"]:
                return _DISCONNECT
            if state["done"]:
                return await receive()  # past the body (a route waiting for the disconnect): no limit
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:  # TimeoutError itself from Python 3.11
                return await refuse(
                    408, "RequestTimeout", f"the request body did not arrive within {self.settings.body_timeout_seconds:g} s"
                )
            if message["type"] == "http.request":
                state["size"] += len(message.get("body", b""))
                if state["size"] > self.max_bytes:
                    return await refuse(413, "PayloadTooLarge", f"request body is over the limit of {self.max_bytes} bytes")
                state["done"] = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            if state["refused"]:
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except ClientDisconnect:
            # The client left mid-body, or the body was refused above: nobody to answer (or
            # answered already), and not an error of ours to log.
            pass
