"""A validated batch as the ingest path stores it, read from either wire layout (rows or columns)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from gac.contracts.columns import ColumnBatch
from gac.contracts.measurements import Batch, PlatformDescriptor, RunInfo, shape_key

CurveKey = tuple[str, str, str, str]  # op, dtype, swept axis, fixed shape ("k=128,m=2048")
# The stored columns after uuid, curve_id, run_id, batch_id and x, in table order.
VALUE_COLUMNS = (
    "median_us",
    "p10_us",
    "p90_us",
    "mean_us",
    "n",
    "timer",
    "backend",
    "kernel",
    "measured_at",
    "stop",
    "samples_discarded",
    "sm_clock_mhz",
    "throttle_reasons",
    "quality",
    "busy_cores",
)
# Columns added after the first agents shipped, at the end of the table: left out of an insert when no
# row of the batch sets them (the common case; they default to NULL).
LATER_COLUMNS = ("quality", "busy_cores")


@dataclass(frozen=True)
class Incoming:
    id: UUID
    platform: PlatformDescriptor
    run: RunInfo
    ids: list[UUID]  # row ids, in the order sent
    curves: list[CurveKey]  # each row's curve
    x: list[int]  # each row's value of its swept axis
    values: list[list[Any]]  # one list per VALUE_COLUMNS entry

    @classmethod
    def from_rows(cls, batch: Batch) -> Incoming:
        ms = batch.measurements
        keys: dict[tuple, CurveKey] = {}
        curves = []
        for m in ms:
            fixed = tuple((k, v) for k, v in m.shape.items() if k != m.sweep_axis)  # shape is in canonical order
            raw = (m.op, m.dtype, m.sweep_axis, fixed)
            key = keys.get(raw)
            if key is None:
                key = keys[raw] = (m.op.value, m.dtype.value, m.sweep_axis, shape_key(dict(fixed)))
            curves.append(key)
        return cls(
            batch.id,
            batch.platform,
            batch.run,
            [m.id for m in ms],
            curves,
            [m.x for m in ms],
            [[getattr(m, name) for m in ms] for name in VALUE_COLUMNS],
        )

    @classmethod
    def from_columns(cls, batch: ColumnBatch) -> Incoming:
        cols = batch.measurements
        names = sorted(cols.shape)  # canonical order
        at = {name: i for i, name in enumerate(names)}
        keys: dict[tuple, CurveKey] = {}
        curves, xs = [], []
        for op, dtype, axis, dims in zip(cols.op, cols.dtype, cols.sweep_axis, zip(*(cols.shape[n] for n in names))):
            j = at[axis]
            xs.append(dims[j])
            raw = (op, dtype, axis, dims[:j] + dims[j + 1 :])
            key = keys.get(raw)
            if key is None:
                fixed = {n: v for n, v in zip(names, dims) if v is not None and n != axis}
                key = keys[raw] = (op.value, dtype.value, axis, shape_key(fixed))
            curves.append(key)
        rows = len(cols.id)
        values = []
        for name in VALUE_COLUMNS:
            column = getattr(cols, name)
            if name == "measured_at":  # the Measurement default: when the service read it
                now = datetime.now(UTC)
                column = [now] * rows if column is None else [t if t is not None else now for t in column]
            values.append(column if column is not None else [None] * rows)
        return cls(batch.id, batch.platform, batch.run, list(cols.id), curves, xs, values)
