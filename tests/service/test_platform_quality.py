"""A platform's profile quality (GET /v1/platforms/{ref}/quality, the dashboard's "Profile quality"):
points stored and flagged by reason, the timing threads, and the load while profiling, from batches
stored through the real ingest path."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gac.client import Client
from gac.contracts.measurements import Batch, RunInfo
from gac.service.ingest import service as ingest_service
from gac.service.ingest.incoming import Incoming
from gac.service.ingest.service import content_hash
from tests import factories as f

PLAT = f.platform(device_name="Quality CPU", cores=8, threads=4)


def _run(day: int, rows: list, agent: str = "box") -> Batch:
    run = RunInfo(id=uuid.uuid4(), agent=agent, plan="quick", started_at=datetime(2026, 11, day, tzinfo=UTC))
    return Batch(id=uuid.uuid4(), platform=PLAT, run=run, measurements=rows)


def _batches() -> list[Batch]:
    m = f.measurement
    busy_run = _run(
        1,
        [
            m(56, median=91.0, busy_cores=0.2),
            m(60, median=23_957.0, p10_us=90.0, p90_us=24_500.0, quality="bimodal,busy", busy_cores=3.5),
            m(64, median=95.0, busy_cores=0.4),
            m(60, median=93.0, busy_cores=0.1),
        ],
    )
    quiet_run = _run(2, [m(68, median=97.0, busy_cores=0.0), m(72, median=400.0, quality="isolated", busy_cores=0.5)])
    old_agent = _run(3, [m(76, median=99.0, quality="busy")], agent="old")  # an agent that sends no load
    return [busy_run, quiet_run, old_agent]


@pytest.mark.filterwarnings("ignore:You should not use the 'timeout' argument with the TestClient")  # gac.client's timeout
def test_the_quality_counts_flags_by_reason_and_the_load_of_each_run(client, ingest_token):
    busy_run, quiet_run, old_agent = _batches()
    # Both wire layouts: the agent's columns and the rows.
    r = client.post("/v1/batches", json=f.columns_body(busy_run), headers={**f.auth(ingest_token), **f.COLUMNS})
    assert r.status_code == 201, r.text
    for b in (quiet_run, old_agent):
        assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    fp = PLAT.fingerprint()

    q = client.get(f"/v1/platforms/{fp}/quality").json()
    assert (q["threads"], q["cores"]) == (4, 8)
    assert (q["measurements"], q["flagged"], q["load_read"]) == (7, 3, 6)
    assert q["flagged_by_reason"] == {"busy": 2, "bimodal": 1, "isolated": 1}  # most first; "bimodal,busy" counts twice
    assert list(q["flagged_by_reason"]) == ["busy", "bimodal", "isolated"]
    assert q["busy_cores_median"] == pytest.approx((1.05 + 0.25) / 2)  # the median of the runs' means
    assert q["busy_cores_max"] == 3.5
    runs = [(r["agent"], r["measurements"], r["flagged"], r["load_read"], r["busy_cores_max"]) for r in q["runs"]]
    assert runs == [("old", 1, 1, 0, None), ("box", 2, 1, 2, 0.5), ("box", 4, 1, 4, 3.5)]  # newest first
    assert q["runs"][2]["busy_cores_mean"] == pytest.approx(1.05)
    assert q["runs"][0]["busy_cores_mean"] is None
    with Client("http://testserver", http=client) as gac:  # the typed client reads the same figures
        typed = gac.platform_quality(fp)
    assert typed.flagged_by_reason == q["flagged_by_reason"] and typed.runs[2].busy_cores_max == 3.5

    # Each point's load is stored and read back with it.
    page = client.get("/v1/measurements", params={"platform": fp, "limit": 10}).json()
    assert sorted((m["shape"]["n"], m["busy_cores"]) for m in page["items"]) == [
        (56, 0.2),
        (60, 0.1),
        (60, 3.5),
        (64, 0.4),
        (68, 0.0),
        (72, 0.5),
        (76, None),
    ]


def test_a_platform_with_no_flags_and_no_load_reads_zero_and_none(client, ingest_token):
    b = f.batch(rows=3)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    q = client.get(f"/v1/platforms/{b.platform.fingerprint()}/quality").json()
    assert (q["measurements"], q["flagged"], q["flagged_by_reason"], q["load_read"]) == (3, 0, {}, 0)
    assert (q["busy_cores_median"], q["busy_cores_max"], q["threads"]) == (None, None, None)
    f.refused(client.get("/v1/platforms/ffffffffffff/quality"), 404)


def test_a_run_names_every_agent_that_sent_its_points(client, ingest_token):
    """A profiling job's attempts on one platform share one run: the first agent began it, a second one
    (after the first was stopped) finished it. Both are the run's agents, and the platform's."""
    m = f.measurement
    first = _run(4, [m(80, median=101.0), m(88, median=103.0)], agent="box-a")
    second_run = first.run.model_copy(update={"agent": "box-b"})
    second = Batch(id=uuid.uuid4(), platform=PLAT, run=second_run, measurements=[m(96, median=104.0)])
    headers = f.auth(ingest_token)
    for b in (first, second, first):  # the last: box-a's batch sent again (its spool drained late), a replay
        assert client.post("/v1/batches", json=f.body(b), headers=headers).status_code in (200, 201)
    fp = PLAT.fingerprint()
    (run,) = client.get(f"/v1/platforms/{fp}/quality").json()["runs"]
    assert (run["agent"], run["agents"], run["measurements"]) == ("box-a", ["box-a", "box-b"], 3)
    summary = client.get(f"/v1/platforms/{fp}").json()
    assert (summary["runs"], summary["agents"]) == (1, 2)


def test_a_resent_batch_is_a_replay_and_a_changed_load_is_refused(client, ingest_token):
    busy_run = _batches()[0]
    headers = f.auth(ingest_token)
    assert client.post("/v1/batches", json=f.body(busy_run), headers=headers).status_code == 201
    again = client.post("/v1/batches", json=f.columns_body(busy_run), headers={**headers, **f.COLUMNS})
    assert again.status_code == 200 and again.json()["replay"] is True, again.text
    changed = f.body(busy_run)
    changed["measurements"][0]["busy_cores"] = 0.3
    detail = f.refused(client.post("/v1/batches", json=changed, headers=headers), 409)["detail"]
    assert "busy_cores" in str(detail)


def test_a_batch_without_loads_hashes_as_before_the_column_existed(monkeypatch):
    """Batches stored before busy_cores keep their hash, so their re-sends stay replays."""
    b = f.batch(rows=2)
    plain = Incoming.from_rows(b)
    loaded = [m.model_copy(update={"busy_cores": 1.0}) for m in b.measurements]
    assert content_hash(Incoming.from_rows(b.model_copy(update={"measurements": loaded}))) != content_hash(plain)
    expected = content_hash(plain)
    # The rule as it was: no busy_cores among the values or the compared columns.
    monkeypatch.setattr(ingest_service, "COMPARED", tuple(n for n in ingest_service.COMPARED if n != "busy_cores"))
    before = Incoming(plain.id, plain.platform, plain.run, plain.ids, plain.curves, plain.x, plain.values[:-1])
    assert content_hash(before) == expected
