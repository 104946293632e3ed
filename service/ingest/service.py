"""The ingest use case: one batch in one transaction, safe to re-send."""

from __future__ import annotations

import hashlib
import operator
from array import array
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session

from gac.contracts.measurements import Batch, BatchReceipt
from gac.service.db import begin_write
from gac.service.errors import Conflict, Unprocessable
from gac.service.ingest import repository as repo
from gac.service.ingest.incoming import VALUE_COLUMNS, CurveKey, Incoming
from gac.service.ingest.known import IdResolver, agent_key, platform_key, run_key
from gac.service.metrics import INGEST_BATCHES, INGEST_ROWS
from gac.service.models import Platform, UploadBatch, utcnow

# What a row says, beyond its id: its curve, its x and its figures. Not measured_at: when it
# is left out the service fills in the time it read the row, so a faithful re-send differs there.
COMPARED = tuple(name for name in VALUE_COLUMNS if name != "measured_at")
# Hashed only when some row sets it: a batch sent before the column existed keeps the hash it was stored with.
HASHED_WHEN_SET = ("busy_cores",)
_SHOWN_CONFLICTS = 50  # rows named in a 409; the message counts the rest


def content_hash(batch: Incoming) -> str:
    """What makes a batch that batch: its platform, run, row ids and every row's values, in the
    order of the row ids (a re-send in another order is the same batch).

    Rows are immutable once stored (the first write of a row id wins), so a re-send with other
    values is a correction that would be lost: it is refused (409), never answered "replay"."""
    rows = len(batch.ids)
    ints = [row_id.int for row_id in batch.ids]
    order = sorted(range(rows), key=ints.__getitem__)
    permute = operator.itemgetter(*order) if rows > 1 else (lambda column: tuple(column))
    h = hashlib.sha256(f"v2|{batch.platform.fingerprint()}|{batch.run.id}|".encode())
    h.update(b"".join(i.to_bytes(16, "big") for i in permute(ints)))
    curves = list(dict.fromkeys(batch.curves))  # a few distinct curves: hashed once, rows by index
    at = {key: i for i, key in enumerate(curves)}
    h.update(repr(curves).encode())
    h.update(array("q", [at[key] for key in permute(batch.curves)]).tobytes())
    h.update(array("q", permute(batch.x)).tobytes())
    for name in COMPARED:
        column = permute(batch.values[VALUE_COLUMNS.index(name)])
        if name in HASHED_WHEN_SET and column.count(None) == len(column):
            continue
        h.update(b"\x00" + name.encode() + b"\x00")
        h.update(_column_bytes(column))
    return h.hexdigest()


def _column_bytes(column: tuple) -> bytes:
    """One column's values as bytes, exactly (floats bit for bit), by the cheapest encoding that
    takes them all (each tried in C): null throughout, packed integers, packed floats, joined
    text, else repr (a mix with nulls)."""
    if column.count(None) == len(column):
        return b"n" + len(column).to_bytes(4, "little")
    for code in ("q", "d"):  # integers first: a float array would round those above 2**53
        try:
            return code.encode() + array(code, column).tobytes()
        except (TypeError, OverflowError):
            pass
    try:
        return b"s" + "\x00".join(column).encode()  # unambiguous: every text field refuses NUL
    except TypeError:
        return b"r" + repr(column).encode()


def _sent_row(batch: Incoming, i: int, columns: list[list[Any]]) -> tuple:
    return (batch.curves[i], batch.x[i], *(column[i] for column in columns))


def _differences(
    session: Session, batch: Incoming, stored: dict[UUID, tuple], platform_id: int | None, *, missing_too: bool
) -> list[dict[str, str]]:
    """The rows of batch whose id is stored with other values, or on another platform than platform_id
    (None: not compared), and, with missing_too, whose id is not stored at all, as field errors that name
    each row and what differs."""
    columns = [batch.values[VALUE_COLUMNS.index(name)] for name in COMPARED]
    names = ("curve", "x", *COMPARED)
    found: list[dict[str, str]] = []
    count = 0
    for i, row_id in enumerate(batch.ids):
        row = stored.get(row_id)
        if row is None:
            if not missing_too:
                continue
            message = f"row {row_id} is not part of the stored batch"
        elif platform_id is not None and row[0] != platform_id:  # the same values elsewhere would store nothing here
            was = session.get_one(Platform, row[0]).fingerprint
            message = f"row {row_id} is stored for platform {was[:16]}, this batch names {batch.platform.fingerprint()[:16]}"
        else:
            have, sent = row[1:], _sent_row(batch, i, columns)
            if have == sent:
                continue
            changed = ", ".join(f"{name}: stored {old!r}, sent {new!r}" for name, old, new in zip(names, have, sent) if old != new)
            message = f"row {row_id} is stored with other values ({changed})"
        count += 1
        if len(found) < _SHOWN_CONFLICTS:
            found.append({"field": f"body.measurements.{i}", "message": message, "type": "conflict"})
    if count > len(found):
        found.append({"field": "body.measurements", "message": f"and {count - len(found)} more rows like these", "type": "conflict"})
    return found


def _other_owner(session: Session, batch: Incoming, stored: UploadBatch, platform_id: int) -> list[dict[str, str]]:
    """Where a re-sent batch names another platform or run than it was stored with: its rows stay the stored
    batch's, so answering "replay" would tell the sender they are stored under its own."""
    found = []
    if stored.platform_id != platform_id:
        was = session.get_one(Platform, stored.platform_id).fingerprint
        found.append(
            {
                "field": "body.platform",
                "message": f"the batch was stored for platform {was[:16]}, this one names {batch.platform.fingerprint()[:16]}",
                "type": "conflict",
            }
        )
    if stored.run_id != batch.run.id:
        said = f"the batch was stored in run {stored.run_id}, this one names {batch.run.id}"
        found.append({"field": "body.run.id", "message": said, "type": "conflict"})
    return found


