"""Alignments as manifests grow, end to end through HTTP on Postgres: the service under uvicorn
(one worker, over a fresh database), POST /v1/align followed to its stored alignment (a 202 is
polled as gac.client does), while another connection asks /healthz every 20 ms.

Per size: the end-to-end seconds (median and worst of --repeat runs), the service's own split of
its time (its Server-Timing header: parse, candidates = the rest of align(), solve, the inline
cross-check and paper-DP, serialize, store), when the checks left for after the answer were stored,
the answer's size, /healthz's p99 and worst while the alignments ran, and the peak memory (VmHWM)
of the service process and of its alignment worker processes.

Rules only (no platform), lognormal importances, random low-rank weights of Llama-3-8B shapes.

    python benchmarks/align_scale.py                          # 1,000, 10,000 and 100,000 weights
    python benchmarks/align_scale.py --sizes 1000 --repeat 5
    python benchmarks/align_scale.py --in-process --sizes 1000   # align() alone, no service
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from gac.client import Client, GacClientError

# The repository first: benchmarks/solver.py would otherwise shadow the solver package.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
PG_ADMIN = os.environ.get("GAC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
WARM_UP_WEIGHTS = 2_001  # a first alignment pays for the fork server that task processes start from

PHASES = ["parse", "candidates", "solve", "check", "baselines", "serialize", "store"]


def manifest_doc(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    weights = []
    for i in range(n):
        out, inn = rng.choice(SHAPES)
        weights.append(
            {
                "name": f"layers.{i}.proj",
                "kind": "lowrank",
                "out_features": out,
                "in_features": inn,
                "dim": rng.uniform(200, min(out, inn) - 70),
                "importance": rng.lognormvariate(0, 1),
            }
        )
    budget = int(sum(w["dim"] * (w["out_features"] + w["in_features"]) for w in weights))
    return {
        "schema": "gac.manifest/v1",
        "model": f"scale-{n}",
        "compressor": "asvd",
        "budget": {"params": budget},
        "workload": {"tokens": [1024], "dtype": "bfloat16"},
        "weights": weights,
    }


# -- the service


def _pg(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """uvicorn over a fresh Postgres database, alignments open (no token), dropped afterwards."""

    def __init__(self) -> None:
        self.db = f"gac_bench_{uuid.uuid4().hex[:10]}"
        host = PG_ADMIN.split("://", 1)[1].rsplit("/", 1)[0]
        self.db_url = f"postgresql+psycopg://{host}/{self.db}"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="gac-bench-", suffix=".log", delete=False)

    def __enter__(self) -> Service:
        from gac.service.db import upgrade

        _pg(f'CREATE DATABASE "{self.db}"')
        upgrade(self.db_url)
        env = os.environ | {
            "GAC_DATABASE_URL": self.db_url,
            "GAC_SECRET_KEY": "bench",
            "GAC_OPEN_ALIGN": "true",
            "GAC_DATA_DIR": tempfile.mkdtemp(prefix="gac-bench-"),
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "gac.service.app:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        proc = self.proc
        with Client(self.url) as service:
            try:
                service.wait_ready(60, alive=lambda: proc.poll() is None)
            except GacClientError as err:
                raise RuntimeError(f"the service did not start ({err}): see {self.log.name}") from err
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        _pg(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')

    def peak_mb(self) -> tuple[float, float]:
        """VmHWM of the service process, and the largest of its worker processes'."""
        assert self.proc is not None
        children = [int(c) for task in Path(f"/proc/{self.proc.pid}/task").iterdir() for c in (task / "children").read_text().split()]
        return _hwm(self.proc.pid), max((_hwm(c) for c in children), default=0.0)


def _hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _probe(url: str, out: str, stop) -> None:  # type: ignore[no-untyped-def]
    """In its own process (the benchmark's parsing must not delay it): GET /healthz every 20 ms,
    one line per answer: when it was sent (CLOCK_MONOTONIC, shared by every process) and its latency."""
    with httpx.Client(base_url=url, timeout=30) as http, open(out, "w", buffering=1) as f:
        while not stop.is_set():
            t = time.monotonic()
            http.get("/healthz")
            f.write(f"{t} {time.monotonic() - t}\n")
            time.sleep(0.02)


