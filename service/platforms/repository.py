"""Platform queries."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from gac.service.models import Agent, Curve, Measurement, Platform, Run, UploadBatch
from gac.service.repository import Slice, offset_page

# Who sent a batch: the agent it names (a job's run has each attempt's), else, for batches stored before a
# batch named its agent, the run's own. A platform's and a run's agents are counted from it.
_SENDER = func.coalesce(UploadBatch.agent_id, Run.agent_id)


def find(session: Session, ref: str) -> Platform | None:
    """A platform by numeric id, full fingerprint or a unique fingerprint prefix (8+ characters). A prefix of
    8 or 9 digits is read as an id when there is a platform of that id, else as a prefix."""
    if ref.isascii() and ref.isdigit() and len(ref) < 10:
        by_id = session.get(Platform, int(ref))
        if by_id is not None or len(ref) < 8:
            return by_id
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
    runs: dict[int, int] = dict(
        session.execute(  # (platform id, count) rows
            select(Run.platform_id, func.count()).where(Run.platform_id.in_(platform_ids)).group_by(Run.platform_id)
        ).all()
    )
    agents: dict[int, int] = dict(
        session.execute(
            select(Run.platform_id, func.count(_SENDER.distinct()))
            .join(UploadBatch, UploadBatch.run_id == Run.id)
            .where(Run.platform_id.in_(platform_ids))
            .group_by(Run.platform_id)
        ).all()
    )
    return {pid: (curves.get(pid, 0), runs.get(pid, 0), agents.get(pid, 0), dtypes.get(pid, [])) for pid in platform_ids}


def run_quality(session: Session, platform_id: int) -> list[Row]:
    """Per run of the platform, newest first: its points, flagged points, load readings and their mean and
    max. Grouped by run id, so the measurements are read through their run_id index."""
    m = Measurement
    return list(
        session.execute(
            select(
                Run.id,
                Run.plan,
                Run.started_at,
                Agent.name.label("agent"),
                func.count(m.id).label("measurements"),
                func.count(m.quality).label("flagged"),  # count skips NULL: the flagged rows
                func.count(m.busy_cores).label("load_read"),
                func.avg(m.busy_cores).label("busy_mean"),
                func.max(m.busy_cores).label("busy_max"),
            )
            .join(Agent, Agent.id == Run.agent_id)
            .join(m, m.run_id == Run.id)
            .where(Run.platform_id == platform_id)
            .group_by(Run.id, Run.plan, Run.started_at, Agent.name)
            .order_by(Run.started_at.desc(), Run.id)
        ).all()
    )


def run_agents(session: Session, platform_id: int) -> dict[UUID, list[str]]:
    """{run id: the agents that sent its batches, the first sender first} for the platform's runs."""
    rows = session.execute(
        select(Run.id, Agent.name, func.min(UploadBatch.received_at))
        .join(UploadBatch, UploadBatch.run_id == Run.id)
        .join(Agent, Agent.id == _SENDER)
        .where(Run.platform_id == platform_id)
        .group_by(Run.id, Agent.name)
        .order_by(Run.id, func.min(UploadBatch.received_at), Agent.name)
    ).all()
    out: dict[UUID, list[str]] = {}
    for run_id, name, _ in rows:
        out.setdefault(run_id, []).append(name)
    return out


def flag_sets(session: Session, platform_id: int) -> dict[str, int]:
    """{the quality text as stored ("bimodal,busy"): rows} of the platform's flagged rows: few distinct sets."""
    rows = session.execute(
        select(Measurement.quality, func.count())
        .join(Run, Run.id == Measurement.run_id)
        .where(Run.platform_id == platform_id, Measurement.quality.is_not(None))
        .group_by(Measurement.quality)
    ).all()
    return {str(quality): n for quality, n in rows}
