"""Running plans on this CPU, and the delivery client's spool and retry policy."""

from __future__ import annotations

import json
import signal
import socket
import time
import uuid

import httpx
import pytest
import torch

from gac.agent.delivery import (
    BatchFileWriter,
    BatchSender,
    Deliverer,
    DeliveryStats,
    Spool,
    document_rows,
    make_batches,
    read_batch_file,
    read_document,
)
from gac.agent.interrupt import shielded, stop_signals
from gac.agent.platform import detect_platform
from gac.agent.runner import PlanRunner, run_plan, values_to_refine
from gac.agent.timing import CpuTimer
from gac.contracts.measurements import Batch, RunInfo
from gac.contracts.plans import loads_plan
from tests.fixtures.memory import HUGE, needs_refused_allocations

TINY = """
name: tiny
timing: {time_cap_ms: 20, warmup_ms: 1, max_samples: 50}
sweeps:
  - {op: gemm, dtypes: [float32, bfloat16], axis: n, fixed: {m: 8, k: 16}, values: {start: 8, stop: 24, step: 8}}
  - {op: gemv, dtypes: [float32], axis: k, fixed: {n: 16}, values: [16, 17]}
"""


@pytest.fixture(scope="module")
def timer():
    before = torch.get_num_threads()
    yield CpuTimer(threads=1)
    torch.set_num_threads(before)


def closed_port_url() -> str:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_run_plan_emits_one_measurement_per_point(timer):
    plan = loads_plan(TINY)
    seen, progress = [], []
    result = run_plan(plan, timer, "cpu", on_progress=progress.append, on_measurement=seen.append)
    assert len(result.measurements) == plan.n_points() == 8 == len(seen)
    assert [p.done for p in progress] == list(range(1, 9)) and progress[-1].total == 8
    assert len({m.id for m in seen}) == 8
    m = seen[0]
    assert m.timer == "cpu-perf-counter+preempt-filter+cold-weights" and m.n >= 10 and m.p10_us <= m.median_us <= m.p90_us
    assert {(m.op.value, m.dtype.value, m.x) for m in seen} == {(p.op.value, p.dtype.value, p.shape[p.axis]) for p in plan.points()}


def test_points_are_timed_in_a_shuffled_order_each_once(timer):
    """A noisy spell must not land on a run of neighbouring dims: the order is shuffled (seeded), never the set."""
    plan = loads_plan("""
name: order
timing: {time_cap_ms: 2, warmup_ms: 0, min_samples: 10, max_samples: 10}
sweeps:
  - {op: gemv, dtypes: [float32], axis: k, fixed: {n: 8}, values: {start: 8, stop: 40, step: 1}}
""")
    in_plan = [p.shape[p.axis] for p in plan.points()]

    def order(seed):
        return [m.x for m in PlanRunner(timer, "cpu", shuffle_seed=seed).run(plan).measurements]

    shuffled = order(0)
    assert sorted(shuffled) == sorted(in_plan) and shuffled != in_plan
    assert order(0) == shuffled  # seeded: a run can be repeated
    assert order(None) == in_plan


@needs_refused_allocations
def test_failed_point_is_reported_not_raised(timer):
    # 2^20 x 2^20 fp32 cannot be allocated here: the point fails, the run goes on.
    plan = loads_plan(f"""
name: oom
timing: {{time_cap_ms: 20, warmup_ms: 1}}
sweeps:
  - {{op: gemm, dtypes: [float32], axis: n, fixed: {{m: {HUGE}, k: {HUGE}}}, values: [{HUGE}]}}
  - {{op: gemv, dtypes: [float32], axis: k, fixed: {{n: 8}}, values: [8]}}
""")
    result = run_plan(plan, timer)
    assert len(result.failures) == 1 and len(result.measurements) == 1
    assert "Error" in result.failures[0].error