class Prober:
    """/healthz asked every 20 ms by another process while the alignments run."""

    def __init__(self, url: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.out = tempfile.NamedTemporaryFile(prefix="gac-healthz-", suffix=".txt", delete=False).name
        self.stop = ctx.Event()
        self.proc = ctx.Process(target=_probe, args=(url, self.out, self.stop), daemon=True)

    def __enter__(self) -> Prober:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(10)

    def between(self, t0: float, t1: float) -> list[float]:
        rows = (line.split() for line in Path(self.out).read_text().splitlines() if line.count(" ") == 1)
        return sorted(float(lat) for t, lat in rows if t0 <= float(t) <= t1)


def _timing(header: str | None) -> dict[str, float]:
    parts = (p.split(";dur=") for p in (header or "").split(", ") if ";dur=" in p)
    return {k: float(v) / 1000 for k, v in parts}


def align_over_http(http: httpx.Client, body: bytes) -> tuple[float, httpx.Response]:
    """POST, then poll the Location of a 202 until it answers otherwise: (seconds, final response)."""
    t0 = time.monotonic()
    r = http.post("/v1/align", content=body, headers={"Content-Type": "application/json"})
    wait = 0.05
    while r.status_code == 202:
        time.sleep(wait)
        wait = min(wait * 1.5, 1.0)
        r = http.get(r.headers["location"])
    seconds = time.monotonic() - t0
    if r.status_code not in (200, 201):
        raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
    return seconds, r


def _pending(body: bytes) -> bool:
    """Whether a stored alignment still lists pending checks (read without parsing tens of MB)."""
    found = re.search(rb'"pending":\[([^\]]*)\]', body)
    return bool(found and found.group(1).strip())


def checks_stored(http: httpx.Client, alignment_id: str, t0: float, timeout: float = 900) -> float | None:
    """Seconds from t0 until the alignment's pending checks were stored (None: nothing was pending)."""
    first = True
    while time.monotonic() - t0 < timeout:
        if not _pending(http.get(f"/v1/alignments/{alignment_id}").content):
            return None if first else time.monotonic() - t0
        first = False
        time.sleep(0.1)
    return float("inf")


def over_http(sizes: list[int], repeat: int) -> None:
    with Service() as svc, httpx.Client(base_url=svc.url, timeout=1800) as http, Prober(svc.url) as prober:
        # The service starts its alignment worker processes on first use: one alignment large enough
        # to need them, unmeasured, so that the figures are the steady state (its time is printed).
        first, _ = align_over_http(http, json.dumps(manifest_doc(WARM_UP_WEIGHTS, seed=1)).encode())
        print(f"warm-up: {WARM_UP_WEIGHTS:,} weights in {first:.2f} s, the task processes' fork server start included", flush=True)
        rows = []
        for n in sizes:
            body = json.dumps(manifest_doc(n)).encode()
            runs, splits, checks, sizes_mb = [], [], [], []
            t_start = time.monotonic()
            for _ in range(repeat):
                t0 = time.monotonic()
                seconds, r = align_over_http(http, body)
                runs.append(seconds)
                splits.append(_timing(r.headers.get("server-timing")))
                sizes_mb.append(len(r.content) / 1e6)
                alignment_id = re.match(rb'{"id":"([0-9a-f-]{36})"', r.content).group(1).decode()  # type: ignore[union-attr]
                checks.append(checks_stored(http, alignment_id, t0))
            lat = prober.between(t_start, time.monotonic())
            service_mb, worker_mb = svc.peak_mb()
            split = {k: statistics.median(s.get(k, 0.0) for s in splits) for k in PHASES}
            done = [c for c in checks if c is not None]
            rows.append(
                {
                    "weights": n,
                    "body MB": len(body) / 1e6,
                    "median s": statistics.median(runs),
                    "worst s": max(runs),
                    **split,
                    "checks s": statistics.median(done) if done else None,
                    "answer MB": statistics.median(sizes_mb),
                    "healthz p99 ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else None,
                    "healthz max ms": 1000 * lat[-1] if lat else None,
                    "healthz n": len(lat),
                    "service MB": service_mb,
                    "worker MB": worker_mb,
                }
            )
            _print_row(rows[-1], header=len(rows) == 1)
    print(
        f"(seconds; {repeat} runs per size; split = the service's median Server-Timing; checks s = when the cross-check "
        "and paper-DP baselines left for after the answer were stored; MB = peak RSS)"
    )
    print(f"CPU: {_cpu()}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


def _print_row(row: dict, header: bool) -> None:
    if header:
        print("  ".join(f"{k:>10}" for k in row))
    print("  ".join(f"{v:>10,.3f}" if isinstance(v, float) else f"{v!s:>10}" for v in row.values()), flush=True)


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + f", {os.cpu_count()} cores"
    return "unknown"


def in_process(sizes: list[int]) -> None:
    """align() alone, its checks inline: where an alignment's own time goes, without the service."""
    from gac.contracts.manifest import Manifest
    from gac.solver.align import align

    for n in sizes:
        text = json.dumps(manifest_doc(n))
        t0 = time.perf_counter()
        manifest = Manifest.model_validate_json(text)
        t1 = time.perf_counter()
        result = align(manifest, None)
        t2 = time.perf_counter()
        body = result.model_dump_json(by_alias=True)
        t3 = time.perf_counter()
        solve, check = result.solver.seconds, result.solver.cross_check.seconds or 0.0
        baselines = sum(b.seconds or 0.0 for b in result.baselines)
        _print_row(
            {
                "weights": n,
                "parse": t1 - t0,
                "align": t2 - t1,
                "solve": solve,
                "cross-check": check,
                "paper-dp": baselines,
                "candidates": (t2 - t1) - solve - check - baselines,
                "serialize": t3 - t2,
                "MB": len(body) / 1e6,
            },
            header=n == sizes[0],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--in-process", action="store_true", help="align() in this process, checks inline, no service")
    args = ap.parse_args()
    if args.in_process:
        in_process(args.sizes)
    else:
        over_http(args.sizes, args.repeat)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally blocks: no orphaned service
    main()
