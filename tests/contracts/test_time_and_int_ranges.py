"""The batch contracts refuse what the service could not store and read back, on the agent's side
too: times whose UTC value leaves years 1..9999, integers past the BIGINT columns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from gac.contracts.columns import ColumnBatch
from gac.contracts.measurements import MAX_INT64, RunInfo
from tests import factories as f


def tz(hours: int) -> timezone:
    return timezone(timedelta(hours=hours))


OUTSIDE = [
    datetime(1, 1, 1, tzinfo=tz(1)),  # 0000-12-31T23:00Z
    datetime(1, 1, 1, 13, 59, 59, 999999, tzinfo=tz(14)),
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=tz(-14)),
    datetime(9999, 12, 31, 23, 0, tzinfo=tz(-1)),  # 10000-01-01T00:00Z
]
INSIDE = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1, 1, 1, 14, tzinfo=tz(14)),  # exactly 0001-01-01T00:00Z
    datetime(1, 1, 1, tzinfo=tz(-14)),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=tz(14)),
    datetime(1, 1, 1),
    datetime(9999, 12, 31, 23, 59, 59, 999999),  # naive: taken as UTC
]


def _fields(err: ValidationError) -> list[tuple]:
    return [e["loc"] for e in err.errors()]


@pytest.mark.parametrize("value", OUTSIDE, ids=str)
def test_times_outside_utc_years_1_to_9999_are_refused(value):
    with pytest.raises(ValidationError) as err:
        RunInfo(id=uuid.uuid4(), agent="a", started_at=value)
    assert _fields(err.value) == [("started_at",)]
    with pytest.raises(ValidationError) as err:
        f.measurement(measured_at=value)
    assert _fields(err.value) == [("measured_at",)]
    doc = f.columns_body(f.batch(rows=2))
    doc["measurements"]["measured_at"][1] = value.isoformat()
    with pytest.raises(ValidationError) as err:
        ColumnBatch.model_validate(doc)
    assert _fields(err.value) == [("measurements", "measured_at", 1)]
    assert "0001-01-01T00:00:00Z" in str(err.value) or "9999-12-31T23:59:59.999999Z" in str(err.value)


@pytest.mark.parametrize("value", INSIDE, ids=str)
def test_times_inside_the_range_are_kept_as_sent(value):
    # The same instant; a time without an offset is read as UTC (the contract's rule), and made aware.
    want = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    assert RunInfo(id=uuid.uuid4(), agent="a", started_at=value).started_at == want
    assert f.measurement(measured_at=value).measured_at == want
    doc = f.columns_body(f.batch(rows=1))
    doc["measurements"]["measured_at"] = [value.isoformat()]
    assert ColumnBatch.model_validate(doc).measurements.measured_at == [want]
    assert want.tzinfo is not None


@pytest.mark.parametrize("name", ["memory_bytes", "l2_bytes"])
def test_byte_counts_stop_at_bigint(name):
    assert getattr(f.platform(**{name: MAX_INT64}), name) == MAX_INT64
    with pytest.raises(ValidationError) as err:
        f.platform(**{name: MAX_INT64 + 1})
    assert _fields(err.value) == [(name,)]
