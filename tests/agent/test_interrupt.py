"""Nothing lost: the real CLI in its own process, stopped by SIGINT, SIGTERM or SIGKILL once its
progress shows points done, keeps every point it showed done; the same command then continues
where it stopped; an agent stopped mid-job gives the job back to the queue without using up an
attempt. Progress is read from the live line (FORCE_COLOR makes rich draw it on a pipe)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gac.agent.http_client import StopSafeClient
from gac.agent.interrupt import shielded, stop_pending, stop_signals
from tests import factories as f
from tests.fixtures.database import BACKENDS

pytestmark = pytest.mark.slow

POINTS = 16
PLAN = f"""
name: interrupt-tiny
timing: {{time_cap_ms: 30, warmup_ms: 1, min_samples: 10, max_samples: 100000, target_spread: 0.0001, median_ci: 0}}
sweeps:
  - {{op: gemm, dtypes: [float32], axis: n, fixed: {{m: 8, k: 16}}, values: {{start: 8, stop: {8 * POINTS}, step: 8}}}}
"""  # every point runs to its 30 ms cap: a few points a second, each a real float32 GEMM on this CPU
# The same points as an adaptive sweep's coarse grid (a jump of 1000 %: nothing between them is refined).
ADAPTIVE_PLAN = PLAN.replace("step: 8}}", "step: 1}, adaptive: {coarse_step: 8, jump: 10}}")
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
KEPT = re.compile(
    r"interrupted: kept (\d+) measured points? \((.*?)\), (\d+) points? not measured; "
    r"run the same command again to continue"
)


class Gac:
    """`python -m gac ARGS` in its own process, its stderr read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str], out: Path) -> None:
        env = env | {"FORCE_COLOR": "1", "COLUMNS": "220"}  # the live progress line, even on a pipe
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gac", *args], env=env, stdin=subprocess.DEVNULL, stdout=out.open("wb"), stderr=subprocess.PIPE
        )
        self.err = ""

    def _read(self, timeout: float) -> bool:
        """Read what stderr has within the timeout; False at its end."""
        assert self.proc.stderr is not None
        ready, _, _ = select.select([self.proc.stderr], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(self.proc.stderr.fileno(), 65536)
        self.err += chunk.decode(errors="replace")
        return bool(chunk)

    @property
    def text(self) -> str:
        return ANSI.sub("", self.err)

    def done(self) -> int:
        """Points the progress line has shown done so far."""
        return max((int(d) for d in re.findall(r"(\d+)/\d+ points", self.text)), default=0)

    def wait_for(self, ready, timeout: float = 180.0) -> None:  # noqa: ANN001 - a predicate on self
        deadline = time.monotonic() + timeout
        while not ready():
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; stderr so far:\n{self.text[-3000:]}"
            assert self._read(min(left, 1.0)), f"exited with {self.proc.wait()} first:\n{self.text[-3000:]}"

    def stop(self, sig: int, after_points: int) -> int:
        """Send `sig` once the progress shows `after_points` done; the points shown done by then."""
        self.wait_for(lambda: self.done() >= after_points)
        seen = self.done()
        self.proc.send_signal(sig)
        return seen

    def finish(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while self._read(max(0.01, deadline - time.monotonic())):
            assert time.monotonic() < deadline, f"did not exit:\n{self.text[-3000:]}"
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))


