"""Cliff analytics as JSON (and curve downloads as CSV or JSON)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from gac.contracts.measurement_csv import curve_header
from gac.contracts.measurements import Dtype, Op
from gac.service.cliffs import service
from gac.service.cliffs.schemas import ComparableCurve, Comparison, CurveCliffs, Rule
from gac.service.curves.service import fixed_key_for, get_curve_by_id
from gac.service.deps import Reader, SessionDep
from gac.service.errors import errors
from gac.service.http import VERSIONED, per_curve_json
from gac.service.platforms.service import get_platform
from gac.service.schemas import NO_NUL, Axis, AxisFilter, CurveId, FixedShape, PlatformRef

router = APIRouter(prefix="/v1", tags=["cliffs"])
Ref = Annotated[str, Query(max_length=64, pattern=NO_NUL, description="platform id, fingerprint or unique prefix")]


@router.get("/curves/{curve_id}/cliffs", response_model=CurveCliffs, responses={**VERSIONED, **errors(401, 404, 422)})
async def curve_cliffs(curve_id: CurveId, _: Reader, request: Request) -> Response:
    """Steps (position, size, confidence), cliff-free frontier and explaining modulus of one curve."""
    return await per_curve_json(request, "cliffs", curve_id, service.curve_cliffs_json)


@router.get("/platforms/{ref}/cliffs", responses=errors(401, 404, 422))
def platform_cliffs(
    ref: PlatformRef,
    session: SessionDep,
    _: Reader,
    op: Annotated[Op | None, Query(description="only curves of this kernel family")] = None,
    dtype: Annotated[Dtype | None, Query(description="only curves timed in this dtype")] = None,
    axis: AxisFilter = None,
) -> list[CurveCliffs]:
    """The cliff analysis of every curve of a platform (or those the filters keep)."""
    return service.platform_cliffs(session, ref, op and op.value, dtype and dtype.value, axis)


@router.get("/platforms/{ref}/rules", responses=errors(401, 404, 422))
def platform_rules(ref: PlatformRef, session: SessionDep, _: Reader) -> list[Rule]:
    """The alignment rules this platform's measurements imply, per op, dtype and axis."""
    return service.rules(session, ref)


@router.get("/compare/curves", responses=errors(401, 404, 422))
def comparable_curves(a: Ref, b: Ref, session: SessionDep, _: Reader) -> list[ComparableCurve]:
    """Curves both platforms have measured: what can be compared side by side."""
    return service.comparable(session, a, b)


@router.get("/compare", responses=errors(401, 404, 422))
def compare(
    a: Ref,
    b: Ref,
    session: SessionDep,
    _: Reader,
    op: Annotated[Op, Query(description="the kernel family")],
    dtype: Annotated[Dtype, Query(description="the dtype it was timed in")],
    axis: Axis,
    fixed: FixedShape,
) -> Comparison:
    """The same sweep on two platforms: both curves, their cliffs, and b/a at every dimension."""
    key = fixed_key_for(op, axis, fixed)
    return service.compare(session, a, b, op.value, dtype.value, axis, key)


@router.get(
    "/curves/{curve_id}/download",
    response_class=Response,
    responses={
        200: {
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/json": {"schema": {"$ref": "#/components/schemas/Curve"}},
            }
        },
        **errors(401, 404, 422),
    },
)
def download_curve(
    curve_id: CurveId,
    session: SessionDep,
    _: Reader,
    format: Annotated[
        Literal["csv", "json"], Query(description="the file's format: one row per point (csv), or the curve as JSON")
    ] = "csv",
) -> Response:
    """One curve as a file to save, named after its sweep and its platform's fingerprint."""
    curve = get_curve_by_id(session, curve_id)
    c = curve.curve
    # The file names its platform (a shared file outlives the database row id): the fingerprint, in the name and a column.
    platform = get_platform(session, str(c.platform_id))
    name = f"{c.op}-{c.dtype}-{c.axis}-{c.fixed_key.replace(',', '_').replace('=', '')}-{platform.fingerprint[:12]}"
    if format == "json":
        body, media = curve.model_dump_json(indent=2), "application/json"
    else:
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(curve_header(c.axis))  # the layout gac ingest and gac align --measurements read
        for p in curve.points:
            values = [p.x, p.median_us, p.p10_us, p.p90_us, p.mean_us, p.n, p.measurements]
            writer.writerow([c.op, c.dtype, c.axis, c.fixed_key, *values, platform.fingerprint])
        body, media = buf.getvalue(), "text/csv"
    return Response(body, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}.{format}"'})
