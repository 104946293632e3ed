"""/healthz (the process is up) and /readyz (database reachable and schema current)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy.exc import SQLAlchemyError

from gac.service.db import ping, schema_status
from gac.service.errors import NotReady, errors

router = APIRouter(tags=["health"])


@router.get("/healthz", responses=errors(database=False))
def healthz() -> dict[str, str]:
    """The process is up (it does not touch the database)."""
    return {"status": "ok"}


@router.get("/readyz", responses=errors(503))
def readyz(request: Request) -> dict[str, str]:
    """The database is reachable and its schema current: 503 naming what is not."""
    engine = request.app.state.engine
    try:
        ping(engine)
        status = schema_status(engine)
    except SQLAlchemyError as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    if not status.up_to_date:
        raise NotReady(status.explain())
    return {"status": "ready", "schema": ",".join(status.current), "database": engine.dialect.name}
