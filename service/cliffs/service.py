"""Cliff analytics on stored curves, cached per curve and recomputed when the curve gains data."""

from __future__ import annotations

from collections import Counter
from statistics import mean, median

from sqlalchemy.orm import Session

from gac.service.cache import VersionedCache
from gac.service.cliffs.schemas import (
    Analysis,
    CombLevel,
    ComparableCurve,
    ComparedPoint,
    Comparison,
    CurveCliffs,
    ModulusOut,
    Rule,
    StepOut,
)
from gac.service.curves import repository as curves_repo
from gac.service.curves.schemas import CurvePoint, CurveSummary
from gac.service.curves.service import combine, get_curve_by_id, list_curves
from gac.service.errors import NotFound
from gac.service.models import Curve as CurveRow
from gac.service.platforms.service import get_platform
from gac.solver.cliffs import Point, analyze

# Analyses per curve version, recomputed when the curve gains data. Kept as JSON bytes, not
# object graphs: a thousand analyses held ~100 objects each for the cyclic collector to walk.
_ANALYSES: VersionedCache[bytes] = VersionedCache()


def _analysis(points: list[CurvePoint]) -> bytes:
    a = analyze([Point(p.x, p.median_us, p.p10_us, p.p90_us, p.n) for p in points])
    return (
        Analysis(
            steps=[StepOut(**vars(s)) for s in a.steps],
            frontier=a.frontier,
            modulus=ModulusOut(m=a.modulus.m, agreement=a.modulus.agreement) if a.modulus else None,
            noise_pct=a.noise_pct,
            tolerance=a.tolerance,
            notes=a.notes,
            comb=[CombLevel(m=m, pct_faster=pct) for m, pct in a.ladder],
        )
        .model_dump_json()
        .encode()
    )


def _out(summary: CurveSummary, analysis: bytes) -> CurveCliffs:
    a = Analysis.model_validate_json(analysis)
    return CurveCliffs(curve=summary, steps=a.steps, frontier=a.frontier, modulus=a.modulus,
                       noise_pct=a.noise_pct, tolerance=a.tolerance, notes=a.notes, comb=a.comb)  # fmt: skip


def analyzed(session: Session, summary: CurveSummary, points: list[CurvePoint] | None = None) -> CurveCliffs:
    key = (str(session.get_bind().engine.url), summary.id)
    cached = _ANALYSES.get(key, summary.version)
    if cached is None:
        pts = points if points is not None else combine(curves_repo.points(session, summary.id))
        cached = _ANALYSES.put(key, summary.version, _analysis(pts))
    return _out(summary, cached)


def curve_cliffs(session: Session, curve_id: int) -> CurveCliffs:
    curve = get_curve_by_id(session, curve_id)
    return analyzed(session, curve.curve, curve.points)


def curve_cliffs_json(session: Session, row: CurveRow) -> bytes:
    """The curve's cliffs as JSON (cached per version by the endpoints)."""
    return curve_cliffs(session, row.id).model_dump_json().encode()


def platform_cliffs(session: Session, platform: str, op: str | None, dtype: str | None, axis: str | None) -> list[CurveCliffs]:
    return [analyzed(session, s) for s in list_curves(session, platform, op, dtype, axis)]


