"""GET /v1/platforms/{ref}/curves, /v1/platforms/{ref}/curve, /v1/curves/{id}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from gac.contracts.measurements import Dtype, Op
from gac.service.curves import service
from gac.service.curves.schemas import Curve, CurveSummary
from gac.service.deps import Reader, SessionDep
from gac.service.errors import errors
from gac.service.http import VERSIONED, per_curve_json, versioned_json
from gac.service.schemas import NO_NUL, Axis, CurveId, FixedShape, PlatformRef

router = APIRouter(prefix="/v1", tags=["curves"])


@router.get("/platforms/{ref}/curves", responses=errors(401, 404, 422))
def list_curves(
    ref: PlatformRef,
    session: SessionDep,
    _: Reader,
    op: Annotated[Op | None, Query(description="only curves of this kernel family")] = None,
    dtype: Annotated[Dtype | None, Query(description="only curves timed in this dtype")] = None,
    axis: Annotated[str | None, Query(max_length=32, pattern=NO_NUL, description="only curves swept along this shape field")] = None,
) -> list[CurveSummary]:
    """Every curve measured on a platform, with its point count and range."""
    return service.list_curves(session, ref, op and op.value, dtype and dtype.value, axis)


@router.get("/platforms/{ref}/curve", response_model=Curve, responses={**VERSIONED, **errors(401, 404, 422)})
def get_curve(
    ref: PlatformRef,
    session: SessionDep,
    _: Reader,
    op: Annotated[Op, Query(description="the kernel family")],
    dtype: Annotated[Dtype, Query(description="the dtype it was timed in")],
    axis: Axis,
    fixed: FixedShape,
    request: Request,
) -> Response:
    """One curve by its natural key: latency against the swept dimension."""
    row = service.find_curve(session, ref, op, dtype.value, axis, fixed)
    return versioned_json(request, "curve", session, row, service.curve_json)


@router.get("/curves/{curve_id}", response_model=Curve, responses={**VERSIONED, **errors(401, 404, 422)})
async def get_curve_by_id(curve_id: CurveId, _: Reader, request: Request) -> Response:
    """One curve by id: latency against the swept dimension, repeated measurements combined."""
    return await per_curve_json(request, "curve", curve_id, service.curve_json)
