"""Where alignments run and how long: each in a process of its own, under a memory limit and a
deadline, so that this process's event loop keeps answering and a stopped alignment (its client
gone, its deadline past, the service stopping) frees its CPU at once: the process is killed.

A body is never parsed here, at any size: the worker process parses it, estimates its cost
(service/align/cost.py) and tells this process, which then answers 202 for a large one or waits.
How many each token may run at once is counted here (per worker process); how many run at all,
in the database (service/align/service.py:admit).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from gac.service.errors import NotReady, TooManyRequests, error_body

log = logging.getLogger("gac.service")

RETRY_AFTER_S = 5  # an alignment takes seconds: come back after a few

# Above this many items the OR-Tools cross-check and the paper-DP baselines run after the answer (a
# worker process stores them on the alignment; the result lists them in `pending` until then):
# SCIP alone takes seconds at a thousand items (docs/results/evidence.md).
INLINE_CHECK_MAX_ITEMS = 64
# Above this many weights POST /v1/align answers 202 once the manifest is parsed, with the alignment's URL to poll
# (a client may ask for that at any size: `Prefer: respond-async`).
ASYNC_ABOVE_WEIGHTS = 20_000
# Results of manifests above this many weights are served compact (each weight's chosen candidate)
# unless ?candidates=full asks for every candidate.
COMPACT_ABOVE_WEIGHTS = 1_000
# Alignments running at once per service process (a process each; the rest wait their turn, their
# deadline running): the checks left for after the answer have their own, so that they never hold
# up an answer.
ALIGN_PROCESSES = 2
CHECK_PROCESSES = 1
# A task's process starts from a server that imported these already: a fork, not a fresh interpreter.
PRELOAD = ["gac.service.align.service"]
POLL_AFTER_S = 1  # the Retry-After of a 202: when to look again
# A job still queued or running this long after its last news was lost with the process running it.
JOB_STALE_S = 3600
# ... for the global budget, sooner: no alignment outlives its deadline by more than this.
STALE_AFTER_DEADLINE_S = 60


class AlignSlots:
    def __init__(self, per_token: int) -> None:
        self.per_token = per_token
        self._running: dict[Hashable, int] = {}
        self.closing = False  # SIGTERM came: no new alignments
        self._lock = threading.Lock()
        self.workers = TaskRunner(ALIGN_PROCESSES)  # alignments
        self.checkers = TaskRunner(CHECK_PROCESSES)  # the checks left for after the answer
        self.ledger = Ledger()  # how alignments ended, recorded through database outages

    def acquire(self, holder: Hashable) -> None:
        """Take one of `holder`'s slots (a token id, or None for anonymous callers), or raise 429
        (503 once the service is stopping)."""
        if self.closing:
            raise NotReady("the service is stopping: it takes no new alignments")  # with Retry-After
        with self._lock:
            running = self._running.get(holder, 0)
            if running >= self.per_token:
                raise TooManyRequests(
                    f"this token already runs {running} alignments here (GAC_ALIGN_CONCURRENCY_PER_TOKEN={self.per_token}); "
                    "retry when one finishes",
                    RETRY_AFTER_S,
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
        """Wait for every alignment and check submitted so far (wait), or stop them now."""
        if wait:
            self.workers.join()  # their ends may queue checks: those are waited for next
            self.checkers.join()
            return
        self.workers.stop_all(SERVICE_STOPPING)
        self.checkers.stop_all(SERVICE_STOPPING)
        self.workers.join()
        self.checkers.join()

    def stop(self, grace_s: float) -> None:
        """Shutting down: what runs gets grace_s to finish, then is stopped (and says so)."""
        end = time.monotonic() + grace_s
        self.workers.join(grace_s)
        self.checkers.join(max(0.0, end - time.monotonic()))
        self.close(wait=False)


@dataclass(frozen=True)
class Stop:
    """Why a task was stopped, as the answer it ends with (and the stored job records)."""

    status: int
    error: str
    detail: str
    retry_after_s: int | None = None

    def answer_parts(self) -> tuple[int, dict[str, str], dict[str, str]]:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}
        return self.status, error_body(self.error, self.detail), headers


def client_gone(seconds: float) -> Stop:
    return Stop(410, "AlignmentCancelled", f"its client disconnected after {seconds:.1f} s: stopped, nothing stored; post it again")


def deadline_passed(seconds: float) -> Stop:
    return Stop(
        504,
        "AlignmentDeadline",
        f"not done within its deadline of {seconds:g} s (GAC_ALIGN_DEADLINE_SECONDS): "
        "stopped, nothing stored; a smaller manifest, or ask the operator",
    )


SERVICE_STOPPING = Stop(
    503, "ServiceStopping", "the service stopped before this alignment was done: nothing stored; post it again", RETRY_AFTER_S
)


class TaskStopped(Exception):
    """The task's process ended without an answer: stopped on purpose (`stop`) or it died (`stop` None)."""

    def __init__(self, stop: Stop | None, exitcode: int | None) -> None:
        self.stop, self.exitcode = stop, exitcode
        super().__init__(stop.detail if stop else f"its worker process stopped (exit code {exitcode})")


