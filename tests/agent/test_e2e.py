"""End to end: the real agent against the real service under uvicorn (tests/fixtures/live_service.py's
live_service, over SQLite and Postgres): every point arrives exactly once, across a
service restart mid-run; concurrent agents never claim the same job."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import httpx
import pytest
import torch
import typer
from typer.testing import CliRunner

from gac.agent.cli import register
from gac.agent.delivery import Deliverer, Spool
from gac.agent.jobs import Heartbeat, JobClient
from gac.agent.platform import detect_platform
from gac.agent.quality import RETRIES
from gac.agent.runner import PlanRunner
from gac.agent.timing import CpuTimer
from gac.contracts.measurements import RunInfo
from gac.contracts.plans import SweepPlan, loads_plan
from tests import factories as f
from tests.fixtures.database import SECRET
from tests.fixtures.lines import OutputLines
from tests.fixtures.memory import HUGE, needs_refused_allocations
from tests.fixtures.tokens import make_token

pytestmark = pytest.mark.slow

TINY = """
name: e2e-tiny
timing: {time_cap_ms: 15, warmup_ms: 1, max_samples: 40}
sweeps:
  - {op: gemm, dtypes: [float32, bfloat16], axis: n, fixed: {m: 8, k: 16}, values: {start: 8, stop: 40, step: 8}}
  - {op: gemv, dtypes: [float32], axis: k, fixed: {n: 16}, values: [15, 16, 17]}
