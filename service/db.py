"""Engine, sessions and schema status (Alembic is the only thing that changes the schema)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

import gac.migrations

if TYPE_CHECKING:
    from gac.service.settings import Settings


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL opens, as SQLAlchemy reads it (%20 decoded); None for another database or one in memory."""
    path = make_url(url).database if url.startswith("sqlite") else None
    return Path(path).absolute() if path and path != ":memory:" else None


def _sqlite_folder(url: str, create: bool) -> None:
    """A SQLite file's folder: made when it is ours (the embedded default's data directory), else it must
    exist, as SQLite itself makes the file but not its folder (a mistyped --db path is said, not made)."""
    if (path := sqlite_file(url)) is None:
        return
    folder = path.parent
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    elif folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder")
    elif not folder.is_dir():
        raise FileNotFoundError(f"no folder {folder} (SQLite makes the database file, not its folder)")


def engine_for(settings: Settings) -> Engine:
    """The engine of a process's settings: the embedded default's folder is made, a URL's must exist."""
    return make_engine(settings.url, create_folder=not settings.database_url)


def make_engine(url: str, create_folder: bool = False) -> Engine:
    _sqlite_folder(url, create_folder)
    if url.startswith("sqlite"):
        # The driver's own transaction handling is switched off so that we can
        # BEGIN IMMEDIATE for writes (see begin_write).
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:
            # A deferred transaction that reads and then writes fails at once
            # (SQLITE_BUSY) when another writer got there first; writers take
            # the lock up front and wait their turn instead.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("gac_write") else "BEGIN")

        return engine
    # UTC sessions: under another server time zone psycopg cannot read back the earliest
    # timestamps the contract accepts (0001-01-01T00:00:00Z is "too small" once shifted).
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"options": "-c timezone=UTC"})


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def begin_write(session: Session) -> None:
    """Start the session's next transaction as a writer (matters on SQLite only).

    Any open read transaction (the token lookup, say) is ended first: the
    write lock must be taken at BEGIN, not upgraded to later.
    """
    if session.in_transaction():
        session.commit()
    session.connection(execution_options={"gac_write": True})


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(gac.migrations.__file__).parent))
    cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    _sqlite_folder(url, create=False)  # engine_for made it where it is ours
    with _one_migration_at_a_time(url):
        command.upgrade(alembic_config(url), revision)


_MIGRATION_LOCK = 0x6761632D6D696772  # Postgres advisory lock key ("gac-migr"), any bigint no other tool takes


@contextmanager
def _one_migration_at_a_time(url: str) -> Iterator[None]:
    """Two upgrades at once (a service's workers migrating on start, two deploy jobs) would each create the same
    tables and one fail: the second waits for the first, then finds the schema current."""
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        with FileLock(f"{path}.migrate.lock") if path is not None else nullcontext():
            yield
        return
    engine = make_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK})
    finally:
        engine.dispose()


@dataclass(frozen=True)
class SchemaStatus:
    current: tuple[str, ...]
    expected: tuple[str, ...]
    unknown: tuple[str, ...] = ()  # revisions of current this version has no migration for: a newer GAC made them

    @property
    def up_to_date(self) -> bool:
        return set(self.current) == set(self.expected)

    def explain(self) -> str:
        have = ", ".join(self.current) or "empty"
        want = ", ".join(self.expected)
        if self.unknown:
            return (
                f"database schema is at {have}, newer than this version of GAC knows (it needs {want}): a newer GAC "
                "migrated it; run that version, or restore a backup taken before that upgrade"
            )
        return f"database schema is at {have}, this version of GAC needs {want}: run `gac db upgrade`"


def schema_status(engine: Engine) -> SchemaStatus:
    script = ScriptDirectory.from_config(alembic_config(str(engine.url)))
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_heads()
    known = {rev.revision for rev in script.walk_revisions()}
    return SchemaStatus(tuple(current), tuple(script.get_heads()), tuple(r for r in current if r not in known))


def ping(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