@dataclass(eq=False)  # each task is itself (kept in sets)
class Task:
    """One task in a process of its own. `estimate` resolves with what the task reported first
    (report(), None when it reported nothing), `answer` with its result or TaskStopped."""

    fn: Callable[..., Any]
    args: tuple
    deadline_s: float
    memory_bytes: int | None
    decide: Callable[[Any], Any] | None = None  # the reply to the task's report (in the pump thread)
    started: float = field(default_factory=time.monotonic)
    estimate: Future = field(default_factory=Future)
    answer: Future = field(default_factory=Future)
    pid: int | None = None
    stopped: Stop | None = None
    _process: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, why: Stop) -> None:
        """Kill the task's process now (SIGKILL: its CPU is free at once); a task not started never starts."""
        with self._lock:
            if self.stopped is None:
                self.stopped = why
            if self._process is not None and self._process.exitcode is None:
                self._process.kill()

    @property
    def deadline(self) -> float:
        return self.started + self.deadline_s


class TaskRunner:
    """Runs tasks each in a process of its own, at most `processes` at once (the others wait, their
    deadline running). Processes fork from a server that preloaded the service's modules (a few
    ms each, not a fresh interpreter) and set their own memory limit before the task runs.

    A process per task, not a pool: a pool's task cannot be stopped without breaking the pool
    (and every other task in it); a process can be killed, and the CPU it held is free at once."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._free = threading.Semaphore(processes)
        self._tasks: set[Task] = set()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        weakref.finalize(self, _stop_all, self._tasks, self._lock)

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        deadline_s: float,
        memory_bytes: int | None = None,
        decide: Callable[[Any], Any] | None = None,
    ) -> Task:
        task = Task(fn, args, deadline_s, memory_bytes, decide)
        thread = threading.Thread(target=self._run, args=(task,), name="gac-align-task", daemon=True)
        with self._lock:
            self._tasks.add(task)
            self._threads.add(thread)
        thread.start()
        return task

    def tasks(self) -> list[Task]:
        with self._lock:
            return list(self._tasks)

    def stop_all(self, why: Stop) -> None:
        for task in self.tasks():
            task.stop(why)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every task submitted so far ended (and its callbacks ran); False at the timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return True
            for t in threads:
                t.join(None if end is None else max(0.0, end - time.monotonic()))
                if end is not None and time.monotonic() >= end:
                    with self._lock:
                        return not self._threads

    def _run(self, task: Task) -> None:
        try:
            self._wait_turn(task)
            if task.stopped is None:
                try:
                    self._run_process(task)
                finally:
                    self._free.release()
        except BaseException as exc:  # noqa: BLE001 - whatever happened, the futures say so
            _settle(task, exc)
        else:
            _settle(task, TaskStopped(task.stopped, None))
        finally:
            with self._lock:
                self._tasks.discard(task)
                self._threads.discard(threading.current_thread())

    def _wait_turn(self, task: Task) -> None:
        while not self._free.acquire(timeout=0.2):
            if task.stopped is not None:
                return
            if time.monotonic() >= task.deadline:
                task.stop(deadline_passed(task.deadline_s))
                return
        if task.stopped is not None:
            self._free.release()

    def _run_process(self, task: Task) -> None:
        ctx = _context()
        ours, theirs = ctx.Pipe()
        process = ctx.Process(
            target=_child,
            args=(theirs, task.fn, task.args, task.memory_bytes, task.deadline - time.monotonic()),
            name="gac-align",
            daemon=True,
        )
        with task._lock:
            if task.stopped is not None:
                return
            process.start()
            task._process, task.pid = process, process.pid
        theirs.close()
        try:
            _pump(task, ours)
        finally:
            ours.close()
            process.join()


def _settle(task: Task, exc: BaseException) -> None:
    if not task.estimate.done():
        task.estimate.set_result(None)
    if not task.answer.done():
        task.answer.set_exception(exc)


def _pump(task: Task, conn: Connection) -> None:
    """Read the task's messages until its answer; stop it at its deadline."""
    while True:
        left = task.deadline - time.monotonic()
        if left <= 0:
            task.stop(deadline_passed(task.deadline_s))
            left = 5.0  # the kill's end of file arrives at once
        try:
            if not conn.poll(min(left, 1.0)):
                continue
            kind, value = conn.recv()
        except (EOFError, OSError):
            task._process.join()
            _settle(task, TaskStopped(task.stopped, task._process.exitcode))
            return
        if kind == "report":
            reply = task.decide(value) if task.decide is not None else None
            try:
                conn.send(reply)
            except OSError:
                pass  # it died meanwhile: the next poll says so
            if not task.estimate.done():
                task.estimate.set_result(value)
        elif kind == "answer":
            if not task.estimate.done():
                task.estimate.set_result(None)
            task.answer.set_result(value)
            return
        else:  # "error": the task raised
            _settle(task, value)
            return


