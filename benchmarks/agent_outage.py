"""An agent's timing while its service hangs: points per second while the service is frozen (SIGSTOP: the kernel
takes its connections, nothing answers), against the same run's rate just before, each run side by side.

`gac serve` on a fresh embedded database, `gac agent run --server` on a long float32 GEMM sweep with one thread,
the service frozen FREEZE_S seconds in, then thawed; the rates are read from the agent's progress line.

    python benchmarks/agent_outage.py [--freeze-s 60] [--runs 3] [--port 18777]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gac.client import Client

PLAN = """
name: outage
timing: {time_cap_ms: 20, warmup_ms: 1, min_samples: 10, max_samples: 200}
sweeps:
  - {op: gemm, dtypes: [float32], axis: n, fixed: {m: 8, k: 64}, values: {start: 8, stop: 40000, step: 1}}
"""
BEFORE_S = 20.0  # the baseline window, just before the freeze
GAC = [sys.executable, "-m", "gac"]


def one_run(freeze_s: float, port: int, work: Path) -> tuple[float, float]:
    """(points/s in the BEFORE_S before the freeze, points/s while frozen)."""
    env = {**os.environ, "GAC_DATA_DIR": str(work), "FORCE_COLOR": "1", "COLUMNS": "200"}  # the live line, on a pipe
    (work / "plan.yaml").write_text(PLAN)
    url = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([*GAC, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    agent = None
    try:
        with Client(url) as service:
            service.wait_ready(30, alive=lambda: serve.poll() is None)
        token = subprocess.run([*GAC, "token", "create", "--name", "outage", "--scope", "ingest"], env=env, capture_output=True, text=True)
        run = ["agent", "run", "--server", url, "--token", token.stdout.strip(), "--plan", str(work / "plan.yaml"), "--threads", "1"]
        run += ["--spool-dir", str(work / "spool")]
        agent = subprocess.Popen([*GAC, *run], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seen: list[tuple[float, int]] = []  # (when, points done) as the progress line says

        def read() -> None:
            assert agent is not None and agent.stderr is not None
            tail = b""
            while chunk := os.read(agent.stderr.fileno(), 65536):
                tail = (tail + chunk)[-4096:]
                if done := re.findall(rb"(\d+)/\d+ points", tail):
                    seen.append((time.monotonic(), int(done[-1])))

        threading.Thread(target=read, daemon=True).start()
        time.sleep(BEFORE_S + 5)  # the start, then the baseline window
        frozen = time.monotonic()
        os.kill(serve.pid, signal.SIGSTOP)
        time.sleep(freeze_s)
        thawed = time.monotonic()
        os.kill(serve.pid, signal.SIGCONT)
        done_at = lambda t: max((n for s, n in seen if s <= t), default=0)  # noqa: E731
        return (done_at(frozen) - done_at(frozen - BEFORE_S)) / BEFORE_S, (done_at(thawed) - done_at(frozen)) / freeze_s
    finally:
        os.kill(serve.pid, signal.SIGCONT)
        for p in (agent, serve):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--freeze-s", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port", type=int, default=18777)
    a = ap.parse_args()
    p = json.loads(subprocess.run([*GAC, "agent", "platform", "--threads", "1"], capture_output=True, text=True).stdout)
    where = f"{p['device_name']} ({p['isa']}) / torch {p['torch_version']} / {p['timing']} / 1 thread"
    print(f"{where}; service frozen {a.freeze_s:g} s per run")
    ratios = []
    for r in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="gac-outage-") as work:
            before, during = one_run(a.freeze_s, a.port, Path(work))
        ratios.append(during / before if before else 0.0)
        print(f"run {r + 1}: {before:.1f} points/s before, {during:.1f} points/s frozen: {ratios[-1]:.2f}x", flush=True)
    print(f"frozen / before: median {statistics.median(ratios):.2f}x, worst {min(ratios):.2f}x over {len(ratios)} runs")


if __name__ == "__main__":
    main()
