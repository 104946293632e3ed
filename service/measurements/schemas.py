"""The measurement read shape is shared with clients (gac/contracts/api.py)."""

from __future__ import annotations

from gac.contracts.api import StoredMeasurement as MeasurementOut

__all__ = ["MeasurementOut"]
