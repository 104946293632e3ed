"""Response shapes shared by several domains."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict

from gac.contracts.measurements import PRINTABLE, SHAPE_FIELD_NAMES

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a listing."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    items: list[T]
    """This page's items."""
    total: int
    """Items the listing holds over all pages."""
    next_cursor: str | None = None
    """Pass back as ?cursor= for the next page; null on the last page."""


# Bounds on every integer that reaches SQL: the databases' INTEGER columns stop at 2**31 - 1.
MAX_ID = 2_147_483_647
CurveId = Annotated[int, Path(ge=1, le=MAX_ID, description="the curve's id")]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="the job's id")]
Offset = Annotated[int, Query(ge=0, le=MAX_ID, description="next_cursor of the previous page")]
AfterId = Annotated[int, Query(ge=0, le=MAX_ID, description="next_cursor of the previous page")]
AfterBigId = Annotated[int, Query(ge=0, le=2**62, description="next_cursor of the previous page")]  # measurements

# Text in a URL is anything but NUL, which is refused in any URL before routing (no database stores it).
NO_NUL = PRINTABLE
PlatformRef = Annotated[str, Path(pattern=NO_NUL, description="platform id, fingerprint or unique fingerprint prefix")]

# A curve's natural key in a query: the swept axis, and the other shape fields as name=value pairs.
_NAME = f"(?:{'|'.join(SHAPE_FIELD_NAMES)})"
# The names any op has (which fit the op is the service's check, after the platform's: 404 first).
Axis = Annotated[
    str,
    Query(max_length=32, json_schema_extra={"enum": list(SHAPE_FIELD_NAMES)}, description="the swept shape field, e.g. n"),
]
# As a filter: one of those names (a misspelt axis is named, not answered with an empty list).
AxisFilter = Annotated[
    str | None,
    Query(max_length=32, pattern=f"^{_NAME}$", description="only curves swept along this shape field, e.g. n"),
]
FixedShape = Annotated[
    str,
    Query(max_length=200, pattern=f"^{_NAME}=[0-9]+(?:,{_NAME}=[0-9]+)*$", description="the other shape fields, e.g. k=128,m=2048"),
]
