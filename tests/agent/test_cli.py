"""The agent's commands on this machine, without a service (the e2e tests add one; so does the
job progress test at the end, which needs a queue)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from gac.agent.cli import register
from gac.agent.delivery import Spool, read_batch_file
from gac.contracts.measurements import Dtype
from tests import factories
from tests.fixtures.memory import HUGE, needs_refused_allocations

from .test_runner_delivery import TINY, closed_port_url


@pytest.fixture
def app():
    before = torch.get_num_threads()
    a = typer.Typer()
    register(a)
    yield a
    torch.set_num_threads(before)


def test_offline_run_writes_a_results_file(app, tmp_path):
    (tmp_path / "p.yaml").write_text(TINY)
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(
        app, ["agent", "run", "--plan", str(tmp_path / "p.yaml"), "--out", str(out), "--threads", "1", "--dtype", "float32", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    batches = [b for _, b, _ in read_batch_file(out)]
    assert sum(len(b.measurements) for b in batches) == 3 + 2  # float32 only: 3 gemm + 2 gemv
    assert "plan tiny" in res.output


@needs_refused_allocations
def test_a_point_that_cannot_be_timed_is_named_with_its_device_and_kernel_and_the_run_goes_on(app, tmp_path):
    """The error is shown as torch raised it: its square brackets are text, not markup to drop."""
    from gac.agent.platform import detect_platform

    huge = {"m": HUGE, "n": HUGE, "k": HUGE}
    (tmp_path / "p.yaml").write_text(f"""
name: too-big
timing: {{time_cap_ms: 20, warmup_ms: 1}}
sweeps:
  - {{op: gemm, dtypes: [float32], axis: n, fixed: {{m: {huge["m"]}, k: {huge["k"]}}}, values: [{huge["n"]}]}}
  - {{op: gemv, dtypes: [float32], axis: k, fixed: {{n: 8}}, values: [8]}}
