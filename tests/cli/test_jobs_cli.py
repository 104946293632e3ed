"""`gac jobs list | show | cancel | requeue` against the real service over HTTP: what an operator of a fleet
reads and does to the queue from a terminal."""

from __future__ import annotations

import json

import httpx
import pytest
import typer
from typer.testing import CliRunner

from gac.commands.jobs import register
from tests import factories as f

SWEEP = {"op": "gemm", "dtypes": ["float32"], "axis": "n", "fixed": {"m": 8, "k": 16}, "values": [8, 16, 24]}
PLAN = {"name": "ops-check", "sweeps": [SWEEP]}

pytestmark = pytest.mark.slow  # the real service under uvicorn
app = typer.Typer()
register(app)


def _queue(svc, match: dict) -> int:
    r = httpx.post(f"{svc.url}/v1/jobs", json={"plan": PLAN, "match": match}, headers=f.auth(svc.admin_token))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def gac(svc, *args: str, token: str | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["jobs", *args, "--server", svc.url, "--token", token or svc.read_token])
    return res.exit_code, " ".join(res.output.split())


def test_an_operator_lists_shows_and_cancels_jobs(live_service):
    svc = live_service
    queued = _queue(svc, {"device_name": "H200"})
    leased = _queue(svc, {"device_kind": "cpu"})
    claim = {"platform": f.platform(device_kind="cpu", device_name="Some CPU").model_dump(mode="json"), "agent": "box-7"}
    assert httpx.post(f"{svc.url}/v1/jobs/claim", json=claim, headers=f.auth(svc.ingest_token)).json()["id"] == leased
    beat = {"agent": "box-7", "points_done": 2}
    assert httpx.post(f"{svc.url}/v1/jobs/{leased}/heartbeat", json=beat, headers=f.auth(svc.ingest_token)).status_code == 200

    box = f.platform(device_kind="cpu", device_name="Some CPU")  # known to the service since its claim above
    pinned = _queue(svc, {"fingerprint": box.fingerprint()})
    code, said = gac(svc, "list")
    assert code == 0, said
    threads = f", {box.threads} thread{'s' if box.threads != 1 else ''}" if box.threads else ""
    # Which machine, in words (the cell may wrap onto a second line at 80 columns).
    assert f"{pinned} queued -/3 ops-check {box.fingerprint()[:12]}" in said and f"(Some CPU{threads})" in said, said
    assert f"{queued} queued 0/3" not in said and f"{queued} queued -/3 ops-check H200" in said, said
    assert f"{leased} leased 2/3 ops-check cpu" in said and "box-7, ends in" in said
    assert "3 job(s) on" in said
    code, said = gac(svc, "list", "--status", "leased", "--status", "done")
    assert code == 0 and f"{leased} leased" in said and f"{queued} queued" not in said and "1 job(s) (leased, done)" in said, said
    code, said = gac(svc, "list", "--limit", "1")
    assert code == 0 and "the first 1 shown (--limit)" in said, said
    res = CliRunner().invoke(app, ["jobs", "list", "--json", "--server", svc.url, "--token", svc.read_token])
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [queued, leased, pinned]

    code, said = gac(svc, "show", str(leased))
    assert code == 0 and '"points_done": 2' in said and '"lease_owner": "box-7"' in said, said

    code, said = gac(svc, "cancel", str(queued))
    assert code == 1 and "admin token" in said, said  # a read token may not
    code, said = gac(svc, "cancel", str(queued), "999999", token=svc.admin_token)
    assert code == 1 and f"cancelled job {queued} (plan ops-check, -/3 points)" in said and "job 999999:" in said and "404" in said, said
    code, said = gac(svc, "cancel", str(queued), token=svc.admin_token)
    assert code == 1 and "already finished (cancelled)" in said, said
    code, said = gac(svc, "list", "--status", "cancelled")
    assert code == 0 and f"{queued} cancelled" in said and f"{leased} leased" not in said, said

    # An operator takes the job back. Its agent reported just now, so it is asked for it: taken at once, the agent would
    # go on timing until its next heartbeat, and two agents would store the same points.
    code, said = gac(svc, "requeue", str(leased))
    assert code == 1 and "admin token" in said, said
    code, said = gac(svc, "requeue", str(leased), str(queued), token=svc.admin_token)
    said = " ".join(said.split())
    assert code == 1 and f"job {leased} (plan ops-check): asked agent box-7 for it back" in said and "its lease ends in" in said, said
    assert f"job {queued}:" in said and "is cancelled: only a leased job is requeued" in said, said
    job = httpx.get(f"{svc.url}/v1/jobs/{leased}", headers=f.auth(svc.read_token)).json()
    assert (job["status"], job["lease_owner"]) == ("leased", "box-7") and job["requeue_asked_at"], job
    code, said = gac(svc, "list", "--status", "leased")
    assert code == 0 and "box-7, asked back" in " ".join(said.split()), said
    late = httpx.post(f"{svc.url}/v1/jobs/{leased}/heartbeat", json=beat, headers=f.auth(svc.ingest_token))
    assert late.status_code == 409 and "requeued by an operator: give it back" in late.text, late.text
    back = httpx.post(f"{svc.url}/v1/jobs/{leased}/release", json={"agent": "box-7"}, headers=f.auth(svc.ingest_token)).json()
    assert (back["status"], back["attempts"], back["requeue_asked_at"]) == ("queued", 0, None), back
    again = httpx.post(f"{svc.url}/v1/jobs/claim", json={**claim, "agent": "box-8"}, headers=f.auth(svc.ingest_token)).json()
    assert (again["id"], again["lease_owner"], again["attempts"]) == (leased, "box-8", 1), again
    code, said = gac(svc, "list", "--status", "leased")  # why it was queued again is no longer what happens to it
    said = " ".join(said.split())  # the lease and note cells wrap onto two lines side by side
    assert code == 0 and "earlier" in said and "attempt: requeued by an operator; agent box-7 gave it back" in said, said


