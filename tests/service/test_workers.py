"""A killed service leaves no workers behind: uvicorn's workers end with their master."""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.live_service import LiveService

pytestmark = pytest.mark.slow


def children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out |= {int(x) for x in text}
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Block until every process in `pids` has exited (a pidfd per process: the kernel wakes us
    when it ends, nothing polls on a timer); returns those still running at the timeout."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            pass  # already gone, and reaped
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        running, deadline = set(fds), time.monotonic() + timeout
        while running and (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                running.discard(fd)
                poller.unregister(fd)
        return {fds[fd] for fd in running}
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_workers_die_with_a_killed_master(tmp_path):
    svc = LiveService(db_url=f"sqlite:///{tmp_path / 'gac.db'}", data_dir=tmp_path, workers=2)
    svc.start()
    try:
        assert svc.proc is not None
        master = svc.proc.pid
        # The service serves before the master is killed (a worker answers readiness through the shared socket).
        assert httpx.get(f"{svc.url}/readyz", timeout=10).status_code == 200
        # The workers are the master's spawned children (multiprocessing's resource tracker aside). On a
        # loaded machine uvicorn's master may be restarting one that missed its pings (a full suite run
        # once saw a single worker here), so every worker present is checked, and there is at least one.
        workers = {p for p in children(master) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()}
        assert workers
        os.kill(master, signal.SIGKILL)
        svc.proc.wait(10)
        left = wait_gone(workers, timeout=20)
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, f"orphan workers still running after their master was killed: {left}"
    finally:
        svc.stop()


def test_workers_on_a_new_database_find_it_migrated_once(tmp_path):
    """The embedded default migrates itself: with several workers, `gac serve` migrates before they start (each
    migrating at once created the same tables twice, and the failed worker stopped the service)."""
    svc = LiveService(db_url=f"sqlite:///{tmp_path / 'gac.db'}", data_dir=tmp_path, workers=3, cli=True)
    svc.start()
    try:
        assert httpx.get(f"{svc.url}/readyz", timeout=10).json()["status"] == "ready"
    finally:
        svc.stop()
    assert svc.log_path is not None
    log = svc.log_path.read_text()
    assert "Traceback" not in log and "failed to start" not in log, log[-3000:]
