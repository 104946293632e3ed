"""Where candidate latencies come from: a curve-oriented lookup protocol and a file-backed one.

A curve is one op at one dtype with every shape field fixed except the swept
axis; a DB can serve each with one query. The service implements the protocol
over its tables; the CLI and the tests use FileLookup.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from gac.contracts.measurement_csv import layout_problem, row_point
from gac.contracts.measurements import Batch, Dtype, Measurement, Op, shape_key, validate_shape


@dataclass(frozen=True)
class PointLatency:
    """One dim of a measured curve as the solver sees it (the wire form is gac.contracts.api.CurvePoint)."""

    latency_us: float  # median over the stored measurements at this point
    source: str = "measured"
    # The spread behind the median, when known: what a noise-aware curve model
    # (gac.solver.curve_model) needs to tell a real step from timing noise.
    p10_us: float | None = None
    p90_us: float | None = None
    n: int | None = None  # timing samples behind the figures, summed over re-runs


@runtime_checkable
class LatencyLookup(Protocol):
    """Latency curves of one platform."""

    @property
    def platform(self) -> str:
        """The platform these curves were measured on (id or fingerprint), for the result."""
        ...

    def curve(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Mapping[int, PointLatency]:
        """Axis value -> point, for the curve with every other shape field fixed; {} when unmeasured."""
        ...


CurveKey = tuple[Op, Dtype, str, str]  # op, dtype, shape_key without the axis, axis


# One measurement: op, dtype, shape, sweep axis, median_us, and optionally p10_us, p90_us, n.
Row = tuple[Op, Dtype, dict[str, int], str, float] | tuple[Op, Dtype, dict[str, int], str, float, float | None, float | None, int | None]


def combine_runs(runs: list[tuple[float, float | None, float | None, int | None]]) -> PointLatency:
    """Several runs of one point: the median of each figure, so one noisy run does not move the
    curve, and the samples summed (as the service combines them). A spread or count missing
    from any run is left unknown rather than guessed."""
    med = statistics.median(r[0] for r in runs)
    p10s, p90s, ns = [r[1] for r in runs], [r[2] for r in runs], [r[3] for r in runs]
    return PointLatency(
        med,
        p10_us=statistics.median(p10s) if None not in p10s else None,  # type: ignore[type-var]
        p90_us=statistics.median(p90s) if None not in p90s else None,  # type: ignore[type-var]
        n=sum(ns) if None not in ns else None,  # type: ignore[arg-type]
    )


class FileLookup:
    """An in-memory index over measurements read from batch JSONL or CSV files."""

    def __init__(self, rows: Iterable[Row], platform: str) -> None:
        samples: dict[CurveKey, dict[int, list[tuple[float, float | None, float | None, int | None]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for op, dtype, shape, axis, median_us, *spread in rows:
            p10, p90, n = (*spread, None, None, None)[:3]
            key = (Op(op), Dtype(dtype), shape_key(shape, without=axis), axis)
            samples[key][shape[axis]].append((median_us, p10, p90, None if n is None else int(n)))
        self._curves: dict[CurveKey, dict[int, PointLatency]] = {
            key: {x: combine_runs(v) for x, v in points.items()} for key, points in samples.items()
        }
        self._platform = platform

    @property
    def platform(self) -> str:
        return self._platform

    def curve(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Mapping[int, PointLatency]:
        return self._curves.get((Op(op), Dtype(dtype), shape_key(dict(fixed_shape)), axis), {})

    def __len__(self) -> int:
        return len(self._curves)

    @property
    def dtypes(self) -> list[str]:
        """The dtypes the curves were measured in, sorted."""
        return sorted({str(dtype) for _, dtype, _, _ in self._curves})

    @classmethod
    def from_measurements(cls, measurements: Iterable[Measurement], platform: str) -> FileLookup:
        """Rows the agent flagged (quality) are left out, as the service leaves them out of its curves."""
        return cls(
            ((m.op, m.dtype, m.shape, m.sweep_axis, m.median_us, m.p10_us, m.p90_us, m.n) for m in measurements if m.quality is None),
            platform,
        )

    @classmethod
    def from_jsonl(cls, path: str | Path, platform: str | None = None) -> FileLookup:
        """Read gac.batch/v1 batches, one per line (the agent's offline spool format).

        `platform` selects by fingerprint (or a unique prefix of at least 8
        characters); it may be omitted when the file holds one platform only.
        """
        by_platform: dict[str, list[Measurement]] = defaultdict(list)
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    batch = Batch.model_validate_json(line)
                except ValidationError as exc:
                    e = exc.errors(include_url=False)[0]
                    where = ".".join(str(p) for p in e["loc"]) or "the line"
                    raise ValueError(f"{path}:{lineno}: not a gac.batch/v1 batch: {where}: {e['msg']}") from exc
                by_platform[batch.platform.fingerprint()].extend(batch.measurements)
        chosen = _choose_platform(sorted(by_platform), platform, str(path))
        return cls.from_measurements(by_platform[chosen], chosen)

    @classmethod
    def from_csv(cls, path: str | Path, platform: str | None = None) -> FileLookup:
        """Read either CSV layout of gac.contracts.measurement_csv (a table, or curve downloads); a
        `platform` column names each row's platform. The spread columns (p10_us, p90_us, and n or
        samples) are optional, and may be empty in a row."""
        rows: dict[str, list[Row]] = defaultdict(list)
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if problem := layout_problem(reader.fieldnames):
                raise ValueError(f"{path}: {problem}")
            for raw in reader:
                rec = {k: v or "" for k, v in raw.items() if k is not None}  # a short row's missing cells read as empty
                try:
                    op, dtype = Op(rec["op"]), Dtype(rec["dtype"])
                    shape, axis, samples = row_point(rec)
                    shape = validate_shape(op, shape)
                    if axis not in shape:
                        raise ValueError(f"sweep_axis {axis!r} not in shape")
                    median = float(rec["median_us"])
                    if not 0 < median < float("inf"):
                        raise ValueError(f"median_us must be positive and finite, got {median}")
                    p10, p90, n = _optional_spread({**rec, "n": samples}, median)
                except (ValueError, KeyError) as exc:
                    # line_num: the file's line, blank lines and quoted line breaks counted
                    raise ValueError(f"{path}:{reader.line_num}: {exc}") from exc
                rows[rec.get("platform") or Path(path).name].append((op, dtype, shape, axis, median, p10, p90, n))
        chosen = _choose_platform(sorted(rows), platform, str(path))
        return cls(rows[chosen], chosen)


def _optional_spread(rec: dict[str, str], median: float) -> tuple[float | None, float | None, int | None]:
    """The optional p10_us, p90_us and n columns of a CSV row (absent or empty: unknown)."""

    def field(name: str) -> str | None:
        value = (rec.get(name) or "").strip()
        return value or None

    p10 = float(v) if (v := field("p10_us")) is not None else None
    p90 = float(v) if (v := field("p90_us")) is not None else None
    n = int(v) if (v := field("n")) is not None else None
    if (p10 is not None and not 0 < p10 <= median) or (p90 is not None and not median <= p90 < float("inf")):
        raise ValueError(f"want 0 < p10_us <= median_us <= p90_us, got {p10}, {median}, {p90}")
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return p10, p90, n


def _choose_platform(available: list[str], wanted: str | None, where: str) -> str:
    if not available:
        raise ValueError(f"{where}: no measurements")
    if wanted is None:
        if len(available) > 1:
            raise ValueError(f"{where}: holds {len(available)} platforms, pick one of {available}")
        return available[0]
    matches = [p for p in available if p == wanted or (len(wanted) >= 8 and p.startswith(wanted))]
    if len(matches) != 1:
        raise ValueError(f"{where}: platform {wanted!r} matches {len(matches)} of {available}")
    return matches[0]


def write_jsonl(batches: Iterable[Batch], path: str | Path) -> None:
    """The inverse of FileLookup.from_jsonl (tests and examples)."""
    with open(path, "w", encoding="utf-8") as fh:
        for b in batches:
            fh.write(json.dumps(b.model_dump(mode="json", by_alias=True)) + "\n")
