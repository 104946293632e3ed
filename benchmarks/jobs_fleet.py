"""The job queue under a fleet: agents claiming, heart-beating and completing jobs on Postgres.

A live service (uvicorn, Postgres, --workers 2) and simulated agents as real HTTP clients
(httpx, asyncio, one connection and one ingest token each). Each agent claims a job, heartbeats
it, completes it, and claims the next. Some agents die mid-job (a deterministic ~1 % of first
attempts): they heartbeat, then vanish with the lease (connection closed) and come back as a new
agent; the lease runs out (the benchmark sets the service's lease to 10 s, --lease) and the job
goes back to the queue for another agent.

At the end, from the database: every job done exactly once (one acknowledged completion per
job, its run id and agent the ones the database holds, attempts = claims, a dead agent's job
re-claimed and done by another); claims/s, p50/p99 claim latency, how often a claim was seen
waiting on a lock (pg_stat_activity sampled), and the same workload with 1 agent as the
baseline, in the same run:

  python benchmarks/jobs_fleet.py [--agents 100] [--jobs 10000] [--workers 2] [--die 0.01]

claims/s counts the claims made until the queue first ran dry (the steady phase; then only
dead agents' leases remain, and they come back when their lease runs out), and over the whole
run. tests/service/test_jobs_fleet.py runs a small fleet with these same agents.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.database import SECRET, make_database  # noqa: E402
from tests.fixtures.live_service import LiveService  # noqa: E402

PLAN = {"name": "fleet", "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 64, "k": 64}, "values": [64, 72]}]}
PLATFORM = {"device_kind": "cpu", "device_name": "Fleet CPU", "isa": "avx2", "cores": 2, "torch_version": "2.13.0"}


# -- set-up: tokens and jobs straight into the database (what is measured is the queue, not enqueue)


def create_tokens(db_url: str, n: int, scope: str = "ingest") -> list[str]:
    """n tokens of scope, one session (the plain texts, in order)."""
    from gac.service.auth.tokens import Scope, create_token
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.settings import Settings

    key = Settings(database_url=db_url, secret_key=SECRET).token_key
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as s:
            return [create_token(s, key, f"{scope}-{uuid.uuid4().hex[:12]}", Scope(scope))[1] for _ in range(n)]
    finally:
        engine.dispose()


def enqueue_jobs(db_url: str, n: int, max_attempts: int = 10) -> None:
    """n queued jobs of PLAN for any platform, in one INSERT (the rows gac.service.jobs.service.enqueue makes).

    Ten attempts: a job that an agent died holding and whose next lease ran out under a slow
    request still gets done (the default of 3 would fail it, and the count would be off)."""
    from sqlalchemy import insert

    from gac.contracts.plans import SweepPlan
    from gac.service.db import make_engine
    from gac.service.jobs.schemas import JobMatch
    from gac.service.jobs.service import dedupe_key
    from gac.service.models import Job

    plan = SweepPlan.model_validate(PLAN)
    now = datetime.now(UTC)
    row = {
        "plan": plan.to_document(),
        "plan_name": plan.name,
        "points": plan.n_points(),
        "match_fingerprint": None,
        "match_device_kind": None,
        "match_device_name": None,
        "priority": 0,
        "status": "queued",
        "attempts": 0,
        "max_attempts": max_attempts,
        "source": "benchmark",
        "dedupe_key": dedupe_key(plan, JobMatch()),
        "created_at": now,
        "updated_at": now,
    }
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(Job), [row] * n)
    finally:
        engine.dispose()


def clear_jobs(db_url: str) -> None:
    from sqlalchemy import text

    from gac.service.db import make_engine

    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs RESTART IDENTITY" if engine.dialect.name == "postgresql" else "DELETE FROM jobs"))
    engine.dispose()


# -- the fleet


@dataclass
class FleetRun:
    """What the agents saw; verify() holds it against the database."""

    agents: int
    jobs: int
    elapsed: float = 0.0
    drained_at: float | None = None  # seconds from the start to the first empty claim
    claim_latencies: list[float] = field(default_factory=list)  # successful claims, seconds
    claims_before_drain: int = 0
    empty_claims: int = 0
    heartbeats: int = 0
    completed: dict[int, tuple[str, str]] = field(default_factory=dict)  # job -> (agent, run id) acknowledged
    acks: Counter = field(default_factory=Counter)  # job -> acknowledged completions (must be 1)
    abandoned: dict[int, str] = field(default_factory=dict)  # job -> the agent that died holding it
    lost_leases: Counter = field(default_factory=Counter)  # job -> a live agent's lease expired under it (409)
    lock_waits: list[str] = field(default_factory=list)  # queries seen waiting on a lock on jobs
    samples: int = 0

    @property
    def claims(self) -> int:
        return len(self.claim_latencies)

    def percentile_ms(self, q: float) -> float:
        xs = sorted(self.claim_latencies)
        return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]

    @property
    def steady_claims_per_s(self) -> float:
        if self.drained_at is None:
            return self.claims / self.elapsed
        return self.claims_before_drain / self.drained_at


def agent_name(i: int, life: int = 0) -> str:
    """The i-th agent (its token is tokens[i]); after it died `life` times, the agent in its place."""
    return f"agent-{i:03d}" + (f"~{life}" if life else "")


def agent_index(name: str) -> int:
    return int(name.split("-", 1)[1].split("~", 1)[0])


# A live agent's lease ran out under a slow request and another agent claimed the job: 409 if
# that agent has the same token, 403 if another. verify() holds every such loss to the claims.
LEASE_LOST = (403, 409)


def dies(seed: int, job_id: int, rate: float) -> bool:
    """Whether the agent holding this job's first attempt dies: fixed by the job, not by scheduling."""
    return rate > 0 and random.Random(f"{seed}:{job_id}").random() < rate


