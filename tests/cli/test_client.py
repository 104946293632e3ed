"""gac.client against the real service under uvicorn, over real HTTP (SQLite and Postgres)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import uuid

import httpx
import pytest
import yaml

from gac.client import (
    AlignmentSummary,
    Client,
    GacApiError,
    GacClientError,
    GacConnectionError,
    Job,
    Platform,
    StoredAlignment,
)
from gac.contracts.alignment import AlignmentResult
from gac.contracts.goal import Objective
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Batch, BatchReceipt, RunInfo
from tests import factories as f
from tests.fixtures.live_service import free_port

M, IN, OUT = 64, 256, 256  # gemm m, and the weights' in/out features


def staircase(x: int) -> float:
    """A latency staircase with a step every 16: the cliff-free dims are the multiples of 16."""
    return 10.0 + 5.0 * math.ceil(x / 16)


def staircase_batch(plat, axes=("n", "k")) -> Batch:  # type: ignore[no-untyped-def]
    rows = []
    for x in range(1, OUT + 1):
        med = staircase(x)
        common = {"op": "gemm", "dtype": "bfloat16", "median_us": med, "p10_us": med, "p90_us": med, "mean_us": med}
        if "n" in axes:
            rows.append(f.measurement(**common, id=uuid.uuid4(), shape={"m": M, "n": x, "k": IN}, sweep_axis="n"))
        if "k" in axes:
            rows.append(f.measurement(**common, id=uuid.uuid4(), shape={"m": M, "n": OUT, "k": x}, sweep_axis="k"))
    return Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="client-test"), measurements=rows)


def manifest(target: str | None = None, dims=(100.3, 37.0, 70.9, 150.2)) -> dict:  # type: ignore[no-untyped-def]
    weights = [
        {"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": OUT, "in_features": IN, "dim": d, "importance": 1.0 + i}
        for i, d in enumerate(dims)
    ]
    doc = {
        "schema": "gac.manifest/v1",
        "model": "tiny",
        "compressor": "asvd",
        "budget": {"params": int(sum(dims) * (IN + OUT))},
        "workload": {"tokens": [M], "dtype": "bfloat16"},
        "weights": weights,
    }
    if target:
        doc["target"] = {"platform": target}
    return doc


@pytest.mark.slow  # the real service under uvicorn
def test_upload_platforms_curve_and_cliffs(live_service):
    plat = f.platform(device_name="Client Staircase CPU")
    fp = plat.fingerprint()
    batch = staircase_batch(plat, axes=("n",))
    with Client(live_service.url, token=live_service.ingest_token) as gac:
        receipt = gac.upload(batch)
        assert isinstance(receipt, BatchReceipt)
        assert (receipt.inserted, receipt.duplicates, receipt.replay, receipt.fingerprint) == (OUT, 0, False, fp)
        again = gac.upload(batch, by_columns=True)  # the same batch in the other layout: recognised
        assert (again.inserted, again.duplicates, again.replay) == (0, OUT, True)
        other = f.batch(5, plat=f.platform(device_name="Client Other CPU"))
        assert gac.upload(f.columns_body(other)).inserted == 5  # a document, sent by its schema

        listed = list(gac.platforms(page_size=1))  # two platforms, one per page
        assert all(isinstance(p, Platform) for p in listed)
        assert sorted(p.descriptor.device_name for p in listed) == ["Client Other CPU", "Client Staircase CPU"]
        assert gac.platforms().total == 2
        assert [p.fingerprint for p in gac.platforms(name="staircase")] == [fp]
        mine = gac.platform(fp[:12])
        assert mine.fingerprint == fp and mine.descriptor == plat and mine.curves == 1
        assert gac.platform(mine.id) == mine

        curve = gac.curve(fp, "gemm", "bfloat16", {"m": M, "k": IN}, "n")
        assert curve.curve.fixed == {"m": M, "k": IN} and curve.curve.points == OUT
        assert [(p.x, p.median_us) for p in curve.points] == [(x, staircase(x)) for x in range(1, OUT + 1)]
        # The whole shape may be given: the swept axis's own value is left out.
        assert gac.curve(fp, "gemm", "bfloat16", {"m": M, "n": 7, "k": IN}, "n") == curve
        assert gac.curve_by_id(curve.curve.id) == curve
        assert [c.id for c in gac.curves(fp)] == [curve.curve.id]

        cliffs = gac.curve_cliffs(curve)
        assert cliffs.curve.id == curve.curve.id
        assert [s.x for s in cliffs.steps] == list(range(17, OUT, 16))
        assert cliffs.frontier == list(range(16, OUT + 1, 16))
        assert cliffs.modulus is not None and cliffs.modulus.m == 16
        assert gac.cliffs(fp, op="gemm", dtype="bfloat16", axis="n") == [cliffs]
        assert gac.cliffs(fp, op="gemm", dtype="BF16", axis="n") == [cliffs]  # as a manifest spells it
        assert gac.cliffs(fp, axis="k") == []


@pytest.mark.slow  # the real service under uvicorn
def test_align_and_read_it_back(live_service, tmp_path):
    plat = f.platform(device_name="Client Align CPU")
    fp = plat.fingerprint()
    with Client(live_service.url, token=live_service.ingest_token) as gac:
        gac.upload(staircase_batch(plat))

        stored = gac.align({**manifest(fp), "objective": "importance"})
        assert isinstance(stored, StoredAlignment) and isinstance(stored.result, AlignmentResult)
        res = stored.result
        assert res.platform == fp and res.objective_kind == "importance" and res.total_params <= res.budget
        assert all(w.dim % 16 == 0 for w in res.weights)  # only the staircase's cliff-free dims survive
        assert {c.source for w in res.weights for c in w.candidates} == {"measured"}
        assert res.solver.cross_check.agrees is True
        assert stored.platform_id == gac.platform(fp).id and stored.jobs == []
        assert gac.alignment(stored.id) == stored
        assert gac.alignment(str(stored.id)).result == res

        # A Manifest model, the platform given beside it, and the default (latency) objective.
        latency = gac.align(Manifest.model_validate(manifest()), platform=fp[:10])
        assert latency.result.platform == fp and latency.result.latency.speedup is not None
        assert latency.result.latency.speedup >= 1.0
        # A manifest file, as a notebook would.
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps(manifest()))
        rules = gac.align(path)
        assert rules.result.platform == "rules only" and rules.platform_id is None

        summaries = list(gac.alignments(page_size=2))  # newest first, across two pages
        assert all(isinstance(s, AlignmentSummary) for s in summaries)
        assert [s.id for s in summaries] == [rules.id, latency.id, stored.id]
        assert {s.id for s in gac.alignments(platform=fp)} == {latency.id, stored.id}
        assert gac.alignments(platform=fp).total == 2
        # A YAML manifest file, as `gac align` reads one.
        yaml_path = tmp_path / "manifest.yaml"
        yaml_path.write_text(yaml.safe_dump(manifest()))
        from_yaml = gac.align(yaml_path).result
        assert [w.dim for w in from_yaml.weights] == [w.dim for w in rules.result.weights] and from_yaml.platform == "rules only"

        # dtype= overrides the manifest's workload dtype: this platform measured bfloat16 only.
        f32 = {**manifest(fp), "workload": {"tokens": [M], "dtype": "float32"}}
        assert gac.align(f32, dtype="bfloat16").result.latency.speedup is not None
        unmeasured = gac.align(f32)
        assert unmeasured.result.latency.speedup is None and unmeasured.result.missing
        # The goal's entries as keywords, in place of the manifest's (as gac align's flags); a path as a str.
        frontier = gac.align(str(path), platform=fp, objective="frontier", epsilon=0.02).result
        assert (frontier.objective_kind, frontier.epsilon) == ("frontier", 0.02) and frontier.frontier
        assert gac.align({**manifest(fp), "objective": "frontier"}, objective=Objective.IMPORTANCE).result.objective_kind == "importance"
        with pytest.raises(GacApiError) as bad:
            gac.align(path, platform=fp, epsilon=0.9)
        assert bad.value.status == 422 and bad.value.fields == ["body.epsilon"], bad.value

        # platform_of: a machine's stored platform from its descriptor, whatever thread count it was
        # timed with, carrying the descriptor's dtype facts (the service keeps only its curves' dtypes).
        here = gac.platform_of(plat.model_copy(update={"threads": 7, "fast_dtype": "bfloat16"}))
        assert here.fingerprint == fp and here.descriptor.fast_dtype == "bfloat16" and here.dtypes == ["bfloat16"]
        assert gac.platform_of(plat).descriptor.fast_dtype is None
        # An agent taking jobs at 7 threads registers that platform with no curves: the one profiled is still the answer.
        from gac.agent.jobs import JobClient

        # Where no profile of the machine has curves yet, its registration is still the machine's (jobs are queued for it).
        only = f.platform(device_name="Only Registered CPU")
        jobs = JobClient(live_service.url, live_service.ingest_token)
        try:
            assert jobs.claim(plat.model_copy(update={"threads": 7})) is None
            assert jobs.claim(only.model_copy(update={"threads": 3})) is None
        finally:
            jobs.close()
        empty = plat.model_copy(update={"threads": 7}).fingerprint()
        assert gac.platform(empty).curves == 0 and gac.platform_of(plat.model_copy(update={"threads": 7})).fingerprint == fp
        registered = only.model_copy(update={"threads": 3}).fingerprint()
        assert gac.platform_of(only.model_copy(update={"threads": 5})).fingerprint == registered
        for other in (plat.model_copy(update={"torch_version": "2.0.0"}), f.platform(device_name="Never Profiled CPU")):
            with pytest.raises(GacApiError) as refused:
                gac.platform_of(other)
            assert refused.value.status == 404 and "profile it first" in str(refused.value)

        # Curves the platform lacks become a profiling job (ingest token), readable as a Job.
        doc = manifest(fp)
        doc["workload"]["tokens"] = [128]  # not measured at m = 128
        queued = gac.align(doc, enqueue_missing=True)
        assert queued.result.missing and len(queued.jobs) == 1
        job = gac.job(queued.jobs[0])
        assert isinstance(job, Job) and job.source == "align-missing" and job.match.fingerprint == fp
        assert job.status == "queued" and job.points > 0
        assert [j.id for j in gac.jobs()] == [job.id]
        assert [j.id for j in gac.jobs(status="queued", page_size=1)] == [job.id]
        assert list(gac.jobs(status="done")) == []
        assert [j.id for j in gac.jobs(status=["done", "queued"])] == [job.id]


@pytest.mark.slow  # the real service under uvicorn
def test_measurements_iterate_across_pages(live_service):
    plat = f.platform(device_name="Client Paging CPU")
    run = uuid.uuid4()
    batches = [f.batch(25, start=1 + 25 * i, plat=plat, run_id=run if i < 2 else None) for i in range(3)]
    sent = {m.id for b in batches for m in b.measurements}
    shared = httpx.Client()  # an httpx client other code uses too: left open by the GAC client
    with shared, Client(live_service.url, token=live_service.ingest_token, http=shared) as gac:
        for b in batches:
            assert gac.upload(b).inserted == 25

        seen = list(gac.measurements(page_size=7))  # 11 pages
        assert len(seen) == len(sent) == 75
        assert {m.uuid for m in seen} == sent
        ids = [m.id for m in seen]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # keyset order, nothing twice
        by_id = {m.id: m for b in batches for m in b.measurements}
        for m in seen:  # each row as it was sent
            row = by_id[m.uuid]
            assert (m.op, m.dtype, m.sweep_axis, m.shape, m.median_us) == ("gemm", "bfloat16", "n", row.shape, row.median_us)

        assert sum(1 for _ in gac.measurements(run=run, page_size=10)) == 50
        listing = gac.measurements(platform=plat.fingerprint(), op="gemm", dtype="bfloat16", axis="n", page_size=500)
        assert listing.total == 75 and len(list(listing)) == 75
        assert list(gac.measurements(axis="k")) == []
        gac.close()
        assert gac.closed and not shared.is_closed
        assert shared.get(f"{live_service.url}/healthz").status_code == 200


@pytest.mark.slow  # the real service under uvicorn
def test_bad_input_is_a_gac_api_error_naming_the_field(live_service, monkeypatch):
    with Client(live_service.url, token=live_service.ingest_token) as gac:
        doc = manifest()
        doc["weights"][1]["dim"] = -3
        with pytest.raises(GacApiError) as bad:
            gac.align(doc)
        e = bad.value
        assert (e.status, e.error) == (422, "ValidationError")
        assert any(name.startswith("body.weights.1") for name in e.fields), e.fields
        assert "body.weights.1" in str(e) and "/v1/align" in str(e)

        # An unknown platform: in the manifest, given beside it, or read directly.
        with pytest.raises(GacApiError) as unknown:
            gac.align(manifest("0" * 64))
        assert unknown.value.status == 422 and unknown.value.fields == ["body.target.platform"]
        with pytest.raises(GacApiError) as unknown:
            gac.align(manifest(), platform="deadbeef00")
        assert unknown.value.status == 422 and unknown.value.fields == ["query.platform"]
        with pytest.raises(GacApiError) as missing:
            gac.platform("0" * 64)
        assert (missing.value.status, missing.value.error) == (404, "NotFound")
        assert isinstance(missing.value.detail, str) and "no platform" in missing.value.detail
        assert missing.value.fields == []
        with pytest.raises(GacApiError) as no_job:
            gac.job(999_999)
        assert (no_job.value.status, no_job.value.error) == (404, "NotFound") and no_job.value.detail

        with pytest.raises(GacApiError) as axis:
            gac.curve("1", "gemm", "bfloat16", {"m": 1, "n": 2}, "q")
        assert (axis.value.status, axis.value.error) == (404, "NotFound") and axis.value.detail  # no platform 1 on an empty service
        plat = f.platform(device_name="Client Bad Input CPU")
        gac.upload(f.batch(3, plat=plat))
        with pytest.raises(GacApiError) as axis:
            gac.curve(plat.fingerprint(), "gemm", "bfloat16", {"m": 1, "n": 2}, "q")
        assert axis.value.status == 422 and axis.value.fields == ["query.axis"]

        # A bad row of a batch document: the service names it; nothing is stored.
        body = f.body(f.batch(3, plat=plat))
        body["measurements"][2]["median_us"] = -1.0
        with pytest.raises(GacApiError) as row:
            gac.upload(body)
        assert row.value.status == 422 and any(n.startswith("body.measurements.2.median_us") for n in row.value.fields)

    # Tokens: a wrong one is refused even on open reads; too weak a one, or none, on writes.
    with Client(live_service.url, token="gac_not-a-real-token") as wrong:
        with pytest.raises(GacApiError) as refused:
            list(wrong.platforms())
        assert (refused.value.status, refused.value.error) == (401, "Unauthorized")
    with Client(live_service.url, token=live_service.read_token) as reader:
        assert reader.platforms().total == 1
        with pytest.raises(GacApiError) as forbidden:
            reader.upload(f.batch(2))
        assert forbidden.value.status == 403
    with Client(live_service.url, token="") as anonymous:  # "": none, not even $GAC_TOKEN
        with pytest.raises(GacApiError) as anon:
            anonymous.align(manifest(), enqueue_missing=True)
        assert anon.value.status == 401
        with pytest.raises(GacApiError) as anon:
            anonymous.upload(f.batch(2))
        assert anon.value.status == 401 and "this client has no token: Client(url, token) or $GAC_TOKEN" in str(anon.value)
    # Without a token argument the client sends $GAC_TOKEN, as the CLI does.
    monkeypatch.setenv("GAC_TOKEN", live_service.read_token)
    with Client(live_service.url) as from_env:
        assert from_env.align(manifest()).result.weights
    # Both kinds of failure share one base to catch.
    assert issubclass(GacApiError, GacClientError) and issubclass(GacConnectionError, GacClientError)


def test_unreachable_server_is_a_connection_error_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with Client(url) as gac:
        with pytest.raises(GacConnectionError) as down:
            list(gac.platforms())
        assert url in str(down.value) and down.value.url.startswith(url)
        assert not isinstance(down.value, GacApiError)
        assert isinstance(down.value.__cause__, httpx.ConnectError)
        with pytest.raises(GacConnectionError, match=url):
            gac.align(manifest())
    assert gac.closed and gac._http.is_closed  # the context manager closed its own connections


def test_a_server_that_never_answers_is_a_connection_error():
    with socket.socket() as listener:  # accepts connections (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with Client(url, timeout=0.3) as gac:
            with pytest.raises(GacConnectionError, match="no answer in time") as slow:
                gac.job(1)
            assert f"{url}/v1/jobs/1" in str(slow.value)


def test_wait_ready_asks_until_the_service_is_ready_and_gives_up_on_a_refusal_or_a_stopped_service():
    """Not listening, then 503 (its database not ready yet), then ready: it waits through both. A refusal (404: another
    server there) ends it at once, and so does a service process that is gone, without waiting out the timeout."""
    answers = ["refused", 503, 503, 200]

    def service(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if answer == "refused":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(answer, json={"status": "ready"} if answer == 200 else {"error": "NotReady", "detail": "db"})

    with Client("http://gac.test", transport=httpx.MockTransport(service)) as gac:
        assert gac.wait_ready(timeout=60, every_s=0) == {"status": "ready"}
        answers[:] = [404]
        with pytest.raises(GacClientError, match="no GAC service answers there .*404"):
            gac.wait_ready(timeout=60, every_s=0)
        answers[:] = ["refused"]
        with pytest.raises(GacClientError, match="stopped before it was ready"):
            gac.wait_ready(timeout=60, every_s=0, alive=lambda: False)
        with pytest.raises(GacClientError, match="not ready after 0 s .*connection refused"):
            gac.wait_ready(timeout=0, every_s=0)


def test_an_error_page_that_is_not_json_keeps_its_text():
    """A proxy in front of the service answers in its own words: status and text are kept."""
    request = httpx.Request("GET", "http://gac.example/v1/platforms")
    page = httpx.Response(502, text="<html>Bad Gateway</html>", headers={"Retry-After": "3"}, request=request)
    err = GacApiError.from_response(page)
    assert (err.status, err.error, err.detail, err.retry_after) == (502, "HTTP502", "<html>Bad Gateway</html>", 3.0)
    assert "GET http://gac.example/v1/platforms" in str(err)


def test_client_and_service_share_one_definition_of_each_read_shape():
    """One model per shape (gac/contracts/api.py): the service answers with what the client reads."""
    import gac.client as client
    from gac.service.align.schemas import AlignmentSummary, StoredAlignment
    from gac.service.cliffs.schemas import CurveCliffs, ModulusOut, StepOut
    from gac.service.curves.schemas import Curve, CurvePoint, CurveSummary
    from gac.service.jobs.schemas import JobOut
    from gac.service.measurements.schemas import MeasurementOut
    from gac.service.platforms.schemas import PlatformOut

    pairs = [
        (client.Platform, PlatformOut),
        (client.StoredMeasurement, MeasurementOut),
        (client.CurveSummary, CurveSummary),
        (client.CurvePoint, CurvePoint),
        (client.Curve, Curve),
        (client.Step, StepOut),
        (client.Modulus, ModulusOut),
        (client.CurveCliffs, CurveCliffs),
        (client.Job, JobOut),
        (client.StoredAlignment, StoredAlignment),
        (client.AlignmentSummary, AlignmentSummary),
    ]
    for ours, theirs in pairs:
        assert ours is theirs, ours.__name__


def test_the_client_needs_only_the_base_install():
    code = (
        "import sys, gac.client; "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'service', 'solver', 'profiler_agent', 'torch', 'sqlalchemy', 'fastapi', 'numpy', 'ortools', 'psycopg'}); "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("model: 2024-01-01\nweights: []\n", "a value JSON cannot carry"),
        ("- a\n- b\n", "not a mapping"),
        ("a: [\n", "is not YAML"),
        ("model: a\nmodel: b\n", "key 'model' appears twice"),
    ],
)
def test_a_yaml_manifest_that_is_no_manifest_is_a_client_error(tmp_path, text, said):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with Client("http://127.0.0.1:9", None) as gac, pytest.raises(GacClientError, match=said):
        gac.align(path)
