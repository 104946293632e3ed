"""GET /v1/auth/token: which token the caller holds, so agents check it before hours of timing."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from gac.service.deps import ReadToken
from gac.service.errors import errors

router = APIRouter(prefix="/v1/auth", tags=["auth"])


class TokenInfo(BaseModel):
    """The token the caller holds."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The name it was created with."""
    scope: str
    """What it may do: read, ingest (uploads and reads) or admin (everything)."""
    created_at: datetime
    """When it was created."""


@router.get("/token", responses=errors(401))
def current_token(token: ReadToken) -> TokenInfo:
    """The caller's token: its name and scope (any valid token may ask)."""
    return TokenInfo(name=token.name, scope=token.scope, created_at=token.created_at)
