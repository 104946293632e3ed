"""The OpenAPI document: every route in the README's HTTP table, one error body for every error
status, and the validators' limits stated where a client reads them.

(That the service answers as the document says is fuzzed in test_fuzz.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# Routes the service serves outside the document (include_in_schema=False) that the table names.
UNDOCUMENTED = {("GET", "/metrics")}


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    from gac.service.app import create_app
    from gac.service.settings import Settings

    tmp = tmp_path_factory.mktemp("openapi")
    return create_app(Settings(database_url=f"sqlite:///{tmp / 'gac.db'}", data_dir=tmp)).openapi()


def _normalized(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])


def readme_routes(text: str) -> set[tuple[str, str]]:
    """(method, path) of every route the README's HTTP table names.

    A cell's code spans are routes: `GET /v1/jobs` names a method, and the spans after it
    without one (`/v1/jobs/{id}`) share it; `[/{id}]` is an optional part (both are routes);
    parameter names and query strings are left out of the comparison."""
    section = text.split("## HTTP API", 1)[1].split("\n\n", 2)[1]  # the table, after the heading line
    routes: set[tuple[str, str]] = set()
    for row in section.splitlines():
        if not row.startswith("|"):
            continue
        methods: list[str] = []
        for span in re.findall(r"`([^`]+)`", row.split("|")[1]):
            match = re.fullmatch(rf"((?:{'|'.join(METHODS)})(?:\s*,\s*(?:{'|'.join(METHODS)}))*)\s+(/\S*)", span)
            if match:
                methods, path = re.split(r"\s*,\s*", match.group(1)), match.group(2)
            elif span.startswith("/"):
                path = span
            else:
                continue
            optional = re.search(r"\[([^\]]*)\]", path)
            paths = [path.replace(optional.group(0), ""), path.replace(optional.group(0), optional.group(1))] if optional else [path]
            routes |= {(method, _normalized(p)) for method in methods for p in paths}
    return routes


def document_routes(doc: dict) -> set[tuple[str, str]]:
    return {(method.upper(), _normalized(path)) for path, ops in doc["paths"].items() for method in ops}


def test_the_readme_table_is_read_as_meant():
    table = (
        "### HTTP API\n\n| | |\n|---|---|\n"
        "| `POST /v1/align`, `GET /v1/alignments[/{id}]` | x |\n"
        "| `GET /v1/jobs`, `/v1/jobs/{id}`, `DELETE /v1/jobs/{id}` (admin) | `not /a/route` |\n"
        "| `GET /v1/compare?a=&b=` | y |\n\nafter\n\n| `PUT /elsewhere` | z |\n"
    )
    assert readme_routes(table) == {
        ("POST", "/v1/align"),
        ("GET", "/v1/alignments"),
        ("GET", "/v1/alignments/{}"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/jobs/{}"),
        ("DELETE", "/v1/jobs/{}"),
        ("GET", "/v1/compare"),
    }


def test_the_readme_http_table_lists_every_route(doc):
    listed = readme_routes(README.read_text())
    missing = sorted(document_routes(doc) - listed)
    assert not missing, f"routes of the OpenAPI document missing from README.md's HTTP table: {missing}"
    unknown = sorted(listed - document_routes(doc) - UNDOCUMENTED)
    assert not unknown, f"README.md's HTTP table names routes the service does not have: {unknown}"


def test_every_error_status_is_declared_with_the_one_error_body(doc):
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's 422 shape is not ours
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            statuses = {int(code) for code in op["responses"]}
            for code in statuses - set(range(400)):
                schema = op["responses"][str(code)]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, where
            assert 400 in statuses, where  # a NUL in any URL is refused before routing
            if op.get("parameters") or op.get("requestBody"):
                assert 422 in statuses, where
            if op.get("security"):
                assert 401 in statuses, where
            if method != "get":
                assert 413 in statuses, where  # every body is limited
            if "{" in path:
                assert 404 in statuses, where


def test_the_error_body_is_the_one_the_service_sends(doc):
    from gac.service.errors import ErrorBody

    schema = doc["components"]["schemas"]["ErrorBody"]
    assert schema["required"] == ["error", "detail"]
    ErrorBody.model_validate(
        {
            "error": "ValidationError",
            "detail": [{"field": "query.limit", "message": "too big", "type": "less_than_equal"}],
        }
    )
    ErrorBody.model_validate({"error": "Unprocessable", "detail": [{"field": "body.budget", "message": "below the smallest feasible"}]})
    ErrorBody.model_validate({"error": "NotFound", "detail": "no curve 7"})


def _schema(doc: dict, name: str) -> dict:
    return doc["components"]["schemas"][name]


def test_the_validators_limits_are_in_the_schema(doc):
    from gac.contracts.measurements import SHAPE_FIELD_NAMES

    names = list(SHAPE_FIELD_NAMES)
    measurement = _schema(doc, "Measurement")["properties"]
    assert measurement["sweep_axis"]["enum"] == names  # an empty or unknown axis is refused
    assert measurement["shape"]["propertyNames"]["enum"] == names and measurement["shape"]["minProperties"] == 1
    assert measurement["median_us"]["exclusiveMinimum"] == 0 and "maximum" in measurement["median_us"]
    assert _schema(doc, "MeasurementColumns")["properties"]["sweep_axis"]["items"]["enum"] == names

    sweep = _schema(doc, "Sweep")["properties"]
    values = next(branch for branch in sweep["values"]["oneOf"] if branch.get("type") == "array")
    assert values["minItems"] == 1 and values["uniqueItems"] and values["items"]["minimum"] == 1
    assert sweep["axis"]["enum"] == names and sweep["fixed"]["propertyNames"]["enum"] == names
    assert sweep["dtypes"]["uniqueItems"]

    ops = {branch["properties"]["op"]["const"]: branch["properties"] for branch in _schema(doc, "Measurement")["oneOf"]}
    assert ops["gemv"]["shape"]["required"] == ["n", "k"] and ops["gemv"]["sweep_axis"]["enum"] == ["n", "k"]  # per op
    sweeps = {(b["properties"]["op"]["const"], b["properties"]["axis"]["const"]): b["properties"] for b in _schema(doc, "Sweep")["oneOf"]}
    assert sweeps[("gemm", "n")]["fixed"]["required"] == ["m", "k"] and len(sweeps) == 16  # per op and axis

    budget = _schema(doc, "Budget")
    assert [branch["required"] for branch in budget["oneOf"]] == [["ratio"], ["params"]]  # exactly one of them
    token_weights = _schema(doc, "Workload")["properties"]["token_weights"]
    assert token_weights["contains"] == {"exclusiveMinimum": 0}  # not all zero

    for path in ("/v1/compare", "/v1/platforms/{ref}/curve"):
        params = {p["name"]: p["schema"] for p in doc["paths"][path]["get"]["parameters"]}
        assert params["axis"]["enum"] == names
        assert re.fullmatch(params["fixed"]["pattern"], "k=128,m=2048") and not re.fullmatch(params["fixed"]["pattern"], "")


def test_versioned_reads_declare_their_etag(doc):
    for path in ("/v1/curves/{curve_id}", "/v1/curves/{curve_id}/cliffs", "/v1/platforms/{ref}/curve"):
        responses = doc["paths"][path]["get"]["responses"]
        assert responses["200"]["headers"]["ETag"]["required"] and "304" in responses
