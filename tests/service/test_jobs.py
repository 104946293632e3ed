"""The profiling job queue: enqueue, claim with a lease, expire, complete, fail."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC

import httpx
import pytest

from tests import factories as f

PLAN = {"name": "tiny", "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 64, "k": 64}, "values": [64, 72]}]}


def enqueue(client, admin_token, match=None, priority=0, **extra):  # type: ignore[no-untyped-def]
    r = client.post("/v1/jobs", json={"plan": PLAN, "match": match or {}, "priority": priority, **extra}, headers=f.auth(admin_token))
    assert r.status_code == 201, r.text
    return r.json()


def claim(client, token, agent="agent-1", plat=None, lease=None, skip=None):  # type: ignore[no-untyped-def]
    body = {"platform": (plat or f.platform()).model_dump(mode="json"), "agent": agent}
    if lease:
        body["lease_seconds"] = lease
    if skip is not None:
        body["skip"] = skip
    return client.post("/v1/jobs/claim", json=body, headers=f.auth(token))


def test_enqueue_claim_complete(client, admin_token, ingest_token):
    job = enqueue(client, admin_token)
    assert (job["status"], job["points"], job["plan_name"]) == ("queued", 2, "tiny")
    got = claim(client, ingest_token)
    assert got.status_code == 200
    leased = got.json()
    assert (leased["id"], leased["status"], leased["lease_owner"], leased["attempts"]) == (job["id"], "leased", "agent-1", 1)
    assert claim(client, ingest_token, agent="agent-2").status_code == 204  # nothing else to do
    done = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "agent-1", "points": 2}, headers=f.auth(ingest_token))
    assert done.status_code == 200 and done.json()["status"] == "done" and done.json()["points_done"] == 2
    assert client.get("/v1/jobs", params={"status": "done"}).json()["total"] == 1


def test_a_job_done_with_points_its_agent_could_not_time_keeps_why_as_its_error(client, admin_token, ingest_token):
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    url, why = f"/v1/jobs/{job['id']}/complete", "1 of 2 points could not be timed on cuda:0 (GPU): gemm float32 m=8: OutOfMemoryError"
    empty = f.refused(client.post(url, json={"agent": "agent-1", "points": 1, "failures": ""}, headers=f.auth(ingest_token)), 422)
    assert "failures" in str(empty["detail"])
    done = client.post(url, json={"agent": "agent-1", "points": 1, "failures": why}, headers=f.auth(ingest_token))
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["points_done"], done.json()["error"]) == ("done", 1, why)
    assert client.get(f"/v1/jobs/{job['id']}").json()["error"] == why  # stored, not only answered


def test_only_the_lease_owner_may_report(client, admin_token, ingest_token):
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    r = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "intruder", "points": 2}, headers=f.auth(ingest_token))
    assert r.status_code == 409 and "agent-1" in r.json()["detail"]


def test_only_the_claiming_token_may_report(client, settings, admin_token, ingest_token):
    """Another token gets 403 even when it names the lease owner's agent; the owner's lease is untouched."""
    from tests.fixtures.tokens import make_token

    other = make_token(settings, "ingest")
    job = enqueue(client, admin_token, max_attempts=3)
    assert claim(client, ingest_token, lease=60).status_code == 200
    calls = [
        ("heartbeat", {"agent": "agent-1", "lease_seconds": 600}),
        ("complete", {"agent": "agent-1", "points": 2}),
        ("fail", {"agent": "agent-1", "error": "not mine"}),
    ]
    for token in (other, admin_token):
        for action, body in calls:
            r = client.post(f"/v1/jobs/{job['id']}/{action}", json=body, headers=f.auth(token))
            assert r.status_code == 403, (action, r.text)
            assert set(r.json()) == {"error", "detail"} and r.json()["error"] == "Forbidden"
            assert "another API token" in r.json()["detail"] and "agent-1" not in r.json()["detail"]
    still = client.get(f"/v1/jobs/{job['id']}", headers=f.auth(ingest_token)).json()
    assert (still["status"], still["lease_owner"], still["error"], still["attempts"]) == ("leased", "agent-1", None, 1)
    assert still["plan"] == job["plan"]  # the lease's bookkeeping never shows in the plan

    # The owner fails it back to the queue; now the other token claims it, and owns it alone.
    r = client.post(f"/v1/jobs/{job['id']}/fail", json={"agent": "agent-1", "error": "OOM"}, headers=f.auth(ingest_token))
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert claim(client, other).json()["id"] == job["id"]
    r = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "agent-1", "points": 2}, headers=f.auth(ingest_token))
    assert "another API token" in f.refused(r, 403)["detail"]
    r = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "agent-1", "points": 2}, headers=f.auth(other))
    assert r.status_code == 200 and r.json()["status"] == "done" and r.json()["plan"] == job["plan"]


def test_lease_owner_needs_a_token_to_read(client, admin_token, ingest_token, read_token):
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    listed = client.get("/v1/jobs")
    assert listed.status_code == 200 and listed.json()["items"][0]["status"] == "leased"
    assert listed.json()["items"][0]["lease_owner"] is None
    assert client.get(f"/v1/jobs/{job['id']}").json()["lease_owner"] is None
    assert "agent-1" not in listed.text
    for token in (read_token, ingest_token, admin_token):
        assert client.get("/v1/jobs", headers=f.auth(token)).json()["items"][0]["lease_owner"] == "agent-1"
        assert client.get(f"/v1/jobs/{job['id']}", headers=f.auth(token)).json()["lease_owner"] == "agent-1"


def test_platform_matching_and_priority(client, admin_token, ingest_token):
    gpu = f.platform(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0")
    enqueue(client, admin_token, match={"device_kind": "cuda", "device_name": "h100"})
    low = enqueue(client, admin_token, match={"device_kind": "cpu"}, priority=-5)
    high = enqueue(client, admin_token, match={"fingerprint": f.platform().fingerprint()}, priority=10)
    assert claim(client, ingest_token).json()["id"] == high["id"]
    assert claim(client, ingest_token).json()["id"] == low["id"]
    assert claim(client, ingest_token).status_code == 204  # the H100 job is not for a CPU
    assert claim(client, ingest_token, plat=gpu).json()["match"]["device_name"] == "h100"


def test_a_claim_passes_over_the_jobs_it_skips(client, admin_token, ingest_token):
    high = enqueue(client, admin_token, priority=10)
    low = enqueue(client, admin_token)
    assert claim(client, ingest_token, skip=[high["id"]]).json()["id"] == low["id"]  # the best job it will take
    assert claim(client, ingest_token, skip=[high["id"]]).status_code == 204
    assert claim(client, ingest_token, agent="agent-2").json()["id"] == high["id"]  # still there for another agent
    for bad in ([0], ["x"], list(range(1, 1002)), [2**31]):
        r = claim(client, ingest_token, skip=bad)
        assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("body.skip"), (bad, r.text)


def test_expired_lease_goes_back_to_the_queue_then_fails(client, admin_token, ingest_token):
    job = enqueue(client, admin_token, max_attempts=2)
    assert claim(client, ingest_token, agent="a", lease=5).status_code == 200
    assert claim(client, ingest_token, agent="b").status_code == 204
    _expire(client, job["id"])
    second = claim(client, ingest_token, agent="b", lease=5).json()
    assert (second["id"], second["lease_owner"], second["attempts"]) == (job["id"], "b", 2)
    late = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "a", "points": 2}, headers=f.auth(ingest_token))
    f.refused(late, 409)  # the first agent lost its lease
    _expire(client, job["id"])
    assert claim(client, ingest_token, agent="c").status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "failed"


def _expire(client, job_id):  # type: ignore[no-untyped-def]
    """Move a lease into the past (the real clock would take the lease length)."""
    from datetime import datetime, timedelta

    from sqlalchemy import update

    from gac.service.models import Job

    with client.app.state.sessionmaker() as s:
        s.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1)))
        s.commit()


def test_fail_requeues_until_attempts_run_out(client, admin_token, ingest_token):
    job = enqueue(client, admin_token, max_attempts=2)
    claim(client, ingest_token)
    r = client.post(f"/v1/jobs/{job['id']}/fail", json={"agent": "agent-1", "error": "CUDA OOM"}, headers=f.auth(ingest_token))
    assert r.json()["status"] == "queued" and r.json()["error"] == "CUDA OOM"
    claim(client, ingest_token)
    r = client.post(f"/v1/jobs/{job['id']}/fail", json={"agent": "agent-1", "error": "CUDA OOM"}, headers=f.auth(ingest_token))
    assert r.json()["status"] == "failed"


def test_heartbeat_extends_the_lease(client, admin_token, ingest_token):
    job = enqueue(client, admin_token)
    first = claim(client, ingest_token, lease=5).json()
    hb = client.post(f"/v1/jobs/{job['id']}/heartbeat", json={"agent": "agent-1", "lease_seconds": 600}, headers=f.auth(ingest_token))
    assert hb.status_code == 200 and hb.json()["lease_expires_at"] > first["lease_expires_at"]


def test_a_running_jobs_points_done_is_what_its_last_heartbeat_said(client, admin_token, ingest_token):
    # Leased: the points measured so far (null before the first beat); a beat without it leaves it as it was.
    # Given back: what the agent said it had measured; claimed again, that until the new attempt beats.
    job = enqueue(client, admin_token)
    assert claim(client, ingest_token).json()["points_done"] is None
    beat = lambda body: client.post(f"/v1/jobs/{job['id']}/heartbeat", json={"agent": "agent-1", **body}, headers=f.auth(ingest_token))  # noqa: E731
    assert beat({"points_done": 1}).json()["points_done"] == 1
    assert beat({}).json()["points_done"] == 1
    assert client.get(f"/v1/jobs/{job['id']}", headers=f.auth(admin_token)).json()["points_done"] == 1
    r = beat({"points_done": -1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.points_done"
    give_back = client.post(f"/v1/jobs/{job['id']}/release", json={"agent": "agent-1", "points_done": 2}, headers=f.auth(ingest_token))
    assert give_back.json()["status"] == "queued" and give_back.json()["points_done"] == 2
    assert claim(client, ingest_token).json()["points_done"] == 2
    client.post(f"/v1/jobs/{job['id']}/release", json={"agent": "agent-1"}, headers=f.auth(ingest_token))  # unchanged
    assert claim(client, ingest_token).json()["points_done"] == 2


def test_a_count_of_points_measured_above_the_jobs_plan_is_refused(client, admin_token, ingest_token):
    # The plan holds 2 points: a beat, a release or a complete saying 3 names its field, and changes nothing.
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    url = f"/v1/jobs/{job['id']}"
    for action, body in (("heartbeat", {"points_done": 3}), ("release", {"points_done": 3}), ("complete", {"points": 3})):
        r = f.refused(client.post(f"{url}/{action}", json={"agent": "agent-1", **body}, headers=f.auth(ingest_token)), 422, "Unprocessable")
        assert r["detail"][0]["field"] == f"body.{next(iter(body))}" and "plan holds (2)" in r["detail"][0]["message"], r
    now = client.get(url, headers=f.auth(admin_token)).json()
    assert (now["status"], now["lease_owner"], now["points_done"]) == ("leased", "agent-1", None)
    done = client.post(f"{url}/complete", json={"agent": "agent-1", "points": 2}, headers=f.auth(ingest_token))
    assert done.json()["points_done"] == 2


def test_the_queue_lists_jobs_in_any_of_several_states(client, admin_token, ingest_token):
    first, second = enqueue(client, admin_token), enqueue(client, admin_token, match={"device_kind": "cpu"}, priority=-1)
    assert claim(client, ingest_token).json()["id"] == first["id"]
    listed = lambda *states: [j["id"] for j in client.get("/v1/jobs", params=[("status", s) for s in states]).json()["items"]]  # noqa: E731
    assert listed("leased") == [first["id"]] and listed("queued") == [second["id"]]
    assert listed("queued", "leased") == [first["id"], second["id"]]
    assert listed() == [first["id"], second["id"]] and listed("done") == []
    r = client.get("/v1/jobs", params=[("status", "queued"), ("status", "lost")])
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("query.status")


def test_job_input_errors(client, admin_token, ingest_token):
    bad_plan = {"name": "x", "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "q", "fixed": {}, "values": [1]}]}
    r = client.post("/v1/jobs", json={"plan": bad_plan}, headers=f.auth(admin_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("body.plan.sweeps.0")
    r = client.post("/v1/jobs", json={"plan": PLAN, "match": {"fingerprint": "xyz"}}, headers=f.auth(admin_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.match.fingerprint"
    f.refused(client.post("/v1/jobs", json={"plan": PLAN}, headers=f.auth(ingest_token)), 403)
    f.refused(client.post("/v1/jobs/999/complete", json={"agent": "a", "points": 1}, headers=f.auth(ingest_token)), 404)
    job = enqueue(client, admin_token)
    assert client.delete(f"/v1/jobs/{job['id']}", headers=f.auth(admin_token)).json()["status"] == "cancelled"
    f.refused(client.delete(f"/v1/jobs/{job['id']}", headers=f.auth(admin_token)), 409)


def test_job_text_fields_refuse_what_a_column_cannot_store(client, admin_token, ingest_token):
    """NUL (Postgres refuses it in text) and text past the column: 422 naming the field on both backends."""
    job = enqueue(client, admin_token)
    body = {"platform": f.platform().model_dump(mode="json"), "agent": "bad\x00name"}
    r = client.post("/v1/jobs/claim", json=body, headers=f.auth(ingest_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.agent", r.text
    r = client.post("/v1/jobs/claim", json=body | {"agent": "a" * 201}, headers=f.auth(ingest_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.agent", r.text
    r = client.post("/v1/jobs", json={"plan": PLAN, "match": {"device_name": "h\x00100"}}, headers=f.auth(admin_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.match.device_name", r.text
    assert claim(client, ingest_token, agent="a" * 200).json()["lease_owner"] == "a" * 200  # the longest name fits
    r = client.post(f"/v1/jobs/{job['id']}/fail", json={"agent": "a" * 200, "error": "boom\x00"}, headers=f.auth(ingest_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.error", r.text
    r = client.post(f"/v1/jobs/{job['id']}/fail", json={"agent": "a" * 200, "error": "€" * 2000}, headers=f.auth(ingest_token))
    assert r.status_code == 200 and r.json()["error"] == "€" * 2000


@pytest.mark.slow
def test_concurrent_claims_never_share_a_job(live_service):
    headers = f.auth(live_service.admin_token)
    with httpx.Client(base_url=live_service.url) as c:
        for _ in range(12):
            assert c.post("/v1/jobs", json={"plan": PLAN}, headers=headers).status_code == 201

    def worker(i: int) -> list[int]:
        got = []
        with httpx.Client(base_url=live_service.url, timeout=30) as c:
            while True:
                r = claim(c, live_service.ingest_token, agent=f"agent-{i}")
                if r.status_code == 204:
                    return got
                assert r.status_code == 200, r.text
                got.append(r.json()["id"])

    with ThreadPoolExecutor(6) as pool:
        claimed = [job for jobs in pool.map(worker, range(6)) for job in jobs]
    assert len(claimed) == 12 and len(set(claimed)) == 12


def test_an_agent_asking_for_work_makes_its_platform_known(client, ingest_token):
    """A new machine's first claim stores its platform (once, however often it asks), so an alignment
    can queue the points it needs for that machine before it has measured anything."""
    from tests.service.test_align_api import manifest

    new = f.platform(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", isa=None, cores=None)
    fp = new.fingerprint()
    assert client.get(f"/v1/platforms/{fp}").status_code == 404
    refused = client.post("/v1/align", json=manifest(fp), params={"enqueue_missing": True}, headers=f.auth(ingest_token))
    assert [d["field"] for d in f.refused(refused, 422, "Unprocessable")["detail"]] == ["body.target.platform"]
    for _ in range(3):
        assert claim(client, ingest_token, plat=new).status_code == 204  # nothing for it yet ...
    known = client.get(f"/v1/platforms/{fp}")
    assert known.status_code == 200 and known.json()["descriptor"]["device_name"] == "NVIDIA H100 80GB HBM3"  # ... but now it is known
    assert client.get("/v1/platforms", params={"device_kind": "cuda"}).json()["total"] == 1  # once
    queued = client.post("/v1/align", json=manifest(fp), params={"enqueue_missing": True}, headers=f.auth(ingest_token))
    assert queued.status_code == 201 and len(queued.json()["jobs"]) == 1  # every point it needs, as a job for it
    got = claim(client, ingest_token, plat=new)
    assert got.status_code == 200 and got.json()["id"] == queued.json()["jobs"][0]


def test_alignments_queueing_the_same_points_at_once_queue_them_once(app, settings):
    """Check-then-insert under a lock on the dedupe key: on Postgres (READ COMMITTED) two transactions
    could otherwise both find no active job and both insert one."""
    import threading

    from sqlalchemy import func, select

    from gac.contracts.plans import SweepPlan
    from gac.service.jobs import service
    from gac.service.jobs.schemas import JobMatch
    from gac.service.models import Job

    plan, match, racers = SweepPlan.model_validate(PLAN), JobMatch(fingerprint=f.platform().fingerprint()), 8
    start, created = threading.Barrier(racers), []

    def enqueue_once() -> None:
        with app.state.sessionmaker() as s:
            start.wait()
            created.append(service.enqueue(s, settings, plan, match, source="align-missing", dedupe=True)[1])

    threads = [threading.Thread(target=enqueue_once) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(created) == [False] * (racers - 1) + [True]
    with app.state.sessionmaker() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 1


def test_metrics_count_the_queue_and_the_leases_that_ran_out(client, admin_token, ingest_token):
    import re

    def gauges() -> dict[str, float]:
        text = client.get("/metrics").text
        return {m[0]: float(m[1]) for m in re.findall(r"^(gac_jobs\S*) (\S+)$", text, re.M)}

    first, second = enqueue(client, admin_token), enqueue(client, admin_token)
    assert claim(client, ingest_token, agent="a").json()["id"] == first["id"]
    now = gauges()
    assert now['gac_jobs{status="queued"}'] == 1 and now['gac_jobs{status="leased"}'] == 1 and now['gac_jobs{status="done"}'] == 0
    assert now["gac_jobs_lease_expired"] == 0 and now["gac_jobs_readable"] == 1
    _expire(client, first["id"])  # its agent stopped reporting
    assert gauges()["gac_jobs_lease_expired"] == 1
    client.delete(f"/v1/jobs/{second['id']}", headers=f.auth(admin_token))
    assert gauges()['gac_jobs{status="cancelled"}'] == 1


def test_a_done_job_says_how_many_of_its_points_were_stored_only_flagged(client, admin_token, ingest_token):
    """A point whose every run was flagged (stalls, a busy machine) is stored but used by no curve or alignment: the
    done job counts it apart. One flagged and then timed clean in the same run is a good point."""
    import uuid

    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    run_id = uuid.uuid4()
    rows = [
        f.measurement(64, quality="bimodal"),  # flagged, every try
        f.measurement(72, quality="busy"),  # flagged once ...
        f.measurement(72),  # ... then clean
        f.measurement(80, quality="bimodal"),
        f.measurement(80, quality="busy"),  # flagged twice: still one point
    ]
    b = f.batch(1, run_id=run_id).model_copy(update={"measurements": rows})
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    other = f.batch(1).model_copy(update={"measurements": [f.measurement(96, quality="busy")]})  # another run's
    assert client.post("/v1/batches", json=f.body(other), headers=f.auth(ingest_token)).status_code == 201
    assert client.get(f"/v1/jobs/{job['id']}").json()["points_flagged"] is None  # open: not counted yet
    body = {"agent": "agent-1", "points": 2, "run_id": str(run_id)}
    done = client.post(f"/v1/jobs/{job['id']}/complete", json=body, headers=f.auth(ingest_token)).json()
    assert done["points_flagged"] == 2
    assert client.get(f"/v1/jobs/{job['id']}").json()["points_flagged"] == 2
    (listed,) = client.get("/v1/jobs", params={"status": "done"}).json()["items"]
    assert listed["points_flagged"] == 2
    bare = enqueue(client, admin_token, priority=1)  # done, its run not reported (older agents): not known
    claim(client, ingest_token)
    report = client.post(f"/v1/jobs/{bare['id']}/complete", json={"agent": "agent-1", "points": 0}, headers=f.auth(ingest_token))
    assert report.json()["points_flagged"] is None
