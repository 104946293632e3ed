"""Sweep plans: which kernels to time at which shapes (shared by agent and service).

A plan is a name and a list of sweeps; each sweep times one op for some dtypes
while one shape field (the axis) takes a list of values and the others stay
fixed. The service stores plans in profiling jobs and builds them from
"missing data" reports; the agent expands them into points and times each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from gac.contracts.measurements import AXIS_SCHEMA, MAX_DIM, PRINTABLE, SHAPE_FIELDS, Dtype, Op, shape_key, validate_shape

PLAN_SCHEMA: Final = "gac.plan/v1"
MAX_SWEEPS = 1_000
MAX_PLAN_POINTS = 100_000  # points over all sweeps and dtypes; a bigger plan is a mistake


class _Strict(BaseModel):
    # Each field's docstring is its description in the JSON Schema (and the service's OpenAPI document).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# The stopping rule's batch-means interval of the median: this many consecutive batches, each of
# at least MIN_BATCH_SAMPLES samples, so a noisy point stops on its median no sooner than their product.
MEDIAN_BATCHES = 10
MIN_BATCH_SAMPLES = 5


class Timing(_Strict):
    """How long to time each point: the noise stopping rule's knobs.

    A point takes samples until it has at least min_samples and either the
    relative spread (p90 - p10) / median is below target_spread (a quiet
    point), or the distribution-free 95 % confidence interval of the median is
    narrower than +/- median_ci of the median (a noisy point whose median is
    nevertheless pinned down), or until time_cap_ms or max_samples is reached.
    """

    min_samples: Annotated[int, Field(ge=10, le=100_000)] = 10
    """The samples a point takes at least."""
    max_samples: Annotated[int, Field(ge=10, le=1_000_000)] = 2_000
    """The samples a point takes at most."""
    target_spread: Annotated[float, Field(gt=0, le=10)] = 0.05
    """A point stops once its relative spread (p90 - p10) / median is below this."""
    median_ci: Annotated[float, Field(ge=0, le=1)] = 0.01
    """A point stops once the 95 % confidence interval of its median is within +/- this share of it; 0 turns this test off."""
    time_cap_ms: Annotated[float, Field(gt=0, le=600_000)] = 2_000.0
    """The most time a point takes samples for, in ms."""
    warmup_ms: Annotated[float, Field(ge=0, le=60_000)] = 30.0
    """The time a point runs before its samples are taken, in ms."""

    @model_validator(mode="after")
    def _samples_ordered(self) -> Timing:
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples ({self.max_samples}) must be >= min_samples ({self.min_samples})")
        return self


class ValueRange(_Strict):
    """An arithmetic range of dimensions; stop is inclusive (64..160 step 8 includes 160)."""

    start: Annotated[int, Field(ge=1, le=MAX_DIM)]
    """The first dimension."""
    stop: Annotated[int, Field(ge=1, le=MAX_DIM)]
    """The last dimension (inclusive, when the steps reach it)."""
    step: Annotated[int, Field(ge=1, le=MAX_DIM)] = 1
    """The distance between dimensions."""

    @model_validator(mode="after")
    def _ordered(self) -> ValueRange:
        if self.stop < self.start:
            raise ValueError(f"stop ({self.stop}) must be >= start ({self.start})")
        if len(self) > MAX_PLAN_POINTS:
            raise ValueError(f"range {self.start}..{self.stop} step {self.step} has more than {MAX_PLAN_POINTS} values")
        return self

    def expand(self) -> list[int]:
        return list(range(self.start, self.stop + 1, self.step))

    def __len__(self) -> int:
        return (self.stop - self.start) // self.step + 1


def _values_kind(v: Any) -> str:
    return "range" if isinstance(v, (dict, ValueRange)) else "list"


# An explicit list of dimensions, or {start, stop, step}; the discriminator keeps
# validation errors to the form the user wrote (values.list.1 / values.range.stop).
SweepValues = Annotated[
    Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_DIM, strict=True)]],
        Field(min_length=1, max_length=MAX_PLAN_POINTS, json_schema_extra={"uniqueItems": True}),
        Tag("list"),
    ]
    | Annotated[ValueRange, Tag("range")],
    Discriminator(_values_kind),
]


class Adaptive(_Strict):
    """Adaptive refinement: time every coarse_step-th value first, then fill in
    the full grid only between coarse neighbours whose latency differs by more
    than `jump` (relative), i.e. around steps."""

    coarse_step: Annotated[int, Field(ge=2, le=MAX_DIM)] = 8
    """The first pass times one value every coarse_step dims along the range (and its last value)."""
    jump: Annotated[float, Field(gt=0, le=10)] = 0.08
    """The relative latency difference between coarse neighbours above which the values between them are timed."""


# What _shape_consistent checks, stated in the JSON Schema: one branch per op and axis, naming
# the shape fields fixed; and adaptive refinement only over a range.
_SWEEP_RULES: dict[str, Any] = {
    "oneOf": [
        {
            "required": ["fixed"],
            "properties": {
                "op": {"const": op.value},
                "axis": {"const": axis},
                "fixed": {"required": [f for f in fields if f != axis], "propertyNames": {"enum": [f for f in fields if f != axis]}},
            },
        }
        for op, fields in SHAPE_FIELDS.items()
        for axis in fields
    ],
    "anyOf": [
        {"not": {"required": ["adaptive"]}},
        {"properties": {"adaptive": {"type": "null"}}},
        {"properties": {"values": {"type": "object"}}},
    ],
}


class Sweep(_Strict):
    """One op, some dtypes, one swept shape field, the others fixed."""

    model_config = ConfigDict(json_schema_extra=_SWEEP_RULES)

    op: Op
    """The kernel family to time."""
    dtypes: Annotated[list[Dtype], Field(min_length=1, max_length=3, json_schema_extra={"uniqueItems": True})]
    """The element types to time it in, each at every value."""
    # Which names fit which op is checked below; the schema says which names exist.
    axis: Annotated[str, Field(json_schema_extra=AXIS_SCHEMA)]
    """The shape field that takes the values."""
    fixed: Annotated[
        dict[str, Annotated[int, Field(ge=1, le=MAX_DIM, strict=True)]],
        Field(json_schema_extra={"propertyNames": AXIS_SCHEMA}),
    ] = Field(default_factory=dict)
    """The op's other shape fields and their values."""
    values: SweepValues
    """The axis values: a list of dimensions, or a range {start, stop, step}."""
    timing: Timing | None = None
    """This sweep's timing settings; null: the plan's."""
    adaptive: Adaptive | None = None
    """Adaptive refinement of a range; null: every value is timed."""
    label: Annotated[str | None, Field(max_length=200, pattern=PRINTABLE)] = None
    """A name for the sweep, for people."""

    @field_validator("dtypes")
    @classmethod
    def _unique_dtypes(cls, v: list[Dtype]) -> list[Dtype]:
        if len(set(v)) != len(v):
            raise ValueError(f"dtypes has duplicates: {[d.value for d in v]}")
        return v

    @field_validator("values")
    @classmethod
    def _values_unique(cls, v: list[int] | ValueRange) -> list[int] | ValueRange:
        # Not empty and not too long: said by the field (and so by the JSON Schema).
        if isinstance(v, list) and len(set(v)) != len(v):
            raise ValueError("values has duplicates")
        return v

    @model_validator(mode="after")
    def _shape_consistent(self) -> Sweep:
        needed = SHAPE_FIELDS[self.op]
        if self.axis not in needed:
            raise ValueError(f"axis {self.axis!r} is not a shape field of op {self.op.value!r} (one of {list(needed)})")
        if self.axis in self.fixed:
            raise ValueError(f"fixed must not contain the swept axis {self.axis!r}")
        missing = [f for f in needed if f != self.axis and f not in self.fixed]
        extra = [f for f in self.fixed if f not in needed]
        if missing:
            raise ValueError(f"fixed is missing {missing} for op {self.op.value!r} (needs {list(needed)} minus the axis)")
        if extra:
            raise ValueError(f"fixed has unknown fields {extra} for op {self.op.value!r} (needs {list(needed)})")
        if self.adaptive is not None and not isinstance(self.values, ValueRange):
            raise ValueError("adaptive needs values as a range {start, stop, step}")
        return self

    def value_list(self) -> list[int]:
        return self.values.expand() if isinstance(self.values, ValueRange) else list(self.values)

    def shape_at(self, value: int) -> dict[str, int]:
        return validate_shape(self.op, {**self.fixed, self.axis: value})

    def coarse_values(self) -> list[int]:
        """The first pass of adaptive refinement (always includes both ends)."""
        full = self.value_list()
        if self.adaptive is None:
            return full
        step = self.adaptive.coarse_step
        coarse = [v for i, v in enumerate(full) if i % max(1, step // self._step()) == 0]
        if coarse[-1] != full[-1]:
            coarse.append(full[-1])
        return coarse

    def _step(self) -> int:
        return self.values.step if isinstance(self.values, ValueRange) else 1

    def n_points(self) -> int:
        return len(self.values) * len(self.dtypes)  # a range counted, not listed: a plan too big is refused at once


class PlanPoint(_Strict):
    """One thing to time: an op at one shape in one dtype."""

    sweep: int
    """The index of the sweep in its plan."""
    op: Op
    """The kernel family."""
    dtype: Dtype
    """The element type."""
    shape: dict[str, int]
    """The full shape."""
    axis: str
    """The shape field its sweep varies."""

    def key(self) -> tuple[str, str, str, str]:
        """(op, dtype, axis, canonical shape): identifies the point across plans."""
        return (self.op.value, self.dtype.value, self.axis, shape_key(self.shape))


class SweepPlan(_Strict):
    """A named list of sweeps, with default timing settings for all of them."""

    schema_: Literal["gac.plan/v1"] = Field(default=PLAN_SCHEMA, alias="schema")
    """The document's schema name."""
    name: Annotated[str, Field(min_length=1, max_length=200, pattern=PRINTABLE)]  # a text column: no NUL
    """The plan's name (the runs and jobs that time it carry it)."""
    description: Annotated[str | None, Field(max_length=2_000, pattern=PRINTABLE)] = None
    """What the plan is for, for people."""
    timing: Timing = Field(default_factory=Timing)
    """The timing settings of every sweep that has none of its own."""
    sweeps: Annotated[list[Sweep], Field(min_length=1, max_length=MAX_SWEEPS)]
    """The sweeps, at least one."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _not_too_big(self) -> SweepPlan:
        total = sum(s.n_points() for s in self.sweeps)
        if total > MAX_PLAN_POINTS:
            raise ValueError(f"plan expands to {total} points, more than {MAX_PLAN_POINTS}")
        return self

    def timing_for(self, sweep: int | Sweep) -> Timing:
        s = self.sweeps[sweep] if isinstance(sweep, int) else sweep
        return s.timing or self.timing

    def points(self) -> list[PlanPoint]:
        """Every point of the full grid, in plan order (sweep, dtype, value).

        With adaptive refinement the agent times a subset of these.
        """
        return list(self.iter_points())

    def iter_points(self) -> Iterator[PlanPoint]:
        for i, sweep in enumerate(self.sweeps):
            for dtype in sweep.dtypes:
                for value in sweep.value_list():
                    yield PlanPoint(sweep=i, op=sweep.op, dtype=dtype, shape=sweep.shape_at(value), axis=sweep.axis)

    def n_points(self) -> int:
        return sum(s.n_points() for s in self.sweeps)

    def to_document(self) -> dict[str, Any]:
        """The JSON document form (what a job stores and the API carries)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def restricted(self, dtypes: Iterable[Dtype | str]) -> SweepPlan:
        """The same plan limited to some dtypes (sweeps left without a dtype are dropped)."""
        keep = {Dtype(d) for d in dtypes}
        sweeps = []
        for s in self.sweeps:
            ds = [d for d in s.dtypes if d in keep]
            if ds:
                sweeps.append(s.model_copy(update={"dtypes": ds}))
        if not sweeps:
            raise ValueError(f"no sweep of plan {self.name!r} uses any of the dtypes {sorted(d.value for d in keep)}")
        return self.model_copy(update={"sweeps": sweeps})


class PlanError(ValueError):
    """A plan document that does not validate; the message names the fields."""


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "<plan>"
        lines.append(f"{loc}: {e['msg']}")
    return "; ".join(lines)


def parse_plan(data: dict[str, Any] | SweepPlan) -> SweepPlan:
    """Validate a plan document (already parsed JSON/YAML); raises PlanError naming the fields."""
    if isinstance(data, SweepPlan):
        return data
    if not isinstance(data, dict):
        raise PlanError(f"a plan must be a mapping with 'name' and 'sweeps', got {type(data).__name__}")
    try:
        return SweepPlan.model_validate(data)
    except ValidationError as err:
        raise PlanError(f"invalid plan: {_format_validation_error(err)}") from err


def loads_plan(text: str, fmt: Literal["json", "yaml", "auto"] = "auto") -> SweepPlan:
    """Parse plan text; YAML is a superset of JSON so "auto" reads both."""
    try:
        data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise PlanError(f"plan is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from err
    except yaml.YAMLError as err:  # PyYAML's message spans lines (the context, a quote of the text): one line of it
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise PlanError(f"plan is not valid YAML/JSON: {getattr(err, 'problem', None) or type(err).__name__}{where}") from err
    return parse_plan(data)


def load_plan(path: str | Path) -> SweepPlan:
    """Read a plan file (.json, .yaml or .yml)."""
    p = Path(path)
    fmt: Literal["json", "yaml", "auto"] = "json" if p.suffix.lower() == ".json" else "auto"
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise PlanError(f"cannot read plan file {p}: {err.strerror or err}") from err
    except UnicodeDecodeError:
        raise PlanError(f"{p}: a plan is UTF-8 text (YAML or JSON), and this file is not") from None
    try:
        return loads_plan(text, fmt)
    except PlanError as err:
        raise PlanError(f"{p}: {err}") from err


def plan_for_points(
    name: str,
    points: Iterable[tuple[Op | str, Dtype | str, dict[str, int], str]],
    timing: Timing | None = None,
) -> SweepPlan:
    """Build a plan that covers exactly the given (op, dtype, shape, axis) points.

    Points sharing op, axis and the other shape fields become one sweep with an
    explicit value list; dtypes measured at the same values are merged. The
    service uses this to turn a "missing data" report into a job.
    """
    groups: dict[tuple[Op, str, tuple[tuple[str, int], ...]], dict[Dtype, set[int]]] = {}
    for op, dtype, shape, axis in points:
        op_, dt = Op(op), Dtype(dtype)
        full = validate_shape(op_, dict(shape))
        if axis not in full:
            raise PlanError(f"axis {axis!r} is not a shape field of op {op_.value!r}")
        fixed = tuple(sorted((k, v) for k, v in full.items() if k != axis))
        groups.setdefault((op_, axis, fixed), {}).setdefault(dt, set()).add(full[axis])
    sweeps: list[Sweep] = []
    for (op_, axis, fixed), by_dtype in groups.items():
        merged: dict[tuple[int, ...], list[Dtype]] = {}
        for dt, dims in by_dtype.items():
            merged.setdefault(tuple(sorted(dims)), []).append(dt)
        for values, dts in merged.items():
            sweeps.append(Sweep(op=op_, dtypes=sorted(dts, key=lambda d: d.value), axis=axis, fixed=dict(fixed), values=list(values)))
    if not sweeps:
        raise PlanError("no points to plan")
    return SweepPlan(name=name, sweeps=sweeps, timing=timing or Timing())


__all__ = [
    "PLAN_SCHEMA",
    "MAX_PLAN_POINTS",
    "Adaptive",
    "PlanError",
    "PlanPoint",
    "Sweep",
    "SweepPlan",
    "Timing",
    "ValueRange",
    "load_plan",
    "loads_plan",
    "parse_plan",
    "plan_for_points",
]
