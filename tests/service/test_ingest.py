"""Ingest: round trip, idempotent re-send, all-or-nothing."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import func, select

from gac.service.models import Measurement, UploadBatch
from tests import factories as f


def count(session) -> int:  # type: ignore[no-untyped-def]
    session.rollback()  # see the latest committed state
    return session.scalar(select(func.count()).select_from(Measurement))


def test_ingest_then_query_round_trip(client, session, ingest_token):
    b = f.batch(rows=25)
    r = client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    receipt = r.json()
    assert (receipt["inserted"], receipt["duplicates"], receipt["replay"]) == (25, 0, False)
    assert receipt["fingerprint"] == b.platform.fingerprint()

    page = client.get("/v1/measurements", params={"platform": b.platform.fingerprint(), "limit": 100}).json()
    assert page["total"] == 25
    sent = {m.id: m for m in b.measurements}
    for item in page["items"]:
        m = sent[uuid.UUID(item["uuid"])]
        assert item["shape"] == m.shape and item["median_us"] == m.median_us and item["p90_us"] == m.p90_us
        assert item["op"] == "gemm" and item["dtype"] == "bfloat16" and item["sweep_axis"] == "n"
    assert count(session) == 25


def test_resent_batch_stores_nothing_twice(client, session, ingest_token):
    b = f.batch(rows=12)
    first = client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    again = client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() | {"batch_id": None} == {
        "batch_id": None,
        "platform_id": first.json()["platform_id"],
        "fingerprint": b.platform.fingerprint(),
        "inserted": 0,
        "duplicates": 12,
        "replay": True,
    }
    assert count(session) == 12
    assert session.scalar(select(func.count()).select_from(UploadBatch)) == 1


def test_rows_resent_in_a_new_batch_are_counted_as_duplicates(client, session, ingest_token):
    b = f.batch(rows=10)
    client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    # An agent that re-batched its spool: half old rows, half new, under a new batch id.
    mixed = b.model_copy(update={"id": uuid.uuid4(), "measurements": b.measurements[:5] + f.batch(rows=5, start=100).measurements})
    r = client.post("/v1/batches", json=f.body(mixed), headers=f.auth(ingest_token))
    assert r.status_code == 201
    assert (r.json()["inserted"], r.json()["duplicates"]) == (5, 5)
    assert count(session) == 15
    stored = session.get_one(UploadBatch, mixed.id)  # the batch row records the split too
    assert (stored.inserted, stored.duplicates) == (5, 5)


def test_rows_resent_in_a_new_batch_for_another_platform_are_refused_not_counted_as_duplicates(client, session, ingest_token):
    """The same row ids and values under another platform would store nothing there, so "duplicates" would lose them."""
    b = f.batch(rows=4)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    ghost = f.platform(device_name="Ghost CPU")
    elsewhere = b.model_copy(update={"id": uuid.uuid4(), "platform": ghost, "run": b.run.model_copy(update={"id": uuid.uuid4()})})
    detail = f.refused(client.post("/v1/batches", json=f.body(elsewhere), headers=f.auth(ingest_token)), 409)["detail"]
    assert [e["field"] for e in detail[1:]] == [f"body.measurements.{i}" for i in range(4)]
    assert b.platform.fingerprint()[:16] in detail[1]["message"] and ghost.fingerprint()[:16] in detail[1]["message"]
    assert count(session) == 4 and client.get("/v1/platforms").json()["total"] == 1


def test_same_batch_id_with_other_content_is_a_conflict(client, session, ingest_token):
    b = f.batch(rows=3)
    client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    changed = b.model_copy(update={"measurements": f.batch(rows=3, start=50).measurements})
    r = client.post("/v1/batches", json=f.body(changed), headers=f.auth(ingest_token))
    assert r.status_code == 409 and r.json()["error"] == "Conflict"
    detail = r.json()["detail"]  # the batch, then each row that is not the stored one
    assert str(b.id) in detail[0]["message"]
    assert [e["field"] for e in detail[1:]] == [f"body.measurements.{i}" for i in range(3)]
    assert count(session) == 3


def test_same_batch_id_naming_another_platform_or_run_is_a_conflict_not_a_replay(client, session, ingest_token):
    """Its rows stay the stored batch's: a "replay" would tell the sender they are stored under its own platform or run
    (and name a platform this request created and rolled back)."""
    b = f.batch(rows=3)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    elsewhere = b.model_copy(update={"platform": f.platform(device_name="Ghost CPU"), "run": b.run.model_copy(update={"id": uuid.uuid4()})})
    r = client.post("/v1/batches", json=f.body(elsewhere), headers=f.auth(ingest_token))
    assert f.refused(r, 409)["error"] == "Conflict"
    fields = {e["field"]: e["message"] for e in r.json()["detail"][1:]}
    assert set(fields) == {"body.platform", "body.run.id"}
    assert b.platform.fingerprint()[:16] in fields["body.platform"] and str(b.run.id) in fields["body.run.id"]
    other_run = b.model_copy(update={"run": b.run.model_copy(update={"id": uuid.uuid4()})})
    r = client.post("/v1/batches", json=f.body(other_run), headers=f.auth(ingest_token))
    assert [e["field"] for e in f.refused(r, 409)["detail"][1:]] == ["body.run.id"]
    assert client.get("/v1/platforms").json()["total"] == 1 and count(session) == 3


def test_one_bad_row_rejects_the_whole_batch(client, session, ingest_token):
    body = f.body(f.batch(rows=10))
    body["measurements"][7]["p90_us"] = -1.0
    r = client.post("/v1/batches", json=body, headers=f.auth(ingest_token))
    assert f.refused(r, 422)["detail"][0]["field"] == "body.measurements.7.p90_us"
    assert count(session) == 0


def test_a_run_belongs_to_one_platform(client, session, ingest_token):
    run = uuid.uuid4()
    client.post("/v1/batches", json=f.body(f.batch(rows=2, run_id=run)), headers=f.auth(ingest_token))
    other = f.batch(rows=2, start=10, run_id=run, plat=f.platform(device_name="Another CPU"))
    r = client.post("/v1/batches", json=f.body(other), headers=f.auth(ingest_token))
    assert r.status_code == 409 and "another platform" in r.json()["detail"]
    assert count(session) == 2


def test_same_platform_from_two_batches_is_one_platform(client, ingest_token):
    client.post("/v1/batches", json=f.body(f.batch(rows=2)), headers=f.auth(ingest_token))
    client.post("/v1/batches", json=f.body(f.batch(rows=2, start=5)), headers=f.auth(ingest_token))
    client.post("/v1/batches", json=f.body(f.batch(rows=2, plat=f.platform(torch_version="2.14.0"))), headers=f.auth(ingest_token))
    platforms = client.get("/v1/platforms").json()
    assert platforms["total"] == 2
    assert sorted(p["runs"] for p in platforms["items"]) == [1, 2]


def test_platform_dtype_fields_are_accepted_and_do_not_split_the_platform(client, ingest_token):
    # An agent that reports its dtypes is the same platform as one that does not.
    plain = f.platform()
    with_dtypes = f.platform(native_dtypes=[], fast_dtype="float32", dtype_speed={"float32": 1.0, "bfloat16": 41.5})
    r = client.post("/v1/batches", json=f.body(f.batch(rows=2, plat=with_dtypes)), headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    assert r.json()["fingerprint"] == plain.fingerprint()
    client.post("/v1/batches", json=f.body(f.batch(rows=2, start=5, plat=plain)), headers=f.auth(ingest_token))
    platforms = client.get("/v1/platforms").json()
    assert platforms["total"] == 1
    descriptor = platforms["items"][0]["descriptor"]
    assert descriptor["device_name"] == plain.device_name
    # Kept (the latest report), and a batch without them leaves them as they were.
    assert (descriptor["fast_dtype"], descriptor["dtype_speed"]) == ("float32", {"float32": 1.0, "bfloat16": 41.5})
    # A later agent's measurement replaces them.
    later = f.platform(native_dtypes=["bfloat16"], fast_dtype="bfloat16", dtype_speed={"float32": 1.0, "bfloat16": 0.4})
    client.post("/v1/batches", json=f.body(f.batch(rows=2, start=9, plat=later)), headers=f.auth(ingest_token))
    descriptor = client.get(f"/v1/platforms/{plain.fingerprint()}").json()["descriptor"]
    assert (descriptor["native_dtypes"], descriptor["fast_dtype"], descriptor["dtype_speed"]["bfloat16"]) == (["bfloat16"], "bfloat16", 0.4)


def test_text_fields_survive_storage_byte_for_byte(client, ingest_token):
    # The Postgres path writes COPY text itself: tabs, newlines and backslashes must round-trip.
    odd = "cuda-events\t+ l2\\flush\nline2\r"
    b = f.batch(rows=1)
    b = b.model_copy(update={"measurements": [f.measurement(64, timer=odd, backend="flash\\2", kernel=None)]})
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    item = client.get("/v1/measurements").json()["items"][0]
    assert (item["timer"], item["backend"], item["kernel"]) == (odd, "flash\\2", None)
    assert item["measured_at"].replace("Z", "+00:00")[:19] == b.measurements[0].measured_at.isoformat()[:19]


def test_ids_of_a_rolled_back_batch_are_not_remembered(client, session, ingest_token):
    """The ingest path remembers platform, agent and run ids to skip their upserts; ids written
    by a transaction that then rolled back (here: a batch id reused for other rows) must not be
    remembered, or the next batch would point at rows that do not exist."""
    first = f.batch(rows=2)
    client.post("/v1/batches", json=f.body(first), headers=f.auth(ingest_token))
    newcomer = f.platform(device_name="Rolled Back CPU")
    clash = f.batch(rows=2, start=30, plat=newcomer).model_copy(update={"id": first.id})
    f.refused(client.post("/v1/batches", json=f.body(clash), headers=f.auth(ingest_token)), 409)
    again = f.batch(rows=3, start=40, plat=newcomer, run_id=clash.run.id)
    r = client.post("/v1/batches", json=f.body(again), headers=f.auth(ingest_token))
    assert r.status_code == 201 and r.json()["inserted"] == 3
    listed = client.get("/v1/platforms").json()
    items = listed["items"] if isinstance(listed, dict) else listed
    assert {p["id"] for p in items if p["descriptor"]["device_name"] == "Rolled Back CPU"} == {r.json()["platform_id"]}
    assert count(session) == 5


def test_a_key_given_twice_is_refused_naming_where_in_either_layout(client, session, ingest_token):
    """JSON parsers keep a repeated key's last value, and a stored row never changes: which one was meant is not ours
    to guess."""
    b = f.batch(rows=2)
    rows = json.dumps(f.body(b))
    twice = rows.replace('"shape": {', '"shape": {"k": 999, ', 1)  # the first row's shape gives k twice
    assert twice != rows and '"k": 999, "k": ' in twice
    r = client.post("/v1/batches", content=twice, headers=f.auth(ingest_token) | {"content-type": "application/json"})
    [error] = f.refused(r, 422)["detail"]
    assert (error["field"], error["type"]) == ("body.measurements.0.shape.k", "duplicate_key")
    columns = json.dumps(f.columns_body(b))
    twice = columns.replace('"schema": ', '"schema": "x", "schema": ', 1)
    r = client.post("/v1/batches", content=twice, headers=f.auth(ingest_token) | f.COLUMNS)
    assert [(e["field"], e["type"]) for e in f.refused(r, 422)["detail"]] == [("body.schema", "duplicate_key")]
    assert count(session) == 0


def test_a_body_that_starts_with_a_byte_order_mark_is_read_as_its_document(client, session, ingest_token):
    """JSON's RFC lets a parser skip a BOM (a file saved by some editors starts with one, and curl sends it on)."""
    body = b"\xef\xbb\xbf" + json.dumps(f.body(f.batch(rows=2))).encode()
    r = client.post("/v1/batches", content=body, headers=f.auth(ingest_token) | {"content-type": "application/json"})
    assert r.status_code == 201, r.text
    assert count(session) == 2
