"""Every refusal has the documented shape {"error", "detail"}, including the framework's own
(unknown routes, wrong methods, bodies it cannot parse), and its status is one the OpenAPI
document declares for that route."""

from __future__ import annotations

import re

import pytest

DEEP = "[" * 1000 + "]" * 1000  # parses nowhere: Python's JSON decoder stops at its recursion limit
PLAN = {"name": "tiny", "sweeps": [{"op": "gemm", "dtypes": ["bfloat16"], "axis": "n", "fixed": {"m": 64, "k": 64}, "values": [64, 72]}]}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def documented(client, response, method: str, path: str):  # type: ignore[no-untyped-def]
    """The response's body as an ErrorBody, after checking its status is declared for the route."""
    from gac.service.errors import ErrorBody

    assert response.headers["content-type"] == "application/json"
    body = ErrorBody.model_validate(response.json())
    for template, ops in client.app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}]*\}", "[^/]+", template), path.split("?")[0]) and method.lower() in ops:
            declared = ops[method.lower()]["responses"]
            assert str(response.status_code) in declared, f"{response.status_code} undeclared on {method} {template}"
    return body


@pytest.mark.parametrize("path", ["/v1/align", "/v1/jobs"])
def test_unparseable_body_is_a_documented_400(client, admin_token, path):
    r = client.post(path, content=DEEP, headers={"content-type": "application/json", **auth(admin_token)})
    assert r.status_code == 400
    body = documented(client, r, "POST", path)
    assert body.error == "BadRequest" and "nested too deeply" in body.detail


def test_unknown_route_and_wrong_method(client):
    r = client.get("/v1/no-such-thing")
    assert r.status_code == 404
    assert r.json() == {"error": "NotFound", "detail": "no such path: GET /v1/no-such-thing (the API's paths are listed at /docs)"}
    r = client.get("/v1/jobs/abc")  # a job's id is a number: no route takes this one
    assert r.status_code == 404 and "GET /v1/jobs/abc" in r.json()["detail"]
    r = client.delete("/v1/align")
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"
    documented(client, r, "DELETE", "/v1/align")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", "/v1/jobs", "GET, HEAD, POST"),  # two routes on one path: both methods (and HEAD with GET)
        ("PUT", "/v1/jobs/1", "GET, HEAD, DELETE"),
        ("GET", "/v1/jobs/claim", "POST"),  # not job "claim": that id is an integer
        ("OPTIONS", "/v1/align", "POST"),
    ],
)
def test_a_wrong_method_names_every_method_the_path_allows(client, method, path, allow):
    r = client.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allow
    assert r.json() == {"error": "MethodNotAllowed", "detail": "Method Not Allowed"}


@pytest.mark.parametrize("path", ["/", "/ui", "/healthz", "/v1/platforms", "/openapi.json", "/ui/static/app.js"])
def test_head_answers_as_get_without_the_body(client, path):
    get = client.get(path, follow_redirects=False)
    head = client.head(path, follow_redirects=False)
    assert head.status_code == get.status_code != 405
    assert head.content == b""
    for name in ("content-type", "content-length", "location"):
        assert head.headers.get(name) == get.headers.get(name), name


def test_head_is_counted_as_head_under_its_route(client):
    client.head("/healthz")
    assert 'gac_http_requests_total{method="HEAD",route="/healthz",status="200"}' in client.get("/metrics").text


def test_head_where_there_is_no_get_is_still_405(client):
    r = client.head("/v1/align")
    assert r.status_code == 405 and r.headers["allow"] == "POST" and r.content == b""


def test_each_refusal_is_documented(client, admin_token, ingest_token):
    cases = [
        (400, "GET", "/v1/platforms?name=a%00b", {}),
        (401, "GET", "/v1/auth/token", {}),
        (401, "POST", "/v1/jobs/claim", {"json": {}}),
        (403, "POST", "/v1/jobs", {"json": {"plan": PLAN}, "headers": auth(ingest_token)}),
        (404, "GET", "/v1/curves/999999", {}),
        (404, "GET", "/v1/platforms/no-such-platform/rules", {}),
        (404, "GET", "/v1/jobs/999999", {}),
        (422, "GET", "/v1/jobs?limit=0", {}),
        (422, "GET", "/v1/compare?a=x&b=y&op=gemm&dtype=float16&axis=&fixed=", {}),
        (
            422,
            "POST",
            "/v1/jobs",
            {
                "json": {"plan": {**PLAN, "sweeps": [{**PLAN["sweeps"][0], "values": []}]}},
                "headers": auth(admin_token),
            },
        ),
    ]
    for status, method, path, kwargs in cases:
        r = client.request(method, path, **kwargs)
        assert r.status_code == status, (method, path, r.text)
        body = documented(client, r, method, path)
        if status == 422:
            assert body.error == "ValidationError" and isinstance(body.detail, list) and body.detail[0].field
        if status == 401:
            assert r.headers["www-authenticate"] == "Bearer"

    job = client.post("/v1/jobs", json={"plan": PLAN}, headers=auth(admin_token)).json()
    assert client.delete(f"/v1/jobs/{job['id']}", headers=auth(admin_token)).status_code == 200
    r = client.delete(f"/v1/jobs/{job['id']}", headers=auth(admin_token))
    assert r.status_code == 409
    documented(client, r, "DELETE", f"/v1/jobs/{job['id']}")


@pytest.fixture
def small_bodies(settings):  # type: ignore[no-untyped-def]
    settings.max_body_bytes = 1024
    return settings


def test_an_oversized_body_is_a_documented_413(small_bodies, client, admin_token):
    r = client.post("/v1/jobs", content=b"x" * 2048, headers={"content-type": "application/json", **auth(admin_token)})
    assert r.status_code == 413
    assert documented(client, r, "POST", "/v1/jobs").error == "PayloadTooLarge"
