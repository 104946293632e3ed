"""Every class of bad input gets a 4xx naming what is wrong, and nothing is written."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from gac.contracts.measurements import MAX_DIM
from gac.service.models import Measurement, Platform
from tests import factories as f


def nothing_stored(session) -> bool:  # type: ignore[no-untyped-def]
    session.rollback()
    return (
        session.scalar(select(func.count()).select_from(Measurement)) == 0
        and session.scalar(select(func.count()).select_from(Platform)) == 0
    )


def _set(path: str, value):  # type: ignore[no-untyped-def]
    """A mutation of the batch body: set the value at a dotted path (row 3 of 5 by default)."""

    def apply(body: dict) -> None:
        node = body
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        node[parts[-1]] = value

    return apply


def _drop(path: str):  # type: ignore[no-untyped-def]
    def apply(body: dict) -> None:
        node = body
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[parts[-1]]

    return apply


CASES = {
    "zero dim": (_set("measurements.3.shape.n", 0), "measurements.3"),
    "negative dim": (_set("measurements.3.shape.k", -8), "measurements.3"),
    "dim over bound": (_set("measurements.3.shape.m", MAX_DIM + 1), "measurements.3"),
    "fractional dim": (_set("measurements.3.shape.n", 64.5), "measurements.3.shape"),
    "negative latency": (_set("measurements.3.median_us", -3.0), "measurements.3.median_us"),
    "zero latency": (_set("measurements.3.mean_us", 0), "measurements.3.mean_us"),
    "infinite latency": (_set("measurements.3.p90_us", "Infinity"), "measurements.3.p90_us"),
    "percentiles out of order": (_set("measurements.3.p10_us", 1e6), "measurements.3"),
    "unknown op": (_set("measurements.3.op", "conv2d"), "measurements.3.op"),
    "unknown dtype": (_set("measurements.3.dtype", "int4"), "measurements.3.dtype"),
    "missing shape field": (_drop("measurements.3.shape.k"), "measurements.3"),
    "extra shape field": (_set("measurements.3.shape.head_dim", 64), "measurements.3"),
    "sweep axis not in shape": (_set("measurements.3.sweep_axis", "head_dim"), "measurements.3"),
    "zero samples": (_set("measurements.3.n", 0), "measurements.3.n"),
    "missing latency": (_drop("measurements.3.median_us"), "measurements.3.median_us"),
    "bad measurement id": (_set("measurements.3.id", "not-a-uuid"), "measurements.3.id"),
    "unknown device kind": (_set("platform.device_kind", "tpu"), "platform.device_kind"),
    "empty device name": (_set("platform.device_name", ""), "platform.device_name"),
    "unknown field": (_set("platform.colour", "blue"), "platform.colour"),
    "wrong schema": (_set("schema", "gac.batch/v0"), "schema"),
    "no rows": (_set("measurements", []), "measurements"),
    # Times whose UTC value leaves years 1..9999: no reader could load them back.
    "started_at after year 9999 in UTC": (_set("run.started_at", "9999-12-31T23:59:59-14:00"), "run.started_at"),
    "started_at before year 1 in UTC": (_set("run.started_at", "0001-01-01T00:00:00+14:00"), "run.started_at"),
    "measured_at before year 1 in UTC": (_set("measurements.3.measured_at", "0001-01-01T00:00:00+01:00"), "measurements.3.measured_at"),
    "measured_at after year 9999 in UTC": (_set("measurements.3.measured_at", "9999-12-31T23:00:00-01:00"), "measurements.3.measured_at"),
    # Integers past what a BIGINT holds (SQLite's driver overflows, Postgres refuses).
    "memory_bytes past BIGINT": (_set("platform.memory_bytes", 2**63), "platform.memory_bytes"),
    "l2_bytes past BIGINT": (_set("platform.l2_bytes", 2**63), "platform.l2_bytes"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_field_is_named_and_nothing_is_stored(case, client, session, ingest_token):
    mutate, field = CASES[case]
    body = f.body(f.batch(rows=5))
    mutate(body)
    r = client.post("/v1/batches", json=body, headers=f.auth(ingest_token))
    assert r.status_code == 422, r.text
    fields = [d["field"] for d in r.json()["detail"]]
    assert any(name.startswith(f"body.{field}") for name in fields), fields
    assert nothing_stored(session)


@pytest.mark.parametrize(
    "column,value",
    [("measured_at", "0001-01-01T00:00:00+01:00"), ("measured_at", "9999-12-31T23:59:59-14:00"), ("throttle_reasons", 2**63)],
)
def test_bad_column_value_is_named_and_nothing_is_stored(column, value, client, session, ingest_token):
    doc = f.columns_body(f.batch(rows=5))
    doc["measurements"][column] = [None, None, value, None, None]
    r = client.post("/v1/batches", content=json.dumps(doc), headers=f.auth(ingest_token) | f.COLUMNS)
    assert r.status_code == 422, r.text
    assert f"body.measurements.{column}.2" in [d["field"] for d in r.json()["detail"]]
    assert nothing_stored(session)


def test_a_refused_time_leaves_every_reader_working(client, ingest_token):
    good = f.batch(rows=3)
    assert client.post("/v1/batches", json=f.body(good), headers=f.auth(ingest_token)).status_code == 201
    bad = f.body(f.batch(rows=3))
    bad["measurements"][1]["measured_at"] = "0001-01-01T00:00:00+01:00"
    refused = f.refused(client.post("/v1/batches", json=bad, headers=f.auth(ingest_token)), 422)
    assert "body.measurements.1.measured_at" in [d["field"] for d in refused["detail"]], refused
    page = client.get("/v1/measurements")
    assert page.status_code == 200 and page.json()["total"] == 3


def test_nan_latency_is_refused(client, session, ingest_token):
    # JSON has no NaN; Python clients send the bare token, which must not slip through.
    text = json.dumps(f.body(f.batch(rows=5))).replace('"median_us": 10.5', '"median_us": NaN', 1)
    assert "NaN" in text
    r = client.post("/v1/batches", content=text, headers=f.auth(ingest_token) | {"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"].endswith("median_us")
    assert nothing_stored(session)


def test_malformed_json(client, session, ingest_token):
    headers = f.auth(ingest_token) | {"content-type": "application/json"}
    r = client.post("/v1/batches", content=b'{"schema": "gac.batch/v1", ', headers=headers)
    assert r.status_code == 422 and r.json()["error"] == "ValidationError"
    assert nothing_stored(session)


def test_too_many_rows_for_this_service(client, session, settings, ingest_token):
    r = client.post("/v1/batches", json=f.body(f.batch(rows=settings.max_batch_rows + 1)), headers=f.auth(ingest_token))
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "body.measurements"
    assert str(settings.max_batch_rows) in r.json()["detail"][0]["message"]
    assert nothing_stored(session)


def test_body_over_the_size_limit(database, tmp_path, session):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from gac.service.app import create_app
    from gac.service.settings import Settings
    from tests.fixtures.tokens import make_token

    small = Settings(database_url=database.url, secret_key="k", data_dir=tmp_path, max_body_bytes=4096)
    token = make_token(small, "ingest")
    app = create_app(small)
    with TestClient(app) as c:
        big = json.dumps(f.body(f.batch(rows=50))).encode()
        r = c.post("/v1/batches", content=big, headers=f.auth(token) | {"content-type": "application/json"})
        assert r.status_code == 413 and "4096" in r.json()["detail"]

        # A body without a declared length (chunked) is counted as it arrives.
        def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        r = c.post("/v1/batches", content=chunks(), headers=f.auth(token) | {"content-type": "application/json"})
        assert "4096" in f.refused(r, 413)["detail"]
    app.state.engine.dispose()
    assert nothing_stored(session)


@pytest.mark.parametrize(
    "path,params,field",
    [
        ("/v1/measurements", {"limit": 0}, "query.limit"),
        ("/v1/measurements", {"op": "conv"}, "query.op"),
        ("/v1/measurements", {"cursor": -1}, "query.cursor"),
        ("/v1/platforms", {"limit": 10_000}, "query.limit"),
        ("/v1/platforms/1/curve", {"op": "gemm", "dtype": "bfloat16", "axis": "q", "fixed": "m=1,k=2"}, "query.axis"),
        ("/v1/platforms/1/curve", {"op": "gemm", "dtype": "bfloat16", "axis": "n", "fixed": "m=x"}, "query.fixed"),
    ],
)
def test_bad_query_parameters(client, ingest_token, path, params, field):
    client.post("/v1/batches", json=f.body(f.batch(rows=2)), headers=f.auth(ingest_token))
    r = client.get(path, params=params)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_a_scalar_query_parameter_given_twice_is_refused_not_read_as_its_last_value(client, ingest_token):
    # Read as the last value, ?platform=a&platform=b would answer for b alone, as if a had been asked.
    client.post("/v1/batches", json=f.body(f.batch(rows=2)), headers=f.auth(ingest_token))
    r = client.get("/v1/measurements", params=[("limit", "5"), ("limit", "7"), ("op", "gemm")])
    detail = f.refused(r, 422)["detail"]
    assert [(d["field"], d["message"]) for d in detail] == [("query.limit", "given 2 times; this parameter takes one value")]
    assert client.get("/v1/measurements", params=[("limit", "5"), ("op", "gemm")]).status_code == 200
    r = client.get("/v1/jobs", params=[("status", "queued"), ("status", "leased")])  # a list: every value counts
    assert r.status_code == 200, r.text


def test_unknown_platform_is_404(client):
    r = client.get("/v1/platforms/" + "ab" * 32)
    assert r.status_code == 404 and r.json()["error"] == "NotFound"


def test_a_query_parameter_the_path_does_not_take_is_refused_not_ignored(client, read_token):
    # Ignored, ?kind=gpu (the parameter is device_kind) listed every platform as if the filter held.
    detail = f.refused(client.get("/v1/platforms", params={"kind": "gpu"}), 422)["detail"]
    assert [d["field"] for d in detail] == ["query.kind"] and "it takes: cursor, device_kind, limit, name" in detail[0]["message"], detail
    assert client.get("/v1/platforms", params={"device_kind": "cuda"}).status_code == 200
    # POST /v1/align reads its query itself: the same rule.
    doc = {"model": "m", "budget": {"ratio": 0.5}, "weights": [{"name": "a", "kind": "linear_out", "out_features": 8, "in_features": 8,
                                                               "dim": 4, "importance": 1}]}  # fmt: skip
    detail = f.refused(client.post("/v1/align", params={"dtpye": "float32"}, json=doc, headers=f.auth(read_token)), 422)["detail"]
    assert [d["field"] for d in detail] == ["query.dtpye"] and "this path takes no such parameter" in detail[0]["message"], detail
    twice = client.post("/v1/align", params=[("platform", "a"), ("platform", "b")], json=doc, headers=f.auth(read_token))
    assert [(d["field"], d["message"]) for d in f.refused(twice, 422)["detail"]] == [
        ("query.platform", "given 2 times; this parameter takes one value")
    ]
    # ?dtype= reads the spellings a manifest may use.
    ok = client.post("/v1/align", params={"dtype": "BF16"}, json=doc, headers=f.auth(read_token))
    assert ok.status_code == 201 and ok.json()["result"]["workload"]["dtype"] == "bfloat16", ok.text
    # Pages and health checks take any query (a link's tracking suffix, a monitor's cache-buster).
    assert client.get("/healthz", params={"ts": "1"}).status_code == 200


def test_a_jobs_body_is_read_as_every_json_body_is(client, admin_token, ingest_token):
    """As /v1/batches and /v1/align read theirs: a form's type or none is JSON, another format 415, a key twice 422."""
    plan = {"name": "p", "sweeps": [{"op": "gemm", "dtypes": ["float32"], "axis": "n", "fixed": {"m": 8, "k": 8}, "values": [8, 16]}]}
    create = json.dumps({"plan": plan, "priority": 5}).encode()
    for media in ("application/x-www-form-urlencoded", None):
        headers = f.auth(admin_token) | ({"Content-Type": media} if media else {})
        r = client.post("/v1/jobs", content=create, headers=headers)
        assert r.status_code == 201 and r.json()["priority"] == 5, (media, r.text)
    r = client.post("/v1/jobs", content=b"plan: p\n", headers={**f.auth(admin_token), "Content-Type": "application/yaml"})
    assert "the body is read as JSON (Content-Type: application/json), not application/yaml" in f.refused(r, 415)["detail"]
    twice = b'{"plan": ' + json.dumps(plan).encode() + b', "priority": 5, "priority": -5}'
    r = client.post("/v1/jobs", content=twice, headers={**f.auth(admin_token), "Content-Type": "application/json"})
    assert f.refused(r, 422)["detail"][0]["field"] == "body.priority"
    claim = json.dumps({"platform": f.platform().model_dump(mode="json"), "agent": "a"}).encode()
    r = client.post("/v1/jobs/claim", content=claim, headers={**f.auth(ingest_token), "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200 and r.json()["priority"] == 5, r.text
    assert client.get("/v1/jobs").json()["total"] == 2  # the refused ones stored nothing


def test_a_body_declared_in_another_format_is_415_not_read_as_json(client, session, read_token, ingest_token):
    doc = {"model": "m", "budget": {"ratio": 0.5}, "weights": [{"name": "a", "kind": "linear_out", "out_features": 8, "in_features": 8,
                                                               "dim": 4, "importance": 1}]}  # fmt: skip
    yaml_text = b"model: m\nbudget: {ratio: 0.5}\n"
    for media in ("application/yaml", "text/plain", "multipart/form-data; boundary=x"):
        r = client.post("/v1/align", content=yaml_text, headers={**f.auth(read_token), "Content-Type": media})
        body = f.refused(r, 415)
        assert body["error"] == "UnsupportedMediaType" and media.split(";")[0] in body["detail"], body
        assert "read a YAML manifest and send it as JSON" in body["detail"], body
    r = client.post("/v1/batches", content=b"\x1f\x8b", headers={**f.auth(ingest_token), "Content-Encoding": "gzip"})
    assert "send it without Content-Encoding (gzip)" in f.refused(r, 415)["detail"]  # not "invalid JSON"
    r = client.post("/v1/batches", content=b"op,dtype\n", headers={**f.auth(ingest_token), "Content-Type": "text/csv"})
    assert "a batch is read as JSON (Content-Type: application/json), not text/csv" in f.refused(r, 415)["detail"]
    assert nothing_stored(session)
    # JSON however declared: its type, a +json type, none, or a form's (what `curl -d` sends unless told otherwise).
    for media in ("application/json; charset=utf-8", "application/vnd.example+json", "application/x-www-form-urlencoded", None):
        headers = f.auth(read_token) | ({"Content-Type": media} if media else {})
        r = client.post("/v1/align", content=json.dumps(doc).encode(), headers=headers)
        assert r.status_code == 201, (media, r.text)
