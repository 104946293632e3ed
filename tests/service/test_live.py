"""The real service under uvicorn, many clients at once over real HTTP."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests import factories as f

pytestmark = pytest.mark.slow


def test_concurrent_batches_store_every_row_exactly_once(live_service):
    plat = f.platform(device_name="Concurrency CPU")
    batches = [f.batch(rows=150, start=1 + 150 * i, plat=plat) for i in range(16)]
    headers = f.auth(live_service.ingest_token)

    def send(b):  # type: ignore[no-untyped-def]
        with httpx.Client(base_url=live_service.url, timeout=60) as c:
            r = c.post("/v1/batches", json=f.body(b), headers=headers)
            assert r.status_code in (200, 201), r.text
            return r.json()

    # Every batch twice, interleaved across 8 threads: a client retrying while its first try is in flight.
    with ThreadPoolExecutor(max_workers=8) as pool:
        receipts = list(pool.map(send, batches + batches[::-1]))

    inserted = sum(r["inserted"] for r in receipts)
    assert inserted == 16 * 150
    assert sum(r["replay"] for r in receipts) == 16
    page = httpx.get(f"{live_service.url}/v1/measurements", params={"platform": plat.fingerprint(), "limit": 1}).json()
    assert page["total"] == 16 * 150
    platforms = httpx.get(f"{live_service.url}/v1/platforms").json()
    assert platforms["total"] == 1 and platforms["items"][0]["curves"] == 1


def test_head_then_get_on_one_connection(live_service):
    """Under uvicorn, HEAD answers the GET's headers and no body, and the connection stays good for
    the next request (pipelined: the GET's answer must follow the HEAD's at once)."""
    with socket.create_connection(("127.0.0.1", live_service.port), timeout=10) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 or not data.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
    head, get = data.split(b"HTTP/1.1 200")[1:]
    length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    assert head.endswith(b"\r\n\r\n") and length > 0  # headers only, describing the GET's body
    assert len(get.split(b"\r\n\r\n", 1)[1]) == length
    assert b"Exception in ASGI application" not in live_service.log_path.read_bytes()  # type: ignore[union-attr]


def test_service_refuses_to_start_on_an_out_of_date_postgres_schema(tmp_path):
    from tests.fixtures.database import BACKENDS, make_database

    if "postgres" not in BACKENDS:
        pytest.skip("postgres backend not selected")
    db = make_database("postgres", tmp_path)
    try:
        env = os.environ | {"GAC_DATABASE_URL": db.url, "GAC_SECRET_KEY": "k", "GAC_DATA_DIR": str(tmp_path)}
        with socket.socket() as s:  # a port it could listen on: the schema is what refuses
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        out = subprocess.run([sys.executable, "-m", "gac", "serve", "--port", port], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1
        assert "gac db upgrade" in out.stderr
        up = subprocess.run([sys.executable, "-m", "gac", "db", "upgrade"], env=env, capture_output=True, text=True, timeout=60)
        assert up.returncode == 0, up.stderr
        cur = subprocess.run([sys.executable, "-m", "gac", "db", "current"], env=env, capture_output=True, text=True, timeout=60)
        assert cur.returncode == 0 and "(up to date)" in cur.stdout, cur.stdout
    finally:
        db.drop()


def test_embedded_sqlite_migrates_itself_on_first_start(tmp_path):
    from tests.fixtures.live_service import LiveService

    service = LiveService(db_url=f"sqlite:///{tmp_path / 'fresh.db'}", data_dir=tmp_path)
    service.start()
    try:
        assert httpx.get(f"{service.url}/readyz").json()["status"] == "ready"
    finally:
        service.stop()


def test_out_of_date_schema_fails_the_app_start(database, tmp_path):  # type: ignore[no-untyped-def]
    """The check lives in the app itself, so a server started any other way refuses too."""
    from fastapi.testclient import TestClient

    from gac.service.app import create_app
    from gac.service.settings import Settings
    from gac.service.startup import SchemaOutOfDate
    from tests.fixtures.database import make_database

    db = make_database(database.backend, tmp_path)
    try:
        app = create_app(Settings(database_url=db.url, secret_key="k", data_dir=tmp_path, auto_migrate=False))
        with pytest.raises(SchemaOutOfDate, match="gac db upgrade"):
            with TestClient(app):
                pass
        app.state.engine.dispose()
    finally:
        db.drop()
