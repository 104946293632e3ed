"""Builders of valid wire objects for tests; each test changes what it is about."""

from __future__ import annotations

import uuid
from typing import Any

from gac.contracts.columns import COLUMNS_MEDIA_TYPE, ColumnBatch
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo


def platform(**over: Any) -> PlatformDescriptor:
    fields: dict[str, Any] = {"device_kind": "cpu", "device_name": "Test CPU", "isa": "avx2", "cores": 2, "torch_version": "2.13.0"}
    return PlatformDescriptor(**(fields | over))


def measurement(n: int = 64, *, op: str = "gemm", median: float | None = None, **over: Any) -> Measurement:
    shape = {"gemm": {"m": 128, "n": n, "k": 256}, "sdpa": {"b": 1, "h": 8, "s": 128, "head_dim": n}}[op]
    axis = {"gemm": "n", "sdpa": "head_dim"}[op]
    med = median if median is not None else 10.0 + n / 8
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "op": op,
        "dtype": "bfloat16",
        "shape": shape,
        "sweep_axis": axis,
        "median_us": med,
        "p10_us": med * 0.95,
        "p90_us": med * 1.05,
        "mean_us": med,
        "n": 20,
        "timer": "test",
    }
    return Measurement(**(fields | over))


def batch(rows: int = 10, *, start: int = 1, plat: PlatformDescriptor | None = None, run_id: uuid.UUID | None = None) -> Batch:
    return Batch(
        id=uuid.uuid4(),
        platform=plat or platform(),
        run=RunInfo(id=run_id or uuid.uuid4(), agent="test-agent", plan="test"),
        measurements=[measurement(n) for n in range(start, start + rows)],
    )


def body(b: Batch) -> dict[str, Any]:
    return b.model_dump(mode="json", by_alias=True)


COLUMNS = {"content-type": COLUMNS_MEDIA_TYPE}


def columns_body(b: Batch) -> dict[str, Any]:
    """The same batch laid out by column (what the agent sends, with COLUMNS as Content-Type)."""
    return ColumnBatch.of(b).model_dump(mode="json", by_alias=True, exclude_none=True)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# The `error` each status is answered with (service/errors.py); a refusal's body is always {"error", "detail"}.
ERRORS = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "PayloadTooLarge",
    422: "ValidationError",
    429: "TooManyRequests",
    503: "DatabaseUnavailable",
}


def refused(r: Any, status: int, error: str | None = None) -> dict[str, Any]:
    """Assert `r` (an httpx or TestClient response) is a refusal with this status and the documented
    body: exactly {"error", "detail"}, a non-empty detail, and `error` (by default the status's usual
    name in ERRORS). Returns the body for further checks on its detail."""
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error", "detail"} and body["detail"], body
    expected = error or ERRORS.get(status)
    assert expected is None or body["error"] == expected, body
    return body


def cli_env(settings: Any, data_dir: Any) -> dict[str, str]:
    """The environment a `gac` subprocess needs to use these settings' database and key."""
    import os

    return os.environ | {
        "GAC_DATABASE_URL": settings.url,
        "GAC_SECRET_KEY": settings.secret_key.get_secret_value(),
        "GAC_DATA_DIR": str(data_dir),
    }


def agent_run_args(service: Any, spool: Any, *extra: str) -> list[str]:
    """`gac agent run` against a live service (tests/fixtures/live_service.py) with its ingest token, one
    timing thread and its own spool folder; `extra` adds --jobs, --plan FILE, --quiet, ..."""
    return ["agent", "run", "--server", service.url, "--token", service.ingest_token, "--threads", "1", "--spool-dir", str(spool), *extra]
