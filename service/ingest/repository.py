"""The writes of an ingest: platform, agent, run, batch, curves, measurements."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime
from itertools import repeat

from sqlalchemy import select, tuple_, update
from sqlalchemy.orm import Session

from gac.contracts.measurements import DTYPE_FIELDS, PlatformDescriptor, RunInfo
from gac.service.ingest.incoming import LATER_COLUMNS, VALUE_COLUMNS, CurveKey, Incoming
from gac.service.ingest.known import STAMP_EVERY
from gac.service.models import Agent, Curve, Measurement, Platform, Run, UploadBatch
from gac.service.upsert import insert_ignoring_conflicts


def _stale(now: datetime):
    return now - STAMP_EVERY


def upsert_platform(session: Session, desc: PlatformDescriptor, now: datetime) -> int:
    fingerprint = desc.fingerprint()
    # Unset fields are left to the column default (NULL), as the fingerprint leaves them out.
    values = desc.model_dump(mode="json", exclude_none=True)
    values |= {"fingerprint": fingerprint, "first_seen": now, "last_seen": now}
    session.execute(insert_ignoring_conflicts(session, Platform.__table__, ["fingerprint"]).values(**values))
    platform_id, *facts = session.execute(
        select(Platform.id, *(getattr(Platform, f) for f in DTYPE_FIELDS)).where(Platform.fingerprint == fingerprint)
    ).one()
    session.execute(update(Platform).where(Platform.id == platform_id, Platform.last_seen < _stale(now)).values(last_seen=now))
    # The dtype facts are measurements, not identity: the latest agent's report replaces them (written only when they change).
    stored = dict(zip(DTYPE_FIELDS, facts))
    if changed := {f: values[f] for f in DTYPE_FIELDS if f in values and values[f] != stored[f]}:
        session.execute(update(Platform).where(Platform.id == platform_id).values(**changed))
    return platform_id


def upsert_agent(session: Session, run: RunInfo, token_id: int | None, now: datetime) -> int:
    values = {"name": run.agent, "token_id": token_id, "agent_version": run.agent_version, "first_seen": now, "last_seen": now}
    session.execute(insert_ignoring_conflicts(session, Agent.__table__, ["name"]).values(**values))
    agent_id = session.execute(select(Agent.id).where(Agent.name == run.agent)).scalar_one()
    session.execute(
        update(Agent)
        .where(Agent.id == agent_id, Agent.last_seen < _stale(now))
        .values(last_seen=now, token_id=token_id, agent_version=run.agent_version)
    )
    return agent_id


def ensure_run(session: Session, run: RunInfo, agent_id: int, platform_id: int, now: datetime) -> Run:
    values = {
        "id": run.id,
        "agent_id": agent_id,
        "platform_id": platform_id,
        "plan": run.plan,
        "agent_version": run.agent_version,
        "started_at": run.started_at,
        "created_at": now,
    }
    session.execute(insert_ignoring_conflicts(session, Run.__table__, ["id"]).values(**values))
    return session.get_one(Run, run.id)


def insert_batch_row(
    session: Session, batch_id: uuid.UUID, run_id: uuid.UUID, platform_id: int, agent_id: int, digest: str, rows: int, now: datetime
) -> bool:
    """Claim the batch id; False when it was already stored (a re-send)."""
    stmt = (
        insert_ignoring_conflicts(session, UploadBatch.__table__, ["id"])
        .values(
            id=batch_id,
            run_id=run_id,
            platform_id=platform_id,
            agent_id=agent_id,
            content_hash=digest,
            rows=rows,
            inserted=rows,
            duplicates=0,
            received_at=now,  # corrected by record_counts if some rows were stored before
        )
        .returning(UploadBatch.id)
    )
    return session.execute(stmt).first() is not None


def curve_ids(session: Session, platform_id: int, keys: set[CurveKey], now: datetime) -> dict[CurveKey, int]:
    """Curve ids for the given keys, creating the missing curves (existing ones are not locked)."""
    ordered = sorted(keys)  # two batches creating the same curves lock them in the same order
    rows = [
        {"platform_id": platform_id, "op": op, "dtype": dt, "axis": axis, "fixed_key": fixed, "version": 0, "updated_at": now}
        for op, dt, axis, fixed in ordered
    ]
    session.execute(insert_ignoring_conflicts(session, Curve.__table__, ["platform_id", "op", "dtype", "axis", "fixed_key"]), rows)
    found = session.execute(
        select(Curve.id, Curve.op, Curve.dtype, Curve.axis, Curve.fixed_key).where(
            Curve.platform_id == platform_id,
            tuple_(Curve.op, Curve.dtype, Curve.axis, Curve.fixed_key).in_(ordered),
        )
    )
    return {(r.op, r.dtype, r.axis, r.fixed_key): r.id for r in found}


def touch_curves(session: Session, ids: list[int], now: datetime) -> None:
    """Give the curves a new version tag, so caches of their points and cliffs are rebuilt.

    Run last, just before the commit: it locks the curve rows, and concurrent batches onto the
    same curves (a fleet of identical machines) wait on those locks only for a commit, not for
    a whole COPY. Rows are locked in id order: no deadlocks.
    """
    session.execute(update(Curve).where(Curve.id.in_(sorted(ids))).values(version=secrets.randbits(62), updated_at=now))


_COLUMNS = ("uuid", "curve_id", "run_id", "batch_id", "x", *VALUE_COLUMNS)


def insert_measurements(session: Session, batch: Incoming, curve_ids: list[int]) -> int:
    """Insert the rows whose uuid is new (curve_ids[i] is row i's curve); returns how many were new."""
    values = trimmed(batch.values)
    rows = list(zip(batch.ids, curve_ids, repeat(batch.run.id), repeat(batch.id), batch.x, *values))
    # Sorted by uuid, so two transactions inserting overlapping rows lock them in the same order.
    rows.sort(key=lambda row: row[0].int)
    if session.get_bind().dialect.name == "postgresql":
        return _copy_then_insert(session, rows)
    table = Measurement.__table__
    stmt = insert_ignoring_conflicts(session, table, ["uuid"]).returning(table.c.id)
    return len(session.execute(stmt, [dict(zip(_COLUMNS, row)) for row in rows]).all())


def trimmed(values: list[list]) -> list[list]:
    """The value columns without the trailing later ones no row sets: they are left to their default, NULL."""
    width = len(values)
    while VALUE_COLUMNS[width - 1] in LATER_COLUMNS and values[width - 1].count(None) == len(values[width - 1]):  # in C
        width -= 1
    return values[:width]


_STAGE = "measurements_stage"
_STAGE_DDL = f"""
CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (
    uuid uuid, curve_id integer, run_id uuid, batch_id uuid, x integer,
    median_us double precision, p10_us double precision, p90_us double precision, mean_us double precision,
    n integer, timer text, backend text, kernel text, measured_at timestamptz,
    stop text, samples_discarded integer, sm_clock_mhz integer, throttle_reasons bigint, quality text,
    busy_cores double precision
) ON COMMIT DELETE ROWS
"""
_STAGE_TYPES = [
    "uuid",
    "int4",
    "uuid",
    "uuid",
    "int4",
    "float8",
    "float8",
    "float8",
    "float8",
    "int4",
    "text",
    "text",
    "text",
    "timestamptz",
    "text",
    "int4",
    "int4",
    "int8",
    "text",
    "float8",
]


def _copy_rows(cur, table: str, rows: list[tuple]) -> None:
    width = len(rows[0]) if rows else len(_COLUMNS)  # without the later columns no row sets (trimmed)
    with cur.copy(f"COPY {table} ({', '.join(_COLUMNS[:width])}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_STAGE_TYPES[:width])
        for row in rows:
            copy.write_row(row)


def _copy_then_insert(session: Session, rows: list[tuple]) -> int:
    """Postgres hot path: binary COPY straight into measurements; if some row ids are already
    stored (a spool re-batched after a lost answer), COPY into a per-connection staging table
    and INSERT ... SELECT ... ON CONFLICT DO NOTHING instead.

    Binary COPY with declared types streams the rows through psycopg's C adapters (a VALUES
    statement of 1,000 rows spends most of its time building SQL text), and going straight
    to the table saves writing every new row twice (see benchmarks/ingest.py).
    """
    import psycopg  # only on Postgres: the embedded default needs no driver

    raw = session.connection().connection.driver_connection
    assert raw is not None  # the session's connection is checked out and live
    with raw.cursor() as cur:
        try:
            with raw.transaction():  # a savepoint: a duplicate row id undoes only this COPY
                _copy_rows(cur, "measurements", rows)
            return len(rows)
        except psycopg.errors.UniqueViolation:
            pass
        cols = ", ".join(_COLUMNS[: len(rows[0])])
        cur.execute(_STAGE_DDL)
        _copy_rows(cur, _STAGE, rows)
        cur.execute(f"INSERT INTO measurements ({cols}) SELECT {cols} FROM {_STAGE} ORDER BY uuid ON CONFLICT (uuid) DO NOTHING")
        inserted = cur.rowcount
        cur.execute(f"TRUNCATE {_STAGE}")
    return inserted


def record_counts(session: Session, batch_id: uuid.UUID, inserted: int, duplicates: int) -> None:
    session.execute(update(UploadBatch).where(UploadBatch.id == batch_id).values(inserted=inserted, duplicates=duplicates))


def stored_rows(
    session: Session, ids: list[uuid.UUID], columns: tuple[str, ...], other_than: uuid.UUID | None = None
) -> dict[uuid.UUID, tuple]:
    """{row id: (platform id, curve key, x, *columns)} of those ids that are stored (by a batch other
    than other_than, when given): what a re-sent row is compared with."""
    table = Measurement.__table__
    stmt = (
        select(
            table.c.uuid,
            Curve.platform_id,
            Curve.op,
            Curve.dtype,
            Curve.axis,
            Curve.fixed_key,
            table.c.x,
            *(table.c[name] for name in columns),
        )
        .join(Curve, Curve.id == table.c.curve_id)
        .where(table.c.uuid.in_(ids))
    )
    if other_than is not None:
        stmt = stmt.where(table.c.batch_id != other_than)
    return {row[0]: (row[1], (row[2], row[3], row[4], row[5]), *row[6:]) for row in session.execute(stmt)}
