"""Query parameters as declared: one the route does not take is refused, not ignored, and a scalar
given twice is refused, not silently the last one.

`/v1/platforms?kind=gpu` (the parameter is device_kind) would list every platform, as if the filter
held. Starlette keeps every value of a repeated parameter and FastAPI reads the last for a scalar, so
`?platform=a&platform=b` would answer for b alone. A parameter typed as a list (`/v1/jobs?status=`)
takes them all."""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union, get_args, get_origin

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

_MANY = (list, tuple, set, frozenset)


def query_as_declared(request: Request) -> None:
    """A dependency of every API route: 422 naming each query parameter the route does not take, and
    each scalar one given more than once. Pages and health checks (outside /v1) take any: a link's
    tracking suffix or a monitor's cache-buster must not break them."""
    route = request.scope.get("route")
    if not request.query_params or not isinstance(route, APIRoute) or not route.path.startswith("/v1/"):
        return
    takes = {param.alias: _takes_many(param.field_info.annotation) for param in _query_params(route.dependant)}
    if errors := query_errors(request.query_params.multi_items(), takes):
        raise RequestValidationError(errors)


def query_errors(items: Iterable[tuple[str, str]], takes: Mapping[str, bool]) -> list[dict[str, Any]]:
    """Pydantic-style errors (loc ("query", name)) for a query's (name, value) pairs: each name not in
    `takes` (name -> whether it takes several values), and each one-value name given more than once."""
    pairs = list(items)
    counts = Counter(key for key, _ in pairs)
    known = ", ".join(sorted(takes)) or "none"
    errors: list[dict[str, Any]] = [
        {"type": "unknown", "loc": ("query", key), "msg": f"this path takes no such parameter (it takes: {known})", "input": None}
        for key in counts
        if key not in takes
    ]
    errors += [
        {
            "type": "repeated",
            "loc": ("query", key),
            "msg": f"given {n} times; this parameter takes one value",
            "input": [v for k, v in pairs if k == key],
        }
        for key, n in counts.items()
        if n > 1 and key in takes and not takes[key]
    ]
    return errors


def _query_params(dependant: Dependant) -> Iterator[Any]:
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_params(sub)


def _takes_many(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_takes_many(arg) for arg in get_args(annotation))
    return origin in _MANY or annotation in _MANY
