"""Alignments bounded by their cost, not their weight count: dimension fields bounded by what a
model can have, the work estimated from the parsed manifest and refused above a setting (413 with
the estimate), every alignment in a process of its own under a memory limit, one budget for the
whole service (429), and a storage quota per token with old results expiring."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from gac.service.align import limits
from gac.service.align.cost import estimate
from tests import factories as f
from tests.service.test_align_scale import manifest

HOSTILE = (  # 269 bytes that cost 2 GB and 9-49 s before dimensions were bounded
    '{"schema":"gac.manifest/v1","model":"m","budget":{"ratio":0.1},"workload":{"tokens":[128]},"weights":[{"name":"h0",'
    '"kind":"head_dim","heads":1048576,"hidden":1048576,"full":1048576,"dim":524288,"importance":1,"seq":1048576,"batch":1048576}]}'
)


@pytest.fixture
def workers(app):  # type: ignore[no-untyped-def]
    yield app.state.align_slots
    app.state.align_slots.close(wait=True)


def test_dimension_fields_are_bounded_by_what_a_model_can_have(client, read_token, workers):
    r = client.post("/v1/align", content=HOSTILE, headers={**f.auth(read_token), "Content-Type": "application/json"})
    fields = {d["field"] for d in f.refused(r, 422)["detail"]}
    assert {
        "body.weights.0.head_dim.heads",
        "body.weights.0.head_dim.hidden",
        "body.weights.0.head_dim.full",
        "body.weights.0.head_dim.batch",
    } <= fields, fields
    # ... and the schema says the limits.
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    head = schema["HeadDimWeight"]["properties"]
    assert head["heads"]["maximum"] == 4096 and head["hidden"]["maximum"] == 1 << 17 and head["full"]["maximum"] == 4096
    assert "at most" in head["hidden"]["description"]


def test_work_above_the_setting_is_refused_with_its_estimate(client, app, read_token, workers):
    doc = manifest(12)
    from gac.contracts.manifest import Manifest

    work = estimate(Manifest.model_validate(doc)).work
    app.state.settings.align_max_work = work - 1
    try:
        r = client.post("/v1/align", json=doc, headers=f.auth(read_token))
        body = f.refused(r, 413)
        assert "GAC_ALIGN_MAX_WORK" in body["detail"]["message"] and body["detail"]["estimate"]["work"] == work
        assert body["detail"]["estimate"]["weights"] == 12 and body["detail"]["estimate"]["dp_cells"] > 0
        app.state.settings.align_max_work = work
        assert client.post("/v1/align", json=doc, headers=f.auth(read_token)).status_code == 201
    finally:
        app.state.settings.align_max_work = 400_000_000


def test_the_cost_grows_with_the_shapes_not_only_the_weight_count():
    from gac.contracts.manifest import Manifest

    small = json.loads(HOSTILE)
    small["weights"][0].update(heads=32, hidden=4096, full=128, dim=100, seq=1024, batch=1)
    big = json.loads(HOSTILE)
    big["weights"][0].update(heads=4096, hidden=1 << 17, full=4096, dim=2048, seq=1 << 20, batch=1 << 16)
    one, wide = estimate(Manifest.model_validate(small)), estimate(Manifest.model_validate(big))
    assert one.weights == wide.weights == 1
    assert wide.work > 50 * one.work and wide.dp_cells > 50 * one.dp_cells and wide.candidates > one.candidates


def test_no_slower_over_several_token_counts_costs_a_solve_per_round():
    from gac.contracts.manifest import Manifest
    from gac.solver.align import AlignOptions
    from gac.solver.no_slower import MOST_SOLVES

    doc = {**manifest(12), "workload": {"tokens": [1024, 1]}}
    plain = estimate(Manifest.model_validate(doc))
    held = estimate(Manifest.model_validate({**doc, "no_slower": True}))
    assert held.evaluations == MOST_SOLVES * plain.evaluations and held.dp_cells == plain.dp_cells
    assert estimate(Manifest.model_validate(doc), AlignOptions(no_slower=True)).evaluations == held.evaluations
    one = {**doc, "workload": {"tokens": [1024]}, "no_slower": True}  # one token count: nothing to hold
    assert estimate(Manifest.model_validate(one)).evaluations == estimate(Manifest.model_validate({**one, "no_slower": None})).evaluations


def test_routing_reads_the_parsed_manifest_not_its_bytes(client, read_token, workers, monkeypatch):
    """Keys written as JSON escapes ("\\u006bind") are the same manifest: 202 above the size, as when written plainly."""
    monkeypatch.setattr(limits, "ASYNC_ABOVE_WEIGHTS", 30)
    body = json.dumps(manifest(40)).replace('"kind"', '"\\u006bind"')
    assert b'"kind"' not in body.encode()
    r = client.post("/v1/align", content=body, headers={**f.auth(read_token), "Content-Type": "application/json"})
    assert r.status_code == 202, r.text
    assert r.json()["weights"] == 40


def _allocate(megabytes: int) -> int:
    """In a task's process: hold this many MB at once."""
    return len(bytearray(megabytes * 2**20))


