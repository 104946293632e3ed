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
def test_upgrades_at_once_take_turns(empty_database):
    """A service's workers, or two deploy jobs, migrating one new database at once: each would create the same tables."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        for done in [pool.submit(upgrade, empty_database.url) for _ in range(3)]:
            done.result()  # raises what an upgrade raised
    engine = make_engine(empty_database.url)
    assert schema_status(engine).up_to_date
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


def _store_as_of_then(url: str, scratch_url: str, batches: list) -> None:
    """Store batches in a database at an older revision, as that revision's service stored them: ingested
    at head into a scratch database, then copied table by table, with only the columns the old schema has
    (a later migration's columns are nullable, and filled by it)."""
    from sqlalchemy import MetaData, insert, select

    from gac.service.ingest.incoming import Incoming
    from gac.service.ingest.service import ingest_batch

    upgrade(scratch_url)
    scratch = make_engine(scratch_url)
    with make_sessionmaker(scratch)() as session:
        for b in batches:
            ingest_batch(session, Incoming.from_rows(b), token_id=None, max_rows=1000)
    old = make_engine(url)
    then = MetaData()
    then.reflect(old)
    with scratch.connect() as source, old.begin() as target:
        for old_table in then.sorted_tables:  # parents first, by the old schema's foreign keys
            if old_table.name == "alembic_version":
                continue
            table = Base.metadata.tables[old_table.name]  # the models' types read and write the values
            columns = [table.c[c.name] for c in old_table.columns]
            rows = [dict(r._mapping) for r in source.execute(select(*columns))]
            if rows:
                target.execute(insert(table), rows)
    scratch.dispose()
    old.dispose()


@backends
def test_upgrade_keeps_stored_measurements(empty_database, tmp_path):
    """0004 rebuilds measurements on SQLite (batch mode): every stored row must come through."""
    from tests import factories as f

    upgrade(empty_database.url, "0003")
    _store_as_of_then(empty_database.url, f"sqlite:///{tmp_path / 'head.db'}", [f.batch(rows=40, start=s) for s in (1, 41)])
    engine = make_engine(empty_database.url)
    query = text("SELECT count(*), sum(x), count(DISTINCT curve_id), sum(median_us) FROM measurements")
    with engine.connect() as conn:
        before = conn.execute(query).one()
    upgrade(empty_database.url)
    with engine.connect() as conn:
        assert conn.execute(query).one() == before
        assert before[0] == 80
    assert schema_status(engine).up_to_date
    engine.dispose()


@backends
def test_batches_stored_before_they_named_their_agent_count_as_their_runs_agents(empty_database, tmp_path):
    from gac.service.platforms import repository as platforms
    from tests import factories as f

    upgrade(empty_database.url, "0010")
    batch = f.batch(rows=4)
    _store_as_of_then(empty_database.url, f"sqlite:///{tmp_path / 'head.db'}", [batch])
    upgrade(empty_database.url)
    engine = make_engine(empty_database.url)
    with make_sessionmaker(engine)() as session:
        (pid,) = session.execute(text("SELECT id FROM platforms")).scalars()
        assert session.execute(text("SELECT agent_id FROM batches")).scalars().all() == [None]
        assert platforms.counts(session, [pid])[pid][1:3] == (1, 1)  # one run, by one agent
        assert platforms.run_agents(session, pid) == {batch.run.id: [batch.run.agent]}
    engine.dispose()
