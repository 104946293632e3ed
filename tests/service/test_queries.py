"""Reads: platforms, measurements with filters and pagination, curves."""

from __future__ import annotations

import uuid

from tests import factories as f


def ingest(client, token, b):  # type: ignore[no-untyped-def]
    r = client.post("/v1/batches", json=f.body(b), headers=f.auth(token))
    assert r.status_code == 201, r.text
    return r.json()


def test_platform_by_id_fingerprint_and_prefix(client, ingest_token):
    b = f.batch(rows=3)
    pid = ingest(client, ingest_token, b)["platform_id"]
    fp = b.platform.fingerprint()
    for ref in (str(pid), fp, fp[:12], fp[:12].upper()):
        got = client.get(f"/v1/platforms/{ref}").json()
        assert got["id"] == pid and got["fingerprint"] == fp
        assert got["descriptor"] == b.platform.model_dump(mode="json")
    f.refused(client.get(f"/v1/platforms/{fp[:5]}"), 404)  # too short to be unambiguous
    # One fingerprint in 40 starts with 8 digits: that prefix names it, as no platform has that id.
    digits = next(p for i in range(10_000) if (p := f.platform(device_name=f"CPU {i}")).fingerprint()[:8].isdigit())
    other = ingest(client, ingest_token, f.batch(rows=1, plat=digits))["platform_id"]
    assert client.get(f"/v1/platforms/{digits.fingerprint()[:8]}").json()["id"] == other


