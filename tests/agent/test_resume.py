"""What a re-run leaves out (profiler_agent/resume.py), and how rows become durable as they come:
commits by time and by count, the spool written before each send (profiler_agent/delivery)."""

from __future__ import annotations

import json
import uuid

import httpx

from gac.agent.delivery import BatchFileWriter, Deliverer, Spool, read_document
from gac.agent.resume import known_in_run, known_in_spool, planned_points, remaining, sweep_curve
from gac.contracts.measurements import RunInfo
from gac.contracts.plans import loads_plan
from tests import factories as f

PLAN = loads_plan("""
name: resume
sweeps:
  - {op: gemm, dtypes: [bfloat16, float32], axis: n, fixed: {m: 128, k: 256}, values: [8, 16, 24, 32]}
  - {op: gemm, dtypes: [bfloat16], axis: n, fixed: {m: 64, k: 64}, values: {start: 1, stop: 33, step: 1},
     adaptive: {coarse_step: 8, jump: 0.1}}
""")
FLAT, ADAPTIVE = PLAN.sweeps
COARSE = ADAPTIVE.coarse_values()  # 1, 9, 17, 25, 33


def values(plan, sweep: int = 0) -> list[int]:  # noqa: ANN001
    return plan.sweeps[sweep].value_list()


def test_stored_points_are_left_out_per_dtype():
    bf16, fp32 = (sweep_curve(FLAT, d) for d in FLAT.dtypes)
    left = remaining(PLAN, {bf16: {8: 1.0, 24: 1.0, 99: 1.0}, fp32: {8: 2.0, 16: 2.0, 24: 2.0, 32: 2.0}}, adaptive=True)
    assert left.skipped == 6 and left.known == {}  # 99 is no point of the plan
    assert left.plan is not None
    first = left.plan.sweeps[0]
    assert [d.value for d in first.dtypes] == ["bfloat16"] and first.value_list() == [16, 32]  # fp32: all stored
    assert left.plan.sweeps[1] == ADAPTIVE  # nothing of it stored: as it was
    assert left.skip_line() == "skipping 6 points already stored for this platform"
    assert remaining(PLAN, {}, adaptive=True).plan == PLAN and remaining(PLAN, {}, adaptive=True).skip_line() is None


def test_a_stored_coarse_grid_decides_the_refinement_as_the_runner_would():
    """The coarse medians are stored: a step between 17 and 25 (+50 %) is refined, the flat stretches are not."""
    key = sweep_curve(ADAPTIVE, ADAPTIVE.dtypes[0])
    medians = {1: 10.0, 9: 10.2, 17: 10.4, 25: 15.6, 33: 15.8, 20: 12.0}  # and one refined point from before
    known = {key: medians}
    left = remaining(PLAN.model_copy(update={"sweeps": [ADAPTIVE]}), known, adaptive=True)
    assert left.plan is not None and left.skipped == 6
    (sweep,) = left.plan.sweeps
    assert sweep.adaptive is None and sweep.value_list() == [18, 19, 21, 22, 23, 24]
    # --exhaustive times the whole grid, stored points left out.
    exhaustive = remaining(PLAN.model_copy(update={"sweeps": [ADAPTIVE]}), known, adaptive=False)
    assert exhaustive.plan is not None and exhaustive.plan.sweeps[0].value_list() == [v for v in range(1, 34) if v not in medians]


def test_a_partly_stored_coarse_grid_stays_adaptive_and_carries_its_stored_medians():
    key = sweep_curve(ADAPTIVE, ADAPTIVE.dtypes[0])
    left = remaining(PLAN.model_copy(update={"sweeps": [ADAPTIVE]}), {key: {1: 10.0, 9: 10.1}}, adaptive=True)
    assert left.plan is not None and left.plan.sweeps[0] == ADAPTIVE  # still adaptive: the runner refines it
    assert left.skipped == 2 and left.known == {key: {1: 10.0, 9: 10.1}}
    assert left.skip_line() == "skipping 2 points already stored for this platform"
    assert planned_points(left.plan, adaptive=True, known=left.known) == len(COARSE) - 2


