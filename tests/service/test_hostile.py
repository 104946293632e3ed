"""Hostile clients against the real service (`gac serve`, real sockets), issue 31: uploads held
open without a token, half-open and dribbling connections, a connection flood, a body that never
finishes, a bad-token flood, and /metrics under several workers.

Every wait polls a condition up to a deadline; nothing sleeps to let something happen."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import factories as f
from tests.fixtures.database import SECRET
from tests.fixtures.live_service import LiveService
from tests.fixtures.tokens import make_token

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")]

LIMITS = {
    "GAC_HEADER_TIMEOUT_SECONDS": "1",
    "GAC_BODY_TIMEOUT_SECONDS": "2",
    "GAC_MAX_CONNECTIONS": "32",
    "GAC_AUTH_FAILURE_BURST": "5",
    "GAC_AUTH_FAILURES_PER_SECOND": "0.1",
}


def _service(database, tmp_path, **extra) -> LiveService:  # type: ignore[no-untyped-def]
    from gac.service.settings import Settings

    svc = LiveService(db_url=database.url, data_dir=tmp_path, cli=True, extra_env={**LIMITS, **extra.pop("env", {})}, **extra)
    svc.ingest_token = make_token(Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path), "ingest")
    return svc


@pytest.fixture
def guarded(database, tmp_path) -> Iterator[LiveService]:  # type: ignore[no-untyped-def]
    from tests.fixtures.database import _truncate

    svc = _service(database, tmp_path)
    svc.start()
    yield svc
    svc.stop()
    _truncate(database.url)


def _wait(what: str, ready, timeout: float = 30.0, every: float = 0.02):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (result := ready()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return result


def _rss_kib(pid: int) -> int:
    """Resident memory of the process serving requests (with one worker, uvicorn serves in its own process)."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1))  # type: ignore[union-attr]


def _connect(svc: LiveService) -> socket.socket:
    return socket.create_connection(("127.0.0.1", svc.port), timeout=10)


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed its end (EOF or reset); what it answered before that is discarded."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _read_status(sock: socket.socket) -> int:
    sock.settimeout(10)
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed before a status line: {head!r}"
        head += chunk
    return int(head.split(b" ", 2)[1])


def _send_some(sock: socket.socket, data: bytes) -> int:
    """Send what the connection takes without blocking, until it would block or is closed; how many bytes went."""
    sock.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent : sent + 65536])
    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_held_uploads_without_a_token_are_refused_before_their_body(guarded):
    """60 uploads that declare 16 MiB, send their headers and the start of a body, and hold: each
    gets 401 while its body is still on its way, its connection is closed, and what they try to
    push after that never reaches the server's memory."""
    head = b"POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16777215\r\n\r\n"
    before = _rss_kib(guarded.proc.pid)
    socks, statuses = [], []
    try:
        for _ in range(60):
            s = _connect(guarded)
            s.sendall(head + b"x" * 16384)
            statuses.append(_read_status(s))  # answered with 15.98 MiB of the body still to come
            socks.append(s)
        for s in socks:
            _send_some(s, b"x" * (4 * 1024 * 1024))
            _wait("the server to close a refused upload", lambda s=s: _closed_by_server(s))
        grown = _rss_kib(guarded.proc.pid) - before
    finally:
        for s in socks:
            s.close()
    assert statuses[:5] == [401] * 5 and set(statuses) == {401, 429}  # then the client is rate-limited
    assert grown < 48 * 1024, f"the server grew by {grown} KiB for uploads it refused"


def test_half_open_and_dribbling_connections_are_closed_after_the_header_timeout(guarded):
    silent = [_connect(guarded) for _ in range(20)]  # connect and say nothing
    partial = [_connect(guarded) for _ in range(20)]  # a request head that never ends
    for s in partial:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    kept = _connect(guarded)  # a kept-alive client that starts its next request and stalls
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _read_status(kept) == 200
    kept.sendall(b"GET /hea")
    try:
        for s in [*silent, *partial, kept]:
            _wait("the server to close a connection without a whole request head", lambda s=s: _closed_by_server(s))
        # The service still serves a client that behaves.
        assert httpx.get(f"{guarded.url}/healthz", timeout=10).status_code == 200
    finally:
        for s in [*silent, *partial, kept]:
            s.close()


def test_a_request_head_over_the_limit_gets_431_whether_it_comes_whole_or_in_pieces(guarded):
    """GAC_MAX_HEADER_BYTES (64 KiB) holds for a head that arrives in one read as for one dribbled in: a 100 KB head
    in one send was served before."""
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    whole, pieces = _connect(guarded), _connect(guarded)
    try:
        whole.sendall(big)
        assert _read_status(whole) == 431
        for at in range(0, len(big), 8192):
            if _send_some(pieces, big[at : at + 8192]) < min(8192, len(big) - at):
                break  # refused and closed midway
        pieces.setblocking(True)
        assert _read_status(pieces) == 431
        small = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Small: " + b"a" * 30_000 + b"\r\n\r\n"
        ok = _connect(guarded)
        ok.sendall(small)
        assert _read_status(ok) == 200
        ok.close()
    finally:
        whole.close()
        pieces.close()


