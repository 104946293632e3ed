"""Platform use cases."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gac.contracts.measurements import DTYPE_FIELDS, PlatformDescriptor
from gac.service.errors import NotFound
from gac.service.models import Platform
from gac.service.platforms import repository as repo
from gac.service.platforms.schemas import PlatformOut
from gac.service.schemas import Page

# The stored columns: the dtype fields an agent reports are not kept (not identity).
DESCRIPTOR_FIELDS = tuple(f for f in PlatformDescriptor.model_fields if f not in DTYPE_FIELDS)


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
