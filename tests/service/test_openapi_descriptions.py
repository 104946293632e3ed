"""The OpenAPI document (/docs, /openapi.json) describes everything a client reads in it: every
property of every schema, every parameter and every operation.

The models' descriptions are their fields' docstrings (use_attribute_docstrings), the parameters'
their Query()/Path() description, an operation's its endpoint's docstring."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    from gac.service.app import create_app
    from gac.service.settings import Settings

    tmp = tmp_path_factory.mktemp("openapi-descriptions")
    return create_app(Settings(database_url=f"sqlite:///{tmp / 'gac.db'}", data_dir=tmp)).openapi()


def _described(node: dict) -> bool:
    return bool(str(node.get("description") or "").strip())


def undescribed(doc: dict) -> list[str]:
    """What the document leaves without a description: schema properties (Schema.property), parameters
    (METHOD path: in name) and operations (METHOD path)."""
    missing = [
        f"{name}.{prop}"
        for name, schema in doc.get("components", {}).get("schemas", {}).items()
        for prop, node in (schema.get("properties") or {}).items()
        if not _described(node)
    ]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            if not _described(op):
                missing.append(where)
            missing += [f"{where}: {p['in']} {p['name']}" for p in op.get("parameters", []) if not _described(p)]
    return missing


def test_everything_in_the_document_is_described(doc):
    missing = undescribed(doc)
    assert not missing, f"{len(missing)} without a description in the OpenAPI document: {missing}"


def test_the_check_finds_what_lacks_a_description():
    """The check above can fail: a property, a parameter and an operation without one are each named."""
    doc = {
        "components": {"schemas": {"Thing": {"properties": {"ok": {"description": "said"}, "bare": {"type": "integer"}}}}},
        "paths": {
            "/v1/things/{id}": {
                "get": {
                    "description": "One thing.",
                    "parameters": [{"name": "id", "in": "path", "description": "its id"}, {"name": "limit", "in": "query"}],
                },
                "delete": {"description": " "},
            }
        },
    }
    assert undescribed(doc) == ["Thing.bare", "GET /v1/things/{id}: query limit", "DELETE /v1/things/{id}"]


def test_a_field_docstring_is_its_description():
    """The contracts' models take their fields' docstrings as descriptions, subclasses and models that
    set a model_config of their own included (pydantic merges it with the base's)."""
    from gac.contracts.alignment import Candidate
    from gac.contracts.manifest import Budget, HeadDimWeight
    from gac.contracts.measurements import Batch, Measurement

    assert Candidate.model_config.get("use_attribute_docstrings")  # overrides _Model's model_config
    assert Candidate.model_fields["source"].description
    assert Measurement.model_fields["median_us"].description == "The median latency of one kernel call, in µs."
    assert Batch.model_fields["run"].description and Budget.model_fields["ratio"].description
    # A description the field's type carries (the manifest's limits) is kept over a docstring.
    assert "at most" in str(HeadDimWeight.model_fields["hidden"].description)
    assert HeadDimWeight.model_fields["name"].description  # inherited from _WeightBase
