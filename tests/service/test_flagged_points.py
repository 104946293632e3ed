"""Points the agent's quality gate flagged: stored and counted, never a curve point, a candidate or "already stored"."""

from __future__ import annotations

import uuid

from gac.contracts.measurements import Batch, RunInfo
from gac.service.align.db_lookup import DbLookup
from gac.service.curves.service import stored_medians
from gac.service.models import Platform
from tests import factories as f

GEMM = ("gemm", "bfloat16", "n", "k=256,m=128")


def _stalled_batch() -> Batch:
    rows = [
        f.measurement(56, median=91.0),
        f.measurement(60, median=23_957.0, p10_us=90.0, p90_us=24_500.0, quality="bimodal,busy"),
        f.measurement(64, median=95.0),
        f.measurement(60, median=93.0, quality=None),
    ]
    return Batch(id=uuid.uuid4(), platform=f.platform(), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)


def test_a_flagged_row_is_stored_and_counted_but_makes_no_point(client, session, ingest_token):
    b = _stalled_batch()
    r = client.post("/v1/batches", json=f.columns_body(b), headers={**f.auth(ingest_token), **f.COLUMNS})
    assert r.status_code == 201, r.text
    fp = b.platform.fingerprint()
    page = client.get("/v1/measurements", params={"platform": fp, "limit": 10}).json()
    assert sorted(str(m["quality"]) for m in page["items"]) == ["None", "None", "None", "bimodal,busy"]  # kept, visible

    summary = client.get(f"/v1/platforms/{fp}/curves").json()[0]
    assert (summary["measurements"], summary["flagged"]) == (4, 1)
    curve = client.get(f"/v1/curves/{summary['id']}").json()
    assert {p["x"]: p["median_us"] for p in curve["points"]} == {56: 91.0, 60: 93.0, 64: 95.0}  # the clean re-run only
    assert curve["curve"]["flagged"] == 1

    session.rollback()
    platform = session.query(Platform).filter_by(fingerprint=fp).one()
    lookup = DbLookup(session, platform)
    points = lookup.curve("gemm", "bfloat16", {"m": 128, "k": 256}, "n")
    assert {x: p.latency_us for x, p in points.items()} == {56: 91.0, 60: 93.0, 64: 95.0}
    assert stored_medians(session, fp, [GEMM]) == {GEMM: {56: 91.0, 60: 93.0, 64: 95.0}}


def test_a_point_with_only_flagged_rows_counts_as_not_stored(client, session, ingest_token):
    """A resume, `--profile-missing` and a job measure it again: nothing trusted is there."""
    rows = [f.measurement(56, median=91.0), f.measurement(60, median=23_957.0, quality="isolated")]
    b = Batch(id=uuid.uuid4(), platform=f.platform(), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token)).status_code == 201
    session.rollback()
    assert stored_medians(session, b.platform.fingerprint(), [GEMM]) == {GEMM: {56: 91.0}}


def _post(client, ingest_token, rows) -> str:  # type: ignore[no-untyped-def]
    b = Batch(id=uuid.uuid4(), platform=f.platform(), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    r = client.post("/v1/batches", json=f.body(b), headers=f.auth(ingest_token))
    assert r.status_code == 201, r.text
    return b.platform.fingerprint()


def test_a_curve_list_counts_points_and_their_range_as_the_curve_does(client, ingest_token):
    """A flagged row at the sweep's end is no point: the list's card must not say 4 dims up to 72 where the curve has 3 up to 64."""
    fp = _post(
        client,
        ingest_token,
        [f.measurement(x, median=90.0 + x / 8) for x in (56, 60, 64)] + [f.measurement(72, median=9e3, quality="isolated")],
    )
    (summary,) = client.get(f"/v1/platforms/{fp}/curves").json()
    curve = client.get(f"/v1/curves/{summary['id']}").json()
    assert (summary["points"], summary["x_min"], summary["x_max"], summary["measurements"], summary["flagged"]) == (3, 56, 64, 4, 1)
    assert summary == curve["curve"]


def test_a_curve_whose_rows_are_all_flagged_lists_no_points(client, ingest_token):
    fp = _post(client, ingest_token, [f.measurement(x, median=9e3, quality="busy") for x in (64, 72)])
    (summary,) = client.get(f"/v1/platforms/{fp}/curves").json()
    assert (summary["points"], summary["x_min"], summary["x_max"], summary["measurements"], summary["flagged"]) == (0, 0, 0, 2, 2)
    assert summary == client.get(f"/v1/curves/{summary['id']}").json()["curve"]


def test_a_rule_of_curves_without_two_usable_points_says_so_not_cliff_free(client, ingest_token):
    """No step shows on a curve of one usable dim or none: that is no sign of a cliff-free axis."""
    rows = [f.measurement(x, op="sdpa", median=9e3, quality="busy") for x in (64, 72)]  # every row flagged
    rows += [f.measurement(64, op="sdpa", dtype="float16")]  # one dim
    rows += [f.measurement(x, dtype="float16", median=90.0 + x) for x in (56, 60, 64, 72)]  # a curve to judge ...
    empty = [f.measurement(x, dtype="float16", shape={"m": 128, "n": x, "k": 512}, median=9e3, quality="busy") for x in (64, 72)]
    rows += empty  # ... beside an empty one
    rules = {(r["op"], r["dtype"]): r["text"] for r in client.get(f"/v1/platforms/{_post(client, ingest_token, rows)}/rules").json()}
    for key in (("sdpa", "bfloat16"), ("sdpa", "float16")):
        assert "too few usable points" in rules[key] and "cliff-free" not in rules[key], rules[key]
    assert rules[("gemm", "float16")].endswith("(1 of the 2 curves have fewer than two usable points)"), rules


def test_an_unknown_flag_is_refused_naming_the_field(client, ingest_token):
    body = f.body(f.batch(rows=1))
    body["measurements"][0]["quality"] = "slow"
    r = client.post("/v1/batches", json=body, headers=f.auth(ingest_token))
    detail = f.refused(r, 422)["detail"]
    assert "quality" in str(detail)
