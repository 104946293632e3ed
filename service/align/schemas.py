"""The alignment read shapes are shared with clients (gac/contracts/api.py); the job a large
alignment answers with (202) is the service's own."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gac.contracts.api import AlignmentSummary, StoredAlignment

__all__ = ["AlignmentJobStatus", "AlignmentSummary", "CandidateLists", "StoredAlignment", "StoredHead"]

# ?candidates=: every candidate of every weight, or each weight's chosen one; unset: full up to
# COMPACT_ABOVE_WEIGHTS weights (service/align/limits.py), compact above.
CandidateLists = Literal["full", "compact"]


class AlignmentJobStatus(BaseModel):
    """A large alignment still being computed (202): GET `poll` until it answers 200 with the stored
    alignment, or the error the POST would have answered (422 for a bad manifest, say)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: uuid.UUID = Field(description="the alignment's id, once stored")
    status: Literal["queued", "running"]
    """queued: accepted, not yet being aligned; running: being aligned."""
    weights: int | None = Field(default=None, description="the manifest's weights (estimated until it is parsed)")
    created_at: datetime
    """When the request was accepted."""
    poll: str = Field(description="GET this URL (also in the Location header) after Retry-After seconds")


class StoredHead(BaseModel):
    """StoredAlignment without its result: the service writes the stored result text after it as is."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: uuid.UUID
    """As StoredAlignment.id."""
    created_at: datetime
    """As StoredAlignment.created_at."""
    platform_id: int | None = None
    """As StoredAlignment.platform_id."""
    jobs: list[int] = Field(default_factory=list)
    """As StoredAlignment.jobs."""