def _repeated_ids(ids: list[UUID]) -> list[dict[str, str]]:
    seen: set[UUID] = set()
    found: list[dict[str, str]] = []
    for i, row_id in enumerate(ids):
        if row_id in seen and len(found) < _SHOWN_CONFLICTS:
            found.append({"field": f"body.measurements.{i}", "message": f"row id {row_id} occurs earlier in this batch"})
        seen.add(row_id)
    return found


_HOW_TO_CORRECT = (
    "a stored row never changes: send a corrected measurement as a new row (a new row id, best in a new run), "
    "see docs/http.md, 'Correcting a measurement'"
)


def _refuse(session: Session, what: str, differences: list[dict[str, str]]) -> Conflict:
    session.rollback()  # nothing of this batch is stored
    INGEST_BATCHES.labels("conflict").inc()
    return Conflict([{"field": "body", "message": f"{what}; {_HOW_TO_CORRECT}", "type": "conflict"}, *differences])


def ingest_batch(session: Session, batch: Incoming, *, token_id: int | None, max_rows: int) -> BatchReceipt:
    """Store a batch whole or not at all; a re-sent batch stores nothing and says so."""
    rows = len(batch.ids)
    if rows > max_rows:
        raise Unprocessable(
            [{"field": "body.measurements", "message": f"{rows} rows is over this service's limit of {max_rows} per batch"}]
        )
    if len(set(batch.ids)) != rows:  # two values for one row id: one of them would be lost
        raise Unprocessable(_repeated_ids(batch.ids))
    digest = content_hash(batch)
    now = utcnow()
    db = str(session.get_bind().engine.url)
    fingerprint = batch.platform.fingerprint()
    ids = IdResolver(now)

    begin_write(session)
    platform_id = ids.resolve(platform_key(db, batch.platform), lambda: repo.upsert_platform(session, batch.platform, now))
    agent_id = ids.resolve(agent_key(db, batch.run.agent), lambda: repo.upsert_agent(session, batch.run, token_id, now))
    run_platform = ids.resolve(
        run_key(db, batch.run.id), lambda: repo.ensure_run(session, batch.run, agent_id, platform_id, now).platform_id
    )
    if run_platform != platform_id:
        session.rollback()
        raise Conflict(f"run {batch.run.id} was recorded on another platform; a run covers one platform")

    if not repo.insert_batch_row(session, batch.id, batch.run.id, platform_id, agent_id, digest, rows, now):
        stored = session.get_one(UploadBatch, batch.id)
        if stored.content_hash != digest:  # other values, or a hash of an older version of this rule
            differences = _other_owner(session, batch, stored, platform_id)
            rows_platform = platform_id if stored.platform_id == platform_id else None  # else said once, for the batch
            differences += _differences(session, batch, repo.stored_rows(session, batch.ids, COMPARED), rows_platform, missing_too=True)
            if stored.rows > rows:
                differences.append(
                    {
                        "field": "body.measurements",
                        "type": "conflict",
                        "message": f"the stored batch has {stored.rows} rows, this one {rows}",
                    }
                )
            if differences:
                raise _refuse(session, f"batch {batch.id} was already stored with other content", differences)
        session.rollback()
        INGEST_BATCHES.labels("replay").inc()
        INGEST_ROWS.labels("duplicate").inc(rows)
        return BatchReceipt(
            batch_id=batch.id,
            platform_id=platform_id,
            fingerprint=fingerprint,
            inserted=0,
            duplicates=rows,
            replay=True,
        )

    curves = repo.curve_ids(session, platform_id, set(batch.curves), now)
    inserted = repo.insert_measurements(session, batch, [curves[k] for k in batch.curves])
    if inserted != rows:
        # Some row ids were stored before, by other batches: duplicates when they say the same,
        # a correction that would be dropped when they do not.
        earlier = repo.stored_rows(session, batch.ids, COMPARED, other_than=batch.id)
        if differences := _differences(session, batch, earlier, platform_id, missing_too=False):
            raise _refuse(session, f"{len(earlier)} row ids of batch {batch.id} were stored before", differences)
        repo.record_counts(session, batch.id, inserted, rows - inserted)
    repo.touch_curves(session, list(curves.values()), now)
    session.commit()
    ids.remember()
    INGEST_BATCHES.labels("stored").inc()
    INGEST_ROWS.labels("inserted").inc(inserted)
    INGEST_ROWS.labels("duplicate").inc(rows - inserted)
    return BatchReceipt(
        batch_id=batch.id,
        platform_id=platform_id,
        fingerprint=fingerprint,
        inserted=inserted,
        duplicates=rows - inserted,
        replay=False,
    )


class LocalDatabase:
    """The configured (by default embedded) database, held open for one command: `gac profile`
    commits a small batch every second or so, and opening the database and checking its schema
    for each batch would cost more than storing it."""

    def __init__(self, database_url: str | None = None) -> None:
        from gac.service.db import engine_for, make_sessionmaker
        from gac.service.settings import get_settings
        from gac.service.startup import ensure_schema

        settings = get_settings(database_url)
        self._engine = engine_for(settings)
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
        """What this platform has stored on these curves: see gac.service.curves.service.stored_medians."""
        from gac.service.curves.service import stored_medians

        with self._sessions() as session:
            return stored_medians(session, fingerprint, keys)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> LocalDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