def test_a_task_past_its_memory_limit_gets_a_memory_error_in_its_own_process():
    runner = limits.TaskRunner(1)
    fine = runner.submit(_allocate, 64, deadline_s=120, memory_bytes=1024 * 2**20)
    assert fine.answer.result(timeout=120) == 64 * 2**20
    greedy = runner.submit(_allocate, 2048, deadline_s=120, memory_bytes=1024 * 2**20)
    with pytest.raises(MemoryError):
        greedy.answer.result(timeout=120)
    # Without the limit the same allocation succeeds: the limit, not the machine, refused it.
    unbounded = runner.submit(_allocate, 1100, deadline_s=120, memory_bytes=None)
    assert unbounded.answer.result(timeout=120) == 1100 * 2**20
    assert runner.join(60)


def test_one_budget_for_the_whole_service_answers_429(client, app, read_token, workers):
    """Counted in the database: another worker's (or replica's) alignments count too."""
    from gac.service.align import service
    from gac.service.models import AlignmentJob, utcnow

    app.state.settings.align_max_running = 1
    try:
        with app.state.sessionmaker() as s:  # what another worker process admitted and runs
            other = service.admit(s, uuid.uuid4(), 1, 360)
        busy = client.post("/v1/align", json=manifest(5), headers=f.auth(read_token))
        body = f.refused(busy, 429)
        assert "GAC_ALIGN_MAX_RUNNING" in body["detail"] and int(busy.headers["Retry-After"]) > 0
        with app.state.sessionmaker() as s:  # it ended
            s.get(AlignmentJob, other.id).status = "done"
            s.commit()
        assert client.post("/v1/align", json=manifest(5), headers=f.auth(read_token)).status_code == 201
        with app.state.sessionmaker() as s:  # one whose process vanished long ago without news is not counted
            lost = service.admit(s, uuid.uuid4(), 1, 360)
            s.get(AlignmentJob, lost.id).updated_at = utcnow() - timedelta(seconds=361)
            s.commit()
        assert client.post("/v1/align", json=manifest(5), headers=f.auth(read_token)).status_code == 201
    finally:
        app.state.settings.align_max_running = 4


def test_a_tokens_oldest_results_go_past_its_quota_and_all_expire(client, app, read_token, ingest_token, workers):
    from sqlalchemy import func, select

    from gac.service.models import Alignment

    def stored() -> list[tuple[uuid.UUID, int | None, int]]:
        with app.state.sessionmaker() as s:
            return [
                tuple(r) for r in s.execute(select(Alignment.id, Alignment.token_id, Alignment.stored_bytes).order_by(Alignment.created_at))
            ]

    doc = manifest(400)
    first = client.post("/v1/align", json=doc, headers=f.auth(read_token))
    assert first.status_code == 201
    size = stored()[0][2]
    assert size > 100_000 and stored()[0][1] is not None
    per_mb = 2**20 // size  # results that fit in 1 MB
    app.state.settings.align_storage_mb_per_token = 1
    try:
        ids = [first.json()["id"]]
        for _ in range(per_mb + 1):
            r = client.post("/v1/align", json=doc, headers=f.auth(read_token))
            assert r.status_code == 201
            ids.append(r.json()["id"])
        other = client.post("/v1/align", json=doc, headers=f.auth(ingest_token)).json()["id"]  # another token's
        kept = stored()
        mine = [str(a) for a, tok, _ in kept if str(a) != other]
        assert mine == ids[-len(mine) :] and len(mine) < len(ids), (len(mine), len(ids))  # the oldest went first
        with app.state.sessionmaker() as s:
            total = s.scalar(select(func.sum(Alignment.stored_bytes)).where(Alignment.id.in_([uuid.UUID(i) for i in mine])))
        assert total <= 2**20
        assert client.get(f"/v1/alignments/{ids[0]}").status_code == 404
        assert other in [str(a) for a, _, _ in kept]
        # Everyone's results expire after the keep time.
        app.state.settings.align_keep_days = 1e-9
        last = client.post("/v1/align", json=manifest(5), headers=f.auth(ingest_token)).json()["id"]
        assert [str(a) for a, _, _ in stored()] == [last]
    finally:
        app.state.settings.align_storage_mb_per_token = 1024
        app.state.settings.align_keep_days = 30.0
