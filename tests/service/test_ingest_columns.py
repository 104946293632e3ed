"""The column layout of a batch: stored exactly as the same rows, checked as strictly, named as clearly."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest
from sqlalchemy import func, select

from gac.service.models import Measurement, Platform
from tests import factories as f


def post_columns(client, doc, token):  # type: ignore[no-untyped-def]
    return client.post("/v1/batches", content=json.dumps(doc), headers=f.auth(token) | f.COLUMNS)


def nothing_stored(session) -> bool:  # type: ignore[no-untyped-def]
    session.rollback()
    return (
        session.scalar(select(func.count()).select_from(Measurement)) == 0
        and session.scalar(select(func.count()).select_from(Platform)) == 0
    )


def mixed_batch():  # type: ignore[no-untyped-def]
    """Two ops (so shape columns hold nulls), optional fields set on some rows only."""
    b = f.batch(rows=6)
    rows = list(b.measurements)
    rows[1] = rows[1].model_copy(update={"backend": "flash", "stop": "spread", "samples_discarded": 2})
    rows += [f.measurement(n, op="sdpa") for n in (64, 72, 80)]
    rows[-1] = rows[-1].model_copy(update={"sm_clock_mhz": 1410, "throttle_reasons": 4, "kernel": "k1"})
    return b.model_copy(update={"measurements": rows})


def test_columns_store_exactly_what_rows_store(client, session, ingest_token):
    b = mixed_batch()
    r = post_columns(client, f.columns_body(b), ingest_token)
    assert r.status_code == 201, r.text
    assert (r.json()["inserted"], r.json()["duplicates"]) == (9, 0)

    session.rollback()
    stored = {m.uuid: m for m in session.scalars(select(Measurement))}
    assert stored.keys() == {m.id for m in b.measurements}
    page = client.get("/v1/measurements", params={"limit": 100}).json()["items"]
    shapes = {uuid.UUID(item["uuid"]): (item["shape"], item["op"], item["sweep_axis"]) for item in page}
    for m in b.measurements:
        row = stored[m.id]
        assert shapes[m.id] == (m.shape, m.op.value, m.sweep_axis)
        assert (row.x, row.median_us, row.p10_us, row.p90_us, row.mean_us, row.n, row.timer) == (
            m.x,
            m.median_us,
            m.p10_us,
            m.p90_us,
            m.mean_us,
            m.n,
            m.timer,
        )
        assert (row.backend, row.kernel, row.stop, row.samples_discarded, row.sm_clock_mhz, row.throttle_reasons) == (
            m.backend,
            m.kernel,
            m.stop,
            m.samples_discarded,
            m.sm_clock_mhz,
            m.throttle_reasons,
        )
        assert row.measured_at == m.measured_at and row.run_id == b.run.id and row.batch_id == b.id


def test_measured_at_left_out_is_when_the_service_read_it(client, session, ingest_token):
    doc = f.columns_body(f.batch(rows=3))
    del doc["measurements"]["measured_at"]
    before = datetime.now().astimezone()
    assert post_columns(client, doc, ingest_token).status_code == 201
    session.rollback()
    assert all(m.measured_at >= before for m in session.scalars(select(Measurement)))


@pytest.mark.parametrize("first", ["rows", "columns"])
def test_a_batch_resent_in_the_other_layout_is_the_same_batch(first, client, session, ingest_token):
    b = mixed_batch()
    sends = {
        "rows": lambda: client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)),
        "columns": lambda: post_columns(client, f.columns_body(b), ingest_token),
    }
    assert sends[first]().status_code == 201
    again = sends["columns" if first == "rows" else "rows"]()
    assert again.status_code == 200, again.text
    assert (again.json()["inserted"], again.json()["duplicates"], again.json()["replay"]) == (0, 9, True)
    session.rollback()
    assert session.scalar(select(func.count()).select_from(Measurement)) == 9


def _at(doc: dict, path: str):  # type: ignore[no-untyped-def]
    node = doc
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    return node, (int(parts[-1]) if parts[-1].isdigit() else parts[-1])


def _set(path: str, value):  # type: ignore[no-untyped-def]
    def apply(doc: dict) -> None:
        node, key = _at(doc, path)
        node[key] = value

    return apply


def _drop(path: str):  # type: ignore[no-untyped-def]
    def apply(doc: dict) -> None:
        node, key = _at(doc, path)
        del node[key]

    return apply


# Row 3 of 5 (a gemm batch sweeping n) broken one way each; the field the error must name, and
# for the rules across a row's fields, the words its message must hold.
CASES = {
    "negative latency": (_set("measurements.median_us.3", -3.0), "measurements.median_us.3", None),
    "infinite latency": (_set("measurements.p90_us.3", "Infinity"), "measurements.p90_us.3", None),
    "zero dim": (_set("measurements.shape.m.3", 0), "measurements.shape.m.3", None),
    "fractional dim": (_set("measurements.shape.k.3", 64.5), "measurements.shape.k.3", None),
    "unknown op": (_set("measurements.op.3", "conv2d"), "measurements.op.3", None),
    "bad row id": (_set("measurements.id.3", "not-a-uuid"), "measurements.id.3", None),
    "zero samples": (_set("measurements.n.3", 0), "measurements.n.3", None),
    "unknown shape field": (_set("measurements.shape.colour", [1, 1, 1, 1, 1]), "measurements.shape.colour.[key]", None),
    "unknown column": (_set("measurements.colour", [1, 1, 1, 1, 1]), "measurements.colour", None),
    "missing column": (_drop("measurements.mean_us"), "measurements.mean_us", None),
    "no rows": (lambda d: d.update(measurements={k: ([] if k != "shape" else {}) for k in d["measurements"]}), "measurements.id", None),
    "short column": (lambda d: d["measurements"]["p10_us"].pop(), "measurements", "p10_us has 4 values for 5 rows"),
    "short shape column": (lambda d: d["measurements"]["shape"]["k"].pop(), "measurements", "shape.k has 4 values"),
    "missing shape field": (_set("measurements.shape.k.3", None), "measurements", "row 3: shape for op 'gemm' is missing ['k']"),
    "extra shape field": (
        _set("measurements.shape.head_dim", [None, None, None, 64, None]),
        "measurements",
        "row 3: shape for op 'gemm' has unknown fields ['head_dim']",
    ),
    "sweep axis not in shape": (_set("measurements.sweep_axis.3", "k2"), "measurements", "row 3: sweep_axis 'k2'"),
    "percentiles out of order": (_set("measurements.p10_us.3", 1e6), "measurements", "row 3: latency percentiles out of order"),
    "rows document as columns": (_set("schema", "gac.batch/v1"), "schema", "Content-Type: application/json"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_column_is_named_and_nothing_is_stored(case, client, session, ingest_token):
    mutate, field, words = CASES[case]
    doc = f.columns_body(f.batch(rows=5))
    mutate(doc)
    r = post_columns(client, doc, ingest_token)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["field"] == f"body.{field}" for d in detail), detail
    if words:
        assert any(words in d["message"] for d in detail), detail
    assert nothing_stored(session)


def test_columns_sent_as_json_are_told_their_content_type(client, session, ingest_token):
    r = client.post("/v1/batches", json=f.columns_body(f.batch(rows=2)), headers=f.auth(ingest_token))
    hint = [d["message"] for d in f.refused(r, 422)["detail"] if d["field"] == "body.schema"]
    assert hint and "application/vnd.gac.batch-columns+json" in hint[0]
    assert nothing_stored(session)


def test_openapi_documents_both_layouts(client):
    doc = client.get("/openapi.json").json()
    content = doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]
    assert content["application/json"]["schema"]["$ref"] == "#/components/schemas/Batch"
    assert content["application/vnd.gac.batch-columns+json"]["schema"]["$ref"] == "#/components/schemas/ColumnBatch"
    columns = doc["components"]["schemas"]["MeasurementColumns"]
    assert {"id", "median_us", "shape", "measured_at"} <= columns["properties"].keys()
