"""Alignments of any size: checks after the answer, large manifests in worker processes (201, or
202 and a URL to poll), compact results by default above 1,000 weights, the full ones on request."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import httpx
import pytest

from gac.client import Client, GacApiError
from gac.contracts.alignment import AlignmentResult
from gac.service.align import limits
from gac.service.align.service import compact_json
from tests import factories as f

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096)]


def manifest(n: int, **extra) -> dict:  # type: ignore[no-untyped-def]
    """n low-rank weights of Llama-like shapes, rules only, the budget at their own dims."""
    weights = []
    for i in range(n):
        out, inn = SHAPES[i % len(SHAPES)]
        weights.append(
            {
                "name": f"layers.{i}.proj",
                "kind": "lowrank",
                "out_features": out,
                "in_features": inn,
                "dim": 300.0 + 7.3 * (i % 97),
                "importance": 1.0 + (i * 37 % 11),
            }
        )
    budget = int(sum(w["dim"] * (w["out_features"] + w["in_features"]) for w in weights))
    return {
        "schema": "gac.manifest/v1",
        "model": f"scale-{n}",
        "compressor": "asvd",
        "budget": {"params": budget},
        "workload": {"tokens": [256], "dtype": "bfloat16"},
        "weights": weights,
        **extra,
    }


@pytest.fixture
def workers(app):  # type: ignore[no-untyped-def]
    """The app's alignment worker processes, stopped (after their work) before the database is cleaned."""
    yield app.state.align_slots
    app.state.align_slots.close(wait=True)


@pytest.fixture
def small_limits(monkeypatch):  # type: ignore[no-untyped-def]
    """202 from 30 weights, compact from 25: the large paths at test sizes."""
    monkeypatch.setattr(limits, "ASYNC_ABOVE_WEIGHTS", 30)
    monkeypatch.setattr(limits, "COMPACT_ABOVE_WEIGHTS", 25)


def settled(client, app, url: str):  # type: ignore[no-untyped-def]
    """GET url once the app's worker processes finished what they were given (no polling, no sleeps)."""
    app.state.align_slots.close(wait=True)  # the next submission starts new ones
    return client.get(url)


def test_checks_run_after_the_answer_and_land_on_the_stored_alignment(client, app, read_token, workers):
    """Above 64 items the answer does not wait for SCIP or the paper's DP: they are pending, then stored."""
    r = client.post("/v1/align", json=manifest(80), headers=f.auth(read_token))
    assert r.status_code == 201, r.text
    first = r.json()["result"]
    assert first["pending"] == ["cross_check", "baselines"]
    assert first["solver"]["cross_check"]["status"] == "pending" and first["solver"]["cross_check"]["agrees"] is None
    assert [b["method"] for b in first["baselines"]] == ["nearest-8", "round-down-8"]
    assert first["candidate_lists"] == "full" and "candidates;dur=" in r.headers["server-timing"]

    url = f"/v1/alignments/{r.json()['id']}"
    done = settled(client, app, url).json()["result"]
    assert done["pending"] == []
    assert done["solver"]["cross_check"]["status"] == "OPTIMAL" and done["solver"]["cross_check"]["agrees"] is True
    assert [b["method"] for b in done["baselines"]] == ["nearest-8", "round-down-8", "paper-dp", "paper-dp-64"]
    # The answer itself did not change: the same dims, objective and candidates.
    assert [w["dim"] for w in done["weights"]] == [w["dim"] for w in first["weights"]]
    assert done["objective"] == first["objective"] and done["weights"] == first["weights"]


def test_small_alignments_still_check_inline(client, read_token):
    res = client.post("/v1/align", json=manifest(10), headers=f.auth(read_token)).json()["result"]
    assert res["pending"] == [] and res["solver"]["cross_check"]["agrees"] is True
    assert {"paper-dp", "paper-dp-64"} <= {b["method"] for b in res["baselines"]}


def test_a_large_manifest_answers_202_and_is_polled(client, app, read_token, workers, small_limits):
    r = client.post("/v1/align", json=manifest(40), headers=f.auth(read_token))
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "queued" and job["weights"] == 40
    assert r.headers["location"] == job["poll"] == f"/v1/alignments/{job['id']}" and int(r.headers["retry-after"]) >= 1

    done = settled(client, app, job["poll"])
    assert done.status_code == 200, done.text
    stored = done.json()
    assert stored["id"] == job["id"]
    timing = dict(part.split(";dur=") for part in done.headers["server-timing"].split(", "))
    assert {"parse", "candidates", "solve", "serialize", "store"} <= set(timing)
    # Compact by default: each weight lists its chosen candidate only.
    res = stored["result"]
    assert res["candidate_lists"] == "compact" and len(res["weights"]) == 40
    assert all([c["dim"] for c in w["candidates"]] == [w["dim"]] for w in res["weights"])
    full = client.get(job["poll"], params={"candidates": "full"}).json()["result"]
    assert full["candidate_lists"] == "full" and full["candidates_total"] is None
    assert sum(len(w["candidates"]) for w in full["weights"]) == res["candidates_total"] > 40
    assert [w["dim"] for w in full["weights"]] == [w["dim"] for w in res["weights"]]
    assert {k: v for k, v in full.items() if k not in ("weights", "candidate_lists", "candidates_total")} == {
        k: v for k, v in res.items() if k not in ("weights", "candidate_lists", "candidates_total")
    }
    listing = client.get("/v1/alignments").json()
    assert listing["total"] == 1 and listing["items"][0]["id"] == job["id"] and listing["items"][0]["weights"] == 40


