"""How many alignments each token may run at once in this worker process (the rest get 429), and
where large ones run: in worker processes, so that this process's event loop keeps answering.

Sizes are counted in manifest weights; a body not parsed yet is sized by its `"kind"` keys (one
per weight), so that a large manifest is never parsed on the event loop.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from service.errors import TooManyRequests

log = logging.getLogger("gac.service")

RETRY_AFTER_S = 5  # an alignment takes seconds: come back after a few

# Above this many items the OR-Tools cross-check and the paper-DP baselines run after the answer (a
# worker process stores them on the alignment; the result lists them in `pending` until then).
# SCIP alone takes about 0.25 s at 50 items and 4-8 s at 1,000 on this 2-core VM.
INLINE_CHECK_MAX_ITEMS = 64
# Manifests above this many weights are parsed and aligned in a worker process, not in this one.
PROCESS_ABOVE_WEIGHTS = 2_000
# ... and above this many, POST /v1/align answers 202 at once with the alignment's URL to poll
# (a client may ask for that at any size: `Prefer: respond-async`).
ASYNC_ABOVE_WEIGHTS = 20_000
# Results of manifests above this many weights are served compact (each weight's chosen candidate)
# unless ?candidates=full asks for every candidate.
COMPACT_ABOVE_WEIGHTS = 1_000
# Worker processes per service process, started on first use: each runs one alignment at a time;
# the checks left for after the answer have their own, so that they never hold up an answer.
ALIGN_PROCESSES = 2
CHECK_PROCESSES = 1
POLL_AFTER_S = 1  # the Retry-After of a 202: when to look again
# A job still queued or running this long after its last news was lost with the process running it.
JOB_STALE_S = 3600


def estimate_weights(body: bytes) -> int:
    """The number of weights of a manifest body, without parsing it: one `"kind"` key each."""
    return body.count(b'"kind"')


class AlignSlots:
    def __init__(self, per_token: int) -> None:
        self.per_token = per_token
        self._running: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        # Their processes start on first use (AlignWorkers.submit): making these costs nothing.
        self.workers = AlignWorkers(ALIGN_PROCESSES)  # large alignments
        self.checkers = AlignWorkers(CHECK_PROCESSES)  # the checks left for after the answer

    def acquire(self, holder: Hashable) -> None:
        """Take one of `holder`'s slots (a token id, or None for anonymous callers), or raise 429."""
        with self._lock:
            running = self._running.get(holder, 0)
            if running >= self.per_token:
                raise TooManyRequests(
                    f"this token already runs {running} alignments here (GAC_ALIGN_CONCURRENCY_PER_TOKEN={self.per_token}); "
                    "retry when one finishes", RETRY_AFTER_S,
                )
            self._running[holder] = running + 1

    def release(self, holder: Hashable) -> None:
        with self._lock:
            self._running[holder] -= 1
            if not self._running[holder]:
                del self._running[holder]

    @contextmanager
    def slot(self, holder: Hashable) -> Iterator[None]:
        """Run one alignment for `holder` (a token id, or None for anonymous callers)."""
        self.acquire(holder)
        try:
            yield
        finally:
            self.release(holder)

    def close(self, wait: bool = False) -> None:
        """Stop the worker processes (wait: after the work they were given)."""
        self.workers.close(wait)
        self.checkers.close(wait)


class AlignWorkers:
    """A pool of spawned worker processes for large alignments and the checks left for later.

    Work runs there, not on this process's threads: a 100,000-weight alignment is seconds of
    pure Python (and collector passes over millions of objects) that would otherwise hold the GIL
    from the event loop. A pool whose process died (killed, out of memory) is replaced."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        weakref.finalize(self, _shutdown, self.__dict__)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self._lock:
            if self._pool is not None:
                try:
                    return self._pool.submit(_collector_paused, fn, *args)
                except BrokenProcessPool:
                    log.warning("alignment worker processes: one died (killed, out of memory?); starting new ones")
                    self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker, initargs=(os.getpid(),),
            )
            return self._pool.submit(_collector_paused, fn, *args)

    def close(self, wait: bool = False) -> None:
        """Stop the processes (wait: after the work they were given; else after their current one)."""
        _shutdown(self.__dict__, wait)


def _start_worker(parent: int) -> None:
    _watch_parent(parent)


def _collector_paused(fn: Callable[..., Any], *args: Any) -> Any:
    """Run one task with the cyclic garbage collector off. An alignment allocates millions of small
    objects that reference counting frees; the collector's passes over them cost a fifth of a
    10,000-weight alignment and, as they grow with what is alive, more than half of a 100,000-weight
    one (its cycles, if any, wait for the next pass after the task)."""
    gc.disable()
    try:
        return fn(*args)
    finally:
        gc.enable()


def _watch_parent(parent: int) -> None:
    """In a worker process: exit when the service process that started it is gone. (Its task queue
    never reports the end: this process holds a handle to it too, so a killed service would leave
    its workers waiting forever.)"""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="gac-watch-parent", daemon=True).start()


def _shutdown(state: dict, wait: bool = False) -> None:
    pool = state.get("_pool")
    if pool is not None:
        state["_pool"] = None
        pool.shutdown(wait=wait, cancel_futures=not wait)