def stored(url: str) -> tuple[int, int]:
    """(distinct points, points timed in more than one run) in the measurements table. A point has more
    rows than one where the quality gate timed it again, within its run, by design; a point in two runs
    was timed again by a command that should have skipped it."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as c:
            points = c.execute(text("select count(*) from (select distinct curve_id, x from measurements) as p")).scalar_one()
            in_two_runs = "select curve_id, x from measurements group by curve_id, x having count(distinct run_id) > 1"
            twice = c.execute(text(f"select count(*) from ({in_two_runs}) as p")).scalar_one()
    finally:
        engine.dispose()
    return points, twice


def kept(gac: Gac) -> tuple[int, str, int]:
    found = KEPT.search(gac.text)
    assert found, gac.text[-3000:]
    return int(found[1]), found[2], int(found[3])


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path


# The local database is the embedded default (SQLite); its commits go through the service's ingest, tested on both
# backends elsewhere. The agent's run goes to the service on Postgres.
LOCAL_BACKEND = "sqlite" if "sqlite" in BACKENDS else BACKENDS[0]
SERVICE_BACKEND = "postgres" if "postgres" in BACKENDS else BACKENDS[0]


@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_stopped_profile_keeps_every_point_it_showed_done(app, settings, tmp_path, plan_file, sig):
    # SIGKILL cannot be handled: with commits on every row, each point is stored before it is shown done.
    # SIGINT and SIGTERM are handled: with commits twice a second, the last ones are flushed on the way out.
    every = "0" if sig == signal.SIGKILL else "0.5"
    env = f.cli_env(settings, tmp_path) | {"GAC_COMMIT_EVERY_S": every}
    gac = Gac(["profile", "--plan", str(plan_file), "--threads", "1"], env, tmp_path / "out")
    seen = gac.stop(sig, after_points=3)
    assert gac.finish() == EXIT[sig], gac.text[-3000:]
    points, twice = stored(settings.url)
    assert points >= seen >= 3 and twice == 0  # every point shown done, each in one run
    if sig == signal.SIGKILL:
        return
    n, where, not_measured = kept(gac)
    assert (n, where) == (points, "stored") and n + not_measured == POINTS
    assert points < POINTS  # it was stopped mid-plan: the test stopped something


@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
@pytest.mark.parametrize("adaptive", [False, True], ids=["grid", "adaptive"])
def test_the_same_command_again_skips_what_is_stored_and_finishes(app, settings, tmp_path, plan_file, adaptive):
    """An adaptive sweep stopped in its coarse grid continues from its stored points too (none timed twice)."""
    if adaptive:
        plan_file.write_text(ADAPTIVE_PLAN)
    env = f.cli_env(settings, tmp_path)
    first = Gac(["profile", "--plan", str(plan_file), "--threads", "1"], env, tmp_path / "out1")
    first.stop(signal.SIGINT, after_points=3)
    assert first.finish() == 130, first.text[-3000:]
    before, _ = stored(settings.url)
    assert 3 <= before < POINTS
    n, _, not_measured = kept(first)
    assert n == before and n + not_measured == POINTS
    assert first.text.rstrip().endswith("what they measure may call for more points between their coarse ones)") == adaptive

    again = Gac(["profile", "--plan", str(plan_file), "--threads", "1", "--quiet"], env, tmp_path / "out2")
    assert again.finish() == 0, again.text[-3000:]
    assert f"skipping {before} points already stored for this platform" in again.text
    new_rows = re.search(r"stored (\d+) new rows \(0 duplicates\)", again.text)
    assert new_rows and int(new_rows[1]) >= POINTS - before  # more where the quality gate timed a point again
    assert stored(settings.url) == (POINTS, 0)  # every point, none missing, none timed by both runs


def test_an_offline_run_stopped_is_continued_from_its_results_file(tmp_path, plan_file):
    """`gac agent run --out FILE` (no service): the same command again reads the file, times only the rest,
    and the file ends with every point once, ready for `gac ingest`."""
    from gac.agent.delivery import read_batch_file

    out = tmp_path / "results.jsonl"
    args = ["agent", "run", "--out", str(out), "--plan", str(plan_file), "--threads", "1"]
    env = os.environ | {"GAC_DATA_DIR": str(tmp_path / "data"), "GAC_COMMIT_EVERY_S": "0.5"}
    first = Gac(args, env, tmp_path / "out1")
    first.stop(signal.SIGINT, after_points=3)
    assert first.finish() == 130, first.text[-3000:]
    n, where, _ = kept(first)
    assert where == f"written to {out}" and 3 <= n < POINTS

    again = Gac([*args, "--quiet"], env, tmp_path / "out2")
    assert again.finish() == 0, again.text[-3000:]
    assert f"skipping {n} points already in {out}" in again.text
    runs_per_point: dict[int, set] = {}
    for _, batch, error in read_batch_file(out):
        assert batch is not None, error
        for m in batch.measurements:
            runs_per_point.setdefault(m.shape["n"], set()).add(batch.run.id)
    assert sorted(runs_per_point) == list(range(8, 8 * POINTS + 1, 8))  # every point...
    assert all(len(runs) == 1 for runs in runs_per_point.values()), runs_per_point  # ... timed by one run


def _manifest(path: Path) -> Path:
    """Two small low-rank weights: rules only, the alignment lists about 30 GEMM points of a few microseconds."""
    path.write_text(
        json.dumps(
            {
                "schema": "gac.manifest/v1",
                "model": "tiny",
                "compressor": "asvd",
                "budget": {"params": 2719},
                "workload": {"tokens": [8], "dtype": "float32"},
                "weights": [
                    {"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": 40, "in_features": 48, "dim": d, "importance": 1.0 + i}
                    for i, d in enumerate((11.3, 19.6))
                ],
            }
        )
    )
    return path


@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
def test_a_stopped_profile_missing_keeps_its_points_and_continues(app, settings, tmp_path):
    manifest = _manifest(tmp_path / "m.json")
    env = f.cli_env(settings, tmp_path)
    args = ["align", str(manifest), "--profile-missing", "--yes", "--threads", "1"]
    first = Gac(args, env, tmp_path / "out1")
    seen = first.stop(signal.SIGTERM, after_points=2)
    assert first.finish() == 143, first.text[-3000:]
    points, twice = stored(settings.url)
    n, where, _ = kept(first)
    assert points == n >= seen >= 2 and twice == 0 and where == "stored"

    # Aligned without a platform, the same command now aligns on this machine's (the points just
    # stored) and asks only for the points it still lacks.
    again = Gac(args, env, tmp_path / "out2")
    again.wait_for(lambda: "platform: this machine" in again.text)
    seen_again = again.stop(signal.SIGTERM, after_points=1)
    assert again.finish() == 143, again.text[-3000:]
    more, _, _ = kept(again)
    assert stored(settings.url) == (n + more, 0) and more >= seen_again >= 1  # both runs' points, none timed by both


@pytest.mark.parametrize("database", [SERVICE_BACKEND], indirect=True)
def test_an_agent_stopped_mid_job_gives_it_back_and_the_same_command_finishes_it_without_timing_twice(live_service, tmp_path, plan_file):
    from gac.contracts.plans import loads_plan

    plan = loads_plan(PLAN).to_document()
    r = httpx.post(
        f"{live_service.url}/v1/jobs",
        json={"plan": plan, "match": {"device_kind": "cpu"}, "max_attempts": 1},
        headers=f.auth(live_service.admin_token),
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    # Commits twice a second, so the signal may well land while a batch is being sent: the agent waits for
    # the service's answer, and says "sent" of what the service has.
    env = os.environ | {"GAC_COMMIT_EVERY_S": "0.5"}
    args = f.agent_run_args(live_service, tmp_path / "spool", "--jobs")
    gac = Gac(args, env, tmp_path / "out")
    seen = gac.stop(signal.SIGTERM, after_points=2)
    assert gac.finish() == 143, gac.text[-3000:]

    job = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers=f.auth(live_service.admin_token)).json()
    # Back in the queue at once, its one attempt not used up (a failure would have used it: status failed).
    assert (job["status"], job["attempts"], job["lease_owner"]) == ("queued", 0, None)
    assert job["error"].startswith("interrupted by SIGTERM on agent ")
    rows = httpx.get(f"{live_service.url}/v1/measurements", params={"limit": 5000}).json()["items"]
    n, where, _ = kept(gac)
    points = {(r["curve_id"], r["shape"][r["sweep_axis"]]) for r in rows}  # a point the gate timed again has more rows
    assert len(points) == n >= seen and where == f"sent to {live_service.url}"
    assert not (tmp_path / "spool" / "spool.jsonl").read_text()  # every batch reached the service

    # The same command again claims the job at once (not after its lease) and times only what is left:
    # the first attempt's points are in the job's run, and are not timed twice.
    again = Gac(args, env, tmp_path / "out-again")
    assert again.finish() == 0, again.text[-3000:]
    assert f"skipping {n} points this job's earlier attempts stored" in again.text, again.text[-3000:]
    job = httpx.get(f"{live_service.url}/v1/jobs/{job_id}", headers=f.auth(live_service.admin_token)).json()
    assert (job["status"], job["attempts"]) == ("done", 1), job
    assert stored(live_service.db_url) == (POINTS, 0)  # every point, each timed in one run
    assert job["points_done"] >= POINTS and job["run_id"] == rows[0]["run_id"]  # both attempts in one run

    # The same plan run by this machine leaves out what the service has stored for it (asked over HTTP).
    rest = Gac(f.agent_run_args(live_service, tmp_path / "spool", "--plan", str(plan_file), "--quiet"), env, tmp_path / "out2")
    assert rest.finish() == 0, rest.text[-3000:]
    assert f"skipping {POINTS} points already stored for this platform" in rest.text
    assert stored(live_service.db_url) == (POINTS, 0)  # nothing timed again


def test_a_stop_signal_waits_for_the_commit_under_way():
    """In this process: SIGTERM inside shielded() is raised as KeyboardInterrupt at the block's end, not inside it."""
    reached = []
    with stop_signals() as stop, pytest.raises(KeyboardInterrupt):
        with shielded():
            signal.raise_signal(signal.SIGTERM)  # the handler runs before this call returns
            reached.append("after the signal")
        reached.append("after the block")  # never: the interrupt comes as the block ends
    assert reached == ["after the signal"]
    assert (stop.name, stop.exit_code) == ("SIGTERM", 143)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler was for the command's duration only


