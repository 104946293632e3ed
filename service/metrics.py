"""Prometheus metrics: request counts and latency per route, and ingest volume."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
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


def metrics_endpoint(_: Request) -> Response:
    """This process's metrics; under `gac serve --workers N`, every worker's, summed.

    Several workers each count what they serve: a scrape lands on one of them. In prometheus_client's
    multiprocess mode (PROMETHEUS_MULTIPROC_DIR, which `gac serve` sets for its workers) each writes
    its counts to files in that directory, so any worker answers with the sum over all of them, a
    worker that was killed or restarted included."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def prepare_multiprocess_dir(path: str | None) -> str:
    """The directory the workers of one `gac serve` share their counts in: the one given (emptied
    of a previous run's files, which would add to this run's counts), else a new one."""
    if not path:
        return tempfile.mkdtemp(prefix="gac-metrics-")
    Path(path).mkdir(parents=True, exist_ok=True)
    for stale in Path(path).glob("*.db"):
        stale.unlink()
    return path
