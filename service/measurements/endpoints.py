"""GET /v1/measurements."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from gac.contracts.measurements import Dtype, Op
from gac.service.deps import Reader, SessionDep
from gac.service.errors import errors
from gac.service.measurements import service
from gac.service.measurements.schemas import MeasurementOut
from gac.service.schemas import NO_NUL, AfterBigId, Page

router = APIRouter(prefix="/v1/measurements", tags=["measurements"])


@router.get("", responses=errors(401, 404, 422))
def list_measurements(
    session: SessionDep,
    _: Reader,
    platform: Annotated[
        str | None, Query(min_length=1, max_length=64, pattern=NO_NUL, description="platform id, fingerprint or prefix")
    ] = None,
    op: Annotated[Op | None, Query(description="only points of this kernel family")] = None,
    dtype: Annotated[Dtype | None, Query(description="only points timed in this dtype")] = None,
    axis: Annotated[
        str | None, Query(max_length=32, pattern=NO_NUL, description="only points of curves swept along this shape field")
    ] = None,
    run: Annotated[uuid.UUID | None, Query(description="only points of this agent run")] = None,
    cursor: AfterBigId = 0,
    limit: Annotated[int, Query(ge=1, le=5000, description="the most points on this page")] = 500,
) -> Page[MeasurementOut]:
    """Stored points, flagged ones included, ordered by id."""
    return service.list_measurements(session, platform=platform, op=op, dtype=dtype, axis=axis, run=run, after_id=cursor, limit=limit)
