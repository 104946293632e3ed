"""What the domains' repositories share: how many rows a query has, and one page of them, by
offset (any order) or by key (keyset: pages stay put while rows are inserted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

T = TypeVar("T")


@dataclass(frozen=True)
class Slice(Generic[T]):
    """One page of a query's rows; total: the whole query's count; more: rows follow this page."""

    rows: list[T]
    total: int
    more: bool


def count(session: Session, query: Select, key: InstrumentedAttribute[Any]) -> int:
    """How many rows the query selects, counted over its key column alone (a row can hold MBs of JSON)."""
    return session.scalar(select(func.count()).select_from(query.with_only_columns(key).subquery())) or 0


def _fetch(session: Session, query: Select) -> list[Any]:
    """The objects a query of one entity selects, the rows (tuples) of a query of several."""
    result = session.execute(query)
    return list(result.scalars() if len(query.column_descriptions) == 1 else result)


def offset_page(
    session: Session,
    query: Select,
    *,
    key: InstrumentedAttribute[Any],
    order_by: tuple[ColumnElement[Any], ...],
    offset: int,
    limit: int,
) -> Slice[Any]:
    """The rows from `offset` on, in `order_by`; key: the column to count on."""
    total = count(session, query, key)
    rows = _fetch(session, query.order_by(*order_by).offset(offset).limit(limit))
    return Slice(rows, total, offset + limit < total)


def keyset_page(session: Session, query: Select, *, key: InstrumentedAttribute[Any], after: int, limit: int) -> Slice[Any]:
    """The rows whose key is above `after`, in key order; one row more is read to know whether any follow."""
    total = count(session, query, key)
    rows = _fetch(session, query.where(key > after).order_by(key).limit(limit + 1))
    return Slice(rows[:limit], total, len(rows) > limit)
