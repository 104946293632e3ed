"""INSERT ... ON CONFLICT DO NOTHING for the dialect in use (Postgres and SQLite both have it)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import FromClause, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignoring_conflicts(session: Session, table: FromClause, conflict_columns: list[str]) -> postgresql.Insert | sqlite.Insert:
    """table: a model's __table__ (declared as a FromClause, a Table at run time)."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    return insert(cast(Table, table)).on_conflict_do_nothing(index_elements=conflict_columns)