def test_the_head_is_counted_to_its_end_when_the_end_is_split_between_reads():
    """A head whose blank line is split between two reads ends in the second: the body after it is not head (it was
    counted as head, and an 80 KB upload split there read 431)."""
    from gac.service.server import head_part

    head, body = b"POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Length: 80000\r\n\r\n", b"x" * 80_000
    request = head + body
    for split in range(1, len(head) + 5):
        first, tail = head_part(b"", request[:split])
        # Once the head is whole, what follows is the request's (the server counts no more): the second read only before.
        second = head_part(tail, request[split:])[0] if split < len(head) else 0
        assert first + second == len(head), split
    assert head_part(b"", b"GET / HTTP/1.1\r\nHost: x\r\n") == (len(b"GET / HTTP/1.1\r\nHost: x\r\n"), b"x\r\n")


def test_idle_connections_cannot_crowd_out_a_working_client(guarded):
    """Past GAC_MAX_CONNECTIONS (32) held idle, a new client still gets served: the longest-idle goes."""
    idle = [_connect(guarded) for _ in range(80)]
    try:
        for _ in range(5):
            assert httpx.get(f"{guarded.url}/healthz", timeout=10).status_code == 200
        _wait("idle connections past the cap to be closed", lambda: sum(_closed_by_server(s) for s in idle) >= 80 - 32)
    finally:
        for s in idle:
            s.close()


def test_an_authenticated_body_that_never_finishes_gets_408(guarded):
    s = _connect(guarded)
    try:
        s.sendall(
            (
                f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {guarded.ingest_token}\r\n"
                'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"schema": '
            ).encode()
        )
        assert _read_status(s) == 408
        _wait("the connection to be closed after the 408", lambda: _closed_by_server(s))
    finally:
        s.close()


def test_a_bad_token_flood_is_rate_limited_and_logged_once(guarded):
    bad = "gac_" + "A" * 32 + "AAAAAA"  # well-formed in shape, wrong checksum
    with httpx.Client(base_url=guarded.url, timeout=10) as client:
        statuses = [client.post("/v1/batches", json={}, headers=f.auth(bad)).status_code for _ in range(40)]
        limited = client.post("/v1/batches", json={}, headers=f.auth(guarded.ingest_token))
    assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1  # the whole client waits
    log = guarded.log_path.read_text()
    assert log.count("authentication failed") == 1, log[-3000:]
    assert "401 Unauthorized" not in log and "429 Too Many Requests" not in log  # no access-log line per refusal


def test_metrics_are_the_sum_over_workers(database, tmp_path):
    from tests.fixtures.database import _truncate

    svc = _service(database, tmp_path, workers=2)
    svc.start(timeout=90)  # two workers import the service on a 2-core machine
    try:
        rows = 0
        for i in range(24):  # each on a fresh connection: the two workers share them out
            b = f.batch(rows=5, start=1 + 5 * i)
            r = httpx.post(f"{svc.url}/v1/batches", json=f.body(b), headers=f.auth(svc.ingest_token), timeout=30)
            assert r.status_code == 201
            rows += 5
        scraped = set()
        for _ in range(12):
            text = httpx.get(f"{svc.url}/metrics", timeout=10).text
            found = re.search(r'^gac_ingest_rows_total\{result="inserted"\} ([0-9.e+]+)$', text, re.M)
            assert found, text[:2000]
            scraped.add(float(found.group(1)))
        assert scraped == {rows}
    finally:
        svc.stop()
        _truncate(database.url)


def test_the_version_poller_logs_an_outage_once_and_its_end_once(tmp_path, caplog, monkeypatch):
    """Polling every 30 ms through a Postgres stop and start (a throwaway cluster): one line when
    the database goes, one when it is back, no traceback, however many polls fail between."""
    import asyncio
    import contextlib
    import logging
    import threading

    from sqlalchemy import event, text

    from gac.service.cache import ResponseCache
    from gac.service.curves.versions import confirm_forever
    from gac.service.db import make_engine, upgrade
    from gac.service.ingest.service import LocalDatabase
    from tests.service.test_outage import Cluster

    cluster = Cluster()
    cluster.init()
    cluster.start()
    engine = make_engine(cluster.url)
    loop = asyncio.new_event_loop()
    try:
        upgrade(cluster.url)
        monkeypatch.setenv("GAC_SECRET_KEY", SECRET)
        with LocalDatabase(cluster.url) as db:
            db.ingest(f.batch(rows=1))
        with engine.connect() as conn:
            curve_id, version = conn.execute(text("SELECT id, version FROM curves")).one()
        cache = ResponseCache(60.0, 1 << 20)
        cache.put(("curve", curve_id), version, b"{}", time.monotonic())
        connects = []
        event.listen(engine, "do_connect", lambda *args: connects.append(1))
        caplog.set_level(logging.INFO, logger="gac.service.curves.versions")
        task = loop.create_task(confirm_forever(cache, engine, 0.09))

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):  # how the test ends it
                loop.run_until_complete(task)

        runner = threading.Thread(target=run)
        runner.start()
        try:
            _wait("a poll while the database is up", lambda: cache.polls >= 2)
            cluster.stop()
            seen = len(connects)
            _wait("ten failed polls", lambda: len(connects) >= seen + 10)
            cluster.start()
            polls = cache.polls
            _wait("a poll after the database is back", lambda: cache.polls > polls)
        finally:
            loop.call_soon_threadsafe(task.cancel)
            runner.join(30)
        lines = [r for r in caplog.records if r.name == "gac.service.curves.versions"]
        assert [r.getMessage().split(" (")[0].split(" after")[0] for r in lines] == [
            "cannot confirm cached curve versions",
            "confirming cached curve versions again",
        ], [r.getMessage() for r in lines]
        assert all(r.exc_info is None for r in lines)
    finally:
        loop.close()
        engine.dispose()
        cluster.remove()
