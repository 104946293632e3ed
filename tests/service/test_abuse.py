"""Abuse and edge cases of issue 31 that need no live server: corrected values re-sent (never
dropped in silence), naive timestamps in both ingest layouts, LIKE patterns in a job's device
filter, NUL in the text fields of every request model, and /readyz while the database is away."""

from __future__ import annotations

import uuid
from datetime import UTC
from typing import Any

import pytest
from sqlalchemy import func, select

from gac.service.models import Measurement as StoredRow
from tests import factories as f
from tests.service.test_jobs import PLAN, claim, enqueue


def _post(client, token: str, body: dict[str, Any], columns: bool = False):  # type: ignore[no-untyped-def]
    headers = {**f.auth(token), **(f.COLUMNS if columns else {})}
    return client.post("/v1/batches", json=body, headers=headers)


def _count(session) -> int:  # type: ignore[no-untyped-def]
    return session.scalar(select(func.count()).select_from(StoredRow))


def _changed(b, i: int, **values: Any):  # type: ignore[no-untyped-def]
    rows = list(b.measurements)
    rows[i] = rows[i].model_copy(update=values)
    return b.model_copy(update={"measurements": rows})


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_a_resend_with_other_values_is_a_conflict_naming_the_rows(client, session, ingest_token, columns):
    b = f.batch(rows=6)
    body = f.columns_body if columns else f.body
    assert _post(client, ingest_token, body(b), columns).status_code == 201
    fixed = _changed(b, 4, median_us=b.measurements[4].median_us * 2, p90_us=b.measurements[4].median_us * 3)
    r = _post(client, ingest_token, body(fixed), columns)
    detail = f.refused(r, 409)["detail"]
    assert str(b.id) in detail[0]["message"] and "new row" in detail[0]["message"]  # says how to send a correction
    assert [e["field"] for e in detail[1:]] == ["body.measurements.4"]
    assert str(b.measurements[4].id) in detail[1]["message"] and "median_us" in detail[1]["message"]
    assert _count(session) == 6
    stored = session.scalar(select(StoredRow.median_us).where(StoredRow.uuid == b.measurements[4].id))
    assert stored == b.measurements[4].median_us  # the first write stands, and the client was told


def test_the_same_rows_in_another_order_are_a_replay(client, session, ingest_token):
    b = f.batch(rows=8)
    assert _post(client, ingest_token, f.body(b)).status_code == 201
    shuffled = b.model_copy(update={"measurements": list(reversed(b.measurements))})
    r = _post(client, ingest_token, f.body(shuffled))
    assert r.status_code == 200 and r.json()["replay"] is True
    # And in the other layout, in yet another order: still the same batch.
    rotated = b.model_copy(update={"measurements": b.measurements[3:] + b.measurements[:3]})
    r = _post(client, ingest_token, f.columns_body(rotated), True)
    assert r.status_code == 200 and r.json()["replay"] is True
    assert _count(session) == 8


def test_a_new_batch_with_stored_row_ids_and_other_values_is_a_conflict(client, session, ingest_token):
    b = f.batch(rows=5)
    assert _post(client, ingest_token, f.body(b)).status_code == 201
    new_rows = f.batch(rows=3, start=100).measurements
    moved = _changed(b, 1, mean_us=b.measurements[1].mean_us + 1.0)
    again = moved.model_copy(update={"id": uuid.uuid4(), "measurements": moved.measurements[:2] + new_rows})
    detail = f.refused(_post(client, ingest_token, f.body(again)), 409)["detail"]
    assert [e["field"] for e in detail[1:]] == ["body.measurements.1"] and "mean_us" in detail[1]["message"]
    assert _count(session) == 5  # nothing of the refused batch, its new rows included


def test_a_new_batch_with_stored_rows_of_the_same_values_says_duplicates(client, session, ingest_token):
    b = f.batch(rows=5)
    assert _post(client, ingest_token, f.body(b)).status_code == 201
    again = b.model_copy(update={"id": uuid.uuid4(), "measurements": b.measurements[:2] + f.batch(rows=3, start=100).measurements})
    r = _post(client, ingest_token, f.body(again))
    assert r.status_code == 201 and (r.json()["inserted"], r.json()["duplicates"]) == (3, 2)
    assert _count(session) == 8