""")
    with pytest.raises(RuntimeError) as raised:
        torch.empty(huge["m"], huge["k"])
    out = tmp_path / "r.jsonl"
    args = ["agent", "run", "--plan", str(tmp_path / "p.yaml"), "--out", str(out), "--threads", "1", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    kernel = f"gemm float32 m={huge['m']},n={huge['n']},k={huge['k']}"
    assert f"failed on cpu ({detect_platform('cpu').device_name}): {kernel}: RuntimeError: " in res.output, res.output
    assert str(raised.value).splitlines()[0][:60] in res.output, res.output
    assert sum(len(b.measurements) for _, b, _ in read_batch_file(out)) == 1  # the gemv point still timed


def test_a_plan_name_that_looks_like_markup_is_shown_as_written(app, tmp_path):
    """Names come from users and from manifests (a job is 'missing for MODEL'): '[/x]' once ended the
    run in a MarkupError after every point was timed."""
    name = "missing for bert[/x] [bold]"
    (tmp_path / "p.yaml").write_text(TINY.replace("name: tiny", f'name: "{name}"'))
    args = ["agent", "run", "--plan", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "r.jsonl"), "--threads", "1", "--quiet"]
    res = CliRunner().invoke(app, [*args, "--dtype", "float32"])
    assert res.exit_code == 0, res.output
    assert f"plan {name}: 5 points in" in res.output, res.output


def test_unreachable_server_spools_and_flush_keeps_it(app, tmp_path):
    (tmp_path / "p.yaml").write_text(TINY)
    spool_dir = tmp_path / "spool"
    url = closed_port_url()
    res = CliRunner().invoke(
        app,
        [
            "agent",
            "run",
            "--server",
            url,
            "--token",
            "t",
            "--plan",
            str(tmp_path / "p.yaml"),
            "--threads",
            "1",
            "--dtype",
            "float32",
            "--spool-dir",
            str(spool_dir),
            "--quiet",
            "--retries",
            "1",
            "--spool",
        ],
    )  # offline on purpose
    assert res.exit_code == 1  # not delivered: the exit code says so
    assert "spooled 5 rows" in res.output
    assert Spool(spool_dir).rows() == 5
    res = CliRunner().invoke(app, ["agent", "flush", "--server", url, "--token", "t", "--spool-dir", str(spool_dir), "--retries", "0"])
    # how many batches depends on how the rows were committed (every second, or so, under load)
    assert res.exit_code == 1 and re.search(r"\b[1-5] batch\(es\) left", res.output), res.output
    assert Spool(spool_dir).rows() == 5  # still there, nothing lost
    # Flushed to another service: kept, and said why and how to send them (it said nothing of it).
    other = closed_port_url()
    res = CliRunner().invoke(app, ["agent", "flush", "--server", other, "--token", "t", "--spool-dir", str(spool_dir), "--retries", "0"])
    assert res.exit_code == 1 and Spool(spool_dir).rows() == 5
    assert f"are for {url}, not {other}: `gac agent flush --server {url}` sends them there, --all-servers sends them here" in res.output
    # The same service spelt another way is the same service.
    upper = url.replace("http://", "HTTP://") + "/"
    res = CliRunner().invoke(app, ["agent", "flush", "--server", upper, "--token", "t", "--spool-dir", str(spool_dir), "--retries", "0"])
    assert "are for" not in res.output and "Connect" in res.output, res.output  # tried (and the service is still down)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["agent", "run", "--out", "x.jsonl", "--plan", "nope.yaml"], "no built-in plan 'nope.yaml'"),
        (["agent", "run", "--plan", "quick"], "give --server URL --token T, or --out FILE"),
        (["agent", "run", "--server", "http://x"], "--token"),
        (["agent", "run", "--out", "x.jsonl", "--device", "cuda:0"], "device error"),
        (["agent", "run", "--out", "x.jsonl", "--dtype", "float64"], "'float64' is not a dtype GAC times: choose from"),
        (["agent", "run", "--out", "x.jsonl", "--plan", "quick", "--follow"], "--follow waits for jobs: give --jobs too"),
    ],
)
def test_usage_errors_are_clear(app, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GAC_SERVER", raising=False)
    monkeypatch.delenv("GAC_TOKEN", raising=False)
    if "cuda:0" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert needle in res.output


def test_bad_plan_file_names_the_field(app, tmp_path):
    (tmp_path / "bad.yaml").write_text(TINY.replace("axis: k", "axis: q"))
    res = CliRunner().invoke(app, ["agent", "run", "--out", str(tmp_path / "x"), "--plan", str(tmp_path / "bad.yaml")])
    assert res.exit_code == 2
    assert "sweeps.1" in res.output and "axis 'q'" in res.output


def test_platform_command_prints_the_fingerprint(app):
    res = CliRunner().invoke(app, ["agent", "platform", "--threads", "1"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)  # JSON alone on stdout (scripts/demo.sh parses it); the dtype line on stderr
    assert doc["device_kind"] == "cpu" and len(doc["fingerprint"]) == 64 and doc["threads"] == 1
    assert doc["fast_dtype"] in ("float32", "bfloat16", "float16") and doc["dtype_speed"]["float32"] == 1.0
    assert f"dtype {doc['fast_dtype']}: " in res.stderr


@pytest.fixture
def planned(monkeypatch):
    """Run the agent's commands without timing anything: the plans they would run are kept here."""
    import gac.agent.cli as cli
    from gac.agent.runner import RunResult

    plans = []

    def fake_run(_session, plan, _sink, _adaptive, _quiet=False, **_options):
        plans.append(plan)
        return RunResult(plan.name)

    monkeypatch.setattr(cli, "run_with_progress", fake_run)
    return plans


def _dtypes(plan) -> list[list[str]]:
    return [[d.value for d in s.dtypes] for s in plan.sweeps]


def test_quick_plan_runs_in_the_platforms_fast_dtype(app, planned, tmp_path):
    from gac.agent.platform import detect_platform

    fast = detect_platform("cpu").fast_dtype.value
    res = CliRunner().invoke(app, ["agent", "run", "--plan", "quick", "--out", str(tmp_path / "r.jsonl"), "--quiet"])
    assert res.exit_code == 0, res.output
    (plan,) = planned
    assert _dtypes(plan)[0] == [fast]  # the main sweeps
    assert f"dtype {fast}: " in res.output  # and it says which and why