def test_the_more_points_note_ends_with_the_adaptive_sweeps():
    """The runner times adaptive sweeps first: past them nothing can add points, and a stop there says none may follow
    (the note is read from the line the run keeps, ProgressLine.refining)."""
    from gac.agent.cli import open_session, run_with_progress
    from gac.agent.jobs import ProgressLine
    from gac.contracts.plans import loads_plan

    plan = loads_plan(
        """
name: refine-then-grid
timing: {time_cap_ms: 2, warmup_ms: 1, min_samples: 10, max_samples: 20}
sweeps:
  - {op: gemm, dtypes: [float32], axis: n, fixed: {m: 4, k: 16}, values: {start: 8, stop: 16, step: 8}}
  - {op: gemm, dtypes: [float32], axis: n, fixed: {m: 8, k: 16}, values: {start: 8, stop: 32, step: 1},
     adaptive: {coarse_step: 8, jump: 10}}
"""
    )
    line = ProgressLine("plan refine-then-grid")
    seen: list[tuple[int, bool]] = []  # (m, whether a stop now would say more may follow), the line as of the point before
    record = lambda m: seen.append((m.shape["m"], line.refining))  # noqa: E731
    run_with_progress(open_session("cpu", 1), plan, record, adaptive=True, quiet=True, line=line)
    adaptive_points = [refining for m, refining in seen if m == 8]
    assert seen[0][0] == 8 and adaptive_points and all(adaptive_points)  # adaptive first, and may refine while it runs
    assert [m for m, _ in seen[-2:]] == [4, 4] and seen[-1][1] is False and line.refining is False  # past it: no note


