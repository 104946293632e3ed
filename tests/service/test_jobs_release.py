"""POST /v1/jobs/{id}/release: the lease holder gives a job back unfinished (an agent stopped by Ctrl-C
or SIGTERM). Queued again at once, the lease cleared, the claim's attempt given back; like heartbeat,
complete and fail, only the holder may (403 another token, 409 another agent or no lease)."""

from __future__ import annotations

from tests import factories as f

SWEEP = {"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 64, "k": 64}, "values": list(range(64, 144, 8))}
PLAN = {"name": "tiny", "sweeps": [SWEEP]}


def enqueue(client, admin_token, **extra) -> dict:  # type: ignore[no-untyped-def]
    r = client.post("/v1/jobs", json={"plan": PLAN, **extra}, headers=f.auth(admin_token))
    assert r.status_code == 201, r.text
    return r.json()


def claim(client, token, agent="agent-1"):  # type: ignore[no-untyped-def]
    return client.post("/v1/jobs/claim", json={"platform": f.platform().model_dump(mode="json"), "agent": agent}, headers=f.auth(token))


def release(client, token, job_id, agent="agent-1", **extra):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/jobs/{job_id}/release", json={"agent": agent, **extra}, headers=f.auth(token))


def test_a_released_job_is_queued_again_without_using_up_an_attempt(client, admin_token, ingest_token):
    job = enqueue(client, admin_token, max_attempts=1)  # one attempt: a failure would end it
    for _ in range(3):  # released as often as agents stop: never counted against it
        assert claim(client, ingest_token).json()["attempts"] == 1
        r = release(client, ingest_token, job["id"], reason="interrupted by SIGTERM on agent agent-1")
        assert r.status_code == 200, r.text
        back = r.json()
        assert (back["status"], back["attempts"], back["lease_owner"], back["lease_expires_at"]) == ("queued", 0, None, None)
        assert back["error"] == "interrupted by SIGTERM on agent agent-1" and back["finished_at"] is None
    assert claim(client, ingest_token, agent="agent-2").json()["id"] == job["id"]  # any agent may take it now
    done = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "agent-2", "points": 2}, headers=f.auth(ingest_token))
    assert done.json()["status"] == "done"


def test_only_the_lease_holder_may_release(client, settings, admin_token, ingest_token):
    from tests.fixtures.tokens import make_token

    job = enqueue(client, admin_token)
    f.refused(release(client, ingest_token, job["id"]), 409)  # queued: nobody holds it
    claim(client, ingest_token)
    assert "agent-1" in f.refused(release(client, ingest_token, job["id"], agent="agent-2"), 409)["detail"]
    other = make_token(settings, "ingest")
    assert "another API token" in f.refused(release(client, other, job["id"]), 403)["detail"]
    f.refused(release(client, ingest_token, 999_999), 404)
    r = release(client, ingest_token, job["id"], reason="bad\x00reason")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body.reason", r.text
    still = client.get(f"/v1/jobs/{job['id']}", headers=f.auth(admin_token)).json()
    assert (still["status"], still["lease_owner"], still["attempts"]) == ("leased", "agent-1", 1)  # none of that touched it
    r = release(client, ingest_token, job["id"])  # no reason: the job's last error stays as it was
    assert r.status_code == 200 and (r.json()["status"], r.json()["error"]) == ("queued", None)