def test_quick_plan_follows_a_platform_that_says_bfloat16(app, planned, monkeypatch, tmp_path):
    import gac.agent.platform as platform_mod

    real = platform_mod.detect_platform

    def amx_cpu(device="cpu", dtypes=True):
        return real(device).model_copy(
            update={
                "native_dtypes": [Dtype.bfloat16],
                "fast_dtype": Dtype.bfloat16,
                "dtype_speed": {Dtype.float32: 1.0, Dtype.bfloat16: 0.4},
            }
        )

    monkeypatch.setattr(platform_mod, "detect_platform", amx_cpu)
    res = CliRunner().invoke(app, ["agent", "run", "--plan", "quick", "--out", str(tmp_path / "r.jsonl"), "--quiet"])
    assert res.exit_code == 0, res.output
    dts = _dtypes(planned[0])
    assert dts[0] == ["bfloat16"] and ["float32"] in dts  # bf16 sweeps, with the fp32 contrast
    assert "dtype bfloat16: bfloat16 is native on this CPU (0.40x float32's time)" in res.output


@pytest.mark.parametrize(
    ("spelled", "override"), [("bfloat16", "bfloat16"), ("float32", "float32"), ("bf16", "bfloat16"), ("FP32", "float32")]
)
def test_dtype_option_overrides_the_fast_dtype(app, planned, tmp_path, spelled, override):
    # bf16, fp16 and fp32 read as a manifest reads them
    res = CliRunner().invoke(app, ["agent", "run", "--plan", "quick", "--dtype", spelled, "--out", str(tmp_path / "r.jsonl"), "--quiet"])
    assert res.exit_code == 0, res.output
    dts = _dtypes(planned[0])
    assert dts[0] == [override] and all(d in ([override], ["float32"]) for d in dts)
    assert f"dtype {override}: chosen with --dtype" in res.output
    if override != "float32":  # the plan's float32 contrast sweep is not said to be the user's choice
        assert "dtype float32: chosen by plan quick" in res.output and "dtype float32: chosen with --dtype" not in res.output


