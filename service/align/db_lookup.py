"""The solver's LatencyLookup over this service's curves: one indexed query per curve, cached."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from gac.contracts.measurements import Dtype, Op, shape_key
from service.curves import repository as curves
from service.curves.service import combine
from service.models import Platform
from solver.lookup import PointLatency


class DbLookup:
    def __init__(self, session: Session, platform: Platform) -> None:
        self._session = session
        self._platform = platform
        self._cache: dict[tuple[str, str, str, str], dict[int, PointLatency]] = {}

    @property
    def platform(self) -> str:
        return self._platform.fingerprint

    def curve(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Mapping[int, PointLatency]:
        key = (Op(op).value, Dtype(dtype).value, axis, shape_key(dict(fixed_shape)))
        if key not in self._cache:
            row = curves.find(self._session, self._platform.id, *key)
            points = combine(curves.points(self._session, row.id)) if row is not None else []
            self._cache[key] = {p.x: PointLatency(p.median_us, p10_us=p.p10_us, p90_us=p.p90_us, n=p.n) for p in points}
        return self._cache[key]