_CONTEXT: Any = None
_CONTEXT_LOCK = threading.Lock()


def _context() -> Any:
    """The forkserver context, its server preloading the service's modules (once per process)."""
    global _CONTEXT
    with _CONTEXT_LOCK:
        if _CONTEXT is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _CONTEXT = ctx
        return _CONTEXT


def warm_up() -> None:
    """Start the fork server now (it imports the service's modules: seconds), not on the first alignment."""
    _context()
    multiprocessing.forkserver.ensure_running()


def _stop_all(tasks: set[Task], lock: threading.Lock) -> None:
    with lock:
        for task in list(tasks):
            task.stop(SERVICE_STOPPING)


# -- in the task's process

_CHANNEL: Connection | None = None
_DEADLINE: float | None = None


def report(value: Any) -> Any:
    """From a task: tell the service something (its parsed size and cost) and get its reply. Outside
    a task's process (a test, the CLI): None."""
    if _CHANNEL is None:
        return None
    _CHANNEL.send(("report", value))
    return _CHANNEL.recv()


def seconds_left() -> float | None:
    """From a task: the time until its deadline (its process is killed then); None outside one."""
    return None if _DEADLINE is None else _DEADLINE - time.monotonic()


def _child(conn: Connection, fn: Callable[..., Any], args: tuple, memory_bytes: int | None, seconds: float) -> None:
    global _CHANNEL, _DEADLINE
    _CHANNEL, _DEADLINE = conn, time.monotonic() + seconds
    if memory_bytes is not None:
        # The address space, not the resident set: it is what a runaway allocation grows first,
        # and the kernel refuses it at once (MemoryError) instead of the OOM killer picking a victim.
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _watch_parent(os.getppid())
    try:
        result = _collector_paused(fn, *args)
    except BaseException as exc:  # noqa: BLE001 - sent to the service, which answers 500
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 - unpicklable: its text
            conn.send(("error", RuntimeError(repr(exc))))
        return
    conn.send(("answer", result))


class Ledger:
    """Writes that record how an alignment ended, made again every few seconds while the database
    is unavailable (until it returns, or for `give_up_s`): an end is never lost to an outage.
    The log says why once when a write is held back, and once when it is made."""

    def __init__(self, retry_s: float = 2.0, give_up_s: float = 3600.0) -> None:
        self.retry_s, self.give_up_s = retry_s, give_up_s
        self._held: list[tuple[str, Callable[[], None], float]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, what: str, fn: Callable[[], None]) -> None:
        """fn() now; if the database is away, again later. Other errors are logged."""
        if not self._try(what, fn, None):
            with self._lock:
                self._held.append((what, fn, time.monotonic()))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._retry_forever, name="gac-align-ledger", daemon=True)
                    self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return len(self._held)

    def flush(self) -> None:
        """One more try of every held write (shutting down): what still fails is logged as lost."""
        with self._lock:
            held, self._held = self._held, []
        for what, fn, since in held:
            if not self._try(what, fn, since):
                log.error("%s: not recorded, the database is still unavailable at shutdown", what)

    def _try(self, what: str, fn: Callable[[], None], since: float | None) -> bool:
        from sqlalchemy.exc import DBAPIError

        from gac.service.errors import is_outage

        try:
            fn()
        except DBAPIError as exc:
            if not is_outage(exc):
                log.exception("%s: not recorded", what)
                return True
            if since is None:
                log.warning("%s: the database is unavailable; recording it once the database returns", what)
            return False
        except Exception:  # noqa: BLE001 - a bug in the write: logged, not retried
            log.exception("%s: not recorded", what)
            return True
        if since is not None:
            log.warning("%s: recorded after %.0f s of database outage", what, time.monotonic() - since)
        return True

    def _retry_forever(self) -> None:
        while True:
            self._wake.wait(self.retry_s)
            with self._lock:
                held, self._held = self._held, []
            keep = []
            for what, fn, since in held:
                if self._try(what, fn, since):
                    continue
                if time.monotonic() - since > self.give_up_s:
                    log.error("%s: not recorded, the database was unavailable for over %.0f s", what, self.give_up_s)
                    continue
                keep.append((what, fn, since))
            with self._lock:
                self._held = keep + self._held


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
