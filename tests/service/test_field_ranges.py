"""The edges of every field's range: stored and read back exactly on both backends, and one step
past them refused at the door with a 422 naming the field (never a 500, never a row that no
reader can load back).

The edges: the integer columns (INTEGER, BIGINT), Python's years 1..9999 in UTC for times, the
200-character text columns, the contract's own ceilings (dimensions, latencies, counts).
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, get_args, get_origin

import annotated_types
import pytest
from pydantic.fields import FieldInfo
from sqlalchemy import BigInteger, Integer, func, select

from gac.contracts.measurements import MAX_DIM, MAX_LATENCY_US, Batch, Measurement, PlatformDescriptor, RunInfo
from gac.service import models
from tests import factories as f

UTC = UTC
EARLIEST = "0001-01-01T00:00:00Z"
LATEST = "9999-12-31T23:59:59.999999Z"
COLUMN_MAX = {Integer: 2**31 - 1, BigInteger: 2**63 - 1}
TEXT = "€" * 200  # the longest text, and not ASCII: the columns count characters


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _metadata(annotation: Any) -> list[Any]:
    """The constraints inside an annotation (an Optional's Annotated arm keeps its own)."""
    found = []
    if get_origin(annotation) is Annotated:
        for m in annotation.__metadata__:
            found += m.metadata if isinstance(m, FieldInfo) else [m]
    for arg in get_args(annotation):
        found += _metadata(arg)
    return found


def _bounds(info: Any) -> tuple[int | None, int | None]:
    lo = hi = None
    for m in [*info.metadata, *_metadata(info.annotation)]:
        if isinstance(m, annotated_types.Ge):
            lo = m.ge
        elif isinstance(m, annotated_types.Gt):
            lo = m.gt + 1
        elif isinstance(m, annotated_types.Le):
            hi = m.le
        elif isinstance(m, annotated_types.Lt):
            hi = m.lt - 1
    return lo, hi


# Every contract field stored in an integer column of the same name.
INT_FIELDS = [
    (contract, column.name, table)
    for contract, table in ((PlatformDescriptor, models.Platform), (Measurement, models.Measurement))
    for column in table.__table__.c
    if isinstance(column.type, (Integer, BigInteger)) and not column.primary_key and column.name in contract.model_fields
]


@pytest.mark.parametrize("contract,name,table", INT_FIELDS, ids=[f"{c.__name__}.{n}" for c, n, _ in INT_FIELDS])
def test_every_integer_field_fits_its_column(contract, name, table):
    column_type = type(table.__table__.c[name].type)
    lo, hi = _bounds(contract.model_fields[name])
    assert lo is not None and hi is not None, f"{contract.__name__}.{name} is unbounded"
    assert -COLUMN_MAX[column_type] - 1 <= lo and hi <= COLUMN_MAX[column_type], (name, column_type, lo, hi)


def test_integer_fields_are_all_checked():
    names = {(c.__name__, n) for c, n, _ in INT_FIELDS}
    assert {
        ("PlatformDescriptor", "memory_bytes"),
        ("PlatformDescriptor", "l2_bytes"),
        ("PlatformDescriptor", "cores"),
        ("Measurement", "n"),
        ("Measurement", "throttle_reasons"),
        ("Measurement", "samples_discarded"),
    } <= names
    assert MAX_DIM <= COLUMN_MAX[Integer]  # a shape's swept value is stored in measurements.x (INTEGER)


# ---- the edges stored and read back --------------------------------------------------------


def widest_platform() -> PlatformDescriptor:
    texts = {name: TEXT for name, info in PlatformDescriptor.model_fields.items() if info.annotation in (str, str | None)}
    return PlatformDescriptor(
        **texts
        | {
            "device_kind": "cuda",
            "sm_count": 100_000,
            "cores": 100_000,
            "threads": 100_000,
            "memory_bytes": 2**63 - 1,
            "l2_bytes": 2**63 - 1,
            "tf32_allowed": True,
            # The dtype facts an agent measures, stored beside the identity: every dtype, ratios at their edges.
            "native_dtypes": ["float16", "bfloat16", "float32"],
            "fast_dtype": "bfloat16",
            "dtype_speed": {"float16": math.ulp(0.0), "bfloat16": 1e6, "float32": 1.0},
        }
    )


def narrowest_platform() -> PlatformDescriptor:
    return PlatformDescriptor(
        device_kind="cpu", device_name="x", sm_count=1, cores=1, threads=1, memory_bytes=0, l2_bytes=0, tf32_allowed=False
    )


def top_row() -> Measurement:
    return Measurement(
        id=uuid.uuid4(),
        op="gemm",
        dtype="float32",
        shape={"m": MAX_DIM, "n": MAX_DIM, "k": MAX_DIM},
        sweep_axis="n",
        median_us=MAX_LATENCY_US,
        p10_us=MAX_LATENCY_US,
        p90_us=MAX_LATENCY_US,
        mean_us=MAX_LATENCY_US,
        n=10_000_000,
        timer=TEXT,
        backend=TEXT,
        kernel=TEXT,
        measured_at=at(LATEST),
        stop="max_samples",
        samples_discarded=10_000_000,
        sm_clock_mhz=100_000,
        throttle_reasons=2**62,
    )


def bottom_row() -> Measurement:
    tiny = math.ulp(0.0)  # the smallest latency above zero
    return Measurement(
        id=uuid.uuid4(),
        op="gemm",
        dtype="float16",
        shape={"m": 1, "n": 1, "k": 1},
        sweep_axis="m",
        median_us=tiny,
        p10_us=tiny,
        p90_us=tiny,
        mean_us=tiny,
        n=1,
        timer="t",
        backend="",
        kernel="",
        measured_at=at(EARLIEST),
        stop="spread",
        samples_discarded=0,
        sm_clock_mhz=0,
        throttle_reasons=0,
    )


def offset_rows() -> list[Measurement]:
    """The same edges written with offsets: exactly the earliest and latest UTC values."""
    return [
        f.measurement(8, measured_at=datetime.fromisoformat("0001-01-01T14:00:00+14:00")),
        f.measurement(16, measured_at=datetime.fromisoformat("9999-12-31T13:59:59.999999-10:00")),
    ]


def edge_batches() -> list[tuple[Batch, str]]:
    """(batch, the run's started_at as sent)."""
    out = []
    for plat, started, rows in (
        (widest_platform(), LATEST, [top_row()]),
        (narrowest_platform(), EARLIEST, [bottom_row(), *offset_rows()]),
    ):
        run = RunInfo(id=uuid.uuid4(), agent=TEXT, plan=TEXT, agent_version=TEXT, started_at=at(started))
        out.append((Batch(id=uuid.uuid4(), platform=plat, run=run, measurements=rows), started))
    return out


def post(client, b: Batch, token: str, layout: str):  # type: ignore[no-untyped-def]
    if layout == "rows":
        return client.post("/v1/batches", json=f.body(b), headers=f.auth(token))
    return client.post("/v1/batches", content=json.dumps(f.columns_body(b)), headers=f.auth(token) | f.COLUMNS)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_edges_are_stored_and_read_back_exactly(layout, client, session, ingest_token):
    for b, started in edge_batches():
        r = post(client, b, ingest_token, layout)
        assert r.status_code == 201, r.text
        assert r.json()["inserted"] == len(b.measurements)
        again = post(client, b, ingest_token, layout)  # a re-send stores nothing twice
        assert again.status_code == 200 and again.json()["inserted"] == 0, again.text

        got = client.get(f"/v1/platforms/{b.platform.fingerprint()}")
        assert got.status_code == 200, got.text
        assert got.json()["descriptor"] == b.platform.model_dump(mode="json")  # the dtype facts too, at their edges

        page = client.get("/v1/measurements", params={"run": str(b.run.id)})
        assert page.status_code == 200, page.text
        items = {uuid.UUID(item["uuid"]): item for item in page.json()["items"]}
        assert items.keys() == {m.id for m in b.measurements}
        for m in b.measurements:
            item = items[m.id]
            sent = m.model_dump(mode="json", exclude={"id", "measured_at"})
            assert {k: item[k] for k in sent} == sent
            assert at(item["measured_at"]) == m.measured_at

        session.rollback()
        run = session.get(models.Run, b.run.id)  # no read endpoint for runs: the row itself
        assert run.started_at == at(started) and run.plan == TEXT
        assert session.scalar(select(models.Agent.name).where(models.Agent.id == run.agent_id)) == TEXT

    every = client.get("/v1/measurements", params={"limit": 5000})  # every page loads, for every reader
    assert every.status_code == 200 and every.json()["total"] == 4


# ---- one step past the edges ----------------------------------------------------------------

NEXT_LATENCY = math.nextafter(MAX_LATENCY_US, math.inf)
JUST_BEFORE = "0001-01-01T00:59:59.999999+01:00"  # 1 us before 0001-01-01T00:00:00Z
JUST_AFTER = "9999-12-31T14:00:00-10:00"  # 1 us after 9999-12-31T23:59:59.999999Z
LONG = "€" * 201

# (where in the batch, value): the field is named by that path in both layouts.
PLATFORM_RUN_CASES = [
    ("platform.device_name", ""),
    ("platform.device_name", LONG),
    ("platform.isa", LONG),
    ("platform.torch_version", LONG),
    ("platform.compute_capability", LONG),
    ("platform.sm_count", 0),
    ("platform.sm_count", 100_001),
    ("platform.cores", 0),
    ("platform.cores", 100_001),
    ("platform.threads", 0),
    ("platform.threads", 100_001),
    ("platform.memory_bytes", -1),
    ("platform.memory_bytes", 2**63),
    ("platform.l2_bytes", -1),
    ("platform.l2_bytes", 2**63),
    ("platform.memory_bytes", 2**64),
    ("run.agent", ""),
    ("run.agent", LONG),
    ("run.plan", LONG),
    ("run.agent_version", LONG),
    ("run.started_at", JUST_BEFORE),
    ("run.started_at", JUST_AFTER),
    ("run.started_at", "9999-12-31T23:59:59-14:00"),
    ("run.started_at", "0001-01-01T00:00:00+14:00"),
]
ROW_CASES = [
    ("shape.m", 0),
    ("shape.m", MAX_DIM + 1),
    ("shape.k", 2**31),
    ("shape.n", 2**63),
    ("median_us", 0.0),
    ("median_us", NEXT_LATENCY),
    ("p10_us", NEXT_LATENCY),
    ("p90_us", NEXT_LATENCY),
    ("mean_us", NEXT_LATENCY),
    ("n", 0),
    ("n", 10_000_001),
    ("n", 2**63),
    ("timer", ""),
    ("timer", LONG),
    ("backend", LONG),
    ("kernel", LONG),
    ("measured_at", JUST_BEFORE),
    ("measured_at", JUST_AFTER),
    ("measured_at", "0001-01-01T00:00:00+01:00"),
    ("samples_discarded", -1),
    ("samples_discarded", 10_000_001),
    ("sm_clock_mhz", -1),
    ("sm_clock_mhz", 100_001),
    ("throttle_reasons", -1),
    ("throttle_reasons", 2**62 + 1),
    ("throttle_reasons", 2**63),
    # A figure is a JSON number: not true, not text (lax pydantic would read them as 1 and 10).
    ("median_us", True),
    ("p90_us", "1e6"),
    ("n", True),
    ("n", "10"),
    ("n", 10.0),
    ("busy_cores", True),
    ("sm_clock_mhz", True),
    ("throttle_reasons", False),
    ("samples_discarded", "1"),
]


def _put(body: dict, path: str, value: Any) -> None:
    node = body
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value


def _nothing_stored(session) -> bool:  # type: ignore[no-untyped-def]
    session.rollback()
    return all(session.scalar(select(func.count()).select_from(t)) == 0 for t in (models.Measurement, models.Platform, models.Run))


def _refused(client, session, token, body, headers, field):  # type: ignore[no-untyped-def]
    r = client.post("/v1/batches", content=json.dumps(body), headers=f.auth(token) | headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "ValidationError"
    assert field in [d["field"] for d in r.json()["detail"]], r.json()["detail"]
    assert _nothing_stored(session)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_one_step_past_each_edge_is_refused_naming_the_field(layout, client, session, ingest_token):
    b = f.batch(rows=1)
    plain = {"content-type": "application/json"}
    make, headers = (f.body, plain) if layout == "rows" else (f.columns_body, f.COLUMNS)
    for path, value in PLATFORM_RUN_CASES:
        body = make(b)
        _put(body, path, value)
        _refused(client, session, ingest_token, body, headers, f"body.{path}")
    for name, value in ROW_CASES:
        body = make(b)
        if layout == "rows":
            _put(body, f"measurements.0.{name}", value)
            field = f"body.measurements.0.{name}"
        else:
            _put(body, f"measurements.{name}", [value])
            field = f"body.measurements.{name}.0"
        _refused(client, session, ingest_token, body, headers, field)
    assert client.get("/v1/measurements").status_code == 200  # readers never see a half-stored row