def test_adaptive_refinement_fills_only_around_steps():
    full = list(range(64, 161))
    coarse = full[::8] + ([full[-1]] if full[-1] not in full[::8] else [])
    step = {v: (100.0 if v <= 96 else 130.0) for v in full}  # one step between 96 and 97
    fill = values_to_refine(full, coarse, {v: step[v] for v in coarse}, jump=0.08)
    assert fill == list(range(97, 104))  # between coarse 96 and 104 only
    assert values_to_refine(full, coarse, {v: 100.0 for v in coarse if v != 128}, 0.08) == [
        v for v in full if 120 < v < 136 and v != 128
    ]  # a failed coarse point is refined around too


def test_adaptive_run_times_a_subset(timer):
    plan = loads_plan("""
name: adaptive
timing: {time_cap_ms: 20, warmup_ms: 1, max_samples: 50}
sweeps:
  - {op: gemv, dtypes: [float32], axis: k, fixed: {n: 8}, values: {start: 8, stop: 72, step: 1}, adaptive: {coarse_step: 16, jump: 5.0}}
""")
    result = run_plan(plan, timer)
    # jump 500 %: no step that large on a tiny GEMV, so only the coarse grid is timed
    assert sorted(m.x for m in result.measurements) == [8, 24, 40, 56, 72]
    assert len(run_plan(plan, timer, adaptive=False).measurements) == 65


def _measurements(n=5):
    plan = loads_plan(TINY)
    return run_plan(plan, CpuTimer(threads=torch.get_num_threads())).measurements[:n]


def test_unreachable_server_spools_everything(tmp_path):
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    rows = _measurements(5)
    spool = Spool(tmp_path)
    d = Deliverer(closed_port_url(), "t", platform, run, spool=spool, batch_size=2, retries=1, backoff_s=0.01)
    d.add_many(rows)
    d.close()
    assert d.stats.spooled_batches == 3 and d.stats.spooled_rows == 5 and d.stats.sent_batches == 0
    recs = spool.records()
    assert [document_rows(r["batch"]) for r in recs] == [2, 2, 1]
    spooled = [read_document(r["batch"]) for r in recs]  # spooled lines are valid wire batches
    ids = [m.id for b in spooled for m in b.measurements]
    assert ids == [m.id for m in rows]  # every row, in order, with its own id kept


def test_batches_another_agent_sharing_the_spool_sent_are_not_said_to_wait(tmp_path):
    """Two agents on one machine share a spool: what the other drained while this run went on is sent, not waiting."""
    down = {"now": True}

    def answer(request: httpx.Request) -> httpx.Response:
        if down["now"]:
            raise httpx.ConnectError("connection refused", request=request)
        return _accepted(request)

    d, spool = _deliverer(tmp_path, answer, retries=0)
    d.add_many(_measurements(4))  # two batches, both spooled: the service is down
    assert d.stats.waiting_rows == 4 and len(spool.records()) == 2
    down["now"] = False
    other = Spool(tmp_path)  # the other agent's, on the same directory: its flush sends both
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        other.drain(lambda doc: BatchSender("http://svc", "tok", client=client).send_document(doc), "http://svc", DeliveryStats())
    assert spool.records() == []
    down["now"] = True  # this run's close() cannot reach the service: it only finds the spool empty
    d.close()
    assert d.stats.waiting_rows == 0 and d.kept_where() == "sent to http://svc"


def test_a_stop_mid_send_leaves_the_batch_spooled_says_so_and_does_not_wait_on_the_service(tmp_path):
    """A signal while a batch waits on a service that went down: the batch stays in the spool and counts as
    waiting there (the 'kept N (M of them spooled for URL)' line), and closing on the way out does not
    drain the spool through the whole retry schedule (seconds of backoff after the user asked to stop)."""
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    rows = _measurements(2)
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the signal arrives while the batch's request is under way
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    spool = Spool(tmp_path)
    d = Deliverer("http://svc", "tok", platform, run, spool=spool, batch_size=2, retries=4, backoff_s=0.001, client=client)
    with pytest.raises(KeyboardInterrupt):
        d.add_many(rows)  # two rows fill a batch, which is sent at once
    d.close()  # what a stopped run does
    assert len(calls) == 1  # no drain on the way out: the next run (or `gac agent flush`) sends it
    assert d.stats.waiting_rows == 2 and len(spool.records()) == 1
    assert d.kept_where() == "2 of them spooled for http://svc: `gac agent flush` sends them"  # none of it reached the service


