"""Platform queries."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gac.service.models import Curve, Platform, Run
from gac.service.repository import Slice, offset_page


def find(session: Session, ref: str) -> Platform | None:
    """A platform by numeric id, full fingerprint or a unique fingerprint prefix (8+ characters)."""
    if ref.isascii() and ref.isdigit() and len(ref) < 10:
        return session.get(Platform, int(ref))
    ref = ref.lower()
    if not all(c in "0123456789abcdef" for c in ref):
        return None  # fingerprints are hex
    if len(ref) == 64:
        return session.scalar(select(Platform).where(Platform.fingerprint == ref))
    if len(ref) >= 8:
        rows = session.scalars(select(Platform).where(Platform.fingerprint.startswith(ref, autoescape=True)).limit(2)).all()
        return rows[0] if len(rows) == 1 else None
    return None


def page(session: Session, *, device_kind: str | None, name: str | None, offset: int, limit: int) -> Slice[Platform]:
    query = select(Platform)
    if device_kind:
        query = query.where(Platform.device_kind == device_kind)
    if name:
        query = query.where(Platform.device_name.icontains(name, autoescape=True))
    newest_first = (Platform.last_seen.desc(), Platform.id.desc())
    return offset_page(session, query, key=Platform.id, order_by=newest_first, offset=offset, limit=limit)


def counts(session: Session, platform_ids: list[int]) -> dict[int, tuple[int, int, int, list[str]]]:
    """(curves, runs, agents, the dtypes its curves were measured in) per platform."""
    curves: dict[int, int] = {}
    dtypes: dict[int, list[str]] = {}
    for pid, dtype, n in session.execute(
        select(Curve.platform_id, Curve.dtype, func.count())
        .where(Curve.platform_id.in_(platform_ids))
        .group_by(Curve.platform_id, Curve.dtype)
        .order_by(Curve.platform_id, Curve.dtype)
    ).all():
        curves[pid] = curves.get(pid, 0) + n
        dtypes.setdefault(pid, []).append(dtype)
    runs = {
        pid: (n, agents)
        for pid, n, agents in session.execute(
            select(Run.platform_id, func.count(), func.count(Run.agent_id.distinct()))
            .where(Run.platform_id.in_(platform_ids))
            .group_by(Run.platform_id)
        ).all()
    }
    return {pid: (curves.get(pid, 0), *runs.get(pid, (0, 0)), dtypes.get(pid, [])) for pid in platform_ids}
