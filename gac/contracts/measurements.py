"""What an agent sends and the service stores: platform, run, measurement, batch.

These models are the contract between profiler_agent and service; both import
them from here so the two sides can never disagree on a field.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from gac.contracts.text import NUL_FREE, NulFree

BATCH_SCHEMA: Final = "gac.batch/v1"
# Hard ceilings of the contract; the service may enforce lower, configurable ones.
MAX_DIM = 1 << 20  # no real tensor dimension is above a million
MAX_BATCH_ROWS = 10_000
MAX_LATENCY_US = 3.6e9  # one hour: anything above is a broken timer
# What the integer columns of both databases hold (service/models.py): a value past these would
# be refused by Postgres and overflow SQLite's driver, so the contract refuses it first.
MAX_INT32 = 2**31 - 1  # INTEGER
MAX_INT64 = 2**63 - 1  # BIGINT


class Op(StrEnum):
    """A kernel family the agent times."""

    gemm = "gemm"  # Y[m, n] = X[m, k] @ W[k, n]
    gemv = "gemv"  # y[n] = x[k] @ W[k, n]  (a GEMM with m = 1)
    sdpa = "sdpa"  # scaled-dot-product attention, q/k/v of (b, h, s, head_dim)
    lowrank = "lowrank"  # Y = (X[m, in] @ A[in, rank]) @ B[rank, out]
    mlp = "mlp"  # gated MLP block: down(silu(gate(x)) * up(x)), width = intermediate


class Dtype(StrEnum):
    """An element type kernels are timed and models run in."""

    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"


# The shape fields each op needs, in canonical order.
SHAPE_FIELDS: dict[Op, tuple[str, ...]] = {
    Op.gemm: ("m", "n", "k"),
    Op.gemv: ("n", "k"),
    Op.sdpa: ("b", "h", "s", "head_dim"),
    Op.lowrank: ("m", "in_features", "rank", "out_features"),
    Op.mlp: ("m", "hidden", "width"),
}


_FIELD_SETS = {op: set(fields) for op, fields in SHAPE_FIELDS.items()}
# Every shape field of any op: what a sweep axis or a shape key can be.
SHAPE_FIELD_NAMES: tuple[str, ...] = tuple(sorted({f for fields in SHAPE_FIELDS.values() for f in fields}))
ShapeField = Literal[SHAPE_FIELD_NAMES]  # type: ignore[valid-type]
# The same limit stated in the JSON Schema only, where the check stays in the op-aware validators
# (whose messages name the op): the document says which names can ever pass.
AXIS_SCHEMA: dict[str, Any] = {"enum": list(SHAPE_FIELD_NAMES)}
SHAPE_KEYS_SCHEMA: dict[str, Any] = {"propertyNames": AXIS_SCHEMA, "minProperties": 1}


def op_flops(op: Op, shape: dict[str, int]) -> int:
    """Floating-point operations of one call of op at shape (what the agent's kernels compute)."""
    s = shape
    if op is Op.gemm:
        return 2 * s["m"] * s["n"] * s["k"]
    if op is Op.gemv:
        return 2 * s["n"] * s["k"]
    if op is Op.sdpa:
        return 2 * s["b"] * s["h"] * s["s"] * s["s"] * s["head_dim"]  # causal: half of 4*b*h*s*s*d
    if op is Op.lowrank:
        return 2 * s["m"] * s["rank"] * (s["in_features"] + s["out_features"])
    return 6 * s["m"] * s["hidden"] * s["width"]  # mlp: gate, up and down projections


def shape_key(shape: dict[str, int], without: str | None = None) -> str:
    """Canonical text of a shape ('k=128,m=2048'), optionally leaving out one axis."""
    return ",".join(f"{k}={shape[k]}" for k in sorted(shape) if k != without)


def parse_shape_key(key: str) -> dict[str, int]:
    """Inverse of shape_key; raises ValueError on malformed text."""
    if not key:
        return {}
    out: dict[str, int] = {}
    for part in key.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"malformed shape component {part!r} (want name=int)")
        out[name.strip()] = int(value)
    return out


def validate_shape(op: Op, shape: dict[str, int]) -> dict[str, int]:
    """Check that shape has exactly the fields op needs, each in 1..MAX_DIM."""
    needed = SHAPE_FIELDS[op]
    missing = [f for f in needed if f not in shape]
    extra = [f for f in shape if f not in needed]
    if missing:
        raise ValueError(f"shape for op {op.value!r} is missing {missing} (needs {list(needed)})")
    if extra:
        raise ValueError(f"shape for op {op.value!r} has unknown fields {extra} (needs {list(needed)})")
    for name in needed:
        value = shape[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"shape.{name} must be an integer, got {value!r}")
        if not 1 <= value <= MAX_DIM:
            raise ValueError(f"shape.{name} = {value} is out of range 1..{MAX_DIM}")
    return {name: shape[name] for name in needed}


