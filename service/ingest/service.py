"""The ingest use case: one batch in one transaction, safe to re-send."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from gac.contracts.measurements import Batch, BatchReceipt
from service.db import begin_write
from service.errors import Conflict, Unprocessable
from service.ingest import repository as repo
from service.ingest.incoming import CurveKey, Incoming
from service.ingest.known import KNOWN, agent_key, platform_key, run_key
from service.metrics import INGEST_BATCHES, INGEST_ROWS
from service.models import UploadBatch, utcnow


def content_hash(batch: Incoming) -> str:
    """What makes a batch that batch: its platform, run and row ids.

    Rows are immutable once stored (the first write of a row id wins), so a
    re-send is recognised by its ids; a batch id reused for other rows is a
    client bug that must not be mistaken for a re-send (its rows would be lost).
    """
    h = hashlib.sha256(f"{batch.platform.fingerprint()}|{batch.run.id}|".encode())
    for row_id in batch.ids:
        h.update(row_id.bytes)
    return h.hexdigest()


class IdResolver:
    """Platform, agent and run ids for one transaction: from KNOWN, else stored (an upsert).
    Those stored are put in KNOWN by remember(), once the transaction commits: a rolled-back id
    may not exist."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._stored: list[tuple[tuple, int]] = []

    def resolve(self, key: tuple, store: Callable[[], int]) -> int:
        value = KNOWN.get(key, self._now)
        if value is None:
            value = store()
            self._stored.append((key, value))
        return value

    def remember(self) -> None:
        for key, value in self._stored:
            KNOWN.put(key, value, self._now)


def ingest_batch(session: Session, batch: Incoming, *, token_id: int | None, max_rows: int) -> BatchReceipt:
    """Store a batch whole or not at all; a re-sent batch stores nothing and says so."""
    rows = len(batch.ids)
    if rows > max_rows:
        raise Unprocessable(
            [{"field": "body.measurements", "message": f"{rows} rows is over this service's limit of {max_rows} per batch"}]
        )
    digest = content_hash(batch)
    now = utcnow()
    db = str(session.get_bind().engine.url)
    fingerprint = batch.platform.fingerprint()
    ids = IdResolver(now)

    begin_write(session)
    platform_id = ids.resolve(platform_key(db, fingerprint), lambda: repo.upsert_platform(session, batch.platform, now))
    agent_id = ids.resolve(agent_key(db, batch.run.agent), lambda: repo.upsert_agent(session, batch.run, token_id, now))
    run_platform = ids.resolve(
        run_key(db, batch.run.id), lambda: repo.ensure_run(session, batch.run, agent_id, platform_id, now).platform_id
    )
    if run_platform != platform_id:
        session.rollback()
        raise Conflict(f"run {batch.run.id} was recorded on another platform; a run covers one platform")

    if not repo.insert_batch_row(session, batch.id, batch.run.id, platform_id, digest, rows, now):
        stored = session.get_one(UploadBatch, batch.id)
        same = stored.content_hash == digest
        session.rollback()
        if not same:
            raise Conflict(f"batch {batch.id} was already stored with different content; use a new batch id")
        INGEST_BATCHES.labels("replay").inc()
        INGEST_ROWS.labels("duplicate").inc(rows)
        return BatchReceipt(
            batch_id=batch.id, platform_id=platform_id, fingerprint=fingerprint,
            inserted=0, duplicates=rows, replay=True,
        )

    curves = repo.curve_ids(session, platform_id, set(batch.curves), now)
    inserted = repo.insert_measurements(session, batch, [curves[k] for k in batch.curves])
    if inserted != rows:
        repo.record_counts(session, batch.id, inserted, rows - inserted)
    repo.touch_curves(session, list(curves.values()), now)
    session.commit()
    ids.remember()
    INGEST_BATCHES.labels("stored").inc()
    INGEST_ROWS.labels("inserted").inc(inserted)
    INGEST_ROWS.labels("duplicate").inc(rows - inserted)
    return BatchReceipt(
        batch_id=batch.id, platform_id=platform_id, fingerprint=fingerprint,
        inserted=inserted, duplicates=rows - inserted, replay=False,
    )


class LocalDatabase:
    """The configured (by default embedded) database, held open for one command: `gac profile`
    commits a small batch every second or so, and opening the database and checking its schema
    for each batch would cost more than storing it."""

    def __init__(self, database_url: str | None = None) -> None:
        from service.db import make_engine, make_sessionmaker
        from service.settings import get_settings
        from service.startup import ensure_schema

        settings = get_settings(database_url)
        self._engine = make_engine(settings.url)
        try:
            ensure_schema(self._engine, settings)
        except BaseException:
            self._engine.dispose()
            raise
        self._sessions = make_sessionmaker(self._engine)

    def ingest(self, batch: Batch) -> BatchReceipt:
        with self._sessions() as session:
            return ingest_batch(session, Incoming.from_rows(batch), token_id=None, max_rows=10_000)

    def stored_medians(self, fingerprint: str, keys: Iterable[CurveKey]) -> dict[CurveKey, dict[int, float]]:
        """What this platform has stored on these curves: see service.curves.service.stored_medians."""
        from service.curves.service import stored_medians

        with self._sessions() as session:
            return stored_medians(session, fingerprint, keys)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> LocalDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