def _accepted(request: httpx.Request) -> httpx.Response:
    """The service's answer to a batch it stored."""
    body = json.loads(request.content)
    inserted = document_rows(body)
    return httpx.Response(
        201, json={"batch_id": body["id"], "platform_id": 1, "fingerprint": "f", "inserted": inserted, "duplicates": 0, "replay": False}
    )


def _deliverer(tmp_path, answer, **policy):
    """A deliverer of batches of two rows to a service that answers with `answer` (which may send the process
    stop signals while the request is under way), and its spool."""
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    client = httpx.Client(transport=httpx.MockTransport(answer))
    spool = Spool(tmp_path)
    d = Deliverer("http://svc", "tok", platform, run, spool=spool, batch_size=2, client=client, **({"backoff_s": 0.001} | policy))
    return d, spool


def _stopped_while_sending(tmp_path, answer, rows=2, **policy):
    """`rows` rows delivered under the run's stop handlers (see _deliverer); the deliverer closed the way a
    stopped run closes it, and its spool."""
    d, spool = _deliverer(tmp_path, answer, **policy)
    with stop_signals(), pytest.raises(KeyboardInterrupt):
        d.add_many(_measurements(rows))  # every two rows fill a batch, which is sent at once
    d.close()
    return d, spool


def test_a_stop_while_a_batch_is_sent_waits_for_the_answer_and_says_the_batch_was_sent(tmp_path):
    """SIGTERM while the service is storing the batch: the run stops once the answer is in, so the batch is
    out of the spool and is said to be sent (not 'spooled', which would have `gac agent flush` send it again)."""
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        signal.raise_signal(signal.SIGTERM)  # the handler runs before this call returns
        return _accepted(request)

    d, spool = _stopped_while_sending(tmp_path, answer)
    assert len(calls) == 1 and d.stats.sent_batches == 1 and d.stats.inserted == 2
    assert d.stats.waiting_rows == 0 and spool.records() == []
    assert d.kept_where() == "sent to http://svc"


def test_a_second_stop_while_a_batch_is_sent_stops_at_once_and_leaves_it_spooled(tmp_path):
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        signal.raise_signal(signal.SIGTERM)  # held back until the answer is in...
        signal.raise_signal(signal.SIGINT)  # ... unless the user insists: raised here
        return _accepted(request)

    d, spool = _stopped_while_sending(tmp_path, answer)
    assert len(calls) == 1 and d.stats.sent_batches == 0
    assert d.stats.waiting_rows == 2 and len(spool.records()) == 1
    assert d.kept_where() == "2 of them spooled for http://svc: `gac agent flush` sends them"  # none of it reached the service


def test_a_stop_while_a_batch_is_sent_does_not_wait_to_try_it_again(tmp_path):
    """The service is restarting (503) when the stop comes: the minute's wait before the next try is cut
    short, and the batch stays in the spool."""
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        signal.raise_signal(signal.SIGTERM)
        return httpx.Response(503, json={"error": "Unavailable", "detail": "restarting"})

    d, spool = _stopped_while_sending(tmp_path, answer, retries=4, backoff_s=60.0, max_backoff_s=60.0)
    assert len(calls) == 1  # no later try, on the way out either: the next run (or `gac agent flush`) sends it
    assert d.stats.waiting_rows == 2 and len(spool.records()) == 1


def test_a_stop_where_the_run_must_report_first_still_retries_the_send(tmp_path):
    """Where a stop must wait for more than the send (a job's last batch, then its report: a block that is not
    breakable), the send's retries go on as usual, and the stop comes once the whole block is done."""
    calls, reported = [], []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGTERM)
            return httpx.Response(503, json={"error": "Unavailable", "detail": "restarting"})
        return _accepted(request)

    d, _ = _deliverer(tmp_path, answer)
    d.add_many(_measurements(1))
    with stop_signals(), pytest.raises(KeyboardInterrupt), shielded():
        d.close()  # the partial batch: sent on the second try
        reported.append(True)  # what the run must do before it stops (the job's report)
    assert len(calls) == 2 and reported == [True]
    assert d.stats.sent_batches == 1 and d.stats.waiting_rows == 0


