"""Keeps the response cache's curves confirmed: every third of the freshness, one query reads
the version of every cached curve, so hot reads never wait on the database (service/cache.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from gac.service.cache import ResponseCache

log = logging.getLogger(__name__)


def read_versions(conn: Connection, ids: set[int]) -> dict[int, int]:
    """{curve id: version} for those of `ids` that exist, in one statement with one parameter:
    an IN list of a thousand bound values costs ~8 ms of Python to build, with the GIL held."""
    raw = conn.connection.driver_connection
    assert raw is not None  # a live connection: the caller connected it
    cur = raw.cursor()
    try:
        if conn.dialect.name == "postgresql":
            cur.execute("SELECT id, version FROM curves WHERE id = ANY(%s)", (sorted(ids),))
        else:
            cur.execute("SELECT id, version FROM curves WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(sorted(ids)),))
        return dict(cur.fetchall())
    finally:
        cur.close()
        conn.rollback()  # SQLite: no read transaction left open to hold back WAL checkpoints


async def confirm_forever(cache: ResponseCache, engine: Engine, freshness: float) -> None:
    # One connection of its own, held between polls and used bare (autocommit, no pool
    # checkout or ping): each poll is one round trip, so the poll thread needs the GIL only
    # briefly. Through a pooled session, polls under load took up to 0.7 s (GIL hand-offs
    # with the busy event loop), long enough for entries to lapse and reads to stall.
    conn: Connection | None = None
    down_since: float | None = None  # when polls started failing: one log line when it starts, one when it ends
    try:
        while True:
            await asyncio.sleep(freshness / 3)  # an entry stays fresh through one slow poll
            ids, generation = cache.stamp()
            if not ids:
                cache.polled_nothing()
                continue
            started = time.monotonic()
            try:
                if conn is None:
                    conn = await run_in_threadpool(_connect, engine)
                versions = await run_in_threadpool(read_versions, conn, ids)
            except Exception as exc:  # the database away: entries age out and reads check (and report) themselves
                if down_since is None:  # a poll every freshness / 3: a line per poll would flood the log
                    down_since = started
                    log.warning(
                        "cannot confirm cached curve versions (%s: %s); retrying quietly until the database answers",
                        type(exc).__name__,
                        _first_line(exc),
                    )
                if conn is not None:
                    conn.invalidate()
                    conn = None
                continue
            if down_since is not None:
                log.warning("confirming cached curve versions again after %.1f s", time.monotonic() - down_since)
                down_since = None
            cache.confirm_all(ids, versions, generation, started)
    finally:
        if conn is not None:
            conn.close()


def _first_line(exc: BaseException) -> str:
    """The driver's message, without SQLAlchemy's statement and background link."""
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).strip().splitlines() or [""])[0][:200]


def _connect(engine: Engine) -> Connection:
    conn = engine.connect()
    return conn.execution_options(isolation_level="AUTOCOMMIT") if conn.dialect.name == "postgresql" else conn
