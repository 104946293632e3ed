"""Alembic owns the schema: one head, upgrade from empty, down and up again, models == migrations."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from gac.service.db import alembic_config, make_engine, make_sessionmaker, schema_status, upgrade
from gac.service.models import Base
from tests.fixtures.database import BACKENDS

backends = pytest.mark.parametrize("empty_database", BACKENDS, indirect=True)


def test_single_head():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


@backends
def test_upgrade_from_empty_creates_every_table(empty_database):
    engine = make_engine(empty_database.url)
    assert not schema_status(engine).up_to_date
    upgrade(empty_database.url)
    assert schema_status(engine).up_to_date
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()


@backends
def test_downgrade_to_base_and_upgrade_again(empty_database):
    cfg = alembic_config(empty_database.url)
    script = ScriptDirectory.from_config(cfg)
    revisions = [r.revision for r in script.walk_revisions()]
    upgrade(empty_database.url)
    # Step down one revision at a time, then all the way up: every downgrade must work.
    for _ in revisions:
        command.downgrade(cfg, "-1")
    engine = make_engine(empty_database.url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade(empty_database.url)
    assert schema_status(engine).up_to_date
    engine.dispose()


@backends
def test_models_match_migrations(empty_database):
    upgrade(empty_database.url)
    engine = make_engine(empty_database.url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"


@backends
def test_upgrade_keeps_stored_measurements(empty_database):
    """0004 rebuilds measurements on SQLite (batch mode): every stored row must come through."""
    from gac.service.ingest.incoming import Incoming
    from gac.service.ingest.service import ingest_batch
    from tests import factories as f

    upgrade(empty_database.url, "0003")
    engine = make_engine(empty_database.url)
    session = make_sessionmaker(engine)()
    for start in (1, 41):
        ingest_batch(session, Incoming.from_rows(f.batch(rows=40, start=start)), token_id=None, max_rows=1000)
    query = text("SELECT count(*), sum(x), count(DISTINCT curve_id), sum(median_us) FROM measurements")
    before = session.execute(query).one()
    session.close()
    upgrade(empty_database.url)
    with engine.connect() as conn:
        assert conn.execute(query).one() == before
        assert before[0] == 80
    assert schema_status(engine).up_to_date
    engine.dispose()
