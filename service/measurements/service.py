"""Measurement listing: filters over the curve index, pagination by id (stable under inserts)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from gac.contracts.measurements import Dtype, Op, parse_shape_key
from gac.service.measurements import repository as repo
from gac.service.measurements.schemas import MeasurementOut
from gac.service.platforms.service import get_platform
from gac.service.schemas import Page


def list_measurements(
    session: Session,
    *,
    platform: str | None,
    op: Op | None,
    dtype: Dtype | None,
    axis: str | None,
    run: uuid.UUID | None,
    after_id: int,
    limit: int,
) -> Page[MeasurementOut]:
    platform_id = get_platform(session, platform).id if platform is not None else None
    found = repo.page(session, platform_id=platform_id, op=op, dtype=dtype, axis=axis, run=run, after_id=after_id, limit=limit)
    items = [
        MeasurementOut(
            id=m.id,
            uuid=m.uuid,
            platform_id=c.platform_id,
            curve_id=c.id,
            run_id=m.run_id,
            op=c.op,
            dtype=c.dtype,
            shape=parse_shape_key(c.fixed_key) | {c.axis: m.x},
            sweep_axis=c.axis,
            median_us=m.median_us,
            p10_us=m.p10_us,
            p90_us=m.p90_us,
            mean_us=m.mean_us,
            n=m.n,
            timer=m.timer,
            backend=m.backend,
            kernel=m.kernel,
            measured_at=m.measured_at,
            stop=m.stop,
            samples_discarded=m.samples_discarded,
            sm_clock_mhz=m.sm_clock_mhz,
            throttle_reasons=m.throttle_reasons,
            quality=m.quality,
            busy_cores=m.busy_cores,
        )
        for m, c in found.rows
    ]
    return Page[MeasurementOut](items=items, total=found.total, next_cursor=str(items[-1].id) if found.more else None)
