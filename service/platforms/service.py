"""Platform use cases."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gac.contracts.measurements import PlatformDescriptor
from gac.service.errors import NotFound
from gac.service.models import Platform
from gac.service.platforms import repository as repo
from gac.service.platforms.schemas import PlatformOut, PlatformQuality, RunQuality
from gac.service.schemas import Page

RECENT_RUNS = 20  # runs listed one by one on a platform's quality; the totals count every run
# The stored columns: every field of the descriptor (the dtype facts are the latest agent's report).
DESCRIPTOR_FIELDS = tuple(PlatformDescriptor.model_fields)


def get_platform(session: Session, ref: str) -> Platform:
    platform = repo.find(session, ref)
    if platform is None:
        raise NotFound(f"no platform {ref!r} (give its id, fingerprint, or a unique fingerprint prefix of 8+ characters)")
    return platform


def describe(platform: Platform) -> PlatformDescriptor:
    return PlatformDescriptor(**{f: getattr(platform, f) for f in DESCRIPTOR_FIELDS})


def to_out(platform: Platform, curves: int = 0, runs: int = 0, agents: int = 0, dtypes: list[str] | None = None) -> PlatformOut:
    descriptor = describe(platform)
    return PlatformOut(
        id=platform.id,
        fingerprint=platform.fingerprint,
        label=descriptor.label(),
        descriptor=descriptor,
        first_seen=platform.first_seen,
        last_seen=platform.last_seen,
        curves=curves,
        runs=runs,
        agents=agents,
        dtypes=dtypes or [],
    )


def list_platforms(session: Session, *, device_kind: str | None, name: str | None, offset: int, limit: int) -> Page[PlatformOut]:
    found = repo.page(session, device_kind=device_kind, name=name, offset=offset, limit=limit)
    counts = repo.counts(session, [p.id for p in found.rows])
    items = [to_out(p, *counts[p.id]) for p in found.rows]
    return Page[PlatformOut](items=items, total=found.total, next_cursor=str(offset + limit) if found.more else None)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def by_reason(flag_sets: dict[str, int]) -> dict[str, int]:
    """Rows per reason, from rows per stored set of reasons ("bimodal,busy" counts under both)."""
    out: dict[str, int] = {}
    for flags, n in flag_sets.items():
        for reason in flags.split(","):
            out[reason] = out.get(reason, 0) + n
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def quality(session: Session, platform: Platform) -> PlatformQuality:
    """The platform's profile quality: flagged points by reason, its timing threads, and the load while
    profiling (each run's mean of the cores other work kept busy; the median of those, and the worst point)."""
    agents = repo.run_agents(session, platform.id)
    runs = [
        RunQuality(
            run_id=r.id,
            agent=r.agent,
            agents=agents.get(r.id, [r.agent]),
            plan=r.plan,
            started_at=r.started_at,
            measurements=r.measurements,
            flagged=r.flagged,
            load_read=r.load_read,
            busy_cores_mean=r.busy_mean,
            busy_cores_max=r.busy_max,
        )
        for r in repo.run_quality(session, platform.id)
    ]
    read = [r for r in runs if r.busy_cores_max is not None]
    return PlatformQuality(
        platform_id=platform.id,
        threads=platform.threads,
        cores=platform.cores,
        measurements=sum(r.measurements for r in runs),
        flagged=sum(r.flagged for r in runs),
        flagged_by_reason=by_reason(repo.flag_sets(session, platform.id)),
        load_read=sum(r.load_read for r in runs),
        busy_cores_median=_median([r.busy_cores_mean for r in read if r.busy_cores_mean is not None]),
        busy_cores_max=max((r.busy_cores_max for r in read if r.busy_cores_max is not None), default=None),
        runs=runs[:RECENT_RUNS],
    )
