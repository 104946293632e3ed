"""A batch laid out by column: one list per Measurement field, row i at index i of every list.

The same batch as gac.batch/v1, for the agent's uploads: validating lists of plain values takes
pydantic-core about a quarter of the time of building one model per row, and the document is
about half the size (benchmarks/ingest.py). The service takes either layout on
POST /v1/batches, told apart by the Content-Type; a batch re-sent in the other layout is still
recognised as the same batch.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gac.contracts.measurements import (
    AXIS_SCHEMA,
    MAX_BATCH_ROWS,
    SHAPE_FIELDS,
    Batch,
    BusyCores,
    ClockMhz,
    Count,
    Dim,
    Dtype,
    Latency,
    Measurement,
    Op,
    OptText,
    PlatformDescriptor,
    Quality,
    RunInfo,
    SampleCount,
    ShapeField,
    StopReason,
    Text,
    ThrottleMask,
    Timestamp,
    check_consistent,
)

COLUMNS_SCHEMA: Final = "gac.batch-columns/v1"
COLUMNS_MEDIA_TYPE = "application/vnd.gac.batch-columns+json"
# Columns every row fills (shape has its own layout), and optional ones: left out, or null at
# a row, they mean the Measurement default.
REQUIRED = tuple(name for name, f in Measurement.model_fields.items() if f.is_required() and name != "shape")
OPTIONAL = tuple(name for name, f in Measurement.model_fields.items() if not f.is_required())


class MeasurementColumns(BaseModel):
    """Every Measurement field as a list, same length as `id`; the same checks as row by row."""

    # Each field's docstring is its description in the JSON Schema (and the service's OpenAPI document).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    id: Annotated[list[UUID], Field(min_length=1, max_length=MAX_BATCH_ROWS)]
    """Each row's id, made by the agent; its length is the number of rows."""
    op: list[Op]
    """Each row's kernel family."""
    dtype: list[Dtype]
    """Each row's element type."""
    shape: dict[ShapeField, list[Dim | None]]
    """One list per shape field, null where a row's op has no such field."""
    sweep_axis: list[Annotated[str, Field(json_schema_extra=AXIS_SCHEMA)]]
    """Each row's swept shape field."""
    median_us: list[Latency]
    """Each row's median latency, in µs."""
    p10_us: list[Latency]
    """Each row's 10th percentile, in µs."""
    p90_us: list[Latency]
    """Each row's 90th percentile, in µs."""
    mean_us: list[Latency]
    """Each row's mean latency, in µs."""
    n: list[Count]
    """Each row's sample count."""
    timer: list[Text]
    """How each row was timed."""
    backend: list[OptText] | None = None
    """Each row's implementation that actually ran; left out or null: not said."""
    kernel: list[OptText] | None = None
    """What each row's kernel called; left out or null: not said."""
    measured_at: list[Timestamp | None] | None = None
    """When each row was timed; left out or null: when the service read it."""
    stop: list[StopReason | None] | None = None
    """Why each row's sampling stopped; left out or null: not said."""
    samples_discarded: list[SampleCount | None] | None = None
    """Samples each row's timer threw away; left out or null: not said."""
    sm_clock_mhz: list[ClockMhz | None] | None = None
    """The SM clock during each row, in MHz; left out or null: not read."""
    throttle_reasons: list[ThrottleMask | None] | None = None
    """NVML's clocks-throttle bitmask during each row; left out or null: not read."""
    quality: list[Quality | None] | None = None
    """Each row's quality flags; left out or null: the row passed the agent's quality gate."""
    busy_cores: list[BusyCores | None] | None = None
    """Cores other work kept busy while each row was timed; left out or null: not read."""

    @model_validator(mode="after")
    def _consistent(self) -> MeasurementColumns:
        rows = len(self.id)
        lists: dict[str, list[Any] | None] = {name: getattr(self, name) for name in type(self).model_fields}
        lists.pop("shape")
        lists.update({f"shape.{name}": column for name, column in self.shape.items()})
        for name, column in lists.items():
            if column is not None and len(column) != rows:
                raise ValueError(f"column {name} has {len(column)} values for {rows} rows (the length of id)")
        if len(set(self.op)) == 1 and self._one_op_consistent():
            return self  # the common case, checked a column at a time
        for i in range(rows):  # mixed ops, or a bad row to find and name
            shape = {name: v for name, column in self.shape.items() if (v := column[i]) is not None}
            try:
                check_consistent(self.op[i], shape, self.sweep_axis[i], self.p10_us[i], self.median_us[i], self.p90_us[i])
            except ValueError as err:
                raise ValueError(f"row {i}: {err}") from None
        return self

    def _one_op_consistent(self) -> bool:
        """True when a single-op batch passes every check; False sends it to the row-by-row check."""
        needed = set(SHAPE_FIELDS[self.op[0]])
        for name, column in self.shape.items():
            if (None in column) if name in needed else (column.count(None) != len(column)):
                return False
        return (
            needed <= self.shape.keys()
            and set(self.sweep_axis) <= needed
            and all(lo <= mid <= hi for lo, mid, hi in zip(self.p10_us, self.median_us, self.p90_us))
        )

    def measurements(self) -> list[Measurement]:
        """The rows as Measurement models (the reference meaning of this layout; slow, for tests and tools)."""
        optional = {name: getattr(self, name) for name in OPTIONAL if getattr(self, name) is not None}
        rows = []
        for i in range(len(self.id)):
            fields: dict[str, Any] = {name: getattr(self, name)[i] for name in REQUIRED}
            fields["shape"] = {name: column[i] for name, column in self.shape.items() if column[i] is not None}
            fields.update({name: column[i] for name, column in optional.items() if column[i] is not None})
            rows.append(Measurement(**fields))
        return rows

    @classmethod
    def of(cls, measurements: list[Measurement]) -> MeasurementColumns:
        names = sorted({name for m in measurements for name in m.shape})
        columns: dict[str, Any] = {name: [getattr(m, name) for m in measurements] for name in REQUIRED}
        columns["shape"] = {name: [m.shape.get(name) for m in measurements] for name in names}
        for name in OPTIONAL:
            column = [getattr(m, name) for m in measurements]
            if any(value is not None for value in column):  # an all-null column is left out
                columns[name] = column
        return cls.model_construct(**columns)  # already-valid rows: no second validation


class ColumnBatch(BaseModel):
    """The unit of upload, laid out by column; stored exactly as the same Batch sent by rows."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True)

    schema_: Literal["gac.batch-columns/v1"] = Field(alias="schema")
    """The document's schema name."""
    id: UUID
    """The batch's id, made by the agent: the same batch sent by rows has the same id."""
    platform: PlatformDescriptor
    """The platform the rows were measured on."""
    run: RunInfo
    """The agent run the rows belong to."""
    measurements: MeasurementColumns
    """The rows, by column."""

    @classmethod
    def of(cls, batch: Batch) -> ColumnBatch:
        return cls.model_construct(
            schema_=COLUMNS_SCHEMA,
            id=batch.id,
            platform=batch.platform,
            run=batch.run,
            measurements=MeasurementColumns.of(list(batch.measurements)),
        )

    def to_batch(self) -> Batch:
        return Batch(id=self.id, platform=self.platform, run=self.run, measurements=self.measurements.measurements())
