"""Alembic environment: the URL comes from the caller (gac.service.db.alembic_config) or GAC settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from gac.service.models import Base, UtcDateTime

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url")
    if url:
        return url
    from gac.service.settings import Settings

    return Settings().url


def render_item(type_: str, obj, autogen_context):  # type: ignore[no-untyped-def]
    """Migrations must not import the app: render our column types as plain SQLAlchemy ones."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying
            compare_type=True,
            render_item=render_item,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
