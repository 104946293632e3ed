"""The service SIGKILLed in the middle of an upload, on Postgres (issue 10).

An agent's deliverer (profiler_agent/delivery/, the real client) streams batches to a live
service (uvicorn, 2 workers). The test holds the curve's row lock, so the next batch's write
transaction copies its rows in and then waits, open, at its last statement before the commit;
then the service is killed with SIGKILL: either its master alone (`kill -9 <pid>`: the workers
get SIGTERM from PR_SET_PDEATHSIG, finish the request in hand and must be gone before anything
else happens) or the master and every worker at once (an OOM kill of the container: the open
transaction is cut and stores nothing). Batches sent while it is down are spooled; the service
is started again and the deliverer re-sends: every row stored exactly once, no batch ever
half-stored, no request answered with a 500.

The other checks of the table run elsewhere: concurrent re-sends with an exact count in
test_live.py, a Postgres stop/start on a throwaway cluster in test_outage.py. No sleeping to
wait: each step waits on a condition (an event, the process table, pg_stat_activity) with a
deadline."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import factories as f
from tests.fixtures.database import BACKENDS, SECRET, FreshDatabase, make_database
from tests.fixtures.live_service import LiveService
from tests.fixtures.tokens import make_token
from tests.service.test_workers import alive, children, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")]

ROWS, BATCHES, KILL_AT = 2500, 7, 3  # batches 0-2 delivered, 3 in flight at the kill, 4-5 sent while down, 6 after it


@pytest.fixture
def pg(tmp_path) -> Iterator[FreshDatabase]:  # type: ignore[no-untyped-def]
    if "postgres" not in BACKENDS:
        pytest.skip("postgres backend not selected")
    from gac.service.db import upgrade

    db = make_database("postgres", tmp_path)
    try:
        upgrade(db.url)
        yield db
    finally:
        db.drop()


def _query(db: FreshDatabase, sql: str, *args: object) -> list[tuple]:
    import psycopg

    with psycopg.connect(db.url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        return conn.execute(sql, args).fetchall()


def _wait(what: str, ready, timeout: float = 20.0, every: float = 0.01) -> None:  # type: ignore[no-untyped-def]
    """Poll a condition until it holds, failing at the deadline."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


@pytest.mark.parametrize("kill", ["master", "master-and-workers"])
def test_sigkill_mid_upload_then_resend_stores_every_row_once(pg, tmp_path, kill):
    import psycopg

    from gac.agent.delivery import Deliverer, Spool
    from gac.contracts.measurements import RunInfo
    from gac.service.settings import Settings

    svc = LiveService(db_url=pg.url, data_dir=tmp_path, workers=2)
    svc.ingest_token = make_token(Settings(database_url=pg.url, secret_key=SECRET, data_dir=tmp_path), "ingest")
    plat = f.platform(device_name="Fault CPU")
    batches = [f.batch(rows=ROWS, start=1 + ROWS * i, plat=plat) for i in range(BATCHES)]
    sent = {str(m.id) for b in batches for m in b.measurements}
    dsn = pg.url.replace("postgresql+psycopg://", "postgresql://")

    before_kill, locked, killed, sent_while_down, restarted = (threading.Event() for _ in range(5))
    statuses: list[int] = []
    failures: list[BaseException] = []
    client = httpx.Client(timeout=60, event_hooks={"response": [lambda r: statuses.append(r.status_code)]})
    spool = Spool(tmp_path / "spool")
    deliverer = Deliverer(
        svc.url,
        svc.ingest_token,
        plat,
        RunInfo(id=uuid.uuid4(), agent="faults", plan="faults"),
        spool=spool,
        retries=2,
        backoff_s=0.05,
        max_backoff_s=0.2,
        client=client,
    )

    def stream() -> None:
        try:
            for i, b in enumerate(batches):
                if i == KILL_AT:
                    before_kill.set()
                    assert locked.wait(60)
                if i == KILL_AT + 1:
                    assert killed.wait(60)
                if i == KILL_AT + 3:
                    sent_while_down.set()
                    assert restarted.wait(120)
                deliverer.deliver(b)
            deliverer.close()  # drains the spool into the service that is back
        except BaseException as err:  # reported by the main thread
            failures.append(err)
        finally:
            before_kill.set()
            sent_while_down.set()

    svc.start()
    sender = threading.Thread(target=stream)
    holder = psycopg.connect(dsn)
    try:
        sender.start()
        assert before_kill.wait(60) and not failures, failures
        # Hold the curve's row: the next batch's transaction copies its rows in, then waits on
        # this lock at its last statement before the commit (touch_curves), open for as long as we like.
        assert holder.execute("SELECT id FROM curves FOR UPDATE").fetchall()
        locked.set()
        with psycopg.connect(dsn, autocommit=True) as watch:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' AND query ILIKE 'UPDATE curves%%'"
            )
            _wait("the batch's transaction to reach the curve lock", lambda: watch.execute(waiting, (pg.name,)).fetchone()[0] > 0)

        assert svc.proc is not None
        master = svc.proc.pid
        workers = {p for p in children(master) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()}
        assert len(workers) == 2, workers
        os.kill(master, signal.SIGKILL)
        if kill == "master-and-workers":
            for p in workers:
                os.kill(p, signal.SIGKILL)
        svc.proc.wait(10)
        if kill == "master":
            holder.rollback()  # the workers (SIGTERM from PDEATHSIG) finish the request in hand, then exit
        try:
            assert not wait_gone(workers, timeout=20), "the workers did not end with their master"
        finally:
            for p in workers:
                if alive(p):
                    os.kill(p, signal.SIGKILL)
        holder.rollback()  # master-and-workers: the dead worker's transaction can never commit now
        killed.set()

        assert sent_while_down.wait(60)
        # Down: every batch wholly stored or not at all; the one in flight as the kind of kill decides.
        stored = dict(_query(pg, "SELECT batch_id::text, count(*) FROM measurements GROUP BY batch_id"))
        expect = KILL_AT + (kill == "master")  # SIGTERMed workers finished it; killed ones left nothing
        assert stored == {str(b.id): ROWS for b in batches[:expect]}, stored
        svc.start()
        restarted.set()
        sender.join(120)
        assert not sender.is_alive(), "the deliverer did not finish"
    finally:
        for event in (locked, killed, restarted):
            event.set()
        holder.close()
        sender.join(30)
        client.close()
        svc.stop()
    assert not failures, failures

    stats = deliverer.stats
    assert stats.spooled_batches >= 2 and spool.records() == [], stats  # it really was down, and all was re-sent
    assert all(s in (200, 201) for s in statuses), statuses  # no 500, no refusal
    per_batch = dict(_query(pg, "SELECT batch_id::text, count(*) FROM measurements GROUP BY batch_id"))
    assert per_batch == {str(b.id): ROWS for b in batches}
    ((rows, distinct),) = _query(pg, "SELECT count(*), count(DISTINCT uuid) FROM measurements")
    assert rows == distinct == ROWS * BATCHES
    assert {u for (u,) in _query(pg, "SELECT uuid::text FROM measurements")} == sent