async def run_fleet(
    base_url: str,
    tokens: list[str],
    jobs: int,
    *,
    die: float = 0.01,
    seed: int = 1,
    poll_s: float = 0.25,
    work_s: float = 0.0,
    timeout_s: float = 600.0,
    on_abandon: Callable[[int, str], Awaitable[None]] | None = None,
    pg_dsn: str | None = None,
) -> FleetRun:
    """One agent per token until every job is done. on_abandon(job, agent) runs when an agent
    dies holding a job (a test moves that lease's clock there); pg_dsn samples lock waits."""
    run = FleetRun(agents=len(tokens), jobs=jobs)
    all_done = asyncio.Event()
    t0 = time.perf_counter()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    async def agent(i: int, token: str) -> None:
        life, name = 0, agent_name(i)
        headers = {"Authorization": f"Bearer {token}"}
        client = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60, limits=limits)
        try:
            while not all_done.is_set():
                start = time.perf_counter()
                r = await client.post("/v1/jobs/claim", json={"platform": PLATFORM, "agent": name})
                now = time.perf_counter()
                if r.status_code == 204:
                    run.empty_claims += 1
                    if run.drained_at is None:
                        run.drained_at = now - t0
                    try:  # nothing claimable now: poll again (at once when the last job is done)
                        await asyncio.wait_for(all_done.wait(), poll_s * random.uniform(0.5, 1.5))
                    except TimeoutError:
                        pass
                    continue
                assert r.status_code == 200, f"claim: {r.status_code} {r.text}"
                run.claim_latencies.append(now - start)
                if run.drained_at is None:
                    run.claims_before_drain += 1
                job = r.json()
                job_id = job["id"]
                hb = await client.post(f"/v1/jobs/{job_id}/heartbeat", json={"agent": name})
                if hb.status_code in LEASE_LOST:
                    run.lost_leases[job_id] += 1
                    continue
                assert hb.status_code == 200, f"heartbeat: {hb.status_code} {hb.text}"
                run.heartbeats += 1
                if job["attempts"] == 1 and dies(seed, job_id, die):
                    # Dies mid-job: the connection goes with the process; a new agent starts in its place.
                    run.abandoned[job_id] = name
                    await client.aclose()
                    if on_abandon is not None:
                        await on_abandon(job_id, name)
                    life += 1
                    name = agent_name(i, life)
                    client = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60, limits=limits)
                    continue
                if work_s:
                    await asyncio.sleep(work_s)
                run_id = str(uuid.uuid4())
                r = await client.post(f"/v1/jobs/{job_id}/complete", json={"agent": name, "points": job["points"], "run_id": run_id})
                if r.status_code in LEASE_LOST:
                    run.lost_leases[job_id] += 1
                    continue
                assert r.status_code == 200 and r.json()["status"] == "done", f"complete: {r.status_code} {r.text}"
                run.acks[job_id] += 1
                run.completed[job_id] = (name, run_id)
                if len(run.completed) == jobs:
                    all_done.set()
        finally:
            await client.aclose()

    async def sample_locks() -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            dbname = (await (await conn.execute("SELECT current_database()")).fetchone())[0]
            while not all_done.is_set():
                cur = await conn.execute(
                    "SELECT query FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' AND query ILIKE %s",
                    (dbname, "%jobs%"),
                )
                run.lock_waits += [q for (q,) in await cur.fetchall()]
                run.samples += 1
                try:
                    await asyncio.wait_for(all_done.wait(), 0.02)
                except TimeoutError:
                    pass

    tasks = [asyncio.create_task(agent(i, t)) for i, t in enumerate(tokens)]
    if pg_dsn:
        tasks.append(asyncio.create_task(sample_locks()))
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout_s)
    except TimeoutError:
        raise AssertionError(
            f"the fleet did not finish in {timeout_s}s: {len(run.completed)} of {jobs} jobs done, {len(run.abandoned)} abandoned"
        ) from None
    run.elapsed = time.perf_counter() - t0
    return run


