"""Measurement queries: rows with their curve, filtered over the curve index."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gac.contracts.measurements import Dtype, Op
from gac.service.models import Curve, Measurement
from gac.service.repository import Slice, keyset_page


def page(
    session: Session,
    *,
    platform_id: int | None,
    op: Op | None,
    dtype: Dtype | None,
    axis: str | None,
    run: uuid.UUID | None,
    after_id: int,
    limit: int,
) -> Slice[tuple[Measurement, Curve]]:
    """(measurement, curve) rows by id: pages stay put while batches are ingested."""
    query = select(Measurement, Curve).join(Curve, Measurement.curve_id == Curve.id)
    if platform_id is not None:
        query = query.where(Curve.platform_id == platform_id)
    if op is not None:
        query = query.where(Curve.op == op.value)
    if dtype is not None:
        query = query.where(Curve.dtype == dtype.value)
    if axis is not None:
        query = query.where(Curve.axis == axis)
    if run is not None:
        query = query.where(Measurement.run_id == run)
    return keyset_page(session, query, key=Measurement.id, after=after_id, limit=limit)