def check_consistent(op: Op, shape: dict[str, int], sweep_axis: str, p10_us: float, median_us: float, p90_us: float) -> dict[str, int]:
    """The rules across one measurement's fields; returns its shape in canonical (sorted) order."""
    keys = list(shape)
    if set(keys) != _FIELD_SETS[op]:
        validate_shape(op, shape)  # raises, naming the missing or unknown fields
    if keys != sorted(keys):
        # Canonical order, so a re-sent row hashes the same whatever order it came in.
        shape = dict(sorted(shape.items()))
    if sweep_axis not in shape:
        raise ValueError(f"sweep_axis {sweep_axis!r} is not a shape field of op {op.value!r} ({list(SHAPE_FIELDS[op])})")
    if not p10_us <= median_us <= p90_us:
        raise ValueError(f"latency percentiles out of order: p10_us={p10_us} median_us={median_us} p90_us={p90_us}")
    return shape


# Strict (checked in pydantic-core, row by row, cheaply): a figure is a JSON number; true and "10" are not
# latencies or counts, and 64.5, "64" and true are not dimensions (or counts).
Latency = Annotated[float, Field(strict=True, gt=0, le=MAX_LATENCY_US, allow_inf_nan=False)]
Dim = Annotated[int, Field(strict=True, ge=1, le=MAX_DIM)]
# No NUL characters (gac.contracts.text): databases cannot store them in text.
PRINTABLE = NUL_FREE
Text = Annotated[NulFree, Field(min_length=1, max_length=200)]
OptText = Annotated[NulFree | None, Field(max_length=200)]


Count = Annotated[int, Field(strict=True, ge=1, le=10_000_000)]  # samples behind a figure
StopReason = Literal["spread", "median_ci", "time_cap", "max_samples"]  # why sampling stopped
SampleCount = Annotated[int, Field(strict=True, ge=0, le=10_000_000)]
ClockMhz = Annotated[int, Field(strict=True, ge=0, le=100_000)]
ThrottleMask = Annotated[int, Field(strict=True, ge=0, le=2**62)]  # NVML clocks-throttle bitmask
# Why the agent's quality gate does not trust a point (comma-separated, e.g. "bimodal,busy"): its samples
# split into two modes (stalls), its median is far off both neighbours while its spread is huge, or other
# work took the cores it was timed on. Such a point is stored, shown, and kept out of candidates and predictions.
QUALITY_FLAGS: Final = ("bimodal", "isolated", "busy")
_FLAG = "(" + "|".join(QUALITY_FLAGS) + ")"
Quality = Annotated[str, Field(max_length=64, pattern=f"^{_FLAG}(,{_FLAG})*$")]
# Cores other work kept busy while a point was timed (the gate's reading, less the agent's own ticks):
# what the dashboard shows as the load while profiling. None where it cannot be read (a GPU's points).
BusyCores = Annotated[float, Field(strict=True, ge=0, le=100_000, allow_inf_nan=False)]