def verify(db_url: str, run: FleetRun) -> dict[str, int]:
    """Every job done exactly once, counted from the database; raises AssertionError otherwise."""
    from sqlalchemy import text

    from gac.service.db import make_engine

    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status, attempts, lease_owner, run_id FROM jobs ORDER BY id")).all()
        done, distinct_runs = conn.execute(text("SELECT count(*), count(DISTINCT run_id) FROM jobs WHERE status = 'done'")).one()
    engine.dispose()
    assert len(rows) == run.jobs, f"{len(rows)} jobs in the database, {run.jobs} queued"
    assert done == distinct_runs == run.jobs, f"done {done}, distinct run ids {distinct_runs}, of {run.jobs}"
    twice = {j: n for j, n in run.acks.items() if n != 1}
    assert not twice, f"jobs acknowledged as completed more than once: {dict(list(twice.items())[:10])}"
    for job_id, status, attempts, owner, run_id in rows:
        assert status == "done", f"job {job_id} is {status}"
        assert run.completed.get(job_id) == (owner, str(run_id)), (
            f"job {job_id}: database {owner}/{run_id}, agents {run.completed.get(job_id)}"
        )
        expected = 1 + (job_id in run.abandoned) + run.lost_leases[job_id]
        assert attempts == expected, f"job {job_id}: {attempts} attempts, {expected} claims of it"
        if job_id in run.abandoned:
            assert owner != run.abandoned[job_id], f"job {job_id} was done by the agent that died holding it"
    claims = sum(r[2] for r in rows)
    assert claims == run.claims, f"the database counts {claims} claims, the agents made {run.claims}"
    return {"done": done, "requeued": sum(1 for r in rows if r[2] > 1), "claims": claims}


# -- the benchmark


@dataclass
class Phase:
    label: str
    run: FleetRun
    verdict: dict[str, int]
    client_cpu_s: float  # the simulated agents' own CPU (they share the machine with the service)


def one_phase(svc: LiveService, db_url: str, tokens: list[str], args: argparse.Namespace, jobs: int) -> Phase:
    clear_jobs(db_url)
    enqueue_jobs(db_url, jobs)
    dsn = db_url.replace("postgresql+psycopg://", "postgresql://")
    before = resource.getrusage(resource.RUSAGE_SELF)
    run = asyncio.run(run_fleet(svc.url, tokens, jobs, die=args.die, seed=args.seed, poll_s=args.poll, pg_dsn=dsn, timeout_s=args.timeout))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Phase(f"{len(tokens)} agent{'s' if len(tokens) > 1 else ''}", run, verify(db_url, run), cpu)


def report(p: Phase) -> str:
    r = p.run
    return (
        f"{p.label:<10} {r.steady_claims_per_s:>8,.0f} claims/s steady  {r.claims / r.elapsed:>7,.0f} overall   "
        f"claim p50 {r.percentile_ms(0.50):6.1f} ms  p99 {r.percentile_ms(0.99):6.1f} ms   "
        f"{r.claims} claims in {r.elapsed:.1f} s (queue dry at {r.drained_at or r.elapsed:.1f} s), "
        f"{len(r.abandoned)} agents died mid-job, {p.verdict['requeued']} jobs re-queued, "
        f"{len(r.lost_leases)} live leases lost; lock waits seen {len(r.lock_waits)} in {r.samples} samples; "
        f"the agents' own CPU {p.client_cpu_s:.1f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--baseline-jobs", type=int, default=None, help="jobs for the 1-agent baseline (default: --jobs)")
    ap.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    ap.add_argument("--lease", type=int, default=10, help="the service's lease, seconds (its minimum is 5)")
    ap.add_argument("--die", type=float, default=0.01, help="share of first attempts whose agent dies mid-job")
    ap.add_argument("--poll", type=float, default=0.5, help="an idle agent's claim interval, seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()

    from gac.service.db import upgrade

    tmp = Path("benchmarks/out")
    tmp.mkdir(parents=True, exist_ok=True)
    db = make_database("postgres", tmp)
    try:
        upgrade(db.url)
        tokens = create_tokens(db.url, args.agents)
        svc = LiveService(db_url=db.url, data_dir=tmp, workers=args.workers, extra_env={"GAC_JOB_LEASE_SECONDS": str(args.lease)})
        svc.start()
        try:
            fleet = one_phase(svc, db.url, tokens, args, args.jobs)
            print(report(fleet), flush=True)
            base = one_phase(svc, db.url, tokens[:1], args, args.baseline_jobs or args.jobs)
            print(report(base), flush=True)
        finally:
            svc.stop()
    finally:
        db.drop()

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(
        f"jobs: {args.jobs} (baseline {args.baseline_jobs or args.jobs})  uvicorn workers: {args.workers}  lease: {args.lease} s  "
        f"cpu: {cpu} x {os.cpu_count()}  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"exactly once: yes, {fleet.verdict['done']} + {base.verdict['done']} jobs done, each acknowledged once, "
        f"attempts = claims ({fleet.verdict['claims']} + {base.verdict['claims']})"
    )
    print(
        f"ratio {args.agents} agents / 1 agent: steady claims/s {fleet.run.steady_claims_per_s / base.run.steady_claims_per_s:.2f}, "
        f"overall {(fleet.run.claims / fleet.run.elapsed) / (base.run.claims / base.run.elapsed):.2f}, "
        f"p50 latency {fleet.run.percentile_ms(0.5) / base.run.percentile_ms(0.5):.1f}x"
    )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally blocks: no orphaned service
    main()