def test_a_block_in_another_thread_holds_no_stop_back():
    """Signals reach the main thread only: a heartbeat's block open in another thread leaves a stop to be raised in the
    main thread at once (held back, it would be raised in the other thread as its block ends, and the run would go on)."""
    inside, leave = threading.Event(), threading.Event()
    raised_there: list[BaseException] = []

    def heartbeat() -> None:
        try:
            with shielded():
                inside.set()
                leave.wait()
        except BaseException as err:  # noqa: BLE001 - what the test looks for
            raised_there.append(err)

    beat = threading.Thread(target=heartbeat)
    with stop_signals():
        beat.start()
        inside.wait()
        try:
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGTERM)
        finally:
            leave.set()
            beat.join()
    assert raised_there == []


@contextmanager
def answering(status: int, stop_on: str = "/stop", hang: threading.Event | None = None, stops: int = 1) -> Iterator[tuple[str, list[str]]]:
    """A service on a free port answering every call with `status` (a JSON body), its URL and the paths called.
    A call to `stop_on` first sends this process's main thread SIGTERM (`stops` times, each once the one before is
    held); with `hang`, no answer comes until it is set."""
    called: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            called.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            for k in range(stops if self.path == stop_on else 0):
                deadline = time.monotonic() + 10
                while k and not stop_pending() and time.monotonic() < deadline:
                    time.sleep(0.001)  # the one before is held: a second one is a second stop, not the same one
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            if hang is not None:
                hang.wait()
            body = b'{"detail": "scripted"}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # a call the stop cut: its client is gone
                pass

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", called
    finally:
        if hang is not None:
            hang.set()
        server.shutdown()
        server.server_close()


