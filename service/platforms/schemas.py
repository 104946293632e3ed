"""The platform read shape is shared with clients (gac/contracts/api.py)."""

from __future__ import annotations

from gac.contracts.api import Platform as PlatformOut
from gac.contracts.api import PlatformQuality, RunQuality

__all__ = ["PlatformOut", "PlatformQuality", "RunQuality"]