@pytest.mark.filterwarnings("ignore:You should not use the .timeout. argument with the TestClient")
def test_the_client_follows_a_202(client, read_token, workers, small_limits):
    doc = manifest(40)
    with Client("http://testserver", token=read_token, http=client) as gac:
        stored = gac.align(doc)
        assert stored.result.candidate_lists == "compact" and len(stored.result.weights) == 40
        assert gac.alignment(stored.id) == stored
        bad = manifest(40)
        bad["weights"][3]["dim"] = -1.0
        with pytest.raises(GacApiError) as err:
            gac.align(bad)
        assert err.value.status == 422 and any(name.startswith("body.weights.3") for name in err.value.fields), err.value.fields


def test_a_mid_size_manifest_runs_in_a_worker_and_answers_201(client, read_token, workers, small_limits, monkeypatch):
    monkeypatch.setattr(limits, "ASYNC_ABOVE_WEIGHTS", 1_000)
    r = client.post("/v1/align", json=manifest(40), params={"candidates": "full"}, headers=f.auth(read_token))
    assert r.status_code == 201, r.text
    res = r.json()["result"]
    assert res["candidate_lists"] == "full" and all(len(w["candidates"]) > 1 for w in res["weights"])
    assert "store;dur=" in r.headers["server-timing"]
    # The same request FastAPI would have parsed gets the same refusals.
    f.refused(client.post("/v1/align", json=manifest(40)), 401)
    bad = manifest(40)
    bad["weights"][1]["dim"] = -3
    r = client.post("/v1/align", json=bad, headers=f.auth(read_token))
    assert r.status_code == 422 and any(d["field"].startswith("body.weights.1") for d in r.json()["detail"]), r.json()
    r = client.post("/v1/align", json=manifest(40), params={"platform": "x" * 65}, headers=f.auth(read_token))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.platform"
    r = client.post("/v1/align", json=manifest(40), params={"enqueue_missing": True}, headers=f.auth(read_token))
    f.refused(r, 403)


def test_a_failed_job_answers_its_error_on_poll(client, app, read_token, workers, small_limits):
    r = client.post("/v1/align", json=manifest(40, target={"platform": "0" * 64}), headers=f.auth(read_token))
    assert r.status_code == 202
    failed = settled(client, app, r.headers["location"])
    assert failed.status_code == 422 and failed.json()["detail"][0]["field"] == "body.target.platform"
    app.state.settings.align_max_weights = 35
    try:
        # Refused once parsed, before any work: answered at once, not after a 202.
        too_many = client.post("/v1/align", json=manifest(40), headers=f.auth(read_token))
        assert too_many.status_code == 413 and "GAC_ALIGN_MAX_WEIGHTS" in too_many.json()["detail"]
    finally:
        app.state.settings.align_max_weights = 100_000


def test_prefer_respond_async_at_any_size(client, app, read_token, workers):
    r = client.post("/v1/align", json=manifest(5), headers={**f.auth(read_token), "Prefer": "respond-async"})
    assert r.status_code == 202
    stored = settled(client, app, r.headers["location"]).json()
    assert stored["result"]["solver"]["cross_check"]["agrees"] is True and stored["result"]["candidate_lists"] == "full"


def test_unknown_and_lost_jobs(client, app, read_token):
    f.refused(client.get(f"/v1/alignments/{uuid.uuid4()}"), 404)
    from gac.service.align import service
    from gac.service.models import AlignmentJob, utcnow

    with app.state.sessionmaker() as s:
        queued = service.create_job(s, uuid.uuid4(), 50_000)
        assert client.get(queued.poll).status_code == 202
        s.get(AlignmentJob, queued.id).updated_at = utcnow() - timedelta(seconds=limits.JOB_STALE_S + 1)
        s.commit()
    lost = client.get(queued.poll)
    assert lost.status_code == 500 and lost.json()["error"] == "AlignmentLost"


def test_compact_json_leaves_the_result_as_it_was():
    from gac.contracts.manifest import Manifest
    from gac.solver.align import align

    res = align(Manifest.model_validate(manifest(12)), None)
    before = res.model_dump_json()
    compact = AlignmentResult.model_validate_json(compact_json(res))
    assert res.model_dump_json() == before
    assert compact.candidate_lists == "compact" and compact.candidates_total == sum(len(w.candidates) for w in res.weights)
    assert [w.candidates for w in compact.weights] == [[c for c in w.candidates if c.dim == w.dim] for w in res.weights]


@pytest.mark.slow  # the real service under uvicorn, a worker process doing the alignment
def test_healthz_answers_while_a_large_alignment_runs(live_service):
    """The event loop never parses or aligns a large manifest: /healthz keeps answering."""
    body = json.dumps(manifest(3_000)).encode()
    answered_while_running = 0
    with httpx.Client(base_url=live_service.url, timeout=60) as http:
        r = http.post(
            "/v1/align",
            content=body,
            headers={**f.auth(live_service.read_token), "Content-Type": "application/json", "Prefer": "respond-async"},
        )
        assert r.status_code == 202, r.text
        while http.get(r.headers["location"]).status_code == 202:
            assert http.get("/healthz").status_code == 200
            answered_while_running += 1
        assert http.get(r.headers["location"]).status_code == 200
    # How fast /healthz answers meanwhile is benchmarks/align_scale.py's to measure (p99 beside the median).
    assert answered_while_running >= 1
