"""Curve queries: every curve read is one range scan of (curve_id, x)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, case, func, select, true
from sqlalchemy.orm import Session

from gac.service.models import Curve, Measurement


def summaries(
    session: Session, platform_id: int, op: str | None, dtype: str | None, axis: str | None, lateral: bool | None = None
) -> Sequence[Row]:
    """One row per curve with its counts as the curve itself reads them (points() leaves flagged rows out;
    measurements counts every row); x_min and x_max are 0 when no row is usable, as on the curve. lateral: count
    each curve's rows apart (Postgres, the default there), else group every row (benchmarks/curve_list.py)."""
    usable_x = case((Measurement.quality.is_(None), Measurement.x))  # NULL on a flagged row: count, min and max skip it
    counts = (
        func.count().label("measurements"),
        func.count(usable_x.distinct()).label("points"),
        func.coalesce(func.min(usable_x), 0).label("x_min"),
        func.coalesce(func.max(usable_x), 0).label("x_max"),
        func.count(Measurement.quality).label("flagged"),  # rows with quality flags (count skips NULL)
    )
    if lateral if lateral is not None else session.get_bind().dialect.name == "postgresql":
        # Each curve's rows, one index range each (LATERAL): grouped first, every curve of every platform was counted
        # before the platform's were picked, 16 to 270 ms for one platform's 50 curves at 1M rows (by where its rows
        # sit), against 14 to 19 ms.
        stats = select(*counts).where(Measurement.curve_id == Curve.id).lateral()
        query = select(Curve, *stats.c).join(stats, true()).where(stats.c.measurements > 0)
    else:  # SQLite has no LATERAL; the embedded default holds one team's curves
        grouped = select(Measurement.curve_id, *counts).group_by(Measurement.curve_id).subquery()
        query = select(Curve, *(grouped.c[c.name] for c in counts)).join(grouped, grouped.c.curve_id == Curve.id)
    query = query.where(Curve.platform_id == platform_id)
    if op:
        query = query.where(Curve.op == op)
    if dtype:
        query = query.where(Curve.dtype == dtype)
    if axis:
        query = query.where(Curve.axis == axis)
    return session.execute(query.order_by(Curve.op, Curve.dtype, Curve.axis, Curve.fixed_key)).all()


def find(session: Session, platform_id: int, op: str, dtype: str, axis: str, fixed_key: str) -> Curve | None:
    return session.scalar(
        select(Curve).where(
            Curve.platform_id == platform_id,
            Curve.op == op,
            Curve.dtype == dtype,
            Curve.axis == axis,
            Curve.fixed_key == fixed_key,
        )
    )


def ids_by_key(session: Session, platform_id: int) -> dict[tuple[str, str, str, str], int]:
    """The platform's curve ids by natural key: (op, dtype, axis, fixed_key)."""
    rows = session.execute(select(Curve.id, Curve.op, Curve.dtype, Curve.axis, Curve.fixed_key).where(Curve.platform_id == platform_id))
    return {(r.op, r.dtype, r.axis, r.fixed_key): r.id for r in rows}


def versions_by_key(session: Session, platform_id: int) -> dict[tuple[str, str, str, str], tuple[int, int]]:
    """The platform's curves by natural key (op, dtype, axis, fixed_key): (id, version)."""
    rows = session.execute(
        select(Curve.id, Curve.op, Curve.dtype, Curve.axis, Curve.fixed_key, Curve.version).where(Curve.platform_id == platform_id)
    )
    return {(r.op, r.dtype, r.axis, r.fixed_key): (r.id, r.version) for r in rows}


def points(session: Session, curve_id: int) -> Sequence[Row]:
    """The curve's trusted rows: a row the agent flagged (quality) never makes a point, so it cannot
    invent a cliff in an alignment or count as stored when a plan is resumed."""
    return session.execute(
        select(Measurement.x, Measurement.median_us, Measurement.p10_us, Measurement.p90_us, Measurement.mean_us, Measurement.n)
        .where(Measurement.curve_id == curve_id, Measurement.quality.is_(None))
        .order_by(Measurement.x)
    ).all()


def flagged(session: Session, curve_id: int) -> int:
    """How many of the curve's rows the agent flagged."""
    return (
        session.scalar(
            select(func.count()).select_from(Measurement).where(Measurement.curve_id == curve_id, Measurement.quality.is_not(None))
        )
        or 0
    )
