"""Shared fixtures: a fresh database per backend (SQLite file and the real Postgres),
the app over it, tokens, and the real service under uvicorn.

GAC_TEST_BACKENDS=sqlite (or postgres) narrows the run; the default is both.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

PG_ADMIN = os.environ.get("GAC_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = [b for b in os.environ.get("GAC_TEST_BACKENDS", "sqlite,postgres").split(",") if b]
SECRET = "test-secret-key"


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql)


@dataclass
class FreshDatabase:
    """An empty database made for one fixture and dropped after it."""

    backend: str
    url: str
    name: str = ""

    def drop(self) -> None:
        if self.backend == "postgres":
            _pg_admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def make_database(backend: str, tmp: Path) -> FreshDatabase:
    if backend == "sqlite":
        return FreshDatabase("sqlite", f"sqlite:///{tmp / f'gac-{uuid.uuid4().hex[:8]}.db'}")
    name = f"gac_test_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    host = PG_ADMIN.split("://", 1)[1].rsplit("/", 1)[0]
    return FreshDatabase("postgres", f"postgresql+psycopg://{host}/{name}", name)


@pytest.fixture
def empty_database(request, tmp_path) -> Iterator[FreshDatabase]:  # type: ignore[no-untyped-def]
    """A brand-new, unmigrated database (parametrize indirectly with the backend name)."""
    db = make_database(getattr(request, "param", "sqlite"), tmp_path)
    yield db
    db.drop()


@pytest.fixture(scope="session", params=BACKENDS)
def database(request, tmp_path_factory) -> Iterator[FreshDatabase]:  # type: ignore[no-untyped-def]
    """One migrated database per backend for the whole run; tests clean up after themselves."""
    from service.db import upgrade

    db = make_database(request.param, tmp_path_factory.mktemp("db"))
    upgrade(db.url)
    yield db
    db.drop()


@pytest.fixture
def settings(database, tmp_path):  # type: ignore[no-untyped-def]
    from service.settings import Settings

    return Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path, auto_migrate=False)


def _truncate(url: str) -> None:
    from sqlalchemy import text

    from service.db import make_engine
    from service.ingest.known import KNOWN
    from service.models import Base

    KNOWN.clear()  # the ids it remembers are about to vanish
    engine = make_engine(url)
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for name in tables:
                conn.execute(text(f"DELETE FROM {name}"))
    engine.dispose()


@pytest.fixture
def app(settings):  # type: ignore[no-untyped-def]
    from service.app import create_app

    application = create_app(settings)
    yield application
    application.state.engine.dispose()
    _truncate(settings.url)


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


@pytest.fixture
def session(app):  # type: ignore[no-untyped-def]
    with app.state.sessionmaker() as s:
        yield s


def make_token(settings, scope: str, name: str | None = None) -> str:  # type: ignore[no-untyped-def]
    from service.auth.tokens import Scope, create_token
    from service.db import make_engine, make_sessionmaker

    engine = make_engine(settings.url)
    with make_sessionmaker(engine)() as s:
        _, plain = create_token(s, settings.token_key, name or f"{scope}-{uuid.uuid4().hex[:8]}", Scope(scope))
    engine.dispose()
    return plain


@pytest.fixture
def ingest_token(app, settings) -> str:  # type: ignore[no-untyped-def]
    return make_token(settings, "ingest")


@pytest.fixture
def admin_token(app, settings) -> str:  # type: ignore[no-untyped-def]
    return make_token(settings, "admin")


@pytest.fixture
def read_token(app, settings) -> str:  # type: ignore[no-untyped-def]
    return make_token(settings, "read")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveService:
    """The real service under uvicorn in its own process, on a free port of loopback."""

    db_url: str
    data_dir: Path
    port: int = field(default_factory=free_port)
    ingest_token: str = ""
    admin_token: str = ""
    read_token: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: int = 1
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        env = os.environ | {
            "GAC_DATABASE_URL": self.db_url,
            "GAC_SECRET_KEY": SECRET,
            "GAC_DATA_DIR": str(self.data_dir),
        } | self.extra_env
        self.log_path = self.data_dir / f"uvicorn-{self.port}.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", "--workers", str(self.workers)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"service did not become ready in {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def live_service(database, tmp_path) -> Iterator[LiveService]:  # type: ignore[no-untyped-def]
    """The real service over this backend's database, with ingest/admin/read tokens ready."""
    from service.settings import Settings

    settings = Settings(database_url=database.url, secret_key=SECRET, data_dir=tmp_path)
    service = LiveService(db_url=database.url, data_dir=tmp_path)
    service.ingest_token = make_token(settings, "ingest")
    service.admin_token = make_token(settings, "admin")
    service.read_token = make_token(settings, "read")
    service.start()
    yield service
    service.stop()
    _truncate(database.url)
