"""NUL is refused in every string field of every model a client sends (gac.contracts.text): the
JSON Schema of each request model is walked, and every string it admits must fail on a NUL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from gac.contracts.columns import ColumnBatch
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Batch
from gac.contracts.plans import SweepPlan


def _request_models() -> list[type[BaseModel]]:
    from gac.service.jobs import schemas

    return [
        Batch,
        ColumnBatch,
        SweepPlan,
        Manifest,
        schemas.JobCreate,
        schemas.ClaimRequest,
        schemas.HeartbeatRequest,
        schemas.CompleteRequest,
        schemas.FailRequest,
        schemas.ReleaseRequest,
    ]


def _strings(node: Any, path: str) -> Iterator[tuple[str, dict]]:
    """Every schema node that admits free text, with where it is."""
    if isinstance(node, dict):
        if node.get("type") == "string" and not {"enum", "const", "format"} & node.keys():
            yield path, node
        for key, value in node.items():
            yield from _strings(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}/{i}")


@pytest.mark.parametrize("model", _request_models(), ids=lambda m: m.__name__)
def test_every_text_field_refuses_nul(model):
    schema = model.model_json_schema()
    open_text = [
        path for path, node in _strings(schema, model.__name__) if "pattern" not in node or re.search(node["pattern"], "a\x00b") is not None
    ]
    assert not open_text, f"string fields that would take a NUL: {open_text}"


def test_the_walk_finds_text_fields():
    """The check above can fail: a model with a plain str is caught."""

    class Loose(BaseModel):
        note: str

    assert [path for path, _ in _strings(Loose.model_json_schema(), "Loose")] == ["Loose/properties/note"]