def _last_report(app, job_id: int, seconds_ago: float, lease_left_s: float = 500) -> None:  # type: ignore[no-untyped-def]
    """The clock: the job's agent last reported this long ago (its lease has lease_left_s to run)."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from gac.service.models import Job

    now = datetime.now(UTC)
    with app.state.sessionmaker() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(updated_at=now - timedelta(seconds=seconds_ago), lease_expires_at=now + timedelta(seconds=lease_left_s))
        )
        s.commit()


def test_a_requeue_asks_a_reporting_agent_for_its_job_and_takes_a_silent_ones_at_once(app, client, admin_token, ingest_token):
    """Taken from a live agent at once, the job went on being timed by it until its next heartbeat (up to 30 s) while
    another agent timed it too: both stored the same points. A live agent is asked instead; a silent one loses it."""
    from datetime import datetime

    requeue = lambda job_id: client.post(f"/v1/jobs/{job_id}/requeue", headers=f.auth(admin_token))  # noqa: E731
    beat = lambda job_id, **body: client.post(  # noqa: E731
        f"/v1/jobs/{job_id}/heartbeat", json={"agent": "agent-1", **body}, headers=f.auth(ingest_token)
    )
    live = enqueue(client, admin_token)
    claim(client, ingest_token)
    asked = requeue(live["id"]).json()
    assert (asked["status"], asked["lease_owner"]) == ("leased", "agent-1") and asked["requeue_asked_at"]
    assert asked["attempts"] == 0  # given back with the ask: the operator's requeue never costs one
    ends = datetime.fromisoformat(asked["lease_expires_at"]) - datetime.fromisoformat(asked["requeue_asked_at"])
    assert 0 < ends.total_seconds() <= 90  # from 600 s: the job is anyone's within 90 s, given back or not
    assert claim(client, ingest_token, agent="agent-2").status_code == 204  # not before then
    assert requeue(live["id"]).json()["lease_expires_at"] == asked["lease_expires_at"]  # asking again changes nothing
    refused = beat(live["id"], points_done=7)
    assert refused.status_code == 409 and "requeued by an operator: give it back" in refused.json()["detail"]
    still = client.get(f"/v1/jobs/{live['id']}", headers=f.auth(admin_token)).json()
    assert still["lease_expires_at"] == asked["lease_expires_at"] and still["points_done"] == 7  # not extended; progress kept
    back = release(client, ingest_token, live["id"], points_done=9).json()
    assert (back["status"], back["attempts"], back["requeue_asked_at"], back["points_done"]) == ("queued", 0, None, 9)
    assert back["error"] == "requeued by an operator; agent agent-1 gave it back"
    assert claim(client, ingest_token, agent="agent-2").json()["id"] == live["id"]  # anyone's now, asked no more
    assert client.post(f"/v1/jobs/{live['id']}/heartbeat", json={"agent": "agent-2"}, headers=f.auth(ingest_token)).status_code == 200

    silent = enqueue(client, admin_token)
    claim(client, ingest_token, agent="agent-3")
    _last_report(app, silent["id"], seconds_ago=61)  # killed: no heartbeat for two of its intervals
    taken = requeue(silent["id"]).json()
    assert (taken["status"], taken["lease_owner"], taken["requeue_asked_at"], taken["attempts"]) == ("queued", None, None, 0)
    assert taken["error"] == "requeued by an operator from agent agent-3"


def test_an_agent_asked_for_its_job_may_still_finish_or_fail_it_and_its_attempt_counts(app, client, admin_token, ingest_token):
    """Done before its next heartbeat: the job is done (its one try shown), and nobody timed it twice. Failed: the
    failure counts, so on the last attempt the job has failed."""
    requeue = lambda job_id: client.post(f"/v1/jobs/{job_id}/requeue", headers=f.auth(admin_token)).json()  # noqa: E731
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    assert requeue(job["id"])["attempts"] == 0
    done = client.post(f"/v1/jobs/{job['id']}/complete", json={"agent": "agent-1", "points": 2}, headers=f.auth(ingest_token)).json()
    assert (done["status"], done["requeue_asked_at"], done["lease_owner"], done["attempts"]) == ("done", None, "agent-1", 1)

    last = enqueue(client, admin_token, max_attempts=1)
    claim(client, ingest_token)
    assert requeue(last["id"])["attempts"] == 0
    failed = client.post(f"/v1/jobs/{last['id']}/fail", json={"agent": "agent-1", "error": "oom"}, headers=f.auth(ingest_token)).json()
    assert (failed["status"], failed["attempts"], failed["requeue_asked_at"]) == ("failed", 1, None)


def test_requeued_again_once_its_agent_is_silent_an_asked_job_gives_its_attempt_back_once(app, client, admin_token, ingest_token):
    """An operator who requeues again a job still shown 'asked back', its agent silent since: queued, one attempt given
    back in all (the ask's), not two."""
    job = enqueue(client, admin_token)
    claim(client, ingest_token)
    _last_report(app, job["id"], seconds_ago=0, lease_left_s=-1)  # the first agent's lease ran out
    assert claim(client, ingest_token, agent="agent-2").json()["attempts"] == 2
    requeue = lambda: client.post(f"/v1/jobs/{job['id']}/requeue", headers=f.auth(admin_token)).json()  # noqa: E731
    assert requeue()["attempts"] == 1  # asked: the second claim's attempt given back
    _last_report(app, job["id"], seconds_ago=61)
    taken = requeue()
    assert (taken["status"], taken["attempts"], taken["requeue_asked_at"]) == ("queued", 1, None)


def test_an_asked_agent_that_goes_silent_costs_the_job_no_attempt(app, client, admin_token, ingest_token):
    """Asked for its last attempt's job, the agent dies before giving it back: when the lease runs out the job is
    claimed again, not failed for a lease that expired on its last attempt. A short lease stays short."""
    from datetime import datetime

    job = enqueue(client, admin_token, max_attempts=1)
    r = client.post("/v1/jobs/claim", json={"platform": f.platform().model_dump(mode="json"), "agent": "agent-1", "lease_seconds": 20},
                    headers=f.auth(ingest_token))  # fmt: skip
    assert r.json()["attempts"] == 1
    asked = client.post(f"/v1/jobs/{job['id']}/requeue", headers=f.auth(admin_token)).json()
    ends = datetime.fromisoformat(asked["lease_expires_at"]) - datetime.fromisoformat(asked["requeue_asked_at"])
    assert ends.total_seconds() == 90  # lengthened: no beat extends an asked lease, and a long point must end first
    _last_report(app, job["id"], seconds_ago=30, lease_left_s=-1)  # it never answered, and the lease ran out
    again = claim(client, ingest_token, agent="agent-2").json()
    assert (again["id"], again["status"], again["attempts"], again["requeue_asked_at"]) == (job["id"], "leased", 1, None)