"""  # 5 * 2 + 3 = 13 points


@pytest.fixture
def threads_one():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def stored(svc, fingerprint: str) -> list[dict]:
    """Every measurement row the service holds for a platform (following cursors)."""
    rows, cursor = [], 0
    with httpx.Client(timeout=30) as c:
        while True:
            r = c.get(
                f"{svc.url}/v1/measurements",
                params={"platform": fingerprint, "limit": 5000, "cursor": cursor},
                headers={"Authorization": f"Bearer {svc.read_token}"},
            )
            assert r.status_code == 200, r.text
            page = r.json()
            rows += page["items"]
            if not page.get("next_cursor"):
                return rows
            cursor = page["next_cursor"]


def assert_plan_stored(rows: list[dict], plan: SweepPlan, runs: int = 1) -> None:
    """Each of `runs` runs holds every point of the plan. A point has more than one row in its run only
    where the agent judged it an isolated spike and timed it again (PlanRunner._judge: at most
    1 + RETRIES more, each a row of its own, as the service combines runs): on a noisy machine that
    happens. A run sent twice, or a job measured twice, would give every point two rows or more."""
    by_run: dict[str, Counter] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], Counter())[(r["op"], r["dtype"], tuple(sorted(r["shape"].items())))] += 1
    assert len(by_run) == runs, list(by_run)
    assert len({r["uuid"] for r in rows}) == len(rows)
    for points in by_run.values():
        assert len(points) == plan.n_points(), points
        assert max(points.values()) <= 2 + RETRIES, points
        assert sum(n > 1 for n in points.values()) < plan.n_points() / 2, points  # the spikes are a few


def cli_app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_agent_run_delivers_every_point_once(live_service, tmp_path, threads_one):
    plan_file = tmp_path / "tiny.yaml"
    plan_file.write_text(TINY)
    out = tmp_path / "results.jsonl"
    app = cli_app()
    res = CliRunner().invoke(
        app,
        [
            "agent",
            "run",
            "--server",
            live_service.url,
            "--token",
            live_service.ingest_token,
            "--plan",
            str(plan_file),
            "--threads",
            "1",
            "--out",
            str(out),
            "--spool-dir",
            str(tmp_path / "spool"),
            "--batch-size",
            "4",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    fp = detect_platform("cpu").fingerprint()
    rows = stored(live_service, fp)
    assert_plan_stored(rows, loads_plan(TINY))
    # Re-uploading the offline file changes nothing: ingest is idempotent.
    res = CliRunner().invoke(app, ["ingest", str(out), "--server", live_service.url, "--token", live_service.ingest_token])
    assert res.exit_code == 0, res.output
    assert "0 new" in res.output, res.output
    assert len(stored(live_service, fp)) == len(rows)


def test_spooled_run_is_flushed_later(live_service, tmp_path, threads_one):
    """Offline first (a closed port), then `gac agent flush` to the real service."""
    from .test_runner_delivery import closed_port_url

    plan_file = tmp_path / "tiny.yaml"
    plan_file.write_text(TINY)
    spool_dir = tmp_path / "spool"
    app = cli_app()
    res = CliRunner().invoke(
        app,
        [
            "agent",
            "run",
            "--server",
            closed_port_url(),
            "--token",
            "t",
            "--plan",
            str(plan_file),
            "--threads",
            "1",
            "--spool-dir",
            str(spool_dir),
            "--retries",
            "1",
            "--quiet",
            "--batch-size",
            "5",
            "--spool",
        ],
    )  # offline on purpose
    spooled = Spool(spool_dir).rows()
    assert res.exit_code == 1 and spooled >= 13
    flush = ["agent", "flush", "--server", live_service.url, "--token", live_service.ingest_token, "--spool-dir", str(spool_dir)]
    res = CliRunner().invoke(app, flush)  # spooled for another server: kept unless asked
    assert res.exit_code == 1 and Spool(spool_dir).rows() == spooled
    # A token the service refuses (unknown, or without ingest) refuses every batch alike: nothing is set aside.
    for wrong in ("gac_not-a-token", live_service.read_token):
        bad = [*flush[:4], "--token", wrong, "--spool-dir", str(spool_dir), "--all-servers"]
        res = CliRunner().invoke(app, bad)
        assert res.exit_code == 1 and "the service refuses this token" in res.output, res.output
        assert Spool(spool_dir).rows() == spooled and not Spool(spool_dir).rejected_path.exists()
    res = CliRunner().invoke(app, [*flush, "--all-servers"])
    assert res.exit_code == 0, res.output
    assert Spool(spool_dir).records() == []
    rows = stored(live_service, detect_platform("cpu").fingerprint())
    assert len(rows) == spooled
    assert_plan_stored(rows, loads_plan(TINY))


def test_service_restart_mid_run_spools_then_drains(live_service, tmp_path, threads_one):
    plan = loads_plan(TINY)
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="e2e-restart", plan=plan.name)
    spool = Spool(tmp_path / "spool")
    deliverer = Deliverer(
        live_service.url, live_service.ingest_token, platform, run, spool=spool, batch_size=2, retries=1, backoff_s=0.01, timeout_s=5
    )
    sent = []

    def on_measurement(m):
        sent.append(m)
        deliverer.add(m)
        if len(sent) == 4:
            live_service.stop()  # batches 3.. cannot be delivered now
        if len(sent) == 9:
            live_service.start()  # ...and a later batch (a probe, or the last one) finds it back and drains the spool

    PlanRunner(CpuTimer(threads=1), "cpu", on_measurement=on_measurement).run(plan)
    deliverer.close()
    assert deliverer.stats.spooled_batches >= 2  # it really was down for a while
    assert spool.records() == []  # and everything spooled was drained
    # ...and the run knows it: nothing counts as undelivered (a job would be failed and timed again).
    assert deliverer.stats.waiting == {} and "spooled" not in deliverer.kept_where()
    rows = stored(live_service, platform.fingerprint())
    assert sorted(r["uuid"] for r in rows) == sorted(str(m.id) for m in sent)  # exact: none lost, none twice
    assert_plan_stored(rows, plan)  # every point, a few with a second row where the agent timed a spike again


def _create_job(svc, plan_doc: dict, fingerprint: str) -> object:
    r = httpx.post(
        f"{svc.url}/v1/jobs",
        json={"plan": plan_doc, "match": {"fingerprint": fingerprint}},
        headers={"Authorization": f"Bearer {svc.admin_token}"},
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_two_agents_never_claim_the_same_job(live_service):
    platform = detect_platform("cpu")
    created = {_create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint()) for _ in range(8)}
    claimed: dict[str, list] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def agent(name: str) -> None:
        jc = JobClient(live_service.url, live_service.ingest_token, agent=f"agent-{name}")
        barrier.wait()
        while (job := jc.claim(platform, lease_seconds=300)) is not None:
            claimed[name].append(job.id)
            assert job.plan.name == "e2e-tiny"
        jc.close()

    threads = [threading.Thread(target=agent, args=(n,)) for n in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    a, b = claimed["a"], claimed["b"]
    assert not set(a) & set(b)
    assert len(a) + len(b) == len(set(a) | set(b)) == len(created)
    assert set(a) | set(b) == created


def test_agent_runs_a_queued_job(live_service, tmp_path, threads_one):
    platform = detect_platform("cpu")
    plan = loads_plan(TINY)
    job_id = _create_job(live_service, plan.to_document(), platform.fingerprint())
    res = CliRunner().invoke(cli_app(), f.agent_run_args(live_service, tmp_path / "spool", "--jobs", "--quiet"))
    assert res.exit_code == 0, res.output
    assert_plan_stored(stored(live_service, platform.fingerprint()), plan)
    job = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {live_service.read_token}"})
    assert job.status_code == 200, job.text
    assert job.json()["status"] == "done" and job.json()["points_done"] == plan.n_points()
    assert JobClient(live_service.url, live_service.ingest_token, agent="after").claim(platform) is None


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs a second core for a second thread count")
def test_an_idle_agent_names_the_thread_count_that_would_take_the_jobs_queued_for_this_machine(live_service, tmp_path, threads_one):
    # An operator's --enqueue-missing queued jobs for this CPU timed with 2 threads; an agent timing
    # with 1 is another platform: it claims nothing, and says which --threads would.
    two = detect_platform("cpu").model_copy(update={"threads": 2})
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), two.fingerprint())
    res = CliRunner().invoke(cli_app(), f.agent_run_args(live_service, tmp_path / "spool", "--jobs", "--quiet"))
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "no (more) jobs for this platform" in said
    assert "1 queued job(s) are for this machine timed with 2 thread(s); this agent times with 1" in said, said
    assert "--threads 2 to take them" in said
    assert _job(live_service, job_id)["status"] == "queued"


def test_an_agent_that_finds_no_job_still_sends_what_an_earlier_run_spooled(live_service, tmp_path, threads_one):
    spool = Spool(tmp_path / "spool")
    batch = f.batch(3, plat=f.platform(device_name="Spooled Earlier CPU"))
    spool.add(live_service.url, batch)
    res = CliRunner().invoke(cli_app(), f.agent_run_args(live_service, tmp_path / "spool", "--jobs", "--quiet"))
    assert res.exit_code == 0, res.output
    assert "no (more) jobs for this platform" in res.output and "spooled earlier: sent 1 batch(es): 3 new" in res.output
    assert spool.records() == [] and len(stored(live_service, batch.platform.fingerprint())) == 3


def test_a_fleet_agent_on_a_busy_machine_keeps_its_thread_count(monkeypatch, capsys):
    # Dropping to one thread for a busy moment would make the agent another platform than the one its
    # jobs are queued for: with --jobs the count stays, and the warning says why.
    from gac.agent import cpu_load
    from gac.agent.cli import FLEET_THREADS, open_session
    from gac.agent.cpu_load import Busy

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(cpu_load, "busy_now", lambda: Busy(2.0, "2.0 cores busy with other work"))
    try:
        fleet = open_session("cpu", None, pinned=FLEET_THREADS)
        said = " ".join(capsys.readouterr().err.split())
        assert fleet.platform.threads == 2, said
        assert "queued for this machine's platform at its thread count, so the count stays at 2" in said
        alone = open_session("cpu", None)
        assert alone.platform.threads == 1
        assert "timing with --threads 1 instead of 2" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)


def _job(svc, job_id) -> dict:
    r = httpx.get(f"{svc.url}/v1/jobs/{job_id}", headers=f.auth(svc.read_token))
    assert r.status_code == 200, r.text
    return r.json()


@needs_refused_allocations
def test_a_job_with_a_point_the_device_cannot_time_is_done_and_says_which_device_and_kernel(live_service, tmp_path, threads_one):
    """Done, not failed: another attempt on this device would fail the same point again. The reason is the
    job's error, for the queue's readers and for `gac align --wait`."""
    platform = detect_platform("cpu")
    huge = HUGE
    plan = loads_plan(f"""
