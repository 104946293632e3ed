"""Read latency with ~1M measurements in Postgres: curve and cliffs queries at 1, 8 and 32
concurrent clients over loopback (real uvicorn, real HTTP).

  python benchmarks/queries.py [--platforms 20] [--curves 50] [--points 1000] [--requests 400] [--workers 2]

Target (issue 5): p99 under 25 ms at 32 clients for curves of up to 1,000 points.
The load comes from wrk (apt-get install wrk: a C load generator, so the clients cost little
of this 2-core machine) when it is installed, else from Python threads with keep-alive
connections; either way latency is what the client sees, on loopback.

Before the cells, every worker reads every path once (over a connection it was seen to hold,
through Linux /proc), and each cell reports what it cost beyond the HTTP layer: bodies built
(a cliffs body: an analysis, ~0.2 s) and the cyclic collector's full passes, summed over workers.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import random
import shutil
import signal
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.database import make_database  # noqa: E402
from tests.fixtures.live_service import LiveService  # noqa: E402


def load(dsn: str, platforms: int, curves: int, points: int) -> list[int]:
    """Bulk-load the database directly (setup, not measured): staircase curves with noise."""
    rng = random.Random(0)
    now = datetime.now(UTC)
    curve_ids = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO agents (name, first_seen, last_seen) VALUES ('bench', now(), now())")
        for p in range(platforms):
            pid = conn.execute(
                "INSERT INTO platforms (fingerprint, device_kind, device_name, first_seen, last_seen) "
                "VALUES (%s, 'cuda', %s, now(), now()) RETURNING id",
                (uuid.uuid4().hex + uuid.uuid4().hex, f"Bench GPU {p}"),
            ).fetchone()[0]
            run, batch = uuid.uuid4(), uuid.uuid4()
            conn.execute(
                "INSERT INTO runs (id, agent_id, platform_id, plan, started_at, created_at) VALUES (%s, 1, %s, 'bench', now(), now())",
                (run, pid),
            )
            conn.execute(
                "INSERT INTO batches (id, run_id, platform_id, content_hash, rows, inserted, duplicates, received_at) "
                "VALUES (%s, %s, %s, 'x', 0, 0, 0, now())",
                (batch, run, pid),
            )
            for c in range(curves):
                cid = conn.execute(
                    "INSERT INTO curves (platform_id, op, dtype, axis, fixed_key, version, updated_at) "
                    "VALUES (%s, 'gemm', 'float16', 'k', %s, 1, now()) RETURNING id",
                    (pid, f"m={1024 + c},n=4096"),
                ).fetchone()[0]
                curve_ids.append(cid)
                period = rng.choice([8, 16, 32, 64])
                with conn.cursor().copy(
                    "COPY measurements (uuid, curve_id, run_id, batch_id, x, median_us, p10_us, p90_us, mean_us, n, timer, measured_at) "
                    "FROM STDIN"
                ) as copy:
                    for x in range(1, points + 1):
                        med = 10.0 * (1 + 0.1 * (x // period)) * (1 + rng.gauss(0, 0.003))
                        copy.write_row((uuid.uuid4(), cid, run, batch, x, med, med * 0.98, med * 1.02, med, 25, "cuda-events", now))
        # The database as a running service finds it: a bulk load leaves a vacuum (autovacuum's insert
        # threshold) and a checkpoint to come, which would share the 2 cores with the measured cells.
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
        total = conn.execute("SELECT count(*) FROM measurements").fetchone()[0]
    print(f"loaded {total:,} measurements in {len(curve_ids):,} curves of {points} points on {platforms} platforms")
    return curve_ids


def run_clients(url: str, paths: list[str], clients: int, requests: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = max(1, requests // clients)

    def client(seed: int) -> None:
        rng = random.Random(seed)
        mine = []
        with httpx.Client(base_url=url, timeout=60) as c:
            for _ in range(per_client):
                path = rng.choice(paths)
                t0 = time.perf_counter()
                r = c.get(path)
                mine.append(time.perf_counter() - t0)
                r.raise_for_status()
        with lock:
            latencies.extend(mine)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return latencies, time.perf_counter() - t0


WRK_SCRIPT = """
local paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
math.randomseed(%d)
request = function() return wrk.format("GET", paths[math.random(#paths)]) end
"""


def run_wrk(url: str, paths: list[str], clients: int, seconds: int) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, requests/s) from wrk --latency with random paths."""
    import re
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, "paths.txt").write_text("\n".join(paths) + "\n")
        Path(d, "random.lua").write_text(WRK_SCRIPT % (Path(d, "paths.txt"), clients))
        out = subprocess.run(
            ["wrk", f"-t{min(2, clients)}", f"-c{clients}", f"-d{seconds}s", "--latency", "-s", str(Path(d, "random.lua")), url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def ms(label: str) -> float:
        value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)", out).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    if "Non-2xx" in out:
        raise RuntimeError(out)
    return ms("50%"), ms("99%"), rps


def serving_pid(conn: http.client.HTTPConnection, port: int, pids: set[int]) -> int | None:
    """Which of `pids` holds the server end of this loopback connection (Linux /proc): the
    uvicorn workers share one listening socket, so only the kernel knows who accepted it."""
    assert conn.sock is not None
    mine = conn.sock.getsockname()[1]
    inode = next(
        (
            f[9]
            for f in (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
            if int(f[1].split(":")[1], 16) == port and int(f[2].split(":")[1], 16) == mine
        ),
        None,
    )
    for pid in pids:
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == f"socket:[{inode}]" for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
    return None


def children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def per_worker(url: str, master: int, workers: int) -> dict[int, http.client.HTTPConnection]:
    """One keep-alive connection to each worker: fresh connections until every worker has one."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    assert host is not None and port is not None
    pids, conns = children(master), {}
    for _ in range(200):
        conn = http.client.HTTPConnection(host, port, timeout=120)
        conn.request("GET", "/healthz")
        conn.getresponse().read()  # answered: accepted by a worker
        pid = serving_pid(conn, port, pids)
        if pid is None or pid in conns:
            conn.close()
            continue
        conns[pid] = conn
        if len(conns) == workers:
            return conns
    raise RuntimeError(f"reached {len(conns)} of {workers} workers in 200 connections")


def warm(url: str, master: int, workers: int, paths: list[str]) -> None:
    """Every path once on every worker, over a connection held to each: each worker caches (and
    analyses) every curve itself. Fresh connections per path (the earlier warm-up) went to
    whichever worker was in accept(), and one busy with an analysis missed them: ~20 of 1,000
    cliffs per worker were left to be analysed inside the measured cells."""

    def walk(conn: http.client.HTTPConnection) -> None:
        for path in paths:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path}: {resp.status}")
        conn.close()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(walk, per_worker(url, master, workers).values()))


def counters(url: str, master: int, workers: int) -> dict[str, float]:
    """Summed over the workers' /metrics: per-curve bodies built (a cliffs body is an analysis,
    unless that worker's analyses cache held it) and the cyclic collector's full passes."""
    wanted = {'gac_read_cache_total{kind="cliffs",result="built"}': "built",
              'gac_read_cache_total{kind="curve",result="built"}': "curve built",
              'python_gc_collections_total{generation="2"}': "gc2"}  # fmt: skip
    out = dict.fromkeys(wanted.values(), 0.0)
    for conn in per_worker(url, master, workers).values():
        conn.request("GET", "/metrics")
        for line in conn.getresponse().read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name in wanted:
                out[wanted[name]] += float(value)
        conn.close()
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platforms", type=int, default=20)
    ap.add_argument("--curves", type=int, default=50)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=640, help="requests per (query, concurrency) cell")
    ap.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--seconds", type=int, default=10, help="per cell, with wrk")
    ap.add_argument("--python-clients", action="store_true", help="use Python threads even when wrk is installed")
    ap.add_argument(
        "--settle", type=int, default=10, help="seconds of wrk at the most clients over every path, unmeasured, before each query's cells"
    )
    args = ap.parse_args()

    out = Path("benchmarks/out")
    out.mkdir(parents=True, exist_ok=True)
    db = make_database("postgres", out)
    try:
        from gac.service.db import upgrade

        upgrade(db.url)
        curve_ids = load(db.url.replace("postgresql+psycopg://", "postgresql://"), args.platforms, args.curves, args.points)
        service = LiveService(db_url=db.url, data_dir=out, workers=args.workers)
        service.start()
        try:
            queries = {
                "curve": [f"/v1/curves/{c}" for c in curve_ids],
                "cliffs": [f"/v1/curves/{c}/cliffs" for c in curve_ids],
            }
            # First requests (nothing cached: points read and combined, cliffs analysed), serially.
            for name in ("curve", "cliffs"):
                cold, _ = run_clients(service.url, queries[name][:100], 1, 100)
                print(f"{name:<7} first request per curve (cold): p50 {pct(cold, 50):.1f} ms, p99 {pct(cold, 99):.1f} ms")
            assert service.proc is not None
            master = service.proc.pid

            def count() -> dict[str, float]:
                return counters(service.url, master, args.workers)

            warm(service.url, master, args.workers, [p for ps in queries.values() for p in ps])
            print(f"every worker read every path once: {count()} (summed over workers)")
            use_wrk = shutil.which("wrk") is not None and not args.python_clients
            print(f"load generator: {'wrk' if use_wrk else 'Python threads'}")
            # built: per-curve bodies (cliffs: analyses) built during the cell, gc2: the cyclic
            # collector's full passes during the cell, both summed over the workers.
            print(f"{'query':<8}{'clients':>8}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>10}{'built':>7}{'gc2':>5}")
            for name, paths in queries.items():
                if use_wrk and args.settle:
                    # Unmeasured: each query's first load after the other's (allocator, caches, connections).
                    _, settle_p99, _ = run_wrk(service.url, paths, max(int(c) for c in args.clients.split(",")), args.settle)
                    print(f"{name:<8}{'settle':>8}{'':>10}{settle_p99:>10.1f}{'':>10}  (not a result)")
                for clients in (int(c) for c in args.clients.split(",")):
                    before = count()
                    if use_wrk:
                        p50, p99, rps = run_wrk(service.url, paths, clients, args.seconds)
                    else:
                        lat, wall = run_clients(service.url, paths, clients, args.requests)
                        p50, p99, rps = pct(lat, 50), pct(lat, 99), len(lat) / wall
                    after = count()
                    built, gc2 = (after[k] - before[k] for k in ("built" if name == "cliffs" else "curve built", "gc2"))
                    print(f"{name:<8}{clients:>8}{p50:>10.1f}{p99:>10.1f}{rps:>10.0f}{built:>7.0f}{gc2:>5.0f}")
        finally:
            service.stop()
    finally:
        db.drop()
    print(f"(uvicorn workers: {args.workers}; {args.points}-point curves; target p99 < 25 ms at 32 clients)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally blocks: no orphaned service
    main()