def test_agent_package_does_not_pull_the_db_stack():
    import subprocess
    import sys

    code = (
        "import sys, importlib\n"
        "for m in ('cli', 'delivery', 'jobs', 'runner', 'timing', 'kernels', 'platform', 'plan_library', 'selftest'):\n"
        "    importlib.import_module('gac.agent.' + m)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'fastapi', 'alembic', 'psycopg'}\n"
        "             | {m for m in sys.modules if m.startswith(('gac.service', 'gac.solver'))}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# ---------------------------------------------------------------- one progress line per job


def test_progress_line_says_job_k_of_n_points_and_eta():
    from gac.agent.cli import first_round
    from gac.agent.jobs import ProgressLine, format_duration, job_label
    from gac.agent.plan_library import cliff_map_plan

    line = ProgressLine(job_label(2, 5), "(id 17, plan quick)", started=100.0)
    assert line.line(0, 120, now=100.0) == "job 2 of 5: 0/120 points, ETA - (id 17, plan quick)"
    # The first point took 10 s (setting up), the next 29 took 2 s each: 90 left -> 3 minutes.
    line.reached(1, now=110.0)
    assert line.line(30, 120, now=168.0) == "job 2 of 5: 30/120 points, ETA 3m00s (id 17, plan quick)"
    # While the 31st point runs the ETA counts down, down to the 89 points after it (2m58s), not below:
    # a slow point holds it there.
    assert line.line(30, 120, now=169.0) == "job 2 of 5: 30/120 points, ETA 2m59s (id 17, plan quick)"
    assert line.line(30, 120, now=200.0) == "job 2 of 5: 30/120 points, ETA 2m58s (id 17, plan quick)"
    line.reached(31, now=200.0)  # 30 points in 90 s after the first: 3 s a point, 89 left
    assert line.line(31, 120, now=200.0) == "job 2 of 5: 31/120 points, ETA 4m27s (id 17, plan quick)"
    # A refresh drawing a count the run has passed (another thread's) shows the latest, and moves nothing back.
    assert line.line(30, 120, now=200.0) == "job 2 of 5: 31/120 points, ETA 4m27s (id 17, plan quick)"
    assert line.line(120, 120, now=341.0) == "job 2 of 5: 120/120 points in 4m01s, 0.498 points/s (id 17, plan quick)"
    # The first point's one-time costs (10 s here) are left out of the rate once a second point is done.
    warming = ProgressLine("plan quick", started=0.0)
    assert warming.line(1, 120, now=10.0) == "plan quick: 1/120 points, ETA 19m50s"
    assert warming.line(11, 120, now=20.0) == "plan quick: 11/120 points, ETA 1m49s"
    # A GPU's timer times 8 points per round: they are done together, so the rate waits for the next round.
    rounds = ProgressLine("plan quick", started=0.0, first_round=8)
    first = [rounds.line(n, 120, now=10.0) for n in (1, 8)]
    assert first == ["plan quick: 1/120 points, ETA 19m50s", "plan quick: 8/120 points, ETA 2m20s"]
    assert rounds.line(9, 120, now=10.5) == "plan quick: 9/120 points, ETA 2m10s"  # (10.5 s / 9 points) * 111 left
    assert rounds.line(16, 120, now=12.0) == "plan quick: 16/120 points, ETA 26s"  # (2 s / 8 points) * 104 left
    assert rounds.line(16, 120, now=15.0) == "plan quick: 16/120 points, ETA 24s"  # a round of 8 runs: the 96 after it
    # Adaptive sweeps first, a point at a time, then rounds of 8: the countdown goes on through a round
    # of 8 (down to the points after it), not held at the points after a single one.
    mixed = ProgressLine("plan quick", started=0.0, first_round=1, per_round=8)
    mixed.reached(1, now=1.0)
    assert mixed.line(21, 120, now=21.0) == "plan quick: 21/120 points, ETA 1m39s"  # 1 s a point, 99 left
    assert mixed.line(21, 120, now=24.0) == "plan quick: 21/120 points, ETA 1m36s"  # not held at the 98 after one point
    assert mixed.line(21, 120, now=60.0) == "plan quick: 21/120 points, ETA 1m31s"  # the 91 after a round of 8
    # Which first round a run has: a GPU's adaptive sweeps are timed first, one point at a time.
    assert [first_round(cliff_map_plan(adaptive=a), a, 8) for a in (False, True)] == [8, 1]
    assert first_round(cliff_map_plan(adaptive=True), False, 8) == 8  # --no-adaptive: the grid, in rounds
    unknown = ProgressLine(job_label(3, None), started=0.0)  # the queue could not be read: no n invented
    assert unknown.line(1, 4, now=2.5) == "job 3: 1/4 points, ETA 7.5s"
    assert [format_duration(s) for s in (0.04, 9.9, 45, 185, 7620)] == ["0.0s", "9.9s", "45s", "3m05s", "2h07m"]


def test_a_job_done_with_failures_is_still_done_on_a_service_older_than_the_field():
    """An agent upgraded before its service: the old service refuses `failures` (422, as it forbids unknown
    fields); the job is completed without it rather than left leased until its lease runs out."""
    import httpx

    from gac.agent.jobs import JobClient, JobError

    bodies: list[dict] = []

    def old_service(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if body["points"] < 0:
            return httpx.Response(422, json={"error": "ValidationError", "detail": "points: Input should be >= 0"})
        if set(body) - {"agent", "points", "run_id"}:
            return httpx.Response(422, json={"error": "ValidationError", "detail": "failures: Extra inputs are not permitted"})
        return httpx.Response(200, json={"id": 7, "status": "done", "points_done": body["points"]})

    jc = JobClient("http://old", "tok", agent="a", client=httpx.Client(transport=httpx.MockTransport(old_service)))
    assert jc.complete(7, 2, failures="1 of 3 points could not be timed")["status"] == "done"
    assert [sorted(b) for b in bodies] == [["agent", "failures", "points"], ["agent", "points"]]
    assert jc.complete(7, 3)["points_done"] == 3 and sorted(bodies[-1]) == ["agent", "points"]  # none: never sent
    with pytest.raises(JobError, match="points"):  # refused for another reason: not sent again without the note
        jc.complete(7, -1, failures="1 point could not be timed")
    assert len(bodies) == 4


def test_a_heartbeat_with_progress_still_extends_the_lease_on_a_service_older_than_the_field():
    """An older service refuses heartbeat's points_done (422, unknown field): the beat is sent again
    without it, and later beats leave it out, rather than the lease running out."""
    import httpx

    from gac.agent.jobs import JobClient, JobError

    bodies: list[dict] = []

    def old_service(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if body.get("lease_seconds", 60) < 5:
            return httpx.Response(422, json={"error": "ValidationError", "detail": "lease_seconds: Input should be >= 5"})
        if set(body) - {"agent", "lease_seconds"}:
            return httpx.Response(422, json={"error": "ValidationError", "detail": "points_done: Extra inputs are not permitted"})
        return httpx.Response(200, json={"id": 7, "status": "leased"})

    jc = JobClient("http://old", "tok", agent="a", client=httpx.Client(transport=httpx.MockTransport(old_service)))
    assert jc.heartbeat(7, 60, points_done=5)["status"] == "leased"
    assert jc.heartbeat(7, 60, points_done=9)["status"] == "leased"
    sent = [sorted(b) for b in bodies]
    assert sent == [["agent", "lease_seconds", "points_done"], ["agent", "lease_seconds"], ["agent", "lease_seconds"]]
    with pytest.raises(JobError, match="lease_seconds"):  # refused for another reason: raised
        jc.heartbeat(7, 1)


def test_a_lease_is_extended_every_third_of_it_and_at_least_every_30_s():
    """Two beats may fail before a lease lapses; and a beat is how a cancelled job is noticed, so a long lease still beats often."""
    from gac.agent.jobs import heartbeat_every_s

    assert [heartbeat_every_s(s) for s in (6, 60, 90, 600, 3600)] == [5.0, 20.0, 30.0, 30.0, 30.0]


def test_a_following_agent_waits_longer_while_the_service_fails_and_never_in_step():
    import random

    import httpx

    from gac.agent.jobs import JobError, Poll, retryable

    poll = Poll(every_s=2.0, max_s=30.0, rng=random.Random(0))
    idle = [poll.next_wait(failed=False) for _ in range(200)]
    assert all(1.5 <= w <= 2.5 for w in idle) and len(set(idle)) == 200  # jittered around every_s
    failing = [poll.next_wait(failed=True) for _ in range(8)]
    bases = [4, 8, 16, 30, 30, 30, 30, 30]  # doubling from every_s, capped at max_s
    assert all(0.75 * b <= w <= 1.25 * b for w, b in zip(failing, bases, strict=True)), failing
    assert 1.5 <= poll.next_wait(failed=False) <= 2.5 and poll.failures == 0  # a claim that worked starts over
    # A day-long outage (thousands of failed claims) still waits max_s, not an overflowing 2**failures.
    outage = [poll.next_wait(failed=True) for _ in range(5000)]
    assert all(0.75 * 30 <= w <= 1.25 * 30 for w in outage[3:]), outage[:5]
    # What asking again may fix, and what it cannot.
    assert retryable(httpx.ConnectError("refused")) and retryable(httpx.ReadTimeout("slow"))
    assert all(retryable(JobError("x", s)) for s in (None, 408, 429, 500, 503))
    assert not any(retryable(JobError("x", s)) for s in (400, 401, 403, 404, 422))


def test_the_compose_files_agent_follows_the_queue(app, monkeypatch):
    """docker-compose.yml's agent container runs a command `gac agent run` accepts, and it waits for
    work rather than exiting (and being restarted by Docker) whenever the queue is empty."""
    import yaml

    import gac.agent.cli as cli

    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())
    command = compose["services"]["agent"]["command"]
    asked = []
    monkeypatch.setattr(cli, "run_agent", lambda opts: asked.append(opts) or 0)
    res = CliRunner().invoke(app, ["agent", "run", *command])
    assert res.exit_code == 0, res.output
    assert asked[0].jobs and asked[0].follow and asked[0].device == "cuda:0"


def test_job_match_rule_is_the_services():
    from gac.agent.jobs import job_matches
    from gac.agent.platform import detect_platform

    p = detect_platform("cpu", dtypes=False)
    assert job_matches({}, p) and job_matches({"fingerprint": None, "device_kind": None, "device_name": None}, p)
    assert job_matches({"fingerprint": p.fingerprint(), "device_kind": "cpu", "device_name": p.device_name[:3].upper()}, p)
    assert not job_matches({"fingerprint": "0" * 64}, p)
    assert not job_matches({"device_kind": "cuda"}, p)
    assert not job_matches({"device_name": "H100"}, p)


@pytest.mark.slow
def test_jobs_progress_is_one_line_per_job_with_k_of_n(live_service, app, tmp_path):
    """Two jobs for this platform and one for another: 'job 1 of 2', then 'job 2 of 2'; in a log (not a
    terminal), with --quiet or without, a line when claimed and a line when done."""
    import httpx

    from gac.agent.platform import detect_platform
    from gac.contracts.plans import loads_plan

    from .test_runner_delivery import TINY

    torch.set_num_threads(1)  # what --threads 1 gives the agent: the thread count is part of the fingerprint
    fingerprint = detect_platform("cpu").fingerprint()
    plan = loads_plan(TINY).restricted(["float32"]).to_document()  # all of it within --dtype below: timed whole

    def enqueue(match: dict) -> int:
        r = httpx.post(
            f"{live_service.url}/v1/jobs",
            json={"plan": plan, "match": match},
            headers={"Authorization": f"Bearer {live_service.admin_token}"},
        )
        assert r.status_code == 201, r.text
        return r.json()["id"]

    elsewhere = enqueue({"device_kind": "cuda"})  # queued, but not for this platform: not counted
    args = factories.agent_run_args(live_service, tmp_path / "spool", "--jobs", "--dtype", "float32")
    for quiet in (True, False):
        first, second = enqueue({"fingerprint": fingerprint}), enqueue({"device_kind": "cpu"})
        res = CliRunner().invoke(app, args + (["--quiet"] if quiet else []))
        assert res.exit_code == 0, res.output
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("job ")]
        # No live line (--quiet, or a log that is not a terminal, as here): which job it took is said when claimed.
        claimed = [rf"job {k} of 2: claimed, 5 points to time \(id {i}, plan tiny\)" for k, i in ((1, first), (2, second))]
        assert re.fullmatch(claimed[0], lines.pop(0)) and re.fullmatch(claimed[1], lines.pop(1)), res.stderr
        assert len(lines) == 2, res.stderr  # one line per job, however many points
        assert re.fullmatch(rf"job 1 of 2: 5/5 points in [0-9.ms]+, [0-9.e+]+ points/s \(id {first}, plan tiny\)", lines[0]), lines
        assert re.fullmatch(rf"job 2 of 2: 5/5 points in [0-9.ms]+, [0-9.e+]+ points/s \(id {second}, plan tiny\)", lines[1]), lines
    assert httpx.get(f"{live_service.url}/v1/jobs/{elsewhere}").json()["status"] == "queued"


@pytest.mark.parametrize(
    ("device", "env", "expected"),
    [("cpu", None, "{host}"), ("cuda:3", None, "{host}/cuda:3"), ("cuda:3", "rack4-gpu3", "rack4-gpu3"), ("cpu", "  ", "{host}")],
)
def test_runs_name_the_agent_by_host_and_gpu_unless_it_is_named(app, tmp_path, monkeypatch, device, env, expected):
    """A host runs one agent per GPU: each names its runs after its GPU, or GAC_AGENT_NAME (blank: unset)."""
    import socket

    from gac.agent.cli import run_info

    if env is None:
        monkeypatch.delenv("GAC_AGENT_NAME", raising=False)
    else:
        monkeypatch.setenv("GAC_AGENT_NAME", env)
    assert run_info("quick", device).agent == expected.format(host=socket.gethostname())
    if device == "cpu":  # what an offline run writes in its results file
        (tmp_path / "p.yaml").write_text(TINY)
        out = tmp_path / "r.jsonl"
        args = ["agent", "run", "--plan", str(tmp_path / "p.yaml"), "--out", str(out), "--threads", "1", "--dtype", "float32"]
        assert CliRunner().invoke(app, [*args, "--quiet"]).exit_code == 0
        assert {b.run.agent for _, b, _ in read_batch_file(out)} == {expected.format(host=socket.gethostname())}


def test_an_agent_started_on_one_visible_gpu_names_the_hosts_gpu_and_its_lease_stays_host_and_process(monkeypatch):
    """CUDA_VISIBLE_DEVICES=3 makes the host's GPU 3 the agent's cuda:0; replicas sharing GAC_AGENT_NAME (and pid 1 in
    their containers) still hold leases apart by host."""
    import os
    import socket

    from gac.agent.cli import _agent_name, _lease_name

    host = socket.gethostname()
    monkeypatch.delenv("GAC_AGENT_NAME", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert _agent_name("cuda:0") == f"{host}/cuda:3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f3c, 5")
    names = (_agent_name("cuda:0"), _agent_name("cuda:1"), _agent_name("cuda:2"))
    assert names == (f"{host}/cuda:GPU-8f3c", f"{host}/cuda:5", f"{host}/cuda:2")
    monkeypatch.setenv("GAC_AGENT_NAME", "replica")
    assert _agent_name("cuda:0") == "replica" and _lease_name() == f"{host}:{os.getpid()}"
