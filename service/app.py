"""The FastAPI application: routers, middleware, errors, start-up schema check."""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from types import FrameType

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi

from gac import __version__
from gac.contracts.columns import ColumnBatch
from gac.contracts.measurements import Batch
from gac.service.align.endpoints import router as align_router
from gac.service.align.limits import AlignSlots, warm_up
from gac.service.auth.endpoints import router as auth_router
from gac.service.auth.guard import AuthFailures, quiet_access_log
from gac.service.cache import ResponseCache
from gac.service.cliffs.endpoints import router as cliffs_router
from gac.service.curves.endpoints import router as curves_router
from gac.service.curves.versions import confirm_forever
from gac.service.db import engine_for, make_sessionmaker
from gac.service.errors import install_error_handlers
from gac.service.head import HeadAsGet
from gac.service.health import router as health_router
from gac.service.ingest.endpoints import router as ingest_router
from gac.service.jobs.endpoints import router as jobs_router
from gac.service.limits import RequestGuard
from gac.service.measurements.endpoints import router as measurements_router
from gac.service.metrics import MetricsMiddleware, metrics_endpoint
from gac.service.platforms.endpoints import router as platforms_router
from gac.service.query import query_as_declared
from gac.service.settings import Settings, get_settings
from gac.service.startup import ensure_schema
from gac.service.ui.endpoints import install_ui
from gac.solver.curve_cache import CURVES


def die_with_parent() -> None:
    """In a worker process that a supervisor spawned (uvicorn --workers), ask Linux to end it
    when its parent dies: a killed master must not leave orphans serving old code.

    Only in spawned workers: a service run in its own process must outlive the shell that
    started it."""
    import multiprocessing
    import os
    import signal
    import sys

    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        return
    if os.getppid() != parent.pid:  # the parent died before the request above took effect
        os.kill(os.getpid(), signal.SIGTERM)


class _Stopping:
    since: float | None = None


def _stop_alignments_on_sigterm(app: FastAPI) -> _Stopping:
    """On SIGTERM, before the server's own handler: refuse new alignments, and give the running
    ones (their checks too) the grace period, then stop them. The server meanwhile stops taking
    connections and waits for its open ones (as long, `gac serve`'s timeout_graceful_shutdown):
    a request waiting for a stopped alignment is answered 503, so both end within the grace."""
    stopping = _Stopping()
    if threading.current_thread() is not threading.main_thread():
        return stopping  # an app run by a test client: no signals here
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if stopping.since is None:
            stopping.since = time.monotonic()
            slots = app.state.align_slots
            slots.closing = True
            grace = app.state.settings.shutdown_grace_seconds
            threading.Thread(target=slots.stop, args=(grace,), name="gac-align-stop", daemon=True).start()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
    return stopping


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    engine = engine_for(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        die_with_parent()
        ensure_schema(engine, settings)  # refuses to start on an out-of-date schema (unless allowed to migrate)
        CURVES.attach(settings.models_dir / "curves")  # the cliffs view reads the curve models alignments made, and back
        poller = None
        if settings.read_cache_seconds > 0:
            poller = asyncio.create_task(confirm_forever(app.state.responses, engine, settings.read_cache_seconds))
        # What start-up made lives as long as the process: keep it out of the cyclic collector,
        # whose full passes over it were stalling requests for tens of ms (p99 under wrk).
        gc.collect()
        gc.freeze()
        stopping = _stop_alignments_on_sigterm(app)
        threading.Thread(target=warm_up, name="gac-forkserver", daemon=True).start()
        yield
        # Alignments and their checks get what is left of the grace period since SIGTERM, then stop.
        grace = settings.shutdown_grace_seconds
        left = grace if stopping.since is None else max(0.0, stopping.since + grace - time.monotonic())
        await asyncio.to_thread(app.state.align_slots.stop, left)
        app.state.align_slots.ledger.flush()
        if poller is not None:
            poller.cancel()
            with suppress(asyncio.CancelledError):
                await poller
        engine.dispose()

    app = FastAPI(
        docs_url=None,  # served by install_ui from local assets: the docs must work offline
        redoc_url=None,
        title="GAC latency-cliff service",
        version=__version__,
        summary="Latency cliffs of GPU kernels per platform, and dimension alignment for compressed LLMs.",
        lifespan=lifespan,
        dependencies=[Depends(query_as_declared)],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    app.state.align_slots = AlignSlots(settings.align_concurrency_per_token)
    app.state.responses = ResponseCache(settings.read_cache_seconds, settings.read_cache_mb * 2**20)
    install_error_handlers(app)
    for router in (
        health_router,
        ingest_router,
        platforms_router,
        measurements_router,
        curves_router,
        cliffs_router,
        jobs_router,
        align_router,
        auth_router,
    ):
        app.include_router(router)
    app.add_route("/metrics", metrics_endpoint, include_in_schema=False)
    install_ui(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.state.auth_failures = AuthFailures(settings.auth_failure_burst, settings.auth_failures_per_second)
    quiet_access_log()
    app.add_middleware(HeadAsGet)  # innermost: the guard and the metrics see HEAD
    app.add_middleware(RequestGuard, settings=settings, failures=app.state.auth_failures)
    app.add_middleware(MetricsMiddleware)
    return app


def _openapi(app: FastAPI) -> dict:
    """FastAPI's document, plus the schemas of bodies that routes parse themselves (Batch, ColumnBatch)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (Batch, ColumnBatch):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        app.openapi_schema = schema
    return app.openapi_schema
