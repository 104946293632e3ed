"""The fleet's path end to end: an agent following the queue on this CPU (`gac agent run --jobs
--follow`; its first claim makes the platform known), and `gac align --enqueue-missing --wait`
queueing the points an alignment lacks for it, following the jobs and aligning again until nothing
is missing. Real kernels are timed (about two minutes): a file of its own, so the workers share it
out with the other slow files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from tests import factories as f
from tests.fixtures.lines import OutputLines
from tests.service.test_profile_missing import SERVICE_BACKEND, gac, this_fingerprint, tiny_manifest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("database", [SERVICE_BACKEND], indirect=True)
def test_a_fleet_agent_measures_what_an_alignment_queues_for_it(live_service, tmp_path):
    """Every point the alignment needs is measured by the agent, once, and the alignment completes."""
    agent = subprocess.Popen(
        [sys.executable, "-m", "gac", "agent", "run", "--jobs", "--follow", "--poll-s", "0.2", "--server", live_service.url,
         "--token", live_service.ingest_token, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")],
        env=os.environ | {"COLUMNS": "250", "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    out = OutputLines(agent)
    try:
        out.wait_for("no jobs for this platform now")
        path = tmp_path / "m.json"
        path.write_text(json.dumps(tiny_manifest(dims=(11.3,))))  # one weight: real kernels are timed
        fingerprint = this_fingerprint()
        args = ["align", str(path), "--server", live_service.url, "--token", live_service.ingest_token, "--platform", fingerprint]
        aligned = gac([*args, "--enqueue-missing", "--wait", "--yes", "--json"], os.environ.copy())
        assert aligned.returncode == 0, aligned.stderr
        assert "waiting for the platform's agents" in aligned.stderr
        assert not re.search(r"measured \d+ points", aligned.stderr)  # the agent timed them, not this command
        out.wait_for("points in")
        assert out.stop(signal.SIGTERM, timeout=60) == 143
    finally:
        if agent.poll() is None:
            agent.kill()
    doc = json.loads(aligned.stdout)
    assert doc["platform"] == fingerprint and doc["missing"] == [] and doc["latency"]["complete"] is True
    jobs = httpx.get(f"{live_service.url}/v1/jobs", headers=f.auth(live_service.admin_token)).json()["items"]
    assert jobs and all((j["source"], j["status"]) == ("align-missing", "done") for j in jobs)
    query = {"platform": fingerprint, "limit": 5000}
    rows = httpx.get(f"{live_service.url}/v1/measurements", params=query, headers=f.auth(live_service.read_token))
    items = rows.json()["items"]
    # A row is one run of a point: a point far off its neighbours is timed again and each run stored (the
    # service combines them), which a loaded machine does now and then. Every point stored.
    points = {(r["op"], r["dtype"], json.dumps(r["shape"], sort_keys=True)) for r in items}
    assert len(points) == sum(j["points_done"] for j in jobs) == sum(j["points"] for j in jobs)