def test_on_the_way_out_a_stop_while_a_batch_is_sent_stops_at_once(tmp_path):
    """The run was stopped while timing; on its way out it sends its last batch, and the user presses Ctrl-C
    again: that stop is not held back (the batch stays spooled, and is said to)."""
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        signal.raise_signal(signal.SIGINT)
        return _accepted(request)

    d, spool = _deliverer(tmp_path, answer)
    d.add_many(_measurements(1))
    with stop_signals():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)  # stopped while timing
        with pytest.raises(KeyboardInterrupt):
            d.close()
    assert len(calls) == 1 and d.stats.sent_batches == 0 and d.stats.waiting_rows == 1 and len(spool.records()) == 1


def test_a_stop_while_the_spool_drains_keeps_the_rest_for_later(tmp_path):
    """The service comes back after three batches were spooled: a batch sent then drains the spool behind it.
    A stop during that send waits for its answer, then stops: the three stay spooled, in order, for the way
    out (where another stop is not held back) or for later."""
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content)["id"])
        if len(calls) <= 3:
            raise httpx.ConnectError("connection refused", request=request)
        if len(calls) == 4:
            signal.raise_signal(signal.SIGTERM)
        return _accepted(request)

    d, spool = _deliverer(tmp_path, answer, retries=0, offline_probe_s=0.0)  # every batch tried
    with stop_signals(), pytest.raises(KeyboardInterrupt):
        d.add_many(_measurements(8))
    assert len(calls) == 4 and d.stats.sent_batches == 1 and d.stats.drained_batches == 0
    assert [r["batch"]["id"] for r in spool.records()] == calls[:3] and d.stats.waiting_rows == 6
    d.close()  # the way out: the service is up, so the spool is drained
    assert calls[4:] == calls[:3] and spool.records() == [] and d.stats.waiting_rows == 0