# Times are stored in UTC, and Python (so every reader of the service) holds years 1..9999 only:
# a time whose UTC value leaves them, like 0001-01-01T00:00:00+01:00 or 9999-12-31T23:59:59-14:00,
# could not be stored or read back. pydantic-core compares with the offset applied (naive times
# count as UTC, as the service stores them), in Rust: nothing per row in Python.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def _as_utc(t: datetime) -> datetime:
    """A time sent without an offset is UTC (the contract says so): made aware here, so that no
    reader, and no database driver (a binary COPY refuses naive times), has to guess."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


# Every time in the batch contracts (row and column layouts) is one of these.
Timestamp = Annotated[datetime, Field(ge=EARLIEST, le=LATEST), AfterValidator(_as_utc)]


class _Strict(BaseModel):
    # Each field's docstring is its description in the JSON Schema (and the service's OpenAPI document).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


DtypeRatio = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
# Measured facts about dtypes, not part of the platform's identity.
DTYPE_FIELDS = ("native_dtypes", "fast_dtype", "dtype_speed")


class PlatformDescriptor(_Strict):
    """Everything that decides which kernels run; its fingerprint names the platform (docs/architecture.md, "Data flow")."""

    device_kind: Literal["cuda", "cpu", "rocm"]
    """The kind of device the kernels run on."""
    device_name: Text
    """The device's name as its driver or the CPU reports it."""
    compute_capability: OptText = None
    """The GPU's compute capability, e.g. "8.0" on CUDA; null on a CPU."""
    isa: OptText = None
    """CPU ISA flags that matter, e.g. "avx2,avx512f,amx"; null on a GPU."""
    sm_count: Annotated[int | None, Field(default=None, ge=1, le=100_000)] = None
    """The GPU's streaming multiprocessors; null on a CPU."""
    cores: Annotated[int | None, Field(default=None, ge=1, le=100_000)] = None
    """The CPU's logical cores; null on a GPU."""
    threads: Annotated[int | None, Field(default=None, ge=1, le=100_000)] = None
    """The CPU threads the kernels are timed with (one machine at 1 and at 2 threads is two platforms); null on a GPU."""
    memory_bytes: Annotated[int | None, Field(default=None, ge=0, le=MAX_INT64)] = None  # BIGINT
    """The GPU's memory, in bytes."""
    l2_bytes: Annotated[int | None, Field(default=None, ge=0, le=MAX_INT64)] = None  # BIGINT
    """The L2 cache, in bytes."""
    driver_version: OptText = None
    """The GPU driver's version."""
    cuda_runtime: OptText = None
    """The CUDA runtime torch was built with (the HIP version on ROCm)."""
    cublas_version: OptText = None
    """cuBLAS's version (CUDA only)."""
    cudnn_version: OptText = None
    """cuDNN's version, when torch has it."""
    torch_version: OptText = None
    """PyTorch's version."""
    triton_version: OptText = None
    """Triton's version, when installed."""
    flash_attn_version: OptText = None
    """flash-attn's version, when installed."""
    mkl_version: OptText = None
    """The MKL version torch uses on a CPU, when available."""
    onednn_version: OptText = None
    """The oneDNN version torch uses on a CPU, when available."""
    tf32_allowed: bool | None = None
    """Whether torch may run float32 matrix products in TF32 (CUDA)."""
    timing: OptText = None
    """How the agent's timer treats caches where that changes the figures, e.g. "cold-weights/256MiB" (CPU kernels read
    their weights from beyond the caches, as inside a model): curves timed another way belong to another platform."""
    # What the agent found out about dtypes on this platform (see profiler_agent/dtypes.py).
    # Not identity: the fingerprint ignores these, and the service does not store them.
    native_dtypes: list[Dtype] | None = None
    """Low-precision dtypes with native arithmetic here (not part of the fingerprint)."""
    fast_dtype: Dtype | None = None
    """The dtype to profile and run in by default (not part of the fingerprint)."""
    dtype_speed: dict[Dtype, DtypeRatio] | None = None
    """Measured GEMM time of each dtype / float32's (not part of the fingerprint)."""

    def fingerprint(self) -> str:
        """Stable hash over the identity fields that are set: the same stack always gives the same id.

        Unset (None) fields are left out so that adding an optional field to this
        model later does not change the fingerprint of platforms already stored.
        """
        fields = self.model_dump(mode="json", exclude_none=True, exclude=set(DTYPE_FIELDS))
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def __hash__(self) -> int:
        # The dtype fields hold a list and a dict, which the default frozen-model hash cannot take.
        return hash(self.fingerprint())

    def threads_for(self, fingerprint: str, cores: int | None = None) -> int | None:
        """The thread count at which this CPU is the platform `fingerprint`, when another than its own:
        one machine timed with 1 and with 2 threads is two platforms. None: no count makes it that one."""
        if self.device_kind != "cpu" or self.fingerprint() == fingerprint:
            return None
        for threads in range(1, (cores or self.cores or 1) + 1):
            if self.model_copy(update={"threads": threads}).fingerprint() == fingerprint:
                return threads
        return None

    def label(self) -> str:
        parts = [self.device_name]
        if self.compute_capability:
            parts.append(f"sm_{self.compute_capability.replace('.', '')}")
        if self.torch_version:
            parts.append(f"torch {self.torch_version}")
        if self.timing:
            parts.append(self.timing)
        if self.threads:  # part of a CPU's identity: one machine profiled at 1 and at 2 threads is two platforms
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        return " / ".join(parts)


class RunInfo(_Strict):
    """One agent session on one platform (many batches share it); for a job, every attempt at it on one
    platform, so that the next attempt finds what a stopped one stored (each batch names the agent that sent it)."""

    id: UUID
    """The run's id, made by the agent (a job's attempts on one platform share it)."""
    agent: Text
    """The agent's stable name, e.g. its hostname."""
    plan: Text = "adhoc"
    """The name of the plan being timed."""
    agent_version: OptText = None
    """The agent's gac version."""
    started_at: Timestamp = Field(default_factory=lambda: datetime.now(UTC))
    """When the run began (UTC when sent without an offset)."""


