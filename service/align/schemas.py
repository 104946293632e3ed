"""The alignment read shapes are shared with clients (gac/contracts/api.py)."""

from __future__ import annotations

from gac.contracts.api import AlignmentSummary, StoredAlignment

__all__ = ["AlignmentSummary", "StoredAlignment"]
