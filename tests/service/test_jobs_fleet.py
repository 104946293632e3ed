"""The job queue under a small fleet, on Postgres (issue 9; benchmarks/jobs_fleet.py is the large one).

20 agents, real HTTP clients with an ingest token each, claim, heartbeat and complete 300 jobs
on a live service (uvicorn, 2 workers); the agents holding a fixed 5 % of first attempts die
mid-job. The test is the clock: when an agent dies it moves that lease into the past (the
service's lease stays at its 600 s default, so nothing else expires it), and the job must be
claimed again and done by another agent. Every job done exactly once, counted from the
database; a claim never waits on a row another transaction holds (SKIP LOCKED)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from benchmarks.jobs_fleet import PLATFORM, agent_index, clear_jobs, create_tokens, dies, enqueue_jobs, run_fleet, verify
from tests.fixtures.database import BACKENDS, FreshDatabase, make_database
from tests.fixtures.live_service import LiveService

pytestmark = pytest.mark.slow

AGENTS, JOBS, DIE, SEED = 20, 300, 0.05, 7


@dataclass
class Fleet:
    db: FreshDatabase
    service: LiveService
    tokens: list[str]

    @property
    def dsn(self) -> str:
        return self.db.url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:  # type: ignore[no-untyped-def]
    if "postgres" not in BACKENDS:
        pytest.skip("postgres backend not selected")
    from gac.service.db import upgrade

    tmp = tmp_path_factory.mktemp("fleet")
    db = make_database("postgres", tmp)
    try:
        upgrade(db.url)
        service = LiveService(db_url=db.url, data_dir=tmp, workers=2)
        tokens = create_tokens(db.url, AGENTS)
        service.start()
        try:
            yield Fleet(db, service, tokens)
        finally:
            service.stop()
    finally:
        db.drop()


def test_every_job_is_done_exactly_once_and_expired_leases_are_claimed_again(fleet):
    from sqlalchemy import select, update

    from gac.service.db import make_engine
    from gac.service.models import Job

    clear_jobs(fleet.db.url)
    enqueue_jobs(fleet.db.url, JOBS)
    engine = make_engine(fleet.db.url)
    with engine.connect() as conn:
        ids = list(conn.scalars(select(Job.id)))
    doomed = {j for j in ids if dies(SEED, j, DIE)}  # fixed by the job ids, whatever the scheduling

    def expire(job_id: int, agent: str) -> None:
        """The clock: this lease is over now (only if the dead agent still holds it)."""
        with engine.begin() as conn:
            moved = conn.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == "leased", Job.lease_owner == agent)
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            ).rowcount
        assert moved == 1, f"job {job_id} was no longer leased to {agent} when it died"

    async def on_abandon(job_id: int, agent: str) -> None:
        await asyncio.to_thread(expire, job_id, agent)

    try:
        run = asyncio.run(
            run_fleet(
                fleet.service.url,
                fleet.tokens,
                JOBS,
                die=DIE,
                seed=SEED,
                poll_s=0.05,
                timeout_s=120,
                on_abandon=on_abandon,
                pg_dsn=fleet.dsn,
            )
        )
    finally:
        engine.dispose()

    verdict = verify(fleet.db.url, run)  # every job done, acknowledged once, attempts = claims
    assert verdict["done"] == JOBS and run.claims == JOBS + len(doomed)
    assert set(run.abandoned) == doomed and len(doomed) >= 10
    assert verdict["requeued"] == len(doomed)  # exactly the dead agents' jobs were claimed twice
    assert not run.lost_leases  # no live agent's 600 s lease ran out
    assert run.lock_waits == [], run.lock_waits[:5]

    # A dead agent that comes back late cannot report on the job another agent has done.
    with httpx.Client(base_url=fleet.service.url, timeout=30) as c:
        for job_id, agent in sorted(run.abandoned.items())[:5]:
            headers = {"Authorization": f"Bearer {fleet.tokens[agent_index(agent)]}"}
            for action, body in (("heartbeat", {"agent": agent}), ("complete", {"agent": agent, "points": 2})):
                r = c.post(f"/v1/jobs/{job_id}/{action}", json=body, headers=headers)
                assert r.status_code == 409 and "is done (by agent" in r.json()["detail"], r.text
    verify(fleet.db.url, run)  # and nothing changed


def test_a_claim_skips_rows_other_transactions_hold_instead_of_waiting(fleet):
    """Another transaction holds job 1 (as a claim in flight does) and job 3, a lease that ran out
    on its last attempt (which a claim marks failed): claims go past both at once."""
    import psycopg

    clear_jobs(fleet.db.url)
    enqueue_jobs(fleet.db.url, 3)
    headers = {"Authorization": f"Bearer {fleet.tokens[0]}"}
    body = {"platform": PLATFORM, "agent": "agent-000"}
    with psycopg.connect(fleet.dsn) as holder, httpx.Client(base_url=fleet.service.url, timeout=10, headers=headers) as c:
        holder.execute(
            "UPDATE jobs SET status = 'leased', attempts = 1, max_attempts = 1, lease_owner = 'gone', "
            "lease_expires_at = now() - interval '1 minute' WHERE id = 3"
        )
        holder.commit()
        holder.execute("SELECT id FROM jobs WHERE id IN (1, 3) FOR UPDATE")
        try:
            first = c.post("/v1/jobs/claim", json=body)  # a claim that waited on the lock would time out (10 s)
            second = c.post("/v1/jobs/claim", json=body)
        finally:
            holder.rollback()
        assert first.status_code == 200 and first.json()["id"] == 2, first.text
        assert second.status_code == 204, second.text  # job 1 is held, job 3 is exhausted (and held)
        # Released: job 1 is claimed now, and the claim fails job 3 on its way.
        third = c.post("/v1/jobs/claim", json=body)
        assert third.status_code == 200 and third.json()["id"] == 1, third.text
        gone = c.get("/v1/jobs/3").json()
        assert (gone["status"], gone["error"]) == ("failed", "lease expired on the last attempt")


def test_claims_go_by_priority_then_expired_leases_then_age(client, admin_token, ingest_token):
    """The order a claim walks the queue in, level by level (both backends)."""
    from datetime import datetime, timedelta

    from sqlalchemy import update

    from gac.service.models import Job
    from tests import factories as f
    from tests.service.test_jobs import claim, enqueue

    old = enqueue(client, admin_token, priority=0)
    first = enqueue(client, admin_token, priority=5)
    gpu_only = enqueue(client, admin_token, priority=9, match={"device_kind": "cuda"})
    lowest = enqueue(client, admin_token, priority=-1)
    dropped = enqueue(client, admin_token, priority=5)
    with client.app.state.sessionmaker() as s:  # an agent claimed it, died, and its lease ran out
        s.execute(
            update(Job)
            .where(Job.id == dropped["id"])
            .values(status="leased", lease_owner="died", attempts=1, lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        s.commit()

    order = []
    while (r := claim(client, ingest_token, agent="cpu")).status_code == 200:
        order.append(r.json()["id"])
    assert r.status_code == 204
    # Priority 5: the expired lease first (it has waited longest), then the queued job; then 0, then -1.
    assert order == [dropped["id"], first["id"], old["id"], lowest["id"]]
    gpu = f.platform(device_kind="cuda", device_name="NVIDIA H100", compute_capability="9.0")
    assert claim(client, ingest_token, agent="gpu", plat=gpu).json()["id"] == gpu_only["id"]
