"""Alignments that stop when they should, on the real service (uvicorn, its worker processes, real
sockets): a client that disconnects frees the CPU within seconds, a deadline stops the work, SIGTERM
stops `gac serve` within its grace period (pending checks marked not run, and runnable again), and
an alignment that finishes during a database outage is stored once the database returns.

Each alignment here would take a minute or more: large windows over 20,000 weights."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gac.service.align.limits import ASYNC_ABOVE_WEIGHTS
from tests import factories as f
from tests.fixtures.database import SECRET
from tests.fixtures.live_service import LiveService, free_port
from tests.service.test_align_scale import manifest

pytestmark = pytest.mark.slow


def long_manifest(n: int = 20_000) -> bytes:
    """n low-rank weights with dims near 3,500: windows of hundreds of dims each (minutes of work)."""
    doc = manifest(n)
    for i, w in enumerate(doc["weights"]):
        w.update(out_features=4096, in_features=4096, dim=3000.0 + (i * 7.3) % 900)
    doc["budget"] = {"params": int(sum(w["dim"] * 8192 for w in doc["weights"]))}  # feasible: the compressor's own size
    return json.dumps(doc).encode()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def task_processes(service_pid: int) -> list[int]:
    """The service's task processes: children of its fork server (a child of the service)."""
    kids = _children()
    return [p for child in kids.get(service_pid, []) for p in kids.get(child, [])]