name: e2e-too-big
timing: {{time_cap_ms: 15, warmup_ms: 1, max_samples: 40}}
sweeps:
  - {{op: gemm, dtypes: [float32], axis: n, fixed: {{m: {huge}, k: {huge}}}, values: [{huge}]}}
  - {{op: gemv, dtypes: [float32], axis: k, fixed: {{n: 16}}, values: [15, 16]}}
""")
    job_id = _create_job(live_service, plan.to_document(), platform.fingerprint())
    args = ["agent", "run", "--jobs", "--server", live_service.url, "--token", live_service.ingest_token]
    res = CliRunner().invoke(cli_app(), [*args, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")])
    assert res.exit_code == 0, res.output
    job = _job(live_service, job_id)
    kernel = f"gemm float32 m={huge},n={huge},k={huge}: RuntimeError: "
    assert (job["status"], job["points_done"], job["attempts"]) == ("done", 2, 1), job
    assert job["error"].startswith(f"1 point could not be timed on cpu ({platform.device_name}): {kernel}"), job
    assert f"failed on cpu ({platform.device_name}): {kernel}" in res.output  # and the agent's own output says so
    assert len(stored(live_service, platform.fingerprint())) == 2


def test_an_agent_passes_over_a_job_it_cannot_time_whole(live_service, tmp_path, threads_one):
    """--dtype float32 on a job that needs bfloat16 too: timing part of it would report it done with the
    rest never measured, and failing it would use up its attempts before another agent saw it."""
    platform = detect_platform("cpu")
    both = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())  # float32 and bfloat16
    fp32 = loads_plan(TINY.replace("e2e-tiny", "e2e-fp32").replace("dtypes: [float32, bfloat16]", "dtypes: [float32]"))
    only_fp32 = _create_job(live_service, fp32.to_document(), platform.fingerprint())
    args = ["agent", "run", "--jobs", "--dtype", "float32", "--server", live_service.url, "--token", live_service.ingest_token]
    res = CliRunner().invoke(cli_app(), [*args, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")])
    assert res.exit_code == 0, res.output
    assert f"passed over job {both} (plan e2e-tiny): it needs bfloat16, which --dtype leaves out" in res.output
    assert (_job(live_service, only_fp32)["status"], _job(live_service, only_fp32)["points_done"]) == ("done", fp32.n_points())
    left = _job(live_service, both)
    assert (left["status"], left["attempts"]) == ("queued", 0)  # no attempt used: whole for the next agent
    assert_plan_stored(stored(live_service, platform.fingerprint()), fp32)


def test_a_stop_signal_during_a_claim_gives_the_job_back(live_service):
    """The signal waits for the claim's answer, then the job goes back to the queue at once instead of
    staying leased to a stopped agent until its lease ends."""
    from gac.agent.cli import _claim
    from gac.agent.interrupt import stop_signals

    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())

    class SignalledMidClaim(JobClient):
        def claim(self, *a, **kw):  # type: ignore[no-untyped-def]
            job = super().claim(*a, **kw)
            os.kill(os.getpid(), signal.SIGTERM)  # arrives once the service has leased the job, before the agent has it
            return job

    jc = SignalledMidClaim(live_service.url, live_service.ingest_token, agent="stopping")
    with stop_signals(), pytest.raises(KeyboardInterrupt):
        _claim(jc, platform, 60, [])
    job = _job(live_service, job_id)
    assert (job["status"], job["attempts"]) == ("queued", 0), job


def test_a_stop_signal_while_a_job_reads_what_it_stored_gives_it_back_without_draining_the_spool(live_service, tmp_path):
    """A stop during the reads before timing (what the job's earlier attempts stored) gives the job back
    at once: nothing is timed, and nothing is opened, so the spool is not drained first (with the
    service unreachable, a drain would run its whole retry schedule before the job went back)."""
    from gac.agent.cli import AgentRunOptions, _Agent, _run_job, open_session
    from gac.agent.interrupt import stop_signals
    from gac.agent.jobs import job_run_id

    session = open_session("cpu", 1)
    fingerprint = session.platform.fingerprint()
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), fingerprint)
    jc = JobClient(live_service.url, live_service.ingest_token, agent="stopping")
    job = jc.claim(session.platform, lease_seconds=60)
    assert job is not None and job.id == job_id
    spool = Spool(tmp_path / "spool")
    waiting = f.batch(2, plat=session.platform, run_id=job_run_id(live_service.url, job_id, fingerprint))
    spool.add(live_service.url, waiting)  # an earlier attempt's points, still waiting to be sent

    def stop_after_the_run_read(response: httpx.Response) -> None:
        if "run" in response.request.url.params:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the job's earlier points are read

    opts = AgentRunOptions(server=live_service.url, token=live_service.ingest_token, jobs=True, spool_dir=tmp_path / "spool", quiet=True)
    with httpx.Client(timeout=30, event_hooks={"response": [stop_after_the_run_read]}) as client:
        with stop_signals(), pytest.raises(KeyboardInterrupt):
            _run_job(_Agent(opts, session, spool, client), jc, job, 1, 1, [])
    back = _job(live_service, job_id)
    assert (back["status"], back["attempts"], back["lease_owner"]) == ("queued", 0, None), back
    assert back["error"].startswith("interrupted by SIGTERM")
    assert stored(live_service, fingerprint) == []  # nothing timed, nothing drained
    assert spool.rows() == 2


def test_job_lease_heartbeat_and_failure(live_service):
    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    jc = JobClient(live_service.url, live_service.ingest_token, agent="hb")
    job = jc.claim(platform, lease_seconds=60)
    assert job is not None and job.id == job_id and job.plan == loads_plan(TINY)
    with Heartbeat(jc, job.id, interval_s=0.05, lease_seconds=600, progress=lambda: 4) as hb:
        assert hb.wait_for(2, timeout=30), f"{hb.sent} heartbeats acknowledged, {hb.failures} failed"
    assert hb.failures == 0
    seen = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers=f.auth(live_service.read_token)).json()
    assert seen["points_done"] == 4  # the queue shows how far a running job is
    extended = datetime.fromisoformat(seen["lease_expires_at"])
    assert (extended - job.lease_expires_at).total_seconds() > 500  # the heartbeats took the 60 s lease to 600 s
    out = jc.fail(job.id, "disk on fire")
    # One attempt of the default 3 (GAC_JOB_MAX_ATTEMPTS) used: back to the queue, with the agent's reason.
    assert out["error"] == "disk on fire" and (out["status"], out["attempts"]) == ("queued", 1)


def test_a_heartbeat_refused_for_a_lost_lease_says_so_and_stops(live_service):
    platform = detect_platform("cpu")
    _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    jc = JobClient(live_service.url, live_service.ingest_token, agent="first")
    job = jc.claim(platform, lease_seconds=60)
    assert job is not None
    # The lease ends under the agent (here: given back; as when it expired and another agent claimed it).
    JobClient(live_service.url, live_service.ingest_token, agent="first").release(job.id, "test")
    other = JobClient(live_service.url, live_service.ingest_token, agent="second").claim(platform, lease_seconds=60)
    assert other is not None and other.id == job.id
    with Heartbeat(jc, job.id, interval_s=0.05, lease_seconds=600) as hb:
        hb._thread.join(30)  # the first refused beat ends the loop
    assert not hb._thread.is_alive() and hb.sent == 0
    assert hb.lost is not None and "409" in hb.lost and "second" in hb.lost


def test_a_heartbeat_refused_for_a_revoked_token_stops_the_job(live_service):
    """`gac token revoke` while an agent times a job: its next beat is refused (401), and the agent
    stops at the next point instead of timing the rest of the job for nothing."""
    from gac.service.auth.tokens import revoke_token
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.settings import Settings

    settings = Settings(database_url=live_service.db_url, secret_key=SECRET, data_dir=live_service.data_dir)
    token = make_token(settings, "ingest", name="soon-revoked")
    platform = detect_platform("cpu")
    _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    jc = JobClient(live_service.url, token, agent="first")
    job = jc.claim(platform, lease_seconds=60)
    assert job is not None
    engine = make_engine(settings.url)
    with make_sessionmaker(engine)() as session:
        revoke_token(session, "soon-revoked")
        session.commit()
    engine.dispose()
    with Heartbeat(jc, job.id, interval_s=0.05, lease_seconds=600) as hb:
        hb._thread.join(30)  # the first refused beat ends the loop
    assert not hb._thread.is_alive() and hb.sent == 0
    assert hb.lost is not None and "401" in hb.lost and "no longer takes this agent's token" in hb.lost


def test_a_refused_token_fails_before_any_timing(live_service, tmp_path):
    (tmp_path / "p.yaml").write_text(TINY)
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(
        cli_app(),
        [
            "agent",
            "run",
            "--server",
            live_service.url,
            "--token",
            "gac_wrong",
            "--plan",
            str(tmp_path / "p.yaml"),
            "--out",
            str(out),
            "--threads",
            "1",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "refuses this token" in res.output
    assert not out.exists()  # nothing was timed
    read_only = CliRunner().invoke(
        cli_app(),
        [
            "agent",
            "run",
            "--server",
            live_service.url,
            "--token",
            live_service.read_token,
            "--plan",
            str(tmp_path / "p.yaml"),
            "--out",
            str(out),
            "--threads",
            "1",
        ],
    )
    assert read_only.exit_code == 2 and "needs ingest" in read_only.output and not out.exists()


@pytest.mark.parametrize(("suffix", "said"), [("/v1", "is not a GAC service's root"), ("", "give the URL with its scheme")])
def test_a_wrong_server_url_fails_before_any_timing(live_service, tmp_path, suffix, said):
    """A path after the service's root, or no scheme: refused before the profile, not batch by batch after it."""
    (tmp_path / "p.yaml").write_text(TINY)
    out = tmp_path / "r.jsonl"
    server = live_service.url + suffix if suffix else live_service.url.removeprefix("http://")
    args = ["agent", "run", "--server", server, "--token", live_service.ingest_token, "--plan", str(tmp_path / "p.yaml")]
    res = CliRunner().invoke(cli_app(), [*args, "--out", str(out), "--threads", "1"])
    assert res.exit_code == 2, res.output
    assert said in " ".join(res.output.split()) and not out.exists()


def test_ctrl_c_keeps_every_point_measured_so_far(live_service, tmp_path, monkeypatch, threads_one):
    """An operator's Ctrl-C after the third point: those points reach the service, exit code 130."""
    import gac.agent.runner as runner

    real_one = runner.PlanRunner._one
    calls = {"n": 0}

    def one_then_interrupt(self, point, timing, out):  # type: ignore[no-untyped-def]
        if calls["n"] == 3:
            raise KeyboardInterrupt  # what SIGINT raises in the main thread, at this exact point
        calls["n"] += 1
        return real_one(self, point, timing, out)

    monkeypatch.setattr(runner.PlanRunner, "_one", one_then_interrupt)
    (tmp_path / "p.yaml").write_text(TINY)
    res = CliRunner().invoke(
        cli_app(),
        [
            "agent",
            "run",
            "--server",
            live_service.url,
            "--token",
            live_service.ingest_token,
            "--plan",
            str(tmp_path / "p.yaml"),
            "--threads",
            "1",
            "--quiet",
            "--spool-dir",
            str(tmp_path / "spool"),
        ],
    )
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.output
    fingerprint = detect_platform("cpu").fingerprint()
    assert len(stored(live_service, fingerprint)) == 3


def test_ctrl_c_gives_a_claimed_job_back_at_once(live_service, tmp_path, monkeypatch, threads_one):
    import gac.agent.runner as runner

    platform = detect_platform("cpu")
    plan = loads_plan(TINY)
    job_id = _create_job(live_service, plan.to_document(), platform.fingerprint())
    real_one = runner.PlanRunner._one
    calls = {"n": 0}

    def one_then_interrupt(self, point, timing, out):  # type: ignore[no-untyped-def]
        if calls["n"] == 2:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_one(self, point, timing, out)

    monkeypatch.setattr(runner.PlanRunner, "_one", one_then_interrupt)
    res = CliRunner().invoke(
        cli_app(),
        [
            "agent",
            "run",
            "--jobs",
            "--server",
            live_service.url,
            "--token",
            live_service.ingest_token,
            "--threads",
            "1",
            "--quiet",
            "--spool-dir",
            str(tmp_path / "spool"),
        ],
    )
    assert res.exit_code == 130, res.output
    job = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {live_service.admin_token}"}).json()
    assert job["status"] == "queued" and "interrupted" in (job["error"] or "")  # not leased for minutes
    assert len(stored(live_service, platform.fingerprint())) == 2  # the points measured before Ctrl-C
    again = JobClient(live_service.url, live_service.ingest_token, agent="next").claim(platform)
    assert again is not None and again.id == job_id  # another agent can take it now


def _job_agent_with(live_service, tmp_path, monkeypatch, at_third_point, token=None, *more):  # type: ignore[no-untyped-def]
    """`gac agent run --jobs` (quiet, one thread), calling at_third_point() as its third point is timed: (its result,
    the points it timed)."""
    import gac.agent.runner as runner

    real_one, timed = runner.PlanRunner._one, {"n": 0}

    def one(self, point, timing, out):  # type: ignore[no-untyped-def]
        timed["n"] += 1
        if timed["n"] == 3:
            at_third_point()
        return real_one(self, point, timing, out)

    monkeypatch.setattr(runner.PlanRunner, "_one", one)
    args = ["agent", "run", "--jobs", "--server", live_service.url, "--token", token or live_service.ingest_token, "--threads", "1"]
    res = CliRunner().invoke(cli_app(), [*args, *more, "--quiet", "--spool-dir", str(tmp_path / "spool")])
    return res, timed["n"]


def _quick_beats(monkeypatch):  # type: ignore[no-untyped-def]
    """The agent's heartbeat every 0.05 s (it is at least 5 s apart; the tests need no wait); .current: the latest."""
    import gac.agent.jobs as jobs

    class QuickBeat(jobs.Heartbeat):
        current: jobs.Heartbeat | None = None

        def __init__(self, jc, job, interval_s, lease_seconds=None, progress=None):  # type: ignore[no-untyped-def]
            super().__init__(jc, job, 0.05, lease_seconds, progress)
            QuickBeat.current = self

    monkeypatch.setattr(jobs, "Heartbeat", QuickBeat)
    return QuickBeat


def test_an_agent_that_lost_its_lease_stops_timing_the_job_and_leaves_it_to_its_holder(live_service, tmp_path, monkeypatch, threads_one):
    """The lease lapses under an agent (a long partition) and another agent claims the job: the first one's
    next heartbeat is refused, and it stops at the next point, delivers what it measured, and neither
    completes nor fails the job that is no longer its own."""
    import gac.agent.cli as agent_cli

    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    beats = _quick_beats(monkeypatch)

    def lose_the_lease() -> None:  # as if its lease ran out: back in the queue, and another agent claims it
        JobClient(live_service.url, live_service.ingest_token, agent=agent_cli._lease_name()).release(job_id, "lapsed")
        holder = JobClient(live_service.url, live_service.ingest_token, agent="holder")
        # A beat of the first agent may hold the job's row for a moment, and a claim passes over locked rows (on
        # Postgres): claim again then. The first refused beat ends the beating.
        assert next((j for j in (holder.claim(platform) for _ in range(50)) if j is not None), None) is not None
        assert beats.current is not None
        beats.current._thread.join(30)

    res, timed = _job_agent_with(live_service, tmp_path, monkeypatch, lose_the_lease)
    assert res.exit_code == 1, res.output
    assert f"(id {job_id}): its lease was lost while it ran" in res.output
    assert timed == 3  # stopped at the point it was timing, not after the whole job
    assert len(stored(live_service, platform.fingerprint())) == 3  # what it measured, delivered
    job = _job(live_service, job_id)
    assert (job["status"], job["lease_owner"], job["error"]) == ("leased", "holder", "lapsed")  # not completed, not failed


def test_an_agent_asked_for_its_job_by_a_requeue_stops_and_gives_it_back(live_service, tmp_path, monkeypatch, threads_one):
    """`gac jobs requeue` while the agent times the job and reports: it is asked for the job, its next heartbeat is
    refused, and it stops at the next point, delivers what it measured and gives the job back at once (points done
    said), so no second agent times the same points beside it."""
    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    beats = _quick_beats(monkeypatch)

    def requeue() -> None:
        asked = httpx.post(f"{live_service.url}/v1/jobs/{job_id}/requeue", headers=f.auth(live_service.admin_token)).json()
        assert asked["status"] == "leased" and asked["requeue_asked_at"], asked  # it reported just now: asked
        assert beats.current is not None
        beats.current._thread.join(30)  # the first refused beat ends the beating

    res, timed = _job_agent_with(live_service, tmp_path, monkeypatch, requeue)
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and f"(id {job_id}): an operator requeued it" in said and "gave it back (3 of its points" in said, said
    assert "left to other agents" in said and "no (more) jobs for this platform" in said, said  # not claimed again
    assert timed == 3  # stopped at the point it was timing, not after the whole job
    assert len(stored(live_service, platform.fingerprint())) == 3  # what it measured, delivered
    job = _job(live_service, job_id)
    assert (job["status"], job["lease_owner"], job["attempts"], job["points_done"]) == ("queued", None, 0, 3), job
    assert job["error"].startswith("requeued by an operator; agent ")


def test_an_agent_whose_token_is_revoked_mid_job_stops_at_the_next_point(live_service, tmp_path, monkeypatch, threads_one):
    """The first batch the service refuses for the token (401) stops the job's timing: nothing it times could be
    reported. It says the job stays leased until its lease runs out, how to free it, and where its points wait."""
    from gac.service.auth.tokens import revoke_token
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.settings import Settings

    settings = Settings(database_url=live_service.db_url, secret_key=SECRET, data_dir=live_service.data_dir)
    token = make_token(settings, "ingest", name="revoked-mid-job")
    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())

    def revoke() -> None:
        engine = make_engine(settings.url)
        with make_sessionmaker(engine)() as session:
            revoke_token(session, "revoked-mid-job")
            session.commit()
        engine.dispose()

    res, timed = _job_agent_with(live_service, tmp_path, monkeypatch, revoke, token, "--batch-size", "1")
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and f"(id {job_id}): stopped, the service no longer takes this agent's token" in said, said
    assert f"`gac jobs requeue {job_id}`" in said and "`gac agent flush`" in said, said
    assert timed <= 4  # not the whole job (13 points): the batch after the revocation stopped it
    assert _job(live_service, job_id)["status"] == "leased"  # nothing could report on it