def test_a_row_id_twice_in_one_batch_is_refused(client, session, ingest_token):
    b = f.batch(rows=3)
    twice = b.model_copy(update={"measurements": [*b.measurements, b.measurements[0].model_copy(update={"median_us": 9.0, "p90_us": 9.0})]})
    detail = f.refused(_post(client, ingest_token, f.body(twice)), 422)["detail"]
    assert detail[0]["field"] == "body.measurements.3"
    assert _count(session) == 0


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_a_naive_timestamp_is_utc_in_both_layouts(client, session, ingest_token, columns):
    from datetime import datetime

    b = f.batch(rows=3)
    body = f.columns_body(b) if columns else f.body(b)
    if columns:
        body["measurements"]["measured_at"] = ["2026-11-26T12:00:00"] * 3
    else:
        for row in body["measurements"]:
            row["measured_at"] = "2026-11-26T12:00:00"
    body["run"]["started_at"] = "2026-11-26T11:00:00"
    r = _post(client, ingest_token, body, columns)
    assert r.status_code == 201, r.text
    stored = session.scalars(select(StoredRow.measured_at)).all()
    want = datetime(2026, 11, 26, 12, tzinfo=UTC)
    assert [t if t.tzinfo else t.replace(tzinfo=UTC) for t in stored] == [want] * 3
    # Re-sent with the offset spelled out, it is the same batch.
    assert _post(client, ingest_token, f.body(b), False).status_code == 200


@pytest.mark.parametrize("pattern", ["H_00", "%", "h%0", "_"])
def test_a_like_pattern_in_a_device_filter_matches_only_itself(client, admin_token, ingest_token, pattern):
    h200 = f.platform(device_kind="cuda", device_name="NVIDIA H200", compute_capability="9.0")
    enqueue(client, admin_token, match={"device_name": pattern})
    assert claim(client, ingest_token, plat=h200).status_code == 204
    literal = f.platform(device_kind="cuda", device_name=f"Lab {pattern} card")
    assert claim(client, ingest_token, plat=literal).status_code == 200


def test_nul_is_refused_in_the_text_of_plans_and_manifests(client, admin_token, read_token):
    for where, plan in [
        ("body.plan.description", {**PLAN, "description": "a\x00b"}),
        ("body.plan.sweeps.0.label", {**PLAN, "sweeps": [{**PLAN["sweeps"][0], "label": "a\x00b"}]}),
    ]:
        detail = f.refused(client.post("/v1/jobs", json={"plan": plan}, headers=f.auth(admin_token)), 422)["detail"]
        assert where in [e["field"] for e in detail]
    manifest = {
        "schema": "gac.manifest/v1",
        "model": "m",
        "budget": {"ratio": 0.1},
        "workload": {"tokens": [128]},
        "weights": [
            {"name": "w", "kind": "linear_out", "out_features": 64, "in_features": 64, "dim": 40, "importance": 1, "group": "g\x00"}
        ],
    }
    r = client.post("/v1/align", json=manifest, headers=f.auth(read_token))
    detail = f.refused(r, 422)["detail"]
    assert any(e["field"].startswith("body.weights.0") and e["field"].endswith("group") for e in detail), detail


def test_readyz_while_the_database_is_away_says_when_to_retry(tmp_path):
    from fastapi.testclient import TestClient

    from gac.service.app import create_app
    from gac.service.settings import Settings
    from tests.fixtures.live_service import free_port

    away = Settings(database_url=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gac", secret_key="x", data_dir=tmp_path)
    app = create_app(away)
    try:
        r = TestClient(app).get("/readyz")  # no lifespan: it would refuse to start on this database
        assert f.refused(r, 503, "NotReady") and int(r.headers["retry-after"]) >= 1
    finally:
        app.state.engine.dispose()
