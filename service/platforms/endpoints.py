"""GET /v1/platforms, /v1/platforms/{ref}."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from gac.service.deps import Reader, SessionDep
from gac.service.errors import errors
from gac.service.platforms import service
from gac.service.platforms.repository import counts
from gac.service.platforms.schemas import PlatformOut, PlatformQuality
from gac.service.schemas import NO_NUL, Offset, Page, PlatformRef

router = APIRouter(prefix="/v1/platforms", tags=["platforms"])


@router.get("", responses=errors(401, 422))
def list_platforms(
    session: SessionDep,
    _: Reader,
    device_kind: Annotated[Literal["cuda", "cpu", "rocm"] | None, Query(description="only platforms of this device kind")] = None,
    name: Annotated[str | None, Query(max_length=200, pattern=NO_NUL, description="substring of the device name")] = None,
    cursor: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=500, description="the most platforms on this page")] = 50,
) -> Page[PlatformOut]:
    """The platforms the service knows, with their counts of curves, runs and agents."""
    return service.list_platforms(session, device_kind=device_kind, name=name, offset=cursor, limit=limit)


@router.get("/{ref}", responses=errors(401, 404, 422))
def get_platform(ref: PlatformRef, session: SessionDep, _: Reader) -> PlatformOut:
    """One platform by id, fingerprint, or unique fingerprint prefix."""
    platform = service.get_platform(session, ref)
    return service.to_out(platform, *counts(session, [platform.id])[platform.id])


@router.get("/{ref}/quality", responses=errors(401, 404, 422))
def get_quality(ref: PlatformRef, session: SessionDep, _: Reader) -> PlatformQuality:
    """How far the platform's profile can be trusted: points flagged by the agents' quality gate (by
    reason), the timing threads, and the cores other work kept busy while the points were timed."""
    return service.quality(session, service.get_platform(session, ref))
