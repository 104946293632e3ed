"""POST /v1/jobs/{id}/release: the lease holder gives a job back unfinished (an agent stopped by Ctrl-C
or SIGTERM). Queued again at once, the lease cleared, the claim's attempt given back; like heartbeat,
complete and fail, only the holder may (403 another token, 409 another agent or no lease)."""

from __future__ import annotations

from tests import factories as f

PLAN = {"name": "tiny", "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 64, "k": 64}, "values": [64, 72]}]}


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