def test_a_mistyped_state_or_an_unreachable_service_is_named(live_service):
    code, said = gac(live_service, "list", "--status", "running")
    assert code == 2 and "--status must be one of queued, leased, done, failed, cancelled, not 'running'" in said, said
    res = CliRunner().invoke(app, ["jobs", "list", "--server", "http://127.0.0.1:9", "--token", "x"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "cannot reach the GAC service at http://127.0.0.1:9" in said, said


def test_a_done_jobs_flagged_points_are_said_beside_its_count(live_service):
    import uuid

    svc = live_service
    job = _queue(svc, {"device_kind": "cpu"})
    claim = {"platform": f.platform(device_kind="cpu", device_name="Some CPU").model_dump(mode="json"), "agent": "box-7"}
    assert httpx.post(f"{svc.url}/v1/jobs/claim", json=claim, headers=f.auth(svc.ingest_token)).json()["id"] == job
    run_id = uuid.uuid4()
    rows = [f.measurement(8), f.measurement(16, quality="busy"), f.measurement(24)]
    b = f.batch(1, run_id=run_id).model_copy(update={"measurements": rows})
    assert httpx.post(f"{svc.url}/v1/batches", json=f.body(b), headers=f.auth(svc.ingest_token)).status_code == 201
    done = {"agent": "box-7", "points": 3, "run_id": str(run_id)}
    assert httpx.post(f"{svc.url}/v1/jobs/{job}/complete", json=done, headers=f.auth(svc.ingest_token)).status_code == 200
    code, said = gac(svc, "list")
    assert code == 0 and f"{job} done 3/3 (1 flagged) ops-check" in said, said


def test_a_lease_that_ran_out_reads_as_the_next_claims_and_an_asked_one_says_so():
    """A lease past its end still reads 'leased' in the API until a claim takes the job: the list says the next claim
    takes it, rather than 'ends 5s ago' beside a job that looks held."""
    from datetime import UTC, datetime, timedelta

    from gac.commands.jobs import _lease
    from gac.contracts.api import Job

    now = datetime.now(UTC)
    base = {"id": 1, "plan": {}, "plan_name": "p", "points": 3, "match": {}, "priority": 0, "status": "leased", "attempts": 1,
            "max_attempts": 3, "lease_owner": "box-7", "source": "api", "created_at": now, "updated_at": now}  # fmt: skip
    held = Job.model_validate({**base, "lease_expires_at": now + timedelta(seconds=42)})
    assert _lease(held, now) == "box-7, ends in 42s"
    lapsed = Job.model_validate({**base, "lease_expires_at": now - timedelta(seconds=5)})
    assert _lease(lapsed, now) == "box-7, ran out 5s ago: the next claim takes it"
    asked = Job.model_validate({**base, "lease_expires_at": now + timedelta(seconds=50), "requeue_asked_at": now - timedelta(seconds=10)})
    assert _lease(asked, now) == "box-7, asked back 10s ago, ends in 50s"
    assert _lease(Job.model_validate({**base, "status": "queued", "lease_owner": None}), now) == ""
