"""Prometheus metrics: request counts and latency per route, ingest volume, and the job queue."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client when it is first imported

REQUESTS = Counter("gac_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "gac_http_request_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGEST_ROWS = Counter("gac_ingest_rows_total", "Measurement rows received", ["result"])
INGEST_BATCHES = Counter("gac_ingest_batches_total", "Batches received", ["result"])
READ_CACHE = Counter("gac_read_cache_total", "Per-curve reads: served fresh, version re-confirmed, or body built", ["kind", "result"])


class MetricsMiddleware:
    """Times every request under its route template (not its raw path, which would explode labels)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", "unmatched")
            LATENCY.labels(scope["method"], name).observe(time.perf_counter() - start)
            REQUESTS.labels(scope["method"], name, str(status["code"])).inc()


class QueueCollector:
    """The job queue as the database holds it at each scrape (one worker's answer is every worker's):
    jobs by status, and leased jobs whose lease ran out, the sign of an agent that stopped reporting."""

    def __init__(self, counts: tuple[dict[str, int], int] | None) -> None:
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from gac.contracts.api import JobStatus

        up = GaugeMetricFamily("gac_jobs_readable", "1 when the job queue could be read for this scrape, else 0")
        up.add_metric([], 0 if self.counts is None else 1)
        yield up
        if self.counts is None:
            return
        by_status, expired = self.counts
        jobs = GaugeMetricFamily("gac_jobs", "Profiling jobs by status", labels=["status"])
        for status in get_args(JobStatus):
            jobs.add_metric([status], by_status.get(status, 0))
        yield jobs
        late = GaugeMetricFamily("gac_jobs_lease_expired", "Leased jobs whose lease ran out: their agent stopped reporting")
        late.add_metric([], expired)
        yield late


def _queue_counts(request: Request) -> tuple[dict[str, int], int] | None:
    from datetime import UTC, datetime

    from gac.service.jobs.repository import queue_counts

    try:
        with request.app.state.sessionmaker() as session:
            return queue_counts(session, datetime.now(UTC))
    except Exception:  # noqa: BLE001 - a scrape still answers (gac_jobs_readable 0) while the database is away
        return None


def metrics_endpoint(request: Request) -> Response:
    """This process's metrics; under `gac serve --workers N`, every worker's, summed; and the job queue.

    Several workers each count what they serve: a scrape lands on one of them. In prometheus_client's
    multiprocess mode (PROMETHEUS_MULTIPROC_DIR, which `gac serve` sets for its workers) each writes
    its counts to files in that directory, so any worker answers with the sum over all of them, a
    worker that was killed or restarted included."""
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        MultiProcessCollector(registry)
        text = generate_latest(registry)
    else:
        text = generate_latest()
    queue = CollectorRegistry()
    queue.register(QueueCollector(_queue_counts(request)))
    return Response(text + generate_latest(queue), media_type=CONTENT_TYPE_LATEST)


def prepare_multiprocess_dir(path: str | None) -> str:
    """The directory the workers of one `gac serve` share their counts in: the one given (emptied
    of a previous run's files, which would add to this run's counts), else a new one."""
    if not path:
        return tempfile.mkdtemp(prefix="gac-metrics-")
    Path(path).mkdir(parents=True, exist_ok=True)
    for stale in Path(path).glob("*.db"):
        stale.unlink()
    return path
