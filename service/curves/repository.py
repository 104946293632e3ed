"""Curve queries: every curve read is one range scan of (curve_id, x)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, case, func, select
from sqlalchemy.orm import Session

from gac.service.models import Curve, Measurement


def summaries(session: Session, platform_id: int, op: str | None, dtype: str | None, axis: str | None) -> Sequence[Row]:
    """One row per curve with its counts as the curve itself reads them (points() leaves flagged rows out;
    measurements counts every row); x_min and x_max are 0 when no row is usable, as on the curve."""
    usable_x = case((Measurement.quality.is_(None), Measurement.x))  # NULL on a flagged row: count, min and max skip it
    stats = (
        select(
            Measurement.curve_id,
            func.count().label("measurements"),
            func.count(usable_x.distinct()).label("points"),
            func.coalesce(func.min(usable_x), 0).label("x_min"),
            func.coalesce(func.max(usable_x), 0).label("x_max"),
            func.count(Measurement.quality).label("flagged"),  # rows with quality flags (count skips NULL)
        )
        .group_by(Measurement.curve_id)
        .subquery()
    )
    query = (
        select(Curve, stats.c.measurements, stats.c.points, stats.c.x_min, stats.c.x_max, stats.c.flagged)
        .join(stats, stats.c.curve_id == Curve.id)
        .where(Curve.platform_id == platform_id)
    )
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