def test_platform_filters_and_pages(client, ingest_token):
    for i in range(5):
        ingest(client, ingest_token, f.batch(rows=1, plat=f.platform(device_name=f"CPU model {i}")))
    a100 = f.platform(device_kind="cuda", device_name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    ingest(client, ingest_token, f.batch(rows=1, plat=a100))
    assert client.get("/v1/platforms", params={"device_kind": "cuda"}).json()["total"] == 1
    assert client.get("/v1/platforms", params={"name": "a100"}).json()["items"][0]["label"].startswith("NVIDIA A100")
    seen, cursor = [], 0
    while cursor is not None:
        page = client.get("/v1/platforms", params={"limit": 4, "cursor": cursor}).json()
        seen += [p["id"] for p in page["items"]]
        cursor = page["next_cursor"]
    assert len(seen) == 6 and len(set(seen)) == 6


def test_measurement_pages_cover_everything_exactly_once(client, ingest_token):
    b = f.batch(rows=37)
    ingest(client, ingest_token, b)
    ingest(client, ingest_token, f.batch(rows=5, plat=f.platform(device_name="Other")))
    seen, cursor = [], 0
    while cursor is not None:
        page = client.get("/v1/measurements", params={"platform": b.platform.fingerprint(), "limit": 10, "cursor": cursor}).json()
        assert page["total"] == 37
        seen += [item["uuid"] for item in page["items"]]
        cursor = page["next_cursor"]
    assert sorted(seen) == sorted(str(m.id) for m in b.measurements)


def test_measurement_filters(client, ingest_token):
    b = f.batch(rows=4)
    sdpa = b.model_copy(update={"id": uuid.uuid4(), "measurements": [f.measurement(n, op="sdpa") for n in (64, 72, 80)]})
    ingest(client, ingest_token, b)
    ingest(client, ingest_token, sdpa)
    assert client.get("/v1/measurements", params={"op": "sdpa"}).json()["total"] == 3
    assert client.get("/v1/measurements", params={"axis": "n"}).json()["total"] == 4
    assert client.get("/v1/measurements", params={"dtype": "float16"}).json()["total"] == 0
    assert client.get("/v1/measurements", params={"run": str(b.run.id)}).json()["total"] == 7


def test_curve_combines_repeated_points(client, ingest_token):
    plat = f.platform()
    first = f.batch(rows=1, plat=plat)
    first = first.model_copy(update={"measurements": [f.measurement(n, median=100.0 + n) for n in (64, 65, 66)]})
    second = f.batch(rows=1, plat=plat)
    second = second.model_copy(update={"measurements": [f.measurement(65, median=300.0), f.measurement(65, median=200.0)]})
    ingest(client, ingest_token, first)
    ingest(client, ingest_token, second)
    curves = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()
    assert len(curves) == 1
    c = curves[0]
    assert (c["op"], c["axis"], c["fixed"], c["points"], c["measurements"], c["x_min"], c["x_max"]) == (
        "gemm",
        "n",
        {"k": 256, "m": 128},
        3,
        5,
        64,
        66,
    )
    curve = client.get(
        f"/v1/platforms/{plat.fingerprint()}/curve", params={"op": "gemm", "dtype": "bfloat16", "axis": "n", "fixed": "m=128,k=256"}
    ).json()
    by_x = {p["x"]: p for p in curve["points"]}
    assert [p["x"] for p in curve["points"]] == [64, 65, 66]
    assert by_x[65]["measurements"] == 3 and by_x[65]["median_us"] == 200.0  # median of 165, 300, 200
    assert by_x[64]["median_us"] == 164.0 and by_x[64]["n"] == 20
    assert client.get(f"/v1/curves/{c['id']}").json() == curve


def test_missing_curve_is_404(client, ingest_token):
    b = f.batch(rows=2)
    ingest(client, ingest_token, b)
    query = {"op": "gemm", "dtype": "float32", "axis": "n", "fixed": "m=128,k=256"}
    r = client.get(f"/v1/platforms/{b.platform.fingerprint()}/curve", params=query)
    assert r.status_code == 404 and "float32" in r.json()["detail"]
    f.refused(client.get("/v1/curves/999999"), 404)


def test_health_and_metrics(client, ingest_token):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    ingest(client, ingest_token, f.batch(rows=3))
    text = client.get("/metrics").text
    assert 'gac_ingest_rows_total{result="inserted"}' in text
    assert 'route="/v1/batches"' in text
    assert client.get("/openapi.json").json()["paths"]["/v1/batches"]["post"]


def test_openapi_docs_page(client):
    assert client.get("/docs").status_code == 200


def test_a_service_without_plotly_starts_and_says_what_the_dashboard_lacks(client, monkeypatch):
    """plotly only ships the dashboard's script: the service does not import it (0.2 s of every start), and a service
    installed without it (a GPU box's carried wheels) serves the API and answers the script's path with a 404 naming it."""
    import subprocess
    import sys

    from gac.service.ui import endpoints

    code = "import sys, gac.service.app, gac.cli; sys.exit('plotly' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    endpoints._plotly.cache_clear()
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if not installed: find_spec finds nothing
    try:
        r = client.get("/ui/vendor/plotly.min.js")
        assert r.status_code == 404 and "plotly package is not installed" in r.text, r.text
        assert client.get("/healthz").status_code == 200
    finally:
        endpoints._plotly.cache_clear()


def test_plotly_is_served_gzipped_to_a_browser_and_whole_to_others(client):
    """The dashboard's largest file: a third of the bytes where the client takes gzip, the same script either way."""
    from gac.service.ui.endpoints import plotly_js_path

    raw = plotly_js_path().read_bytes()
    packed = client.get("/ui/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip, deflate, br"})
    assert packed.headers["content-encoding"] == "gzip" and packed.headers["vary"] == "Accept-Encoding"
    assert packed.content == raw and packed.num_bytes_downloaded < len(raw) / 2  # httpx inflates it
    for takes in ("*;q=0, gzip", "br, *"):
        assert client.get("/ui/vendor/plotly.min.js", headers={"Accept-Encoding": takes}).headers["content-encoding"] == "gzip"
    for refuses in ("identity", "gzip;q=0, identity", "gzip;q=0., *"):
        whole = client.get("/ui/vendor/plotly.min.js", headers={"Accept-Encoding": refuses})
        assert "content-encoding" not in whole.headers and whole.content == raw
    assert whole.headers["etag"] != packed.headers["etag"]  # other bytes, another tag
    gz = {"Accept-Encoding": "gzip"}
    for tag in (packed.headers["etag"], f'"x", {packed.headers["etag"]}', "*"):
        again = client.get("/ui/vendor/plotly.min.js", headers={**gz, "If-None-Match": tag})
        assert again.status_code == 304 and not again.content
    assert client.get("/ui/vendor/plotly.min.js", headers={**gz, "If-None-Match": whole.headers["etag"]}).status_code == 200
