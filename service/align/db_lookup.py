"""The solver's LatencyLookup over this service's curves: one indexed query per curve, cached.

It names each curve's version (gac.solver.model_cache.VersionedLookup), so alignments in this process
share their latency models while the curves are unchanged; a curve's combined points are kept per
version too (a long curve is tens of thousands of rows)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from sqlalchemy.orm import Session

from gac.contracts.measurements import Dtype, Op, shape_key
from gac.service.cache import VersionedCache
from gac.service.curves import repository as curves
from gac.service.curves.service import combine
from gac.service.models import Platform
from gac.solver.lookup import PointLatency

# Combined points per (database, curve id), at the curve's version.
_POINTS: VersionedCache[dict[int, PointLatency]] = VersionedCache(size=2_000)


class DbLookup:
    def __init__(self, session: Session, platform: Platform) -> None:
        self._session = session
        self._platform = platform
        self._cache: dict[tuple[str, str, str, str], dict[int, PointLatency]] = {}
        self._versions: dict[tuple[str, str, str, str], tuple[int, int]] | None = None  # key -> (curve id, version)
        self._db = str(session.get_bind().engine.url)

    @property
    def platform(self) -> str:
        return self._platform.fingerprint

    def _rows(self) -> dict[tuple[str, str, str, str], tuple[int, int]]:
        """Every curve of the platform: (op, dtype, axis, fixed_key) -> (id, version), in one query,
        read once per lookup (an alignment sees one state of the curves)."""
        if self._versions is None:
            self._versions = curves.versions_by_key(self._session, self._platform.id)
        return self._versions

    @staticmethod
    def _key(op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> tuple[str, str, str, str]:
        return (Op(op).value, Dtype(dtype).value, axis, shape_key(dict(fixed_shape)))

    def curve_version(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Hashable | None:
        found = self._rows().get(self._key(op, dtype, fixed_shape, axis))
        return None if found is None else (self._db, *found)

    def curve(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Mapping[int, PointLatency]:
        key = self._key(op, dtype, fixed_shape, axis)
        if key not in self._cache:
            found = self._rows().get(key)
            if found is None:
                self._cache[key] = {}
            else:
                curve_id, version = found
                points = _POINTS.get((self._db, curve_id), version)
                if points is None:
                    combined = combine(curves.points(self._session, curve_id))
                    points = _POINTS.put(
                        (self._db, curve_id),
                        version,
                        {p.x: PointLatency(p.median_us, p10_us=p.p10_us, p90_us=p.p90_us, n=p.n) for p in combined},
                    )
                self._cache[key] = points
        return self._cache[key]