# What _consistent checks of a measurement's op, stated in its JSON Schema: one branch per op,
# naming the shape fields and the axis it can sweep (the percentiles' order cannot be stated).
_SHAPE_PER_OP: dict[str, Any] = {
    "oneOf": [
        {
            "properties": {
                "op": {"const": op.value},
                "shape": {"required": list(fields), "propertyNames": {"enum": list(fields)}},
                "sweep_axis": {"enum": list(fields)},
            },
        }
        for op, fields in SHAPE_FIELDS.items()
    ]
}


class Measurement(_Strict):
    """One timed point: one kernel at one shape, with its latency statistics."""

    model_config = ConfigDict(json_schema_extra=_SHAPE_PER_OP)

    id: UUID
    """The row's id, made by the agent, so a re-send is recognised row by row."""
    op: Op
    """The kernel family timed."""
    dtype: Dtype
    """The element type it was timed in."""
    shape: Annotated[dict[str, Dim], Field(json_schema_extra=SHAPE_KEYS_SCHEMA)]
    """The kernel's shape: exactly the op's shape fields, by name."""
    sweep_axis: Annotated[str, Field(json_schema_extra=AXIS_SCHEMA)]
    """Which shape field this point's curve sweeps."""
    median_us: Latency
    """The median latency of one kernel call, in µs."""
    p10_us: Latency
    """The 10th percentile of the samples, in µs (at most median_us)."""
    p90_us: Latency
    """The 90th percentile of the samples, in µs (at least median_us)."""
    mean_us: Latency
    """The mean of the samples, in µs."""
    n: Count
    """The samples taken."""
    timer: Text
    """How it was timed, e.g. "cpu-perf-counter" or "cuda-events+l2-flush"."""
    backend: OptText = None
    """The implementation that actually ran (e.g. SDPA "flash")."""
    kernel: OptText = None
    """What the agent's kernel called, for the record."""
    measured_at: Timestamp = Field(default_factory=lambda: datetime.now(UTC))
    """When it was timed (UTC when sent without an offset); left out: when it was read."""
    stop: StopReason | None = None
    """Why sampling stopped, when the timer says (the stopping rule: gac.contracts.plans.Timing)."""
    samples_discarded: SampleCount | None = None
    """Samples the timer threw away, e.g. preempted off-CPU."""
    sm_clock_mhz: ClockMhz | None = None
    """The GPU's SM clock during the point (NVML), in MHz."""
    throttle_reasons: ThrottleMask | None = None
    """NVML's clocks-throttle bitmask during the point."""
    quality: Quality | None = None
    """The agent's quality flags, comma-separated; null: the point passed the agent's quality gate (or predates it)."""
    busy_cores: BusyCores | None = None
    """Cores other work kept busy while it was timed (optional: agents before it send none)."""

    @model_validator(mode="after")
    def _consistent(self) -> Measurement:
        # One Python validator per row (this runs for every row of every batch).
        shape = check_consistent(self.op, self.shape, self.sweep_axis, self.p10_us, self.median_us, self.p90_us)
        if shape is not self.shape:
            object.__setattr__(self, "shape", shape)
        return self

    @property
    def x(self) -> int:
        return self.shape[self.sweep_axis]


class Batch(_Strict):
    """The unit of upload: stored whole or not at all; re-sending it is safe.

    A batch is its id, its rows' ids and their values (in any order). A stored row never changes:
    a re-send with other values is refused (409 naming the rows), and a corrected measurement is
    sent as a new row with a new id, best in a new run. Times without an offset are UTC."""

    schema_: Literal["gac.batch/v1"] = Field(default=BATCH_SCHEMA, alias="schema")
    """The document's schema name."""
    id: UUID
    """The batch's id, made by the agent: a re-sent batch is recognised by it."""
    platform: PlatformDescriptor
    """The platform the rows were measured on."""
    run: RunInfo
    """The agent run the rows belong to."""
    measurements: Annotated[list[Measurement], Field(min_length=1, max_length=MAX_BATCH_ROWS)]
    """The rows, in any order."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class BatchReceipt(BaseModel):
    """The service's answer to an upload."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    batch_id: UUID
    """The batch's id, as sent."""
    platform_id: int
    """The service's id of the batch's platform (stored on first sight)."""
    fingerprint: str
    """The platform's fingerprint."""
    inserted: int
    """Rows stored by this upload."""
    duplicates: int
    """Rows stored before (by this batch or another) with the same values: not stored again."""
    replay: bool
    """True when this batch id had been stored before."""
