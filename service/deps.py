"""Request dependencies: the database session and the caller's token, so routes read plainly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from gac.service.auth.tokens import GRANTS, Scope, find_active
from gac.service.errors import Forbidden, TooManyRequests, Unauthorized
from gac.service.models import ApiToken
from gac.service.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API token made by `gac token create`.")


# Dependencies that do no I/O are `async def`: FastAPI runs a plain `def` dependency on the
# thread pool, and each hop there costs more than a cached curve read (py-spy under wrk).
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    # Creating a Session does no I/O; its queries run in the (threaded) endpoint.
    session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        if session.in_transaction():  # only then does closing talk to the database
            await run_in_threadpool(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _authenticate(session: Session, settings: Settings, creds: HTTPAuthorizationCredentials | None) -> ApiToken:
    if creds is None:
        raise Unauthorized("this endpoint needs an API token: send 'Authorization: Bearer <token>'")
    token = find_active(session, settings.token_key, creds.credentials)
    if token is None:
        raise Unauthorized("the API token is unknown, malformed or revoked")
    return token


def require(scope: Scope, session: Session, settings: Settings, creds: HTTPAuthorizationCredentials | None) -> ApiToken:
    """The caller's token if it grants scope; for routes where the scope depends on the request."""
    token = _authenticate(session, settings, creds)
    if scope not in GRANTS[Scope(token.scope)]:
        raise Forbidden(f"this needs a token with scope {scope.value!r}; this one has {token.scope!r}")
    return token


def _verified(request: Request, creds: HTTPAuthorizationCredentials | None) -> ApiToken | None:
    """The token the request guard (service/limits.py) already looked up for this request, if any."""
    verified = request.scope.get("state", {}).get("token")
    if verified is not None and creds is not None and verified[0] == creds.credentials:
        return verified[1]
    return None


async def _checked(
    request: Request, scope: Scope, session: Session, settings: Settings, creds: HTTPAuthorizationCredentials | None
) -> ApiToken:
    """require() for a route's dependency: no second lookup of a token the guard checked, and
    failures counted against the client (429 once it failed too often, before any lookup)."""
    token = _verified(request, creds)
    if token is None:
        failures = request.app.state.auth_failures
        client = request.client.host if request.client else "unknown"
        if creds is not None and (wait := failures.retry_after(client)):
            raise TooManyRequests("too many failed authentications from this client; retry later", wait)
        try:
            return await run_in_threadpool(require, scope, session, settings, creds)
        except Unauthorized:
            failures.failed(client)
            raise
    if scope not in GRANTS[Scope(token.scope)]:
        raise Forbidden(f"this needs a token with scope {scope.value!r}; this one has {token.scope!r}")
    return token


def _require(scope: Scope):
    async def dependency(request: Request, session: SessionDep, settings: SettingsDep, creds: Credentials) -> ApiToken:
        return await _checked(request, scope, session, settings, creds)

    return dependency


async def _reader(request: Request, session: SessionDep, settings: SettingsDep, creds: Credentials) -> ApiToken | None:
    # Reads are open by default; a sent token is still checked so a bad one is never silently accepted.
    if creds is None and not settings.require_read_token:
        return None
    return await _checked(request, Scope.read, session, settings, creds)


ReadToken = Annotated[ApiToken, Depends(_require(Scope.read))]  # any valid token, even where reads are open
IngestToken = Annotated[ApiToken, Depends(_require(Scope.ingest))]
AdminToken = Annotated[ApiToken, Depends(_require(Scope.admin))]
Reader = Annotated[ApiToken | None, Depends(_reader)]
