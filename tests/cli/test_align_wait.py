"""`gac align --server --profile-missing --wait` for another machine's platform: the points are
queued as jobs, the command follows them, aligns again once their agent has measured them, and
queues what the new points call for, until nothing is missing. The other machine's agent is played
here over real HTTP (claim, upload, complete), with synthetic latencies for a platform that is not
this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC
from pathlib import Path

import httpx
import pytest
from rich.markup import escape

from gac.agent.jobs import JobClient
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo
from gac.contracts.plans import SweepPlan

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples/cpu-demo-lowrank.json"
OTHER = PlatformDescriptor(device_kind="cuda", device_name="Synthetic GPU (elsewhere)", compute_capability="9.0", torch_version="2.13.0")


def _latency(dim: int) -> float:
    """A lattice: multiples of 8 fast, odd widths slowest."""
    return 20.0 + 0.01 * dim + (0 if dim % 8 == 0 else 15 if dim % 2 else 6)


def _measured(points: list[tuple[str, str, dict[str, int], str]]) -> Batch:
    rows = [
        Measurement(
            id=uuid.uuid4(),
            op=op,
            dtype=dtype,
            shape=shape,
            sweep_axis=axis,
            median_us=_latency(shape[axis]),
            p10_us=_latency(shape[axis]) * 0.99,
            p90_us=_latency(shape[axis]) * 1.01,
            mean_us=_latency(shape[axis]),
            n=50,
            timer="synthetic",
        )  # fmt: skip
        for op, dtype, shape, axis in points
    ]
    return Batch(id=uuid.uuid4(), platform=OTHER, run=RunInfo(id=uuid.uuid4(), agent="other-machine", plan="jobs"), measurements=rows)


def _upload(live_service, batch: Batch) -> None:
    headers = {"Authorization": f"Bearer {live_service.ingest_token}", "content-type": "application/json"}
    r = httpx.post(f"{live_service.url}/v1/batches", content=batch.model_dump_json(by_alias=True), headers=headers, timeout=60)
    assert r.status_code in (200, 201), r.text


@pytest.mark.slow
def test_wait_follows_the_jobs_until_nothing_is_missing(live_service, tmp_path):
    # The other platform exists (one point on a curve the manifest does not use) and has nothing it needs.
    _upload(live_service, _measured([("gemm", "bfloat16", {"m": 8, "n": 8, "k": 8}, "n")]))
    env = {**os.environ, "GAC_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    command = [sys.executable, "-m", "gac", "align", str(MANIFEST), "--server", live_service.url, "--token", live_service.admin_token,
               "--platform", OTHER.fingerprint(), "--profile-missing", "--wait", "--yes", "--json"]  # fmt: skip
    aligning = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agent = JobClient(live_service.url, live_service.ingest_token, agent="other-machine")
    done = []
    try:
        while aligning.poll() is None:  # the other machine's agent: whatever is queued for it, measured
            job = agent.claim(OTHER)
            if job is None:
                time.sleep(0.2)
                continue
            points = [(p.op, p.dtype, p.shape, p.axis) for p in SweepPlan.model_validate(job.plan).iter_points()]
            _upload(live_service, _measured(points))
            agent.complete(job.id, len(points))
            done.append(len(points))
        out, err = aligning.communicate(timeout=60)
    finally:
        agent.close()
        if aligning.poll() is None:
            aligning.kill()
    assert aligning.returncode == 0, err
    assert done, "no job was queued"
    assert "waiting for them" in err and "done" in err
    result = json.loads(out)
    assert result["platform"] == OTHER.fingerprint()
    assert result["missing"] == [] and result["latency"]["complete"] is True
    assert all(c["source"] == "measured" for w in result["weights"] for c in w["candidates"] if c["dim"] == w["dim"])


def _queue_for_other(live_service, name: str, **extra) -> int:  # type: ignore[no-untyped-def]
    """A one-point job for the other machine's platform (no agent here takes it); its id."""
    plan = {"name": name, "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 8, "k": 8}, "values": [8]}]}
    body = {"plan": plan, "match": {"fingerprint": OTHER.fingerprint()}, **extra}
    r = httpx.post(f"{live_service.url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {live_service.admin_token}"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_waiting_on_jobs_no_agent_claims_says_once_what_would(live_service, monkeypatch):
    import threading

    import gac.commands.align as align_cmd
    from gac.client import Client

    admin = {"Authorization": f"Bearer {live_service.admin_token}"}
    job = _queue_for_other(live_service, "nobody")
    said, hinted, polls_after = [], threading.Event(), threading.Semaphore(0)

    def record(text, *args, **kwargs):  # type: ignore[no-untyped-def]
        said.append(str(text))
        if "no agent has claimed" in str(text):
            hinted.set()

    real_job = Client.job

    def counted_job(self, job_id):  # type: ignore[no-untyped-def]
        if hinted.is_set():
            polls_after.release()
        return real_job(self, job_id)

    monkeypatch.setattr(align_cmd.err, "print", record)
    monkeypatch.setattr(Client, "job", counted_job)

    def cancel_once_hinted() -> None:
        # Five more polls after the hint, then the job is cancelled (the hint is said once, not at every poll).
        if hinted.wait(30):
            for _ in range(5):
                polls_after.acquire(timeout=30)
        httpx.delete(f"{live_service.url}/v1/jobs/{job}", headers=admin)

    canceller = threading.Thread(target=cancel_once_hinted)
    canceller.start()
    align_cmd._wait_for([job], live_service.url, live_service.read_token, every_s=0.05, platform=OTHER.fingerprint(), hint_after_s=0.2)
    canceller.join()
    hints = [s for s in said if "no agent has claimed" in s]
    assert len(hints) == 1, said
    assert OTHER.fingerprint()[:16] in hints[0] and "--jobs --follow" in hints[0]
    assert said[-1].startswith(f"jobs [{job}]: 1 cancelled; 0/") and said[-1].endswith(" points"), said


def _job_doc(**kw):  # type: ignore[no-untyped-def]
    from datetime import datetime

    from gac.contracts.api import Job

    now = datetime.now(UTC)
    base = {"id": 1, "plan": {}, "plan_name": "p", "points": 1, "match": {}, "priority": 0, "status": "leased", "attempts": 1,
            "max_attempts": 3, "source": "api", "created_at": now, "updated_at": now}  # fmt: skip
    return Job.model_validate({**base, **kw})


def test_a_lease_that_ran_out_reads_as_waiting_for_a_claim_or_failed_on_its_last_attempt():
    from datetime import datetime, timedelta

    from gac.commands.align import _job_state

    now = datetime.now(UTC)
    assert _job_state(_job_doc(lease_expires_at=now + timedelta(seconds=60)), now) == "leased"
    assert _job_state(_job_doc(lease_expires_at=now - timedelta(seconds=1)), now) == "expired"  # its agent stopped reporting
    assert _job_state(_job_doc(lease_expires_at=now - timedelta(seconds=1), attempts=3), now) == "failed"  # nothing will claim it
    assert _job_state(_job_doc(status="done", lease_expires_at=None), now) == "done"


def test_a_failed_job_ends_the_wait_without_queueing_its_points_again(live_service):
    import typer

    import gac.commands.align as align_cmd

    _queue_for_other(live_service, "doomed", max_attempts=1)
    agent = JobClient(live_service.url, live_service.ingest_token, agent="other-machine")
    job = agent.claim(OTHER)
    assert job is not None
    agent.fail(job.id, "CUDA error: out of memory on sdpa b=64")
    queued = align_cmd._Stored(result=None, document=None, jobs=[job.id])  # type: ignore[arg-type]

    def align_again(*_):  # type: ignore[no-untyped-def]
        raise AssertionError("aligned again (and queued the failed points anew) after a failed job")

    said: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(align_cmd.err, "print", lambda text, *a, **k: said.append(str(text)))
        with pytest.raises(typer.Exit) as stop:
            align_cmd._follow_jobs(queued, align_again, OTHER.fingerprint(), live_service.url, live_service.read_token)
    assert stop.value.exit_code == 1
    assert any(f"job {job.id} failed after 1 of 1 attempts: CUDA error: out of memory on sdpa b=64" in s for s in said), said
    assert "not queued again" in said[-1]


def test_a_job_done_without_some_points_says_which_and_why(live_service):
    """The agent could not time a point (its device ran out of memory): the job is done, and the wait
    says what the agent said, naming the device and kernel, before it aligns again."""
    from types import SimpleNamespace

    import gac.commands.align as align_cmd

    _queue_for_other(live_service, "partly")
    agent = JobClient(live_service.url, live_service.ingest_token, agent="other-machine")
    job = agent.claim(OTHER)
    assert job is not None
    why = "1 of 1 points could not be timed on cuda:0 (the other GPU): gemm bfloat16 m=8,n=8,k=8: OutOfMemoryError: [sic]"
    agent.complete(job.id, 0, failures=why)
    queued = align_cmd._Stored(result=None, document=None, jobs=[job.id])  # type: ignore[arg-type]
    aligned = align_cmd._Stored(result=SimpleNamespace(missing=[]), document=None, jobs=[])  # type: ignore[arg-type]
    said: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(align_cmd.err, "print", lambda text, *a, **k: said.append(str(text)))
        out = align_cmd._follow_jobs(queued, lambda *_: aligned, OTHER.fingerprint(), live_service.url, live_service.read_token)
    assert out is aligned
    assert any(f"job {job.id} done, some of its points not: {escape(why)}" in s for s in said), said

    # The alignment still lacks those points: they are not queued again, which would only fail them again.
    queued = align_cmd._Stored(result=None, document=None, jobs=[job.id])  # type: ignore[arg-type]
    still = align_cmd._Stored(result=SimpleNamespace(missing=["that point"]), document=None, jobs=[])  # type: ignore[arg-type]
    asked: list[bool] = []

    def align_again(_target, enqueue):  # type: ignore[no-untyped-def]
        asked.append(enqueue)
        return still

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(align_cmd.err, "print", lambda text, *a, **k: said.append(str(text)))
        out = align_cmd._follow_jobs(queued, align_again, OTHER.fingerprint(), live_service.url, live_service.read_token)
    assert out is still and asked == [False]
    assert "could not time these points" in said[-1] and "not queued again" in said[-1]


def test_the_wait_rides_out_a_service_restart(live_service, monkeypatch):
    import threading

    import gac.commands.align as align_cmd

    admin = {"Authorization": f"Bearer {live_service.admin_token}"}
    job = _queue_for_other(live_service, "patient")
    said, first_read, cannot_read = [], threading.Event(), threading.Event()

    def record(text, *args, **kwargs):  # type: ignore[no-untyped-def]
        said.append(str(text))
        first_read.set()
        if "cannot read jobs" in str(text):
            cannot_read.set()

    monkeypatch.setattr(align_cmd.err, "print", record)

    def restart_then_cancel() -> None:
        first_read.wait(30)
        live_service.stop()
        cannot_read.wait(30)
        live_service.start()
        httpx.delete(f"{live_service.url}/v1/jobs/{job}", headers=admin)

    restarter = threading.Thread(target=restart_then_cancel)
    restarter.start()
    ended = align_cmd._wait_for([job], live_service.url, live_service.read_token, every_s=0.05, platform=OTHER.fingerprint())
    restarter.join()
    assert [j.status for j in ended] == ["cancelled"]
    assert sum("cannot read jobs" in s for s in said) == 1 and "reached the service again" in said, said
    assert said[-1].startswith(f"jobs [{job}]: 1 cancelled; 0/") and said[-1].endswith(" points"), said


def test_ctrl_c_while_waiting_says_which_jobs_stay_queued(live_service, monkeypatch):
    import typer

    import gac.commands.align as align_cmd

    job = _queue_for_other(live_service, "nobody")
    said: list[str] = []
    monkeypatch.setattr(align_cmd.err, "print", lambda text, *a, **k: said.append(str(text)))

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(align_cmd.time, "sleep", interrupted)
    with pytest.raises(typer.Exit) as stopped:
        align_cmd._wait_for([job], live_service.url, live_service.read_token, every_s=0.05, platform=OTHER.fingerprint())
    assert stopped.value.exit_code == 130
    assert said[0].startswith(f"jobs [{job}]: 1 queued; 0/") and said[0].endswith(" points"), said
    assert f"stopped waiting: job(s) [{job}] stay on the service for its agents (`gac jobs list`)" in said[-1], said


def test_a_stop_while_reading_the_jobs_waits_for_the_read_then_says_which_stay(monkeypatch):
    """SIGTERM while the jobs are read from a service that hangs: the read is not cut inside httpx (its pool's lock),
    the stop is raised a few seconds later, and the waiter says which jobs stay queued and exits 143."""
    import signal
    import threading

    import typer

    import gac.commands.align as align_cmd
    from gac.agent.interrupt import stop_signals
    from tests.agent.test_interrupt import answering

    said: list[str] = []
    monkeypatch.setattr(align_cmd.err, "print", lambda text, *a, **k: said.append(str(text)))
    raised: list[BaseException] = []
    # The outer handlers stand for the command's: a stop cut inside httpx ends up here, not in pytest.
    with answering(200, stop_on="/v1/jobs/7", hang=threading.Event()) as (url, called), stop_signals():
        try:
            align_cmd._wait_for([7], url, "t", every_s=0.05, platform=OTHER.fingerprint())
        except BaseException as stopped:  # noqa: BLE001 - which way it stopped is what is tested
            raised.append(stopped)
    assert called == ["/v1/jobs/7"]
    assert [type(e) for e in raised] == [typer.Exit] and raised[0].exit_code == 143 == 128 + signal.SIGTERM, raised
    assert said[-1].startswith("stopped waiting: job(s) [7] stay on the service for its agents"), said