def test_a_stop_signal_during_a_call_to_the_service_waits_for_its_answer(capfd):
    """A stop cut inside httpx can leave its connection pool's lock taken (the command then hangs closing the client):
    the agent's client raises it once the answer is in, and says at once that it waits."""
    answered: list[int] = []
    hook = {"response": [lambda r: answered.append(r.status_code)]}
    with answering(200) as (url, _), stop_signals(), StopSafeClient(timeout=10, event_hooks=hook) as client:
        with pytest.raises(KeyboardInterrupt):
            client.get(f"{url}/stop")
        assert answered == [200]  # the answer came in before the stop was raised
        assert client.get(url).status_code == 200  # and the client still works
    assert "SIGTERM: stopping once the step under way ends (at most 3 s; again to stop without waiting)" in capfd.readouterr().err


def test_a_call_that_fails_with_a_stop_held_still_stops_the_run():
    """A caller that handles the failed call and goes on (a timeout read as 'cannot ask the service') must not drop
    the stop that waited for it: the service hangs, SIGTERM comes, the call times out, the run ends."""
    with answering(200, hang=threading.Event()) as (url, _), stop_signals(), StopSafeClient(timeout=0.5) as client:
        with pytest.raises(KeyboardInterrupt) as stopped:
            try:
                client.get(f"{url}/stop")
            except httpx.TimeoutException:
                pass  # as resume.known_on_server does: it would time the whole plan next
        assert isinstance(stopped.value.__cause__, httpx.TimeoutException)


def test_a_stop_waits_on_a_hung_service_for_a_few_seconds_only(monkeypatch):
    """A service that accepts the call and never answers: the stop is raised WAIT_AT_MOST_S after it came, as a second
    stop would, not at the call's timeout (30 s would outlast docker stop's grace)."""
    import gac.agent.interrupt as interrupt

    monkeypatch.setattr(interrupt, "WAIT_AT_MOST_S", 0.2)
    ended: list[BaseException] = []
    with answering(200, hang=threading.Event()) as (url, _), stop_signals(), StopSafeClient(timeout=30) as client:
        with pytest.raises(KeyboardInterrupt) as stopped:
            try:
                client.get(f"{url}/stop")
            except BaseException as err:
                ended.append(err)
                raise
    assert ended == [stopped.value] and stopped.value.__cause__ is None  # cut by the deadline, not ended by a timeout


def test_a_client_whose_call_a_stop_cut_leaves_its_pool_alone_on_close(monkeypatch):
    """Cut inside httpx (here by the deadline), the call may have left its pool's lock taken, and closing the pool takes
    that lock: the client then does not close it (the process is on its way out), where an uncut client does."""
    import gac.agent.interrupt as interrupt

    monkeypatch.setattr(interrupt, "WAIT_AT_MOST_S", 0.2)
    closed: list[str] = []
    with answering(200, hang=threading.Event()) as (url, _), stop_signals():
        for how in ("close", "with"):  # httpx's __exit__ closes the transport without calling close()
            cut = StopSafeClient(timeout=30)
            monkeypatch.setattr(cut._transport._pool, "close", lambda how=how: closed.append(f"cut, {how}"))  # both paths end here
            with pytest.raises(KeyboardInterrupt):
                if how == "with":
                    with cut:
                        cut.get(f"{url}/stop")
                else:
                    cut.get(f"{url}/stop")
            cut.close()
        whole = StopSafeClient(timeout=30)
        monkeypatch.setattr(whole._transport._pool, "close", lambda: closed.append("whole"))
        with whole:
            pass
    assert closed == ["whole"]


def test_a_stop_that_came_in_a_commit_waits_on_the_service_a_few_seconds_only(monkeypatch):
    """The stop comes while a batch is written to the spool (a commit: it waits), the send that follows hangs: once the
    commit is done the stop only waits, and its deadline runs from there."""
    import gac.agent.interrupt as interrupt

    monkeypatch.setattr(interrupt, "WAIT_AT_MOST_S", 0.2)
    with answering(200, hang=threading.Event()) as (url, _), stop_signals(), StopSafeClient(timeout=30) as client:
        with pytest.raises(KeyboardInterrupt) as stopped:
            with shielded() as shield:
                signal.raise_signal(signal.SIGTERM)  # held by the commit, no deadline yet
                shield.breakable = True  # the batch is in the spool: what is left is the send
                client.get(url)
    assert stopped.value.__cause__ is None  # cut by the deadline, not raised from the call's timeout (ReadTimeout)