def test_a_following_agent_waits_for_new_jobs_and_rides_out_a_service_restart(live_service, tmp_path, threads_one):
    platform = detect_platform("cpu")
    plan = loads_plan(TINY)
    command = [sys.executable, "-m", "gac", "agent", "run", "--jobs", "--follow", "--poll-s", "0.2", "--server", live_service.url,
               "--token", live_service.ingest_token, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")]  # fmt: skip
    env = {**os.environ, "COLUMNS": "250", "PYTHONFAULTHANDLER": "1"}
    live_service.stop()  # the agent's machine booted first: it waits for the service, it does not exit
    agent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = OutputLines(agent)
    try:
        assert "waiting for it" in out.wait_for(f"cannot reach {live_service.url}")
        live_service.start()
        out.wait_for(f"reached {live_service.url}")
        out.wait_for("no jobs for this platform now: waiting for more")  # an empty queue does not end it
        first = _create_job(live_service, plan.to_document(), platform.fingerprint())
        assert f"(id {first}, plan e2e-tiny)" in out.wait_for("claimed, 13 points to time")  # --quiet still says what it took
        out.wait_for("points in")  # the job it found on its next claim, done
        out.wait_for("no jobs for this platform now: waiting for more")
        live_service.stop()
        out.wait_for("cannot claim a job")  # the service gone: it waits for it, it does not exit
        assert agent.poll() is None
        live_service.start()
        second = _create_job(live_service, plan.to_document(), platform.fingerprint())
        out.wait_for("points in")
        out.wait_for("no jobs for this platform now: waiting for more")
        assert out.stop(signal.SIGTERM) == 143  # stopped as asked, between jobs
    finally:
        if agent.poll() is None:
            agent.kill()
    for job_id in (first, second):
        job = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers=f.auth(live_service.read_token)).json()
        assert (job["status"], job["points_done"]) == ("done", plan.n_points()), job
    assert_plan_stored(stored(live_service, platform.fingerprint()), plan, runs=2)  # both jobs' points, each job once


