"""A fleet-sized alignment end to end: a synthetic GPU platform whose curves hold 38,144 measured
points (every dim of the six GEMM curves Llama-3-8B's compressed weights run, tiles of 64, slower
widths off multiples of 8, 3 % sample noise; tests/solver/synthetic.py:fleet_rows) and a 512-weight
manifest mixing ASVD ranks, PaLU head-group ranks and LLM-Pruner MLP widths (fleet_manifest).

The service runs under uvicorn (one worker) over a fresh Postgres database; the platform is stored
through the ingest path. Then the same manifest is posted --repeat times, each followed until its
pending checks (the OR-Tools cross-check, the paper-DP baselines) are stored. Printed: the first
alignment's seconds, the later ones' (median and worst), and the pending checks' seconds after
each answer (median and worst), with the service's own split of its time (Server-Timing).

    .venv/bin/python benchmarks/align_fleet.py
    .venv/bin/python benchmarks/align_fleet.py --repeat 5 --objective importance
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.align_scale import Service, _cpu, _timing, align_over_http, checks_stored  # noqa: E402
from tests.solver.synthetic import fleet_batches, fleet_manifest, fleet_rows  # noqa: E402


def store_platform(db_url: str) -> str:
    """The fleet's measurements stored as an agent's batches would be; its fingerprint."""
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.ingest.service import Incoming, ingest_batch

    fingerprint, batches = fleet_batches(fleet_rows())
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        for b in batches:
            ingest_batch(session, Incoming.from_rows(b), token_id=None, max_rows=10_000)
    engine.dispose()
    return fingerprint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="alignments of the same manifest (the first is cold)")
    ap.add_argument("--objective", choices=["latency", "importance"], default=None, help="default: the manifest's (latency)")
    args = ap.parse_args()
    print(f"# {_cpu()}; load average {os.getloadavg()[0]:.2f}")
    with Service() as svc:
        t0 = time.monotonic()
        fingerprint = store_platform(svc.db_url)
        doc = fleet_manifest() | {"target": {"platform": fingerprint}}
        if args.objective:
            doc["objective"] = args.objective
        body = json.dumps(doc).encode()
        print(f"# 38,144 points stored in {time.monotonic() - t0:.1f} s; 512 weights")
        answers: list[float] = []
        checks: list[float] = []
        with httpx.Client(base_url=svc.url, timeout=900) as http:
            for i in range(args.repeat):
                seconds, r = align_over_http(http, body)
                t_answer = time.monotonic()
                split = ", ".join(f"{k} {v:.2f}" for k, v in _timing(r.headers.get("server-timing")).items())
                pending = checks_stored(http, r.json()["id"], t_answer)
                answers.append(seconds)
                checks.append(pending or 0.0)
                result = http.get(f"/v1/alignments/{r.json()['id']}").json()["result"]
                cross = result["solver"]["cross_check"]
                print(f"alignment {i + 1}: answer {seconds:.2f} s ({split}); pending checks {pending or 0:.2f} s later "
                      f"(cross-check {cross['method']} {cross['status']}, agrees {cross['agrees']}; "
                      f"baselines {[b['method'] for b in result['baselines']]})", flush=True)  # fmt: skip
        later = answers[1:] or answers
        print(f"first alignment {answers[0]:.2f} s; later ones median {statistics.median(later):.2f} s, worst {max(later):.2f} s "
              f"({max(later) / answers[0]:.1%} of the first at worst)")  # fmt: skip
        print(f"pending checks after the answer: median {statistics.median(checks):.2f} s, worst {max(checks):.2f} s")
        print(
            "load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}; latency models are stored in the service's "
            "data_dir/models and read back by every later alignment's and check's process (model_load, model_store "
            "above)".format(*os.getloadavg())
        )


if __name__ == "__main__":
    main()