def test_the_deadline_leaves_a_timer_someone_else_set_alone():
    """A watchdog's SIGALRM (a test harness, a notebook) keeps its handler and time: the stop then waits for the
    call's own end, and says nothing of a deadline."""
    fired: list[int] = []

    def watchdog(signum: int, frame: object) -> None:
        fired.append(signum)

    before = signal.signal(signal.SIGALRM, watchdog)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        with stop_signals(), pytest.raises(KeyboardInterrupt):
            with shielded(breakable=True):
                signal.raise_signal(signal.SIGTERM)
                assert signal.getsignal(signal.SIGALRM) is watchdog
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 50  # still the watchdog's, still running
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert fired == []


def test_a_call_failing_in_another_thread_leaves_the_stop_to_the_main_thread():
    """A heartbeat's call fails (the service is down) while the main thread holds a stop in a wait: the heartbeat sees
    its error, and the stop stays the main thread's, raised as its wait ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens once it is closed
    seen: list[str] = []

    def beat() -> None:
        try:
            with StopSafeClient(timeout=5) as client:
                client.get(f"http://127.0.0.1:{closed_port}/")
        except BaseException as err:  # noqa: BLE001 - what the test looks for
            seen.append(type(err).__name__)

    with stop_signals(), pytest.raises(KeyboardInterrupt):
        with shielded(breakable=True):
            signal.raise_signal(signal.SIGTERM)
            heartbeat = threading.Thread(target=beat)
            heartbeat.start()
            heartbeat.join()
    assert seen == ["ConnectError"]


def test_on_the_way_out_a_batch_gets_one_short_try():
    """Once a stop is raised, the last rows sent and the job given back must fit a supervisor's grace before SIGKILL:
    one try, at most STOPPING_TIMEOUT_S, no retries with backoff (what is not sent stays in the spool)."""
    from gac.agent.delivery import BatchSender, DeliveryError, RetryPolicy
    from gac.agent.delivery.codec import batch_document
    from gac.agent.http_client import STOPPING_TIMEOUT_S

    timeouts: list[dict] = []
    hook = {"request": [lambda r: timeouts.append(r.extensions["timeout"])]}
    with answering(503) as (url, called), stop_signals():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)  # no block open: the run is stopping from here
        with StopSafeClient(timeout=30, event_hooks=hook) as client, BatchSender(url, "t", RetryPolicy(4, 0.01), client=client) as sender:
            with pytest.raises(DeliveryError):
                sender.send_document(batch_document(f.batch(2)))
    assert called == ["/v1/batches"]  # 503 is retried, but not on the way out
    assert [t["read"] for t in timeouts] == [STOPPING_TIMEOUT_S]


def test_a_held_stop_survives_a_closed_stderr():
    """`gac agent run ... 2>&1 | tee log` and Ctrl-C: tee ends too, and the handler's line cannot be written. The stop
    is held all the same (the write's error raised inside a call to the service would have dropped it)."""
    saved, (read_end, write_end) = os.dup(2), os.pipe()
    os.close(read_end)
    os.dup2(write_end, 2)  # a pipe no one reads: EPIPE
    os.close(write_end)
    reached = []
    try:
        with stop_signals(), pytest.raises(KeyboardInterrupt):
            with shielded():
                signal.raise_signal(signal.SIGTERM)
                reached.append("after the signal")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert reached == ["after the signal"]


def test_an_error_inside_a_block_with_a_stop_held_goes_on_as_it_is():
    """A commit that fails while a stop waits is reported as what it is (a full disk, a bug), not as the stop."""
    with stop_signals(), pytest.raises(OSError, match="No space left"):
        with shielded():
            signal.raise_signal(signal.SIGTERM)
            raise OSError(28, "No space left on device")


def test_a_stopped_drain_takes_what_the_service_took_out_of_the_spool(tmp_path):
    """A stop while the spool is sent (gac agent flush, an agent's drain) waits for the batch under way, keeps the
    rest for the next flush, and the batches the service took leave the spool: they are not sent again."""
    from gac.agent.delivery import DeliveryStats, Spool
    from gac.contracts.measurements import BatchReceipt

    spool, batches = Spool(tmp_path / "spool"), [f.batch(2) for _ in range(3)]
    with answering(200) as (url, called):
        for b in batches:
            spool.add(url, b)
        with StopSafeClient(timeout=10) as client:

            def send(doc: dict) -> BatchReceipt:
                client.post(f"{url}/stop" if len(called) == 1 else url, json={})  # the second batch's call brings the stop
                return BatchReceipt(batch_id=doc["id"], platform_id=1, fingerprint="f", inserted=2, duplicates=0, replay=False)

            with stop_signals(), pytest.raises(KeyboardInterrupt):
                spool.drain(send, url, DeliveryStats())
    assert len(called) == 2  # the third batch was not sent
    assert [r["batch"]["id"] for r in spool.records()] == [str(batches[2].id)]  # the two the service took left the spool


def test_a_second_stop_does_not_wait_for_a_claim():
    """A stop during a claim waits for its answer (a job it brings is given back), a second one does not: the
    service hangs, and the claim's call ends at the second stop, not at its timeout."""
    from gac.agent.cli import _claim
    from gac.agent.jobs import JobClient
    from gac.agent.platform import detect_platform

    class Recording(StopSafeClient):
        ended: list[str] = []

        def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            try:
                return super().send(request, **kwargs)
            except BaseException as err:
                self.ended.append(type(err).__name__)
                raise

    platform = detect_platform("cpu")
    with answering(200, stop_on="/v1/jobs/claim", hang=threading.Event(), stops=2) as (url, _), stop_signals():
        with Recording(timeout=5) as client, pytest.raises(KeyboardInterrupt):
            _claim(JobClient(url, "t", client=client), platform, None, [])
    assert Recording.ended == ["KeyboardInterrupt"]  # cut by the second stop, not ended by the timeout (ReadTimeout)


def test_a_stopped_ingest_says_the_rest_can_be_sent_again(tmp_path):
    """`gac ingest` stopped mid-upload: the batch under way is answered (no retry after the stop), then it says what
    to do and exits 143."""
    from tests.agent.test_e2e import cli_app
    from tests.cli.test_ingest_csv import H100, H100_ROWS, platform_file

    with answering(503, stop_on="/v1/batches") as (url, called):
        args = ["ingest", str(H100_ROWS), "--platform-file", str(platform_file(tmp_path, H100)), "--server", url, "--token", "t"]
        res = CliRunner().invoke(cli_app(), args)
    assert res.exit_code == 143, res.output
    assert "interrupted by SIGTERM: ingest is idempotent: the same command again sends the rest" in res.output
    assert called == ["/v1/batches"]


def test_a_stopped_first_pass_says_more_points_may_follow():
    """A first pass's 'not measured' is not the whole of what is left: its measurements decide the next pass."""
    from gac.agent.interrupt import FIRST_PASS_MORE, interrupted_line

    plain = interrupted_line(55, 54, "stored")
    assert KEPT.fullmatch(plain) and "first pass" not in plain
    first = interrupted_line(55, 54, "stored", FIRST_PASS_MORE)
    assert KEPT.match(first) and first.endswith("(a first pass: what it measures may call for more points)")


def test_a_second_stop_during_the_way_out_still_says_what_was_kept(capfd):
    """SIGTERM while timing, then again while the job is given back to a service that hangs: the give-back ends
    there, and the command still says how many points it kept and exits 143 (not 'nothing measured was left behind')."""
    import typer

    from gac.agent.cli import open_session, run_keeping
    from gac.contracts.plans import loads_plan

    class Rows:
        committed = committed_points = 0

        def add(self, m: object) -> None:
            self.committed = self.committed_points = self.committed + 1
            if self.committed == 2:
                signal.raise_signal(signal.SIGTERM)  # the first stop, two points in

        def close(self) -> None:
            pass

        def kept_where(self) -> str:
            return "stored"

    plan = loads_plan(PLAN.replace("time_cap_ms: 30", "time_cap_ms: 2"))
    with answering(200, stop_on="/release", hang=threading.Event()) as (url, called), StopSafeClient(timeout=30) as client:
        give_back = lambda _: client.post(f"{url}/release")  # noqa: E731 - the service takes the second stop's signal, then hangs
        with pytest.raises(typer.Exit) as ended:
            run_keeping(open_session("cpu", 1), plan, Rows(), adaptive=False, quiet=True, on_stop=give_back)
    assert ended.value.exit_code == 143 and called == ["/release"]
    err = capfd.readouterr().err
    assert "SIGTERM again: stopping without waiting for the rest of the way out" in err
    assert KEPT.search(err) and KEPT.search(err)[1] == "2", err