LONG = """
name: e2e-long
timing: {time_cap_ms: 15, warmup_ms: 1, max_samples: 40}
sweeps:
  - {op: gemm, dtypes: [float32], axis: n, fixed: {m: 8, k: 16}, values: {start: 8, stop: 2400, step: 8}}
"""  # 300 points: a few seconds, long enough to stop the service under it


def test_a_following_agent_reports_its_job_once_the_service_is_back(live_service, tmp_path, threads_one):
    """The service stops while the agent times a job: its rows wait in the spool, and the job is reported when the
    service returns (spool sent first), not left leased to an idle agent until the lease runs out."""
    platform, plan = detect_platform("cpu"), loads_plan(LONG)
    command = [sys.executable, "-m", "gac", "agent", "run", "--jobs", "--follow", "--poll-s", "0.2", "--server", live_service.url,
               "--token", live_service.ingest_token, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")]  # fmt: skip
    job = _create_job(live_service, plan.to_document(), platform.fingerprint())
    env = {**os.environ, "COLUMNS": "250", "PYTHONFAULTHANDLER": "1"}  # a hang on the way out says where
    agent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = OutputLines(agent)
    try:
        out.wait_for("claimed, 300 points to time")
        live_service.stop()
        # The rest of the 300 points first: a few seconds on a quiet machine, more under load (the lines say when).
        assert f"to report job {job}: waiting for it" in out.wait_for("the service cannot be reached to report job", timeout=300)
        live_service.start()
        out.wait_for("no jobs for this platform now: waiting for more")  # reported, then back to the queue
        assert out.stop(signal.SIGTERM) == 143
    finally:
        if agent.poll() is None:
            agent.kill()
    done = httpx.get(f"{live_service.url}/v1/jobs/{job}", headers=f.auth(live_service.read_token)).json()
    assert (done["status"], done["points_done"], done["attempts"]) == ("done", plan.n_points(), 1), "".join(out.seen)
    assert_plan_stored(stored(live_service, platform.fingerprint()), plan)  # every point, once


def test_an_agent_stopped_while_its_service_hangs_exits_and_keeps_what_it_measured(live_service, tmp_path, threads_one):
    """docker stop on an agent whose service hangs (frozen: the kernel takes its connections, nothing answers): the
    agent stops waiting, says what it kept, and keeps it, sent or spooled. (The test's wait only catches a hang: the
    agent's own bound is a few seconds, docs/timing.md.)"""
    from gac.agent.delivery.codec import by_row

    platform, plan = detect_platform("cpu"), loads_plan(LONG.replace("stop: 2400", "stop: 24000"))  # more than it times here
    command = [sys.executable, "-m", "gac", "agent", "run", "--jobs", "--follow", "--poll-s", "0.2", "--server", live_service.url,
               "--token", live_service.ingest_token, "--threads", "1", "--quiet", "--spool-dir", str(tmp_path / "spool")]  # fmt: skip
    _create_job(live_service, plan.to_document(), platform.fingerprint())
    env = {**os.environ, "COLUMNS": "250", "PYTHONFAULTHANDLER": "1"}
    agent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = OutputLines(agent)
    assert live_service.proc is not None
    try:
        out.wait_for("claimed, 3000 points to time")
        deadline = time.monotonic() + 120
        while not stored(live_service, platform.fingerprint()):  # a batch delivered: it is timing, and sending
            assert time.monotonic() < deadline and agent.poll() is None, out.everything()
            time.sleep(0.1)  # a poll of the service (no line says a batch went)
        os.kill(live_service.proc.pid, signal.SIGSTOP)
        try:
            assert out.stop(signal.SIGTERM, timeout=60) == 143
        finally:
            os.kill(live_service.proc.pid, signal.SIGCONT)
    finally:
        if agent.poll() is None:
            agent.kill()
    said = out.everything()
    kept = re.search(r"interrupted: kept (\d+) measured points?", said)  # "1 measured point": the freeze may come that early
    assert kept, said
    stored_n = {r["shape"]["n"] for r in stored(live_service, platform.fingerprint())}
    spooled_n = {m["shape"]["n"] for r in Spool(tmp_path / "spool").records() for m in by_row(r["batch"])["measurements"]}
    assert len(stored_n | spooled_n) >= int(kept[1]) > 0, said  # every point it said it kept is in one or the other


def test_a_report_whose_answer_was_lost_is_read_back_from_the_job(live_service):
    """A report tried again after its answer was lost meets 409: the job as stored says whether the first try took."""
    from gac.agent.cli import _report_took

    platform = detect_platform("cpu")
    job_id = _create_job(live_service, loads_plan(TINY).to_document(), platform.fingerprint())
    mine = JobClient(live_service.url, live_service.ingest_token, agent="box-1")
    job = mine.claim(platform)
    assert job is not None and job.id == job_id
    assert _report_took(mine, job, failed=False) is None  # still leased: nothing was reported
    mine.complete(job.id, 13)  # stored; say its answer never came back
    assert _report_took(mine, job, failed=False) == 0
    other = JobClient(live_service.url, live_service.ingest_token, agent="box-2")
    assert _report_took(other, job, failed=False) is None  # done, but not by this agent
    assert _report_took(mine, job, failed=True) is None  # this agent failed nothing