def test_retry_policy_and_permanent_rejection(tmp_path):
    """The client's policy against scripted HTTP answers (the real service is in test_e2e)."""
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    rows = _measurements(2)
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.headers["content-type"] == "application/vnd.gac.batch-columns+json"
        calls.append((body["id"], request.headers["authorization"]))
        if len(calls) == 1:
            return httpx.Response(503, json={"error": "Unavailable", "detail": "db restarting"})
        if len(calls) == 2:
            return httpx.Response(429, headers={"retry-after": "0"}, json={"error": "TooMany"})
        if len(calls) == 3:
            return _accepted(request)
        return httpx.Response(422, json={"error": "ValidationError", "detail": "measurements.0.shape: bad"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    spool = Spool(tmp_path)
    said: list[str] = []
    d = Deliverer("http://svc", "tok", platform, run, spool=spool, batch_size=1, retries=3, backoff_s=0.001, client=client, log=said.append)
    d.add_many(rows)
    d.close()
    # The operator is told where the rejected rows are and the command that resends them.
    assert any(f"gac ingest {spool.rejected_path} --server http://svc" in line for line in said), said
    assert calls[0][1] == "Bearer tok"
    assert calls[0][0] == calls[1][0] == calls[2][0]  # the same batch id on every retry
    assert d.stats.inserted == 1 and d.stats.rejected_batches == 1 and d.stats.spooled_batches == 0
    assert len(calls) == 4  # a 422 is not retried
    rejected = [json.loads(line) for line in spool.rejected_path.read_text().splitlines()]
    assert read_document(rejected[0]["batch"]).measurements[0].id == rows[1].id and "422" in rejected[0]["error"]


def test_results_file_round_trip(tmp_path):
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    rows = _measurements(5)
    w = BatchFileWriter(tmp_path / "r.jsonl", platform, run, batch_size=3)
    for m in rows:
        w.add(m)
    w.close()
    (tmp_path / "r.jsonl").open("a").write("{not json\n")
    parsed = list(read_batch_file(tmp_path / "r.jsonl"))
    batches = [b for _, b, _ in parsed if b is not None]
    assert [len(b.measurements) for b in batches] == [3, 2]
    assert [m.id for b in batches for m in b.measurements] == [m.id for m in rows]
    assert parsed[-1][1] is None and parsed[-1][2].startswith("line 3")
    assert [len(b.measurements) for b in make_batches(platform, run, rows, batch_size=2)] == [2, 2, 1]


def test_committed_points_count_a_point_timed_again_once(tmp_path):
    platform = detect_platform("cpu")
    rows = _measurements(3)
    again = rows[1].model_copy(update={"id": uuid.uuid4()})  # the gate's second run of the same point
    w = BatchFileWriter(tmp_path / "r.jsonl", platform, RunInfo(id=uuid.uuid4(), agent="test"), batch_size=3)
    for m in [*rows, again]:
        w.add(m)
    assert (w.committed, w.committed_points) == (3, 3)  # one batch so far: the last row waits for its commit
    w.close()
    assert (w.committed, w.committed_points) == (4, 3)


def test_batch_document_is_by_column_without_nulls_and_reads_back_equal(timer):
    from gac.agent.delivery import batch_document

    platform = detect_platform()
    run = RunInfo(id=uuid.uuid4(), agent="doc-test")
    result = run_plan(loads_plan(TINY), timer)
    batch = Batch(id=uuid.uuid4(), platform=platform, run=run, measurements=result.measurements)
    doc = json.loads(json.dumps(batch_document(batch)))

    assert doc["schema"] == "gac.batch-columns/v1"
    assert len(doc["measurements"]["median_us"]) == document_rows(doc) == len(batch.measurements)
    assert any(m.backend is None for m in batch.measurements)  # there were nulls to leave out...
    assert "backend" not in doc["measurements"]  # ...and an all-null column is left out whole
    assert read_document(doc) == batch
    rows_doc = batch.model_dump(mode="json", by_alias=True)
    assert document_rows(rows_doc) == len(batch.measurements) and read_document(rows_doc) == batch


def test_service_older_than_the_column_layout_gets_batches_by_row(tmp_path):
    """A service that predates the column layout refuses it naming body.schema (as ours did):
    the agent re-sends that batch by row and sends every later one by row; other refusals stand."""
    platform = detect_platform("cpu")
    run = RunInfo(id=uuid.uuid4(), agent="test")
    rows = _measurements(3)
    seen: list[str] = []

    def old_service(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["content-type"])
        body = json.loads(request.content)
        if request.headers["content-type"] != "application/json":
            return httpx.Response(
                422,
                json={
                    "error": "ValidationError",
                    "detail": [{"field": "body.schema", "message": "Input should be 'gac.batch/v1'", "type": "literal_error"}],
                },
            )
        batch = Batch.model_validate(body)  # the rows layout, whole
        if batch.measurements[0].id == rows[2].id:  # a refusal for another reason is final
            return httpx.Response(
                422,
                json={"error": "ValidationError", "detail": [{"field": "body.measurements.0.median_us", "message": "bad", "type": "x"}]},
            )
        return httpx.Response(
            201,
            json={
                "batch_id": str(batch.id),
                "platform_id": 1,
                "fingerprint": "f",
                "inserted": len(batch.measurements),
                "duplicates": 0,
                "replay": False,
            },
        )

    spool = Spool(tmp_path)
    client = httpx.Client(transport=httpx.MockTransport(old_service))
    with Deliverer("http://old", "tok", platform, run, spool=spool, batch_size=1, retries=0, client=client) as d:
        d.add_many(rows)
    assert seen == ["application/vnd.gac.batch-columns+json", "application/json", "application/json", "application/json"]
    assert d.stats.inserted == 2 and d.stats.rejected_batches == 1 and d.stats.spooled_batches == 0
    rejected = [json.loads(line) for line in spool.rejected_path.read_text().splitlines()]
    assert read_document(rejected[0]["batch"]).measurements[0].id == rows[2].id


def test_retry_after_is_waited_for_and_4xx_is_never_retried(monkeypatch):
    """The backoff is never shorter than the service's Retry-After; a 4xx other than 408/429 is final at once.
    The waits are recorded (tenacity's sleep replaced), not slept through."""
    from gac.agent.delivery import BatchSender, DeliveryError, RejectedError, RetryPolicy

    waits: list[float] = []
    retrying = RetryPolicy.retrying
    monkeypatch.setattr(RetryPolicy, "retrying", lambda self, *a, **k: retrying(self, *a, **k).copy(sleep=waits.append))
    answers = [
        httpx.Response(503, headers={"retry-after": "0.3"}, json={"error": "Unavailable"}),
        httpx.Response(
            201, json={"batch_id": str(uuid.uuid4()), "platform_id": 1, "fingerprint": "f", "inserted": 1, "duplicates": 0, "replay": False}
        ),
        httpx.Response(400, json={"error": "BadRequest"}),
        httpx.Response(500, json={"error": "Internal"}),
    ]
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return answers[min(len(calls), len(answers)) - 1]

    sender = BatchSender(
        "http://svc/", "tok", RetryPolicy(retries=1, backoff_s=0.001), client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert sender.send_document({"id": "a"}).inserted == 1
    assert len(calls) == 2 and len(waits) == 1
    assert waits[0] >= 0.3  # the 1 ms backoff (+-50 %) was raised to the service's Retry-After
    with pytest.raises(RejectedError):
        sender.send_document({"id": "b"})
    assert len(calls) == 3  # not retried
    with pytest.raises(DeliveryError, match="could not deliver batch c to http://svc: HTTP 500"):
        sender.send_document({"id": "c"})
    assert len(calls) == 5  # one retry, then given up
    assert len(waits) == 2 and waits[1] < 0.3  # no Retry-After on that 500: the policy's own short backoff


def test_a_run_whose_service_went_away_midway_says_what_was_sent_and_what_waits(tmp_path):
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return _accepted(request)
        raise httpx.ConnectError("connection refused", request=request)

    d, spool = _deliverer(tmp_path, answer, retries=0)
    d.add_many(_measurements(4))  # two batches: the first stored, the second spooled
    assert d.stats.sent_batches == 1 and d.stats.waiting_rows == 2 and len(spool.records()) == 1
    assert d.kept_where() == "sent to http://svc, 2 of them spooled: `gac agent flush` sends them"


def test_with_the_service_down_a_batch_is_tried_once_a_probe_interval_and_the_last_one_always(tmp_path):
    """A hung service or a network dropping packets costs a call's timeout each try: while the service is down the
    timing is held up by one try per probe interval, not one per batch; the run's last batch is still tried."""
    calls = []

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectTimeout("no answer to the connection", request=request)

    d, spool = _deliverer(tmp_path, down, retries=0)
    d.add_many(_measurements(6))  # three batches in well under the probe interval: the first tried, two spooled untried
    assert len(calls) == 1 and d.stats.waiting_rows == 6 and len(spool.records()) == 3
    d.offline_probe_s = 0.0  # the interval passed: the next batch is tried
    d.add_many(_measurements(2))
    assert len(calls) == 2
    d.offline_probe_s = 1e9
    d.add_many(_measurements(1))
    d.close()  # the partial last batch: tried, whatever the interval
    assert len(calls) == 3 and d.stats.waiting_rows == 9 and len(spool.records()) == 5


def test_a_connection_waits_a_few_seconds_whatever_the_call_s_timeout():
    """The agent's client caps the connect phase (a service that is up answers a connect in well under a second);
    the read keeps the call's own timeout."""
    from gac.agent.http_client import CONNECT_AT_MOST_S, StopSafeClient

    seen = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200)

    with StopSafeClient(timeout=30.0, transport=httpx.MockTransport(record)) as client:
        client.get("http://svc/a")
        client.get("http://svc/b", timeout=None)
        client.get("http://svc/c", timeout=httpx.Timeout(2.0))
    assert [(t["connect"], t["read"]) for t in seen] == [(CONNECT_AT_MOST_S, 30.0), (CONNECT_AT_MOST_S, None), (2.0, 2.0)]


def test_a_service_back_within_the_probe_interval_gets_the_spool_at_close_with_no_batch_left_to_try(tmp_path):
    """The service is down for one batch and back for the next two, which the probe interval spools untried; the run
    ends with no partial batch: close() probes with the spool's first batch and drains the rest (else its job would be
    failed with the service up, its points waiting in the spool)."""
    state = {"down": True}
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if state["down"]:
            raise httpx.ConnectError("connection refused", request=request)
        return _accepted(request)

    d, spool = _deliverer(tmp_path, answer, retries=0)
    rows = _measurements(6)
    d.add_many(rows[:2])  # tried: down
    state["down"] = False
    d.add_many(rows[2:])  # two full batches within the interval: spooled untried
    assert len(calls) == 1 and len(spool.records()) == 3
    d.close()
    assert len(calls) == 4 and spool.records() == [] and d.stats.waiting_rows == 0 and d.kept_where() == "sent to http://svc"


def test_a_second_stop_while_the_service_is_sent_to_leaves_the_results_file_whole(tmp_path):
    """--out beside --server: the file is written first on the way out (it never waits), so a second stop during the
    last send does not keep the file's last rows from it."""
    from gac.agent.cli import _Sinks
    from gac.agent.delivery import BatchFileWriter, read_batch_file

    def stopped_again(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt  # a second stop, cutting the send

    d, _ = _deliverer(tmp_path, stopped_again, retries=0)
    d.batch_size = 100
    out = tmp_path / "rows.jsonl"
    writer = BatchFileWriter(out, d.platform, d.run, batch_size=100)
    sinks = _Sinks(d, writer)
    rows = _measurements(3)
    for m in rows:
        sinks.add(m)
    with pytest.raises(KeyboardInterrupt):
        sinks.close()
    assert [m.id for _, batch, _ in read_batch_file(out) if batch is not None for m in batch.measurements] == [m.id for m in rows]


def test_a_try_that_timed_out_is_not_repeated_while_measuring_and_a_probe_waits_a_few_seconds(tmp_path):
    """A service that hangs: the batch's try times out and is not tried again inline (four more 30 s timeouts would
    hold the timing up for minutes); the service found down, a probe waits PROBE_TIMEOUT_S, not the client's timeout.
    A refused connection, quick to learn, is still retried."""
    from gac.agent.delivery.deliverer import PROBE_TIMEOUT_S

    seen: list[tuple[str, float | None]] = []
    failure = {"kind": httpx.ReadTimeout}

    def hung(request: httpx.Request) -> httpx.Response:
        seen.append((failure["kind"].__name__, request.extensions["timeout"]["read"]))
        raise failure["kind"]("no answer", request=request)

    d, _ = _deliverer(tmp_path, hung, retries=3, offline_probe_s=0.0)
    d.add_many(_measurements(2))  # up: one try, timed out, not repeated
    assert [k for k, _ in seen] == ["ReadTimeout"]
    d.add_many(_measurements(2))  # down: a probe, with its own short timeout
    assert seen[1] == ("ReadTimeout", PROBE_TIMEOUT_S)

    failure["kind"] = httpx.ConnectError
    d2, _ = _deliverer(tmp_path / "refused", hung, retries=3)
    d2.add_many(_measurements(2))
    assert [k for k, _ in seen[2:]] == ["ConnectError"] * 4  # the first try and three retries


def test_each_probe_that_fails_doubles_the_wait_for_the_next_up_to_a_minute(tmp_path):
    from gac.agent.delivery.deliverer import OFFLINE_PROBE_MAX_S, OFFLINE_PROBE_S

    calls = []

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    d, _ = _deliverer(tmp_path, down, retries=0)
    rows = _measurements(2)
    d.add_many(rows)  # found down
    waits = []
    for _ in range(5):  # how long after the last try the next batch is tried
        tried = len(calls)
        for ago in range(0, 200):
            d._tried_at = time.monotonic() - ago  # the last try, `ago` seconds back
            d.add_many(rows)  # a batch (the same rows again: the service is not there to mind)
            if len(calls) > tried:
                waits.append(ago)
                break
    assert waits == [OFFLINE_PROBE_S, 2 * OFFLINE_PROBE_S, 4 * OFFLINE_PROBE_S, OFFLINE_PROBE_MAX_S, OFFLINE_PROBE_MAX_S]


def test_while_measuring_a_batch_waits_for_its_answer_ten_times_the_service_s_slowest_lately(tmp_path, monkeypatch):
    """A service that answered in 10 ms and then hangs holds the timing up PROBE_TIMEOUT_S, not the 30 s timeout; one
    that answers in 2 s gets 20 s; none gets more than the timeout. Before any answer, the client's own timeout."""
    from gac.agent.delivery import sender
    from gac.agent.delivery.deliverer import ANSWER_FACTOR, PROBE_TIMEOUT_S

    clock = {"now": 1000.0}
    monkeypatch.setattr(sender.time, "monotonic", lambda: clock["now"])
    service = {"takes_s": 0.01, "hangs": False}
    waits: list[float | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        waits.append(request.extensions["timeout"]["read"])
        if service["hangs"]:
            raise httpx.ReadTimeout("no answer", request=request)
        clock["now"] += service["takes_s"]  # the answer takes this long
        return _accepted(request)

    client = httpx.Client(transport=httpx.MockTransport(answer), timeout=25.0)
    run = RunInfo(id=uuid.uuid4(), agent="test")
    d = Deliverer("http://svc", "tok", detect_platform("cpu"), run, spool=Spool(tmp_path), batch_size=2, client=client, timeout_s=30.0)
    rows = _measurements(2)
    d.add_many(rows)  # the first batch: nothing known of the service yet
    d.add_many(rows)
    assert waits == [25.0, PROBE_TIMEOUT_S]  # 10 x 10 ms is below the floor

    service["takes_s"] = 2.0
    d.add_many(rows)  # a slow answer: the next batch waits ten times as long
    d.add_many(rows)
    assert waits[3] == pytest.approx(ANSWER_FACTOR * 2.0)
    service["takes_s"] = 4.0
    d.add_many(rows)
    d.add_many(rows)
    assert waits[5] == 30.0  # capped at the timeout

    service["hangs"] = True
    d.add_many(rows)
    assert len(waits) == 7 and d.stats.spooled_batches == 1  # timed out once, not tried again while measuring


def test_a_service_that_turns_slow_but_answers_gets_every_batch_the_probes_wait_longer_each_time(tmp_path, monkeypatch):
    """Sixteen answers in 20 ms, then each takes 6 s (a stall on the service's database): the first slow batch times
    out at 5 s and the service is taken for down, but each probe waits twice as long as the last, so the second gets
    its answer, and the spool drains. (With probes of 5 s every batch stayed spooled and the run exited 1.)"""
    from gac.agent.delivery import sender

    clock = {"now": 1000.0}
    monkeypatch.setattr(sender.time, "monotonic", lambda: clock["now"])
    answered: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        takes = 0.02 if len(answered) < 16 else 6.0
        if request.extensions["timeout"]["read"] < takes:
            raise httpx.ReadTimeout("no answer yet", request=request)
        clock["now"] += takes
        answered.append(json.loads(request.content)["id"])
        return _accepted(request)

    client = httpx.Client(transport=httpx.MockTransport(answer), timeout=30.0)  # as the agent's own: the 30 s timeout
    run, spool = RunInfo(id=uuid.uuid4(), agent="test"), Spool(tmp_path)
    d = Deliverer(
        "http://svc", "tok", detect_platform("cpu"), run, spool=spool, batch_size=2, client=client, retries=0, offline_probe_s=0.0
    )
    rows = _measurements(2)
    for _ in range(20):
        d.add_many(rows)
    d.close()
    assert d.stats.sent_batches == 20 and spool.records() == [] and len(set(answered)) == 20
