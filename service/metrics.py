"""Prometheus metrics: request counts and latency per route, and ingest volume."""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

REQUESTS = Counter("gac_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "gac_http_request_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGEST_ROWS = Counter("gac_ingest_rows_total", "Measurement rows received", ["result"])
INGEST_BATCHES = Counter("gac_ingest_batches_total", "Batches received", ["result"])
READ_CACHE = Counter(
    "gac_read_cache_total", "Per-curve reads: served fresh, version re-confirmed, or body built", ["kind", "result"]
)


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
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
