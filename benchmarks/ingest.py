"""Ingest throughput: rows/s through POST /v1/batches (uvicorn, Postgres) vs raw psycopg COPY.

"API" is the batch as our agent sends it (laid out by column); the same rows laid out one
object per row (application/json, what a hand-written client sends) are timed too.

Both run in this process, on the same machine, over the same rows, alternating over several
rounds (the machine's speed drifts); medians and ranges are printed:
  python benchmarks/ingest.py [--rows 100000] [--batch 1000] [--clients 4] [--workers 4] [--rounds 5]
  python benchmarks/ingest.py --parse --batch 5000 --rounds 21   # the parse alone: the duplicate-key check's cost
Target (issue 2): >= 20,000 rows/s through the API and >= 1/3 of raw COPY.

The ratios are paired: each round's API rate over the same round's COPY rate, then the median
over rounds, so a drift in the machine's speed (this VM's COPY rate moves by 2x over an hour)
hits both sides of a ratio alike.

Four workers on two cores: a worker waits on Postgres for much of each request (COPY, commit),
and with two workers this machine sat 45 % idle under the same load (README, "Deploying").

Two physical limits are printed: text COPY through psycopg's write_row (the straightforward
client), and binary COPY with declared types (psycopg's C adapters, the fastest it goes).
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gac.agent.delivery import batch_document  # noqa: E402
from gac.contracts.columns import COLUMNS_MEDIA_TYPE  # noqa: E402
from gac.contracts.ids import new_id  # noqa: E402
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo  # noqa: E402
from tests.fixtures.database import make_database  # noqa: E402
from tests.fixtures.live_service import LiveService  # noqa: E402
from tests.fixtures.tokens import make_token  # noqa: E402

COLS = "uuid, curve_id, run_id, batch_id, x, median_us, p10_us, p90_us, mean_us, n, timer, measured_at"
TYPES = ["uuid", "int4", "uuid", "uuid", "int4", "float8", "float8", "float8", "float8", "int4", "text", "timestamptz"]


def make_batches(rows: int, per_batch: int) -> list[Batch]:
    """Rows as our agent makes them (its time-ordered ids included)."""
    plat = PlatformDescriptor(device_kind="cuda", device_name="Benchmark GPU", compute_capability="8.0", torch_version="2.13.0")
    run = RunInfo(id=new_id(), agent="bench", plan="bench")
    batches = []
    for start in range(0, rows, per_batch):
        ms = []
        for i in range(start, min(rows, start + per_batch)):
            k = 64 + i % 4096
            med = 10.0 + (i % 97)
            ms.append(
                Measurement(
                    id=new_id(),
                    op="gemm",
                    dtype="float16",
                    shape={"m": 2048, "n": 1 + i // 4096, "k": k},
                    sweep_axis="k",
                    median_us=med,
                    p10_us=med * 0.97,
                    p90_us=med * 1.04,
                    mean_us=med * 1.01,
                    n=25,
                    timer="cuda-events+l2-flush",
                )
            )
        batches.append(Batch(id=new_id(), platform=plat, run=run, measurements=ms))
    return batches


def api_rows_per_second(service: LiveService, bodies: list[bytes], rows: int, clients: int, media_type: str) -> float:
    headers = {"Authorization": f"Bearer {service.ingest_token}", "content-type": media_type}

    def send(chunk: list[bytes]) -> None:
        with httpx.Client(base_url=service.url, timeout=120) as c:
            for body in chunk:
                r = c.post("/v1/batches", content=body, headers=headers)
                r.raise_for_status()

    chunks = [bodies[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, chunks))
    return rows / (time.perf_counter() - t0)


def copy_rows_per_second(dsn: str, batches: list[Batch], rows: int, binary: bool) -> float:
    """The physical limit: the same rows COPY'd into a bare table (no index, no constraint), one connection."""
    table = f"raw_copy_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (uuid uuid, curve_id int, run_id uuid, batch_id uuid, x int, median_us float8, "
            "p10_us float8, p90_us float8, mean_us float8, n int, timer text, measured_at timestamptz)"
        )
        t0 = time.perf_counter()
        for b in batches:
            with conn.cursor().copy(f"COPY {table} ({COLS}) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")) as copy:
                if binary:
                    copy.set_types(TYPES)
                for m in b.measurements:
                    copy.write_row(
                        (m.id, 1, b.run.id, b.id, m.shape["k"], m.median_us, m.p10_us, m.p90_us, m.mean_us, m.n, m.timer, m.measured_at)
                    )
        elapsed = time.perf_counter() - t0
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == rows
        conn.execute(f"DROP TABLE {table}")
    return rows / elapsed