def test_a_stopped_adaptive_sweep_continues_where_it_stopped_and_refines_as_a_whole_run():
    """On a simulated GPU's lattice: the re-run times only the coarse values not stored, and refines
    the same stretches as one uninterrupted run, no stored point timed twice."""
    from gac.agent.runner import PlanRunner
    from gac.agent.simulated_gpu import SimulatedGpu
    from gac.agent.timing import CudaTimer

    plan = loads_plan("""
name: lattice
sweeps:
  - {op: gemm, dtypes: [float16], axis: n, fixed: {m: 256, k: 256}, values: {start: 64, stop: 160, step: 1},
     adaptive: {coarse_step: 6, jump: 0.1}}
""")
    coarse = plan.sweeps[0].coarse_values()

    def run(plan, stored=None):  # noqa: ANN001, ANN202
        sim = SimulatedGpu(seed=3)
        result = PlanRunner(CudaTimer(queue=sim), "cpu", build=sim.build_kernel, stored=stored).run(plan)
        return {m.shape["n"]: m.median_us for m in result.measurements}

    whole = run(plan)
    refined = set(whole) - set(coarse)
    assert set(coarse) <= set(whole) and refined  # the lattice's steps were refined
    key = sweep_curve(plan.sweeps[0], plan.sweeps[0].dtypes[0])
    stopped = {x: whole[x] for x in coarse[: len(coarse) // 2]}  # the first half of the grid, then a stop
    left = remaining(plan, {key: stopped}, adaptive=True)
    assert left.plan is not None and left.skipped == len(stopped)
    again = run(left.plan, left.known)
    assert not set(again) & set(stopped)  # nothing stored is timed again
    assert set(again) == set(whole) - set(stopped)  # the rest of the grid, and the same refinement


def test_points_waiting_in_the_spool_count_as_stored_for_their_server_only(tmp_path):
    spool, here, other = Spool(tmp_path), f.platform(), f.platform(device_name="Other CPU")
    spool.add("http://svc/", f.batch(3, start=8, plat=here))  # n = 8, 9, 10
    spool.add("http://elsewhere", f.batch(2, start=20, plat=here))
    spool.add("http://svc", f.batch(2, start=30, plat=other))
    known = known_in_spool(spool, "http://svc", here.fingerprint())
    assert known == {("gemm", "bfloat16", "n", "k=256,m=128"): {8: 11.0, 9: 11.125, 10: 11.25}}


def test_a_jobs_earlier_attempts_are_its_runs_unflagged_points_on_the_service_and_in_the_spool(client, ingest_token, tmp_path):
    """What a job's next attempt leaves out: the points of its run, through every page, but not a flagged
    one (timed on a busy core: it is timed again) and not another run's."""
    run, other = uuid.uuid4(), uuid.uuid4()
    stored = f.batch(6, start=8, run_id=run)  # n = 8..13
    stored.measurements[2] = stored.measurements[2].model_copy(update={"quality": "busy"})  # n = 10
    for b in (stored, f.batch(3, start=40, run_id=other)):
        assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    known = known_in_run(client, "http://testserver", ingest_token, run)
    assert known == {("gemm", "bfloat16", "n", "k=256,m=128"): {n: 11.0 + (n - 8) / 8 for n in (8, 9, 11, 12, 13)}}
    assert known_in_run(client, "http://testserver", ingest_token, uuid.uuid4()) == {}

    spool = Spool(tmp_path)
    waiting = f.batch(3, start=20, run_id=run)
    waiting.measurements[0] = waiting.measurements[0].model_copy(update={"quality": "bimodal"})
    spool.add("http://svc", waiting)
    spool.add("http://svc", f.batch(2, start=30, run_id=other))
    here = waiting.platform.fingerprint()
    assert known_in_spool(spool, "http://svc", here, run) == {("gemm", "bfloat16", "n", "k=256,m=128"): {21: 12.625, 22: 12.75}}


def test_the_spool_holds_each_batch_until_the_service_has_it(tmp_path):
    """Written before the send (a SIGKILL mid-send leaves it there), taken out once sent, kept once when not."""
    spool = Spool(tmp_path)
    in_spool_when_sent: list[bool] = []
    answers = iter([201, 503])

    def service(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        in_spool_when_sent.append(any(r["batch"]["id"] == body["id"] for r in spool.records()))
        status = next(answers)
        return httpx.Response(
            status,
            json={"batch_id": body["id"], "platform_id": 1, "fingerprint": "f", "inserted": 2, "duplicates": 0, "replay": False}
            if status == 201
            else {},
        )

    d = Deliverer(
        "http://svc",
        "tok",
        f.platform(),
        RunInfo(id=uuid.uuid4(), agent="t"),
        spool=spool,
        batch_size=2,
        retries=0,
        client=httpx.Client(transport=httpx.MockTransport(service)),
    )
    d.add_many([f.measurement(n) for n in (8, 16)])
    assert in_spool_when_sent == [True] and spool.records() == []  # sent: taken out
    d.add_many([f.measurement(n) for n in (24, 32)])
    assert in_spool_when_sent == [True, True]
    (rec,) = spool.records()  # refused for now (503): kept, once
    assert [m.median_us for m in read_document(rec["batch"]).measurements] == [13.0, 14.0]
    assert (d.committed, d.stats.spooled_rows, d.stats.inserted) == (4, 2, 2)


def test_a_sent_batch_is_taken_out_of_the_spool_behind_later_records(tmp_path):
    spool = Spool(tmp_path)
    first = spool.add("http://svc", f.batch(1, start=1))
    spool.add("http://svc", f.batch(1, start=2))  # written after it: the spool is rewritten without it
    spool.remove(first)
    assert [read_document(r["batch"]).measurements[0].x for r in spool.records()] == [2]


def test_rows_are_committed_by_time_as_well_as_by_count(tmp_path):
    run = RunInfo(id=uuid.uuid4(), agent="t")
    every_row = BatchFileWriter(tmp_path / "a.jsonl", f.platform(), run, batch_size=100, commit_every_s=0.0)
    by_count = BatchFileWriter(tmp_path / "b.jsonl", f.platform(), run, batch_size=3, commit_every_s=3600.0)
    for n in range(1, 8):
        every_row.add(f.measurement(n))
        by_count.add(f.measurement(n))
    assert (every_row.batches, every_row.committed) == (7, 7)  # each row on disk as it came
    assert (by_count.batches, by_count.committed) == (2, 6)  # the seventh waits for close()
    by_count.close()
    assert (by_count.batches, by_count.committed) == (3, 7)


def test_a_job_is_not_complete_while_an_earlier_attempts_points_wait_in_the_spool(tmp_path):
    """The next attempt skips what an earlier one spooled; if the drain could not send it, the attempt
    must not complete the job (it fails, and the job is queued again)."""
    from gac.agent.cli import job_waiting_in_spool

    spool, run = Spool(tmp_path), uuid.uuid4()
    waiting = f.batch(3, start=20, run_id=run)
    here = waiting.platform.fingerprint()
    assert job_waiting_in_spool(spool, "http://svc", here, run) is None
    spool.add("http://svc", f.batch(2, start=30))  # another run's: not this job's
    assert job_waiting_in_spool(spool, "http://svc", here, run) is None
    entry = spool.add("http://svc", waiting)
    assert job_waiting_in_spool(spool, "http://svc", here, run) == "3 points of this job wait in the spool"
    assert job_waiting_in_spool(spool, "http://elsewhere", here, run) is None
    spool.remove(entry)  # sent at last
    assert job_waiting_in_spool(spool, "http://svc", here, run) is None
