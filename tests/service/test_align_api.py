"""POST /v1/align over the service's own measurements, stored and fetched back, on both backends."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid

import pytest

from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f

M, IN, OUT = 64, 256, 256


def staircase(x: int) -> float:
    """A latency staircase with a step every 16: the cliff-free dims are the multiples of 16."""
    return 10.0 + 5.0 * math.ceil(x / 16)


def measured_platform(client, token):  # type: ignore[no-untyped-def]
    plat = f.platform(device_name="Staircase CPU")
    rows = []
    for x in range(1, OUT + 1):
        med = staircase(x)
        common = {
            "op": "gemm",
            "dtype": "bfloat16",
            "median_us": med,
            "p10_us": med,
            "p90_us": med,
            "mean_us": med,
            "n": 10,
            "timer": "test",
        }
        rows.append(f.measurement(**common, id=uuid.uuid4(), shape={"m": M, "n": x, "k": IN}, sweep_axis="n"))
        rows.append(f.measurement(**common, id=uuid.uuid4(), shape={"m": M, "n": OUT, "k": x}, sweep_axis="k"))
    b = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(token)).status_code == 201
    return plat


def manifest(target: str | None = None, dims=(100.3, 37.0, 70.9, 150.2), budget=None):  # type: ignore[no-untyped-def]
    weights = [
        {"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": OUT, "in_features": IN, "dim": d, "importance": 1.0 + i}
        for i, d in enumerate(dims)
    ]
    doc = {
        "schema": "gac.manifest/v1",
        "model": "tiny",
        "compressor": "asvd",
        "budget": budget or {"params": int(sum(dims) * (IN + OUT))},
        "workload": {"tokens": [M], "dtype": "bfloat16"},
        "weights": weights,
    }
    if target:
        doc["target"] = {"platform": target}
    return doc


def test_align_with_measured_cliffs(client, ingest_token):
    plat = measured_platform(client, ingest_token)
    r = client.post("/v1/align", json={**manifest(plat.fingerprint()), "objective": "importance"}, headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    stored = r.json()
    res = stored["result"]
    assert res["objective_kind"] == "importance"
    assert res["schema"] == "gac.alignment/v1" and res["platform"] == plat.fingerprint()
    assert res["total_params"] <= res["budget"]
    for w in res["weights"]:
        assert w["dim"] % 16 == 0, w  # only the staircase's cliff-free dims survive
        assert {c["source"] for c in w["candidates"]} == {"measured"}
        assert all(c["dim"] % 16 == 0 for c in w["candidates"])
    assert not any("window" in m["reasons"] for m in res["missing"])
    assert res["solver"]["cross_check"]["agrees"] is True
    again = client.get(f"/v1/alignments/{stored['id']}").json()
    assert again["result"] == res
    listing = client.get("/v1/alignments", params={"platform": plat.fingerprint()}).json()
    assert listing["total"] == 1 and listing["items"][0]["aligned_share_after"] == 1.0


def test_latency_objective_round_trips(client, ingest_token):
    """The default with measurements: latency priced, the frontier and speed-ups stored and served back."""
    plat = measured_platform(client, ingest_token)
    doc = {**manifest(plat.fingerprint()), "objective": "frontier", "epsilon": 0.01}
    r = client.post("/v1/align", json=doc, headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    stored = r.json()
    res = stored["result"]
    assert res["objective_kind"] == "frontier" and res["epsilon"] == 0.01
    assert res["frontier"] and all(p["params"] <= res["budget"] for p in res["frontier"])
    assert res["latency"]["importance_kept"] >= 0.99
    assert client.get(f"/v1/alignments/{stored['id']}").json()["result"] == res
    bad = client.post("/v1/align", json={**manifest(plat.fingerprint()), "objective": "fastest"}, headers=f.auth(ingest_token))
    assert [d["field"] for d in f.refused(bad, 422)["detail"]] == ["body.objective"], bad.text


def test_dtype_in_the_query_is_aligned_for_and_said_in_the_result_and_the_list(client, ingest_token):
    """?dtype= aligns in that dtype (it used to be ignored: the manifest's bfloat16 was aligned); the result and the
    list say which dtype and token counts the predictions are for."""
    plat = measured_platform(client, ingest_token)  # bfloat16 only
    r = client.post("/v1/align", params={"dtype": "float32"}, json=manifest(plat.fingerprint()), headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    res = r.json()["result"]
    assert res["workload"] == {"dtype": "float32", "tokens": [M], "token_weights": None}
    assert res["objective_kind"] == "importance" and any("in float32 for platform" in w for w in res["warnings"])
    kept = client.post("/v1/align", json=manifest(plat.fingerprint()), headers=f.auth(ingest_token)).json()["result"]
    assert kept["workload"]["dtype"] == "bfloat16" and kept["latency"]["complete"] is True
    listing = client.get("/v1/alignments", params={"platform": plat.fingerprint()}).json()["items"]
    assert [(a["dtype"], a["tokens"]) for a in listing] == [("bfloat16", [M]), ("float32", [M])]  # newest first
    bad = client.post("/v1/align", params={"dtype": "int8"}, json=manifest(plat.fingerprint()), headers=f.auth(ingest_token))
    assert [d["field"] for d in f.refused(bad, 422)["detail"]] == ["query.dtype"], bad.text


def test_rules_only_without_a_target(client, read_token):
    r = client.post("/v1/align", json=manifest(), headers=f.auth(read_token))
    res = r.json()["result"]
    assert r.status_code == 201 and res["platform"] == "rules only"
    assert all(c["source"] == "rule" for w in res["weights"] for c in w["candidates"])
    assert any("rule" in w for w in res["warnings"])
    # An empty ?platform= names no platform: refused, not read as "none" (a rules-only answer to a typo'd script).
    for url in ("/v1/align?platform=", "/v1/alignments?platform=", "/v1/measurements?platform="):
        call = client.post(url, json=manifest(), headers=f.auth(read_token)) if url.startswith("/v1/align?") else client.get(url)
        assert [d["field"] for d in f.refused(call, 422)["detail"]] == ["query.platform"], (url, call.text)


def test_missing_curves_become_a_profiling_job(client, ingest_token):
    plat = measured_platform(client, ingest_token)
    doc = manifest(plat.fingerprint())
    doc["workload"]["tokens"] = [128]  # not measured at M = 128
    f.refused(client.post("/v1/align", json=doc, params={"enqueue_missing": True}), 401)
    r = client.post("/v1/align", json=doc, params={"enqueue_missing": True}, headers=f.auth(ingest_token))
    assert r.status_code == 201
    stored = r.json()
    assert stored["result"]["missing"] and len(stored["jobs"]) == 1
    job = client.get(f"/v1/jobs/{stored['jobs'][0]}").json()
    assert job["match"]["fingerprint"] == plat.fingerprint() and job["source"] == "align-missing"
    wanted = {(m["axis"], d) for m in stored["result"]["missing"] for d in m["dims"]}
    planned = {(s["axis"], v) for s in job["plan"]["sweeps"] for v in s["values"]}
    assert planned == wanted
    # Asking again does not queue the same work twice.
    again = client.post("/v1/align", json=doc, params={"enqueue_missing": True}, headers=f.auth(ingest_token)).json()
    assert again["jobs"] == stored["jobs"]


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda d: d.update(budget={"params": 10}), "body.budget"),
        (lambda d: d.update(target={"platform": "0" * 64}), "body.target.platform"),
        (lambda d: d["weights"][1].update(dim=-3), "body.weights.1"),
        (lambda d: d["weights"][0].pop("importance"), "body.weights.0"),
    ],
)
def test_align_errors_name_the_field(client, read_token, mutate, field):
    doc = manifest()
    mutate(doc)
    r = client.post("/v1/align", json=doc, headers=f.auth(read_token))
    assert r.status_code == 422, r.text
    assert any(d["field"].startswith(field) for d in r.json()["detail"]), r.json()
    if field == "body.budget":
        assert "smallest feasible" in r.json()["detail"][0]["message"]


def test_a_key_given_twice_is_refused_naming_where_not_read_as_its_last_value(client, read_token):
    """A JSON parser keeps the last of two equal keys; which rank the compressor meant is not the service's to guess."""
    body = json.dumps(manifest())
    twice = body.replace('"dim": 37.0', '"dim": 37.0, "dim": 40', 1)
    assert twice != body
    r = client.post("/v1/align", content=twice, headers=f.auth(read_token) | {"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert [(d["field"], d["type"]) for d in r.json()["detail"]] == [("body.weights.1.dim", "duplicate_key")]
    assert "given twice" in r.json()["detail"][0]["message"]
    # Given twice, then not JSON: answered as the same body without the repeat is (the parser's error), not a 500.
    post = lambda text: client.post("/v1/align", content=text, headers=f.auth(read_token) | {"content-type": "application/json"})  # noqa: E731
    broken, once = (t[:-1] + ', "extra": }' for t in (twice, body))
    kinds = lambda r: (r.status_code, [d["type"] for d in r.json()["detail"]])  # noqa: E731
    assert kinds(post(broken)) == kinds(post(once)) == (422, ["json_invalid"])
    assert client.post("/v1/align", content=body, headers=f.auth(read_token) | {"content-type": "application/json"}).status_code == 201
    # A byte-order mark (some editors save one) is not the document's: JSON's RFC lets a parser skip it.
    assert post(b"\xef\xbb\xbf" + body.encode()).status_code == 201


@pytest.mark.slow
def test_cli_json_is_exactly_the_document(client, settings, ingest_token, tmp_path):
    plat = measured_platform(client, ingest_token)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(manifest(plat.fingerprint())))
    env = f.cli_env(settings, tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "gac", "align", str(path), "--json", "--out", str(tmp_path / "r.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "gac.alignment/v1" and doc["platform"] == plat.fingerprint()
    assert json.loads((tmp_path / "r.json").read_text()) == doc
    table = subprocess.run([sys.executable, "-m", "gac", "align", str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and "layers.0.proj" in table.stdout and "cross-check" in table.stdout
    bad = subprocess.run([sys.executable, "-m", "gac", "align", str(tmp_path / "nope.json")], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_alignments_need_a_token_unless_opened(client, app, read_token):
    r = client.post("/v1/align", json=manifest())
    assert r.status_code == 401 and r.json()["error"] == "Unauthorized" and "token" in r.json()["detail"]
    app.state.settings.open_align = True  # the operator opened them (GAC_OPEN_ALIGN=true)
    try:
        assert client.post("/v1/align", json=manifest()).status_code == 201
    finally:
        app.state.settings.open_align = False


def test_per_token_limits_answer_413_and_429(client, app, read_token, ingest_token):
    settings = app.state.settings
    settings.align_max_weights = 3
    try:
        r = client.post("/v1/align", json=manifest(), headers=f.auth(read_token))  # 4 weights
        assert r.status_code == 413 and "GAC_ALIGN_MAX_WEIGHTS" in r.json()["detail"]
    finally:
        settings.align_max_weights = 100_000
    slots = app.state.align_slots
    from sqlalchemy import select

    from gac.service.models import ApiToken

    with app.state.sessionmaker() as s:
        reader_id = s.scalars(select(ApiToken.id).where(ApiToken.scope == "read")).one()
    # This token already runs as many alignments as it may (held here as a running request would).
    with slots.slot(reader_id), slots.slot(reader_id):
        busy = client.post("/v1/align", json=manifest(), headers=f.auth(read_token))
        assert busy.status_code == 429 and int(busy.headers["Retry-After"]) > 0
        assert busy.json()["error"] == "TooManyRequests"
        # Another token is not held back by this one's load.
        assert client.post("/v1/align", json=manifest(), headers=f.auth(ingest_token)).status_code == 201
    assert client.post("/v1/align", json=manifest(), headers=f.auth(read_token)).status_code == 201


def test_a_mistyped_field_is_answered_with_the_field_it_is_closest_to(client, read_token):
    body = manifest()
    body["budget"] = {"param": body["budget"].get("params", 1000)}
    r = client.post("/v1/align", json=body, headers=f.auth(read_token))
    detail = f.refused(r, 422)["detail"]
    assert [(d["field"], d["message"]) for d in detail] == [("body.budget.param", "unknown field 'param': did you mean 'params'?")]