def wait_for(what: str, check, timeout: float):  # type: ignore[no-untyped-def]
    """Poll check() until it returns something true; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def job_rows(url: str) -> list[tuple[str, str, dict | None]]:
    """(id, status, error) of every alignment job, oldest first."""
    from sqlalchemy import select

    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.models import AlignmentJob

    engine = make_engine(url)
    with make_sessionmaker(engine)() as s:
        rows = [(str(j.id), j.status, j.error) for j in s.scalars(select(AlignmentJob).order_by(AlignmentJob.created_at))]
    engine.dispose()
    return rows


def stored_result(url: str, alignment_id: str) -> dict:
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.models import Alignment

    engine = make_engine(url)
    with make_sessionmaker(engine)() as s:
        row = s.get(Alignment, uuid.UUID(alignment_id))
        assert row is not None
        result = row.result
    engine.dispose()
    return result


def post_raw(port: int, token: str, body: bytes, prefer: str = "") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        f"POST /v1/align HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"{prefer}Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


@pytest.fixture
def service(database, tmp_path) -> Iterator[LiveService]:  # type: ignore[no-untyped-def]
    from gac.service.settings import Settings
    from tests.fixtures.database import _truncate
    from tests.fixtures.tokens import make_token

    settings = Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path)
    svc = LiveService(db_url=database.url, data_dir=tmp_path)
    svc.read_token = make_token(settings, "read")
    yield svc
    svc.stop()
    _truncate(database.url)


def test_a_client_that_disconnects_frees_the_cpu_within_seconds(service, database):
    service.start()
    sock = post_raw(service.port, service.read_token, long_manifest())
    assert service.proc is not None
    running = wait_for("the alignment running", lambda: [r for r in job_rows(database.url) if r[1] == "running"], 60)
    pids = wait_for("its task process", lambda: task_processes(service.proc.pid), 10)
    sock.close()  # the client goes away
    wait_for("the task process gone", lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 10)
    job = wait_for("the job failed", lambda: [r for r in job_rows(database.url) if r[1] == "failed"], 10)[0]
    assert job[0] == running[0][0] and job[2]["body"]["error"] == "AlignmentCancelled" and job[2]["status"] == 410
    with httpx.Client(base_url=service.url, timeout=30) as http:
        r = http.get(f"/v1/alignments/{job[0]}")
        assert r.status_code == 410 and "disconnected" in r.json()["detail"]
        assert http.get("/healthz").status_code == 200


def test_the_deadline_stops_the_work_and_says_so(service, database):
    service.extra_env = {"GAC_ALIGN_DEADLINE_SECONDS": "1"}  # the work takes many times that
    service.start()
    assert service.proc is not None
    with httpx.Client(base_url=service.url, timeout=120) as http:
        headers = {**f.auth(service.read_token), "Content-Type": "application/json"}
        # At most ASYNC_ABOVE_WEIGHTS: the POST waits for its answer (above, a 202 can come before the deadline).
        r = http.post("/v1/align", content=long_manifest(ASYNC_ABOVE_WEIGHTS), headers=headers)
        assert r.status_code == 504 and r.json()["error"] == "AlignmentDeadline", r.text
        wait_for("no task process left", lambda: not task_processes(service.proc.pid), 10)
        # The failure is recorded after the answer (the task's end, in the runner's thread): on a busy
        # machine the 504 can arrive while the row still reads queued or running.
        (job,) = wait_for("the job recorded failed", lambda: [j for j in job_rows(database.url) if j[1] not in ("queued", "running")], 10)
        assert job[1] == "failed" and job[2]["status"] == 504
        assert http.get(f"/v1/alignments/{job[0]}").status_code == 504


def test_sigterm_stops_gac_serve_within_its_grace_and_marks_checks_not_run(database, tmp_path):
    from gac.service.settings import Settings
    from tests.fixtures.database import _truncate
    from tests.fixtures.tokens import make_token

    grace = 2.0
    settings = Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path)
    token = make_token(settings, "read")
    port = free_port()
    env = os.environ | {
        "GAC_DATABASE_URL": database.url,
        "GAC_SECRET_KEY": SECRET,
        "GAC_DATA_DIR": str(tmp_path),
        "GAC_SHUTDOWN_GRACE_SECONDS": str(grace),
        "GAC_AUTO_MIGRATE": "false",
    }
    log = open(tmp_path / "serve.log", "wb")
    gac = Path(sys.executable).parent / "gac"
    proc = subprocess.Popen([str(gac), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for("gac serve ready", ready, 60)
        with httpx.Client(base_url=url, timeout=120, headers={**f.auth(token), "Content-Type": "application/json"}) as http:
            # One alignment answered, its checks (SCIP over 2,000 items and the paper's DP) left running ...
            checked = http.post("/v1/align", content=json.dumps(manifest(2_000)))
            assert checked.status_code == 201 and checked.json()["result"]["pending"], checked.text
            # ... and one still aligning (202): three times the size a client waits for, so that it is
            # still running when the signal comes, however fast this machine aligns.
            aligning = http.post("/v1/align", content=long_manifest(3 * ASYNC_ABOVE_WEIGHTS), headers={"Prefer": "respond-async"})
            assert aligning.status_code == 202
            wait_for("the alignment running", lambda: [r for r in job_rows(database.url) if r[1] == "running"], 60)
            wait_for("its task processes", lambda: len(task_processes(proc.pid)) >= 2, 20)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace + 30)  # bounded: a hang fails here
        took = time.monotonic() - sent
        assert took < grace + 3, f"exited {took:.1f} s after SIGTERM, grace {grace} s"
        assert not task_processes(proc.pid)
        jobs = {j[0]: j for j in job_rows(database.url)}
        stopped = jobs[aligning.json()["id"]]
        assert stopped[1] == "failed" and stopped[2]["body"]["error"] == "ServiceStopping", stopped

        result = stored_result(database.url, checked.json()["id"])
        assert result["pending"] and result["solver"]["cross_check"]["status"].startswith("not run: the service stopped"), result["solver"]
        assert "its worker process stopped" not in (tmp_path / "serve.log").read_text()

        # Re-runnable: a service asked to run them again fills them in.
        from fastapi.testclient import TestClient

        from gac.service.app import create_app

        app = create_app(settings)
        with TestClient(app) as client:
            again = client.post(f"/v1/alignments/{checked.json()['id']}/checks", headers=f.auth(token))
            assert again.status_code == 202 and again.json()["pending"]
            app.state.align_slots.close(wait=True)
            done = client.get(f"/v1/alignments/{checked.json()['id']}").json()["result"]
            assert done["pending"] == [] and done["solver"]["cross_check"]["agrees"] is True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _truncate(database.url)


def test_an_alignment_that_finishes_during_an_outage_is_stored_once_the_database_returns(tmp_path):
    """On a throwaway cluster: the database stops while the alignment runs, and starts again after
    it finished computing; the result is stored then, and the log says why it waited."""
    from gac.service.db import upgrade
    from gac.service.settings import Settings
    from tests.fixtures.tokens import make_token
    from tests.service.test_outage import Cluster

    cluster = Cluster()
    cluster.init()
    cluster.start()
    svc = None
    try:
        upgrade(cluster.url)
        settings = Settings(database_url=cluster.url, secret_key=SECRET, data_dir=tmp_path)
        svc = LiveService(db_url=cluster.url, data_dir=tmp_path)
        svc.read_token = make_token(settings, "read")
        svc.start()
        with httpx.Client(base_url=svc.url, timeout=60, headers=f.auth(svc.read_token)) as http:
            r = http.post(
                "/v1/align", content=json.dumps(manifest(6_000)), headers={"Content-Type": "application/json", "Prefer": "respond-async"}
            )
            assert r.status_code == 202, r.text
            poll = r.headers["location"]
            wait_for("the alignment running", lambda: http.get(poll).json().get("status") == "running", 60)
            cluster.stop("immediate")
            assert svc.log_path is not None
            waiting = "storing its result: the database is unavailable"
            wait_for("the finished alignment waiting for the database", lambda: waiting in svc.log_path.read_text(), 120)
            cluster.start()
            done = wait_for("the alignment stored", lambda: (g := http.get(poll)).status_code == 200 and g, 60)
            assert done.json()["id"] == r.json()["id"] and len(done.json()["result"]["weights"]) == 6_000
        log = svc.log_path.read_text()
        assert "done once the database returned" in log and "its worker process stopped" not in log, log[-3000:]
    finally:
        if svc is not None:
            svc.stop()
        cluster.remove()
