"""The curve read shapes are shared with clients (gac/contracts/api.py)."""

from __future__ import annotations

from gac.contracts.api import Curve, CurvePoint, CurveSummary

__all__ = ["Curve", "CurvePoint", "CurveSummary"]