def rules(session: Session, platform: str) -> list[Rule]:
    """Per (op, dtype, axis): the modulus most of its curves agree on."""
    groups: dict[tuple[str, str, str], list[CurveCliffs]] = {}
    for c in platform_cliffs(session, platform, None, None, None):
        groups.setdefault((c.curve.op, c.curve.dtype, c.curve.axis), []).append(c)
    out = []
    for (op, dtype, axis), cs in sorted(groups.items()):
        votes = Counter(c.modulus.m for c in cs if c.modulus)
        worst = max((s.size_pct for c in cs for s in c.steps), default=0.0)
        any_step = any(c.steps for c in cs)
        fastest, pct = _fastest_multiple(cs)
        m, support = max(votes.items(), key=lambda kv: (kv[1], -kv[0])) if votes else (None, 0)
        which = "they" if fastest == m else f"multiples of {fastest}"
        faster = f"; {which} take {pct:.0f} % less time than the dims around them" if fastest else ""
        # A curve of fewer than two usable points (every row flagged, or one dim) shows no step, cliff or not.
        blind = sum(c.curve.points < 2 for c in cs)
        if blind == len(cs):
            agreement = 0.0
            text = f"{op} {dtype}: too few usable points on the {axis} curves to tell (fewer than two dims each not flagged): no rule"
        elif votes:
            agreement = mean(c.modulus.agreement for c in cs if c.modulus and c.modulus.m == m)
            rises = f"steps up to +{worst:.0f} %" if worst > 0 else "steps down only" if any_step else "no steps"
            text = f"{op} {dtype}: {axis} wants multiples of {m} ({support} of {len(cs)} curves; {rises}){faster}"
        else:
            agreement = 0.0
            text = (
                f"{op} {dtype}: no alignment rule explains the {axis} curves"
                + (
                    f" (steps up to +{worst:.0f} %)"
                    if worst > 0
                    else " (steps down only)"
                    if any_step
                    else " (no steps: any dimension is cliff-free)"
                )
                + faster
            )
        if blind and blind < len(cs):
            text += f" ({blind} of the {len(cs)} curves have fewer than two usable points)"
        out.append(
            Rule(
                op=op,
                dtype=dtype,
                axis=axis,
                modulus=m,
                curves=len(cs),
                support=support,
                agreement=agreement,
                worst_step_pct=worst,
                fastest_multiple=fastest,
                fastest_pct=pct,
                text=text,
            )
        )
    return out


HOLDS_MOST = 2.5  # percentage points: a multiple within this of a curve's largest saving holds most of the speed


def _holding(c: CurveCliffs) -> int:
    """The smallest multiple whose saving is within HOLDS_MOST of the curve's largest (0: no faster multiple).
    On an H100's fp16 GEMM (N swept) multiples of 2 take 57 % less time, of 8 82 %, of 16 83 %: 8."""
    faster = [lv for lv in c.comb if lv.pct_faster > 0]
    if not faster:
        return 0
    best = max(lv.pct_faster for lv in faster)
    return min(lv.m for lv in faster if lv.pct_faster >= best - HOLDS_MOST)


def _fastest_multiple(cs: list[CurveCliffs]) -> tuple[int | None, float | None]:
    """The multiple that holds most of the speed on most of the curves, and the median of how much less time it
    takes (None, None: most curves have no faster multiples). It can say more than the rule's modulus: every
    cliff-free dim may be a multiple of 2 while multiples of 8 run far faster still."""
    votes = Counter(_holding(c) for c in cs)
    m, n = max(votes.items(), key=lambda kv: (kv[1], kv[0]))
    if not m or 2 * n <= len(cs):
        return None, None
    return m, median(lv.pct_faster for c in cs for lv in c.comb if lv.m == m)


def comparable(session: Session, a: str, b: str) -> list[ComparableCurve]:
    """Curves both platforms measured (same op, dtype, axis and fixed shape)."""
    pa, pb = get_platform(session, a), get_platform(session, b)
    ca, cb = curves_repo.ids_by_key(session, pa.id), curves_repo.ids_by_key(session, pb.id)
    return [
        ComparableCurve(op=k[0], dtype=k[1], axis=k[2], fixed_key=k[3], a_curve_id=ca[k], b_curve_id=cb[k])
        for k in sorted(ca.keys() & cb.keys())
    ]


def compare(session: Session, a: str, b: str, op: str, dtype: str, axis: str, fixed_key: str) -> Comparison:
    pa, pb = get_platform(session, a), get_platform(session, b)
    ra = curves_repo.find(session, pa.id, op, dtype, axis, fixed_key)
    rb = curves_repo.find(session, pb.id, op, dtype, axis, fixed_key)
    for ref, row in ((a, ra), (b, rb)):
        if row is None:
            raise NotFound(f"platform {ref} has no {op} {dtype} curve over {axis} at {fixed_key}")
    assert ra is not None and rb is not None
    ca, cb = get_curve_by_id(session, ra.id), get_curve_by_id(session, rb.id)
    by_a = {p.x: p.median_us for p in ca.points}
    by_b = {p.x: p.median_us for p in cb.points}
    points = [
        ComparedPoint(x=x, a_us=by_a.get(x), b_us=by_b.get(x), ratio=(by_b[x] / by_a[x]) if x in by_a and x in by_b else None)
        for x in sorted(by_a.keys() | by_b.keys())
    ]
    return Comparison(
        a=analyzed(session, ca.curve, ca.points),
        b=analyzed(session, cb.curve, cb.points),
        a_points=ca.points,
        b_points=cb.points,
        points=points,
    )
