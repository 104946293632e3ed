"""Readiness while aligning: /healthz and a read route (GET /v1/alignments) latency, p50 and p99,
with the service idle and while it runs one long alignment (each alignment runs in a process of
its own, so the web worker's event loop only waits on a pipe). Also: how soon a disconnected
client's alignment frees its CPU, and how long `gac serve` takes to exit after SIGTERM.

`gac serve` on an embedded SQLite file in a temp directory, alignments opened (GAC_OPEN_ALIGN).

    python benchmarks/align_readiness.py
    python benchmarks/align_readiness.py --weights 20000 --requests 400
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from gac.client import Client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def long_manifest(n: int) -> bytes:
    """n low-rank weights with dims near 3,500 (windows of hundreds of dims): minutes of work at 20,000."""
    weights = [
        {
            "name": f"layers.{i}.proj",
            "kind": "lowrank",
            "out_features": 4096,
            "in_features": 4096,
            "dim": 3000.0 + (i * 7.3) % 900,
            "importance": 1.0 + (i * 37 % 11),
        }
        for i in range(n)
    ]
    return json.dumps(
        {"schema": "gac.manifest/v1", "model": f"bench-{n}", "budget": {"ratio": 0.2}, "workload": {"tokens": [256]}, "weights": weights}
    ).encode()


def latencies(http: httpx.Client, path: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = http.get(path)
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text
        time.sleep(0.01)
    return out


def show(label: str, xs: list[float]) -> None:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    print(f"  {label:<40} p50 {1000 * statistics.median(xs):7.2f} ms   p99 {1000 * p99:7.2f} ms   max {1000 * xs[-1]:7.2f} ms")


def task_processes(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    return [p for c in kids.get(pid, []) for p in kids.get(c, [])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", type=int, default=20_000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--grace", type=float, default=10.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gac-ready-"))
    port = free_port()
    env = os.environ | {"GAC_DATA_DIR": str(tmp), "GAC_OPEN_ALIGN": "true", "GAC_SHUTDOWN_GRACE_SECONDS": str(args.grace)}
    gac = Path(sys.executable).parent / "gac"
    proc = subprocess.Popen(
        [str(gac), "serve", "--port", str(port)], env=env, stdout=open(tmp / "serve.log", "wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with Client(url) as service:
            service.wait_ready(60, alive=lambda: proc.poll() is None)
        body = long_manifest(args.weights)
        with httpx.Client(base_url=url, timeout=60) as http:
            print(f"service pid {proc.pid}; {args.weights:,} weights, {len(body) / 2**20:.1f} MB")
            show("/healthz, idle", latencies(http, "/healthz", args.requests))
            show("/v1/alignments, idle", latencies(http, "/v1/alignments", args.requests))
            r = http.post("/v1/align", content=body, headers={"Content-Type": "application/json", "Prefer": "respond-async"})
            assert r.status_code == 202, r.text
            while not task_processes(proc.pid):
                time.sleep(0.05)
            show("/healthz, while aligning", latencies(http, "/healthz", args.requests))
            show("/v1/alignments, while aligning", latencies(http, "/v1/alignments", args.requests))
            still = http.get(r.headers["location"]).status_code == 202
            print(f"  (the alignment was still running at the end: {still})")
        # A client that disconnects: how soon its task process is gone.
        earlier = set(task_processes(proc.pid))
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            (f"POST /v1/align HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        )
        while not (mine := set(task_processes(proc.pid)) - earlier):
            time.sleep(0.05)
        time.sleep(2.0)  # let it parse and start aligning
        t0 = time.perf_counter()
        sock.close()
        while set(task_processes(proc.pid)) & mine:
            time.sleep(0.01)
        print(f"  disconnect -> its task process gone: {1000 * (time.perf_counter() - t0):.0f} ms")
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=args.grace + 60)
        print(
            f"  SIGTERM (one alignment running, grace {args.grace:g} s) -> exit: {time.perf_counter() - t0:.2f} s, "
            f"task processes left: {len(task_processes(proc.pid))}"
        )
    finally:
        if proc.poll() is None:
            proc.kill()


if __name__ == "__main__":
    main()