def parse_cost(rows: int, rounds: int) -> None:
    """The service's parse of one batch (service/ingest/endpoints.py:parse_batch: the duplicate-key check, the
    model, the rows it stores) against the same without the check (the baseline), alternating, in this process."""
    from gac.contracts.columns import ColumnBatch
    from gac.service.ingest.endpoints import parse_batch
    from gac.service.ingest.incoming import Incoming

    batch = make_batches(rows, rows)[0]

    def by_columns(body: bytes) -> Incoming:
        return Incoming.from_columns(ColumnBatch.model_validate_json(body))

    def by_rows(body: bytes) -> Incoming:
        return Incoming.from_rows(Batch.model_validate_json(body))

    layouts = [
        ("by column", json.dumps(batch_document(batch)).encode(), COLUMNS_MEDIA_TYPE, by_columns),
        ("by row", batch.model_dump_json(by_alias=True, exclude_none=True).encode(), "application/json", by_rows),
    ]
    print(f"one batch of {rows:,} rows, {rounds} rounds; ms are medians; ratio = parse_batch / the same without the check, per round")
    for name, body, media_type, unchecked in layouts:
        alone, ours = [], []
        for _ in range(rounds):
            gc.collect()
            gc.disable()  # as timeit does: a collection the other call's garbage set off lands in neither
            try:
                t0 = time.perf_counter()
                unchecked(body)
                t1 = time.perf_counter()
                parse_batch(body, media_type)
                t2 = time.perf_counter()
            finally:
                gc.enable()
            alone.append(t1 - t0)
            ours.append(t2 - t1)
        ratios = [b / a for a, b in zip(alone, ours)]
        extra = (statistics.median(ours) - statistics.median(alone)) / rows * 1e6
        print(
            f"{name:<10} unchecked {statistics.median(alone) * 1e3:7.1f} ms   parse_batch {statistics.median(ours) * 1e3:7.1f} ms   "
            f"ratio median {statistics.median(ratios):.2f}x worst {max(ratios):.2f}x   (+{extra:.1f} µs a row)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4, help="uvicorn worker processes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parse", action="store_true", help="only the parse of one --batch-row batch, in this process (no service)")
    args = ap.parse_args()
    if args.parse:
        parse_cost(args.batch, args.rounds)
        return

    from gac.service.db import upgrade
    from gac.service.settings import Settings

    tmp = Path("benchmarks/out")
    tmp.mkdir(parents=True, exist_ok=True)
    db = make_database("postgres", tmp)
    results: dict[str, list[float]] = {"api": [], "api_rows": [], "text": [], "binary": []}
    try:
        upgrade(db.url)
        dsn = db.url.replace("postgresql+psycopg://", "postgresql://")
        service = LiveService(db_url=db.url, data_dir=tmp, workers=args.workers)
        service.ingest_token = make_token(Settings(database_url=db.url, secret_key="test-secret-key", data_dir=tmp), "ingest")
        service.start()
        try:
            for _ in range(args.rounds):
                batches = make_batches(args.rows, args.batch)  # fresh ids: every round inserts for real
                bodies = [json.dumps(batch_document(b)).encode() for b in batches]  # what the agent sends
                results["api"].append(api_rows_per_second(service, bodies, args.rows, args.clients, COLUMNS_MEDIA_TYPE))
                rows_layout = make_batches(args.rows, args.batch)
                bodies = [b.model_dump_json(by_alias=True, exclude_none=True).encode() for b in rows_layout]
                results["api_rows"].append(api_rows_per_second(service, bodies, args.rows, args.clients, "application/json"))
                results["text"].append(copy_rows_per_second(dsn, batches, args.rows, binary=False))
                results["binary"].append(copy_rows_per_second(dsn, batches, args.rows, binary=True))
            total = httpx.get(f"{service.url}/v1/measurements", params={"limit": 1}).json()["total"]
            assert total == 2 * args.rows * args.rounds, f"stored {total} of {2 * args.rows * args.rounds}"
        finally:
            service.stop()
    finally:
        db.drop()

    def line(name: str, key: str) -> str:
        v = results[key]
        return f"{name:<34}{statistics.median(v):>10,.0f} rows/s   (range {min(v):,.0f} .. {max(v):,.0f})"

    def paired(key: str, api: str = "api") -> str:
        ratios = [a / c for a, c in zip(results[api], results[key])]
        return f"{statistics.median(ratios):.2f}   (rounds {min(ratios):.2f} .. {max(ratios):.2f})"

    print(f"rows: {args.rows} x {args.rounds} rounds  batch: {args.batch}  clients: {args.clients}  uvicorn workers: {args.workers}")
    print(line("API  POST /v1/batches, by column", "api"))
    print(line("API  POST /v1/batches, by row", "api_rows"))
    print(line("raw  COPY, text (write_row)", "text"))
    print(line("raw  COPY, binary (typed, C adapters)", "binary"))
    print(
        "per round (k rows/s)    : "
        + "   ".join(f"{a / 1e3:.0f}/{t / 1e3:.0f}/{b / 1e3:.0f}" for a, t, b in zip(results["api"], results["text"], results["binary"]))
        + "   (API by column/text/binary)"
    )
    print(f"ratio API / text COPY   : {paired('text')}")
    print(f"ratio API / binary COPY : {paired('binary')}")
    print(f"by row: / text COPY {paired('text', 'api_rows')}; / binary COPY {paired('binary', 'api_rows')}")
    print("targets: API >= 20,000 rows/s; API >= 1/3 of raw COPY")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally blocks: no orphaned service
    main()
