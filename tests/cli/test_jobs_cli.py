"""`gac jobs list | show | cancel` against the real service over HTTP: what an operator of a fleet
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

    code, said = gac(svc, "list")
    assert code == 0, said
    assert f"{queued} queued 0/3" not in said and f"{queued} queued -/3 ops-check H200" in said, said
    assert f"{leased} leased 2/3 ops-check cpu" in said and "box-7, ends in" in said
    assert "2 job(s) on" in said
    code, said = gac(svc, "list", "--status", "leased", "--status", "done")
    assert code == 0 and f"{leased} leased" in said and f"{queued} queued" not in said and "1 job(s) (leased, done)" in said, said
    code, said = gac(svc, "list", "--limit", "1")
    assert code == 0 and "the first 1 shown (--limit)" in said, said
    res = CliRunner().invoke(app, ["jobs", "list", "--json", "--server", svc.url, "--token", svc.read_token])
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [queued, leased]

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


def test_a_mistyped_state_or_an_unreachable_service_is_named(live_service):
    code, said = gac(live_service, "list", "--status", "running")
    assert code == 2 and "--status must be one of queued, leased, done, failed, cancelled, not 'running'" in said, said
    res = CliRunner().invoke(app, ["jobs", "list", "--server", "http://127.0.0.1:9", "--token", "x"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "cannot reach the GAC service at http://127.0.0.1:9" in said, said
