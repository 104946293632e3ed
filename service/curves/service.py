"""Curve use cases: list a platform's curves, read one curve as latency vs dimension."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby
from statistics import median

from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from gac.contracts.measurements import SHAPE_FIELDS, Op, parse_shape_key, shape_key
from gac.service.curves import repository as repo
from gac.service.curves.schemas import Curve, CurvePoint, CurveSummary
from gac.service.errors import NotFound, Unprocessable
from gac.service.models import Curve as CurveRow
from gac.service.platforms import repository as platforms_repo
from gac.service.platforms.service import get_platform


def _summary(row: CurveRow, measurements: int, points: int, x_min: int, x_max: int, flagged: int = 0) -> CurveSummary:
    return CurveSummary(
        id=row.id,
        platform_id=row.platform_id,
        op=row.op,
        dtype=row.dtype,
        axis=row.axis,
        fixed=parse_shape_key(row.fixed_key),
        fixed_key=row.fixed_key,
        points=points,
        measurements=measurements,
        x_min=x_min,
        x_max=x_max,
        updated_at=row.updated_at,
        version=row.version,
        flagged=flagged,
    )


def list_curves(session: Session, platform: str, op: str | None, dtype: str | None, axis: str | None) -> list[CurveSummary]:
    pid = get_platform(session, platform).id
    return [_summary(r.Curve, r.measurements, r.points, r.x_min, r.x_max, r.flagged) for r in repo.summaries(session, pid, op, dtype, axis)]


_POINTS = TypeAdapter(list[CurvePoint])


def combine(rows) -> list[CurvePoint]:
    """Several measurements of one dimension (re-runs, other agents) become one point.

    Points are built as plain dicts and validated in one pydantic-core call: per-point
    model construction in Python was most of a cold 1,000-point curve read.
    """
    out = []
    for x, group in groupby(rows, key=lambda r: r.x):
        g = list(group)
        if len(g) == 1:  # the common case
            r = g[0]
            out.append({"x": x, "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
                        "mean_us": r.mean_us, "n": r.n, "measurements": 1})  # fmt: skip
            continue
        out.append(
            {
                "x": x,
                "median_us": median(r.median_us for r in g),
                "p10_us": median(r.p10_us for r in g),
                "p90_us": median(r.p90_us for r in g),
                "mean_us": median(r.mean_us for r in g),
                "n": sum(r.n for r in g),
                "measurements": len(g),
            }
        )
    return _POINTS.validate_python(out)


def _curve(session: Session, row: CurveRow) -> Curve:
    rows = repo.points(session, row.id)
    pts = combine(rows)
    flagged = repo.flagged(session, row.id)
    summary = _summary(row, len(rows) + flagged, len(pts), pts[0].x if pts else 0, pts[-1].x if pts else 0, flagged)
    return Curve(curve=summary, points=pts)


def curve_row(session: Session, curve_id: int) -> CurveRow:
    row = session.get(CurveRow, curve_id)
    if row is None:
        raise NotFound(f"no curve {curve_id}")
    return row


def get_curve_by_id(session: Session, curve_id: int) -> Curve:
    return _curve(session, curve_row(session, curve_id))


def curve_json(session: Session, row: CurveRow) -> bytes:
    """The curve as JSON (cached per version by the endpoints)."""
    return _curve(session, row).model_dump_json().encode()


def stored_medians(
    session: Session, fingerprint: str, keys: Iterable[tuple[str, str, str, str]]
) -> dict[tuple[str, str, str, str], dict[int, float]]:
    """The points a platform has stored on these curves (op, dtype, axis, fixed_key), each point's
    median (repeated measurements combined): what a re-run of a plan may leave out. Nothing for a
    platform this database has never seen."""
    platform = platforms_repo.find(session, fingerprint)
    if platform is None:
        return {}
    ids = repo.ids_by_key(session, platform.id)
    found = {}
    for key in keys:
        if key in ids:
            points = combine(repo.points(session, ids[key]))
            if points:
                found[key] = {p.x: p.median_us for p in points}
    return found


def fixed_key_for(op: Op, axis: str, fixed: str) -> str:
    """Validate a curve's fixed shape ('k=128,m=2048') for op and axis; returns its canonical key."""
    fields = SHAPE_FIELDS[op]
    if axis not in fields:
        raise Unprocessable([{"field": "query.axis", "message": f"{axis!r} is not a shape field of {op.value} ({list(fields)})"}])
    try:
        shape = parse_shape_key(fixed)
    except ValueError as exc:
        raise Unprocessable([{"field": "query.fixed", "message": str(exc)}]) from exc
    want = set(fields) - {axis}
    if set(shape) != want:
        raise Unprocessable(
            [{"field": "query.fixed", "message": f"a {op.value} curve swept over {axis} fixes {sorted(want)}, got {sorted(shape)}"}]
        )
    return shape_key(shape)


def find_curve(session: Session, platform: str, op: Op, dtype: str, axis: str, fixed: str) -> CurveRow:
    pid = get_platform(session, platform).id
    key = fixed_key_for(op, axis, fixed)
    row = repo.find(session, pid, op.value, dtype, axis, key)
    if row is None:
        raise NotFound(f"platform {platform} has no {op.value} {dtype} curve over {axis} at {key}")
    return row
