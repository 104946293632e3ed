"""Every refusal has the documented shape {"error", "detail"}, including the framework's own
(unknown routes, wrong methods, bodies it cannot parse)."""

from __future__ import annotations

import pytest

DEEP = "[" * 1000 + "]" * 1000  # parses nowhere: Python's JSON decoder stops at its recursion limit


@pytest.mark.parametrize("path", ["/v1/align", "/v1/jobs"])
def test_unparseable_body_is_a_documented_400(client, admin_token, path):
    r = client.post(path, content=DEEP, headers={"content-type": "application/json", "Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "BadRequest" and "nested too deeply" in body["detail"]


def test_unknown_route_and_wrong_method(client):
    r = client.get("/v1/no-such-thing")
    assert r.status_code == 404 and r.json() == {"error": "NotFound", "detail": "Not Found"}
    r = client.delete("/v1/align")
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"
