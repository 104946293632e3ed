"""The cliff analytics JSON API on stored data (both backends)."""

from __future__ import annotations

import csv
import io
import math
import re
import uuid

from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f

FIXED = "k=256,m=128"


def staircase_batch(plat, period: int, xs, run=None):  # type: ignore[no-untyped-def]
    rows = []
    for x in xs:
        med = 20.0 * (1 + 0.2 * math.ceil(x / period))
        rows.append(f.measurement(x, median=med, p10_us=med * 0.99, p90_us=med * 1.01))
    return Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=run or uuid.uuid4(), agent="t"), measurements=rows)


def post(client, token, b):  # type: ignore[no-untyped-def]
    r = client.post("/v1/batches", json=f.body(b), headers=f.auth(token))
    assert r.status_code == 201, r.text


def test_curve_cliffs_rules_and_recompute(client, ingest_token):
    plat = f.platform(device_name="Sixteen")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 97)))
    curve_id = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]["id"]
    cl = client.get(f"/v1/curves/{curve_id}/cliffs").json()
    assert [s["x"] for s in cl["steps"]] == [17, 33, 49, 65, 81]
    assert all(s["x_before"] == s["x"] - 1 and 9 < s["size_pct"] < 20 for s in cl["steps"])
    assert cl["frontier"] == [16, 32, 48, 64, 80, 96]
    assert cl["modulus"] == {"m": 16, "agreement": 1.0}

    rules = client.get(f"/v1/platforms/{plat.fingerprint()}/rules").json()
    assert len(rules) == 1 and rules[0]["modulus"] == 16 and rules[0]["support"] == 1
    assert "multiples of 16" in rules[0]["text"]

    # New data for the curve: the analysis is recomputed, not served stale from the cache.
    post(client, ingest_token, staircase_batch(plat, 16, range(97, 129)))
    again = client.get(f"/v1/curves/{curve_id}/cliffs").json()
    assert again["curve"]["version"] != cl["curve"]["version"]
    assert again["frontier"][-2:] == [112, 128] and [s["x"] for s in again["steps"]][-2:] == [97, 113]
    listed = client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs", params={"op": "gemm"}).json()
    assert listed[0]["frontier"] == again["frontier"]
    by_axis = client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs", params={"axis": listed[0]["curve"]["axis"]}).json()
    assert [c["curve"]["id"] for c in by_axis] == [c["curve"]["id"] for c in listed]
    misspelt = f.refused(client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs", params={"axis": "zzz"}), 422)
    assert "axis" in str(misspelt)  # named, not answered with an empty list


def test_a_rule_names_the_multiple_that_holds_most_of_the_speed(client, ingest_token):
    """An H100's fp16 GEMM curves (N and K swept, measured): every cliff-free dim is even, so the rule's modulus is 2,
    yet multiples of 8 take about 80 % less time than the dims around them. The rule says both, and each curve
    its comb; the SDPA curve's rule says multiples of 8 hold its speed too."""
    from pathlib import Path

    from gac.contracts.measurements import Measurement, parse_shape_key

    plat = f.platform(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3")
    data = Path(__file__).resolve().parents[1] / "solver" / "data" / "h100_lattice.csv"
    rows = [
        Measurement(id=uuid.uuid4(), op=r["op"], dtype=r["dtype"], sweep_axis=r["axis"], timer="t", n=int(r["n"]),
                    shape={**parse_shape_key(r["fixed"]), r["axis"]: int(r["x"])},
                    median_us=float(r["median_us"]), p10_us=float(r["p10_us"]), p90_us=float(r["p90_us"]), mean_us=float(r["mean_us"]))
        for r in csv.DictReader(data.open())
    ]  # fmt: skip
    post(client, ingest_token, Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows))
    rules = {(r["op"], r["axis"]): r for r in client.get(f"/v1/platforms/{plat.fingerprint()}/rules").json()}
    gemm_n = rules[("gemm", "n")]
    assert gemm_n["modulus"] == 2 and gemm_n["fastest_multiple"] == 8 and 75 < gemm_n["fastest_pct"] < 90, gemm_n
    assert "wants multiples of 2 (1 of 1 curves; steps up to +" in gemm_n["text"]
    assert re.search(r"multiples of 8 take (7[5-9]|8\d) % less time than the dims around them", gemm_n["text"])
    assert rules[("gemm", "k")]["fastest_multiple"] == 8 and rules[("sdpa", "head_dim")]["fastest_multiple"] == 8
    cliffs = client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs", params={"op": "gemm", "axis": "n"}).json()
    assert [lv["m"] for lv in cliffs[0]["comb"]][:3] == [2, 4, 8] and cliffs[0]["comb"][2]["pct_faster"] > 75


def test_compare_two_platforms(client, ingest_token):
    a, b = f.platform(device_name="Old driver"), f.platform(device_name="New driver")
    post(client, ingest_token, staircase_batch(a, 16, range(1, 65)))
    post(client, ingest_token, staircase_batch(b, 8, range(1, 65)))
    pairs = client.get("/v1/compare/curves", params={"a": a.fingerprint(), "b": b.fingerprint()}).json()
    assert [(p["op"], p["axis"], p["fixed_key"]) for p in pairs] == [("gemm", "n", FIXED)]
    cmp = client.get(
        "/v1/compare",
        params={"a": a.fingerprint(), "b": b.fingerprint(), "op": "gemm", "dtype": "bfloat16", "axis": "n", "fixed": "m=128,k=256"},
    ).json()
    assert cmp["a"]["modulus"]["m"] == 16 and cmp["b"]["modulus"]["m"] == 8
    by_x = {p["x"]: p for p in cmp["points"]}
    assert len(by_x) == 64 and by_x[9]["ratio"] == by_x[9]["b_us"] / by_x[9]["a_us"]
    assert by_x[9]["ratio"] > 1  # x = 9 is past a step on b (period 8) but not on a


def test_compare_errors(client, ingest_token):
    a = f.platform(device_name="Only one")
    post(client, ingest_token, staircase_batch(a, 16, range(1, 20)))
    query = {"op": "gemm", "dtype": "bfloat16", "axis": "n"}
    r = client.get("/v1/compare", params={"a": a.fingerprint(), "b": "0" * 64, **query, "fixed": FIXED})
    f.refused(r, 404)
    r = client.get("/v1/compare", params={"a": a.fingerprint(), "b": a.fingerprint(), **query, "fixed": "m=1"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.fixed"


def test_curve_downloads(client, ingest_token):
    plat = f.platform(device_name="Download")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 33)))
    curve_id = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]["id"]
    r = client.get(f"/v1/curves/{curve_id}/download")
    assert r.headers["content-type"].startswith("text/csv") and "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    # The axis is n: its column holds the swept value, the sample count is "samples".
    assert len(rows) == 32 and rows[0]["n"] == "1" and rows[0]["samples"] == "20" and float(rows[16]["median_us"]) == 20.0 * 1.4
    # A shared file names its platform: its fingerprint in the file name and in every row.
    assert plat.fingerprint()[:12] in r.headers["content-disposition"] and {row["platform"] for row in rows} == {plat.fingerprint()}
    j = client.get(f"/v1/curves/{curve_id}/download", params={"format": "json"}).json()
    assert [p["x"] for p in j["points"]] == list(range(1, 33))
    bad = f.refused(client.get(f"/v1/curves/{curve_id}/download", params={"format": "xml"}), 422)
    assert [d["field"] for d in bad["detail"]] == ["query.format"], bad


def test_etags_spare_unchanged_curves(client, ingest_token):
    plat = f.platform(device_name="Etag")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 33)))
    curve_id = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]["id"]
    paths = (f"/v1/curves/{curve_id}", f"/v1/curves/{curve_id}/cliffs")
    etags = {p: client.get(p).headers["etag"] for p in paths}
    for path in paths:
        # The tag as sent, strong, in a list, or `*` (RFC 9110's If-None-Match).
        for asked in (etags[path], etags[path].removeprefix("W/"), f'"other", {etags[path]}', "*"):
            again = client.get(path, headers={"If-None-Match": asked})
            assert again.status_code == 304 and again.content == b"", asked
        assert client.get(path, headers={"If-None-Match": '"other"'}).status_code == 200
    post(client, ingest_token, staircase_batch(plat, 16, range(33, 49)))  # new data: a new version
    for path in paths:
        fresh = client.get(path, headers={"If-None-Match": etags[path]})
        assert fresh.status_code == 200 and fresh.headers["etag"] != etags[path]
        assert len(fresh.json()["points" if "cliffs" not in path else "frontier"]) > 0


def test_other_workers_writes_show_within_the_cache_freshness(client, settings, ingest_token):
    """Two service processes over one database: a reader caches a curve's body; a write through
    the other one shows at once with GAC_READ_CACHE_SECONDS=0, and with 0.5 as soon as the
    reader's poller has looked again (waited for by counting polls, not by sleeping)."""
    from fastapi.testclient import TestClient

    from gac.service.app import create_app

    plat = f.platform(device_name="TwoWorkers")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 33)))
    curve_id = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]["id"]
    path = f"/v1/curves/{curve_id}"
    readers = {s: create_app(settings.model_copy(update={"read_cache_seconds": s})) for s in (0.0, 0.5)}
    try:
        with TestClient(readers[0.0]) as checks_always, TestClient(readers[0.5]) as lags:
            assert all(c.get(path).json()["curve"]["points"] == 32 for c in (checks_always, lags))
            post(client, ingest_token, staircase_batch(plat, 16, range(33, 49)))  # through the other "worker"
            polls = readers[0.5].state.responses.polls
            assert checks_always.get(path).json()["curve"]["points"] == 48
            # Two polls counted from after the write: the first may have read before the write
            # committed, the second started after the first ended, so it saw the new version.
            assert readers[0.5].state.responses.wait_for_polls(polls + 2, timeout=30)
            assert lags.get(path).json()["curve"]["points"] == 48
    finally:
        for app in readers.values():
            app.state.engine.dispose()


def test_response_cache_is_bounded_by_bytes_and_expires_on_demand():
    from gac.service.cache import ResponseCache

    cache = ResponseCache(freshness=10.0, max_bytes=100)
    cache.put("a", 1, b"x" * 60, now=0.0)
    cache.put("b", 1, b"y" * 30, now=0.0)
    assert cache.fresh("a", now=5.0) == (1, b"x" * 60)  # "a" is now the most recently used
    cache.put("c", 1, b"z" * 30, now=0.0)  # 120 bytes: the least recently used ("b") goes
    assert cache.fresh("b", now=5.0) is None and cache.fresh("a", now=5.0) is not None
    assert cache.fresh("a", now=11.0) is None  # older than the freshness: must be confirmed
    assert cache.confirm("a", 2, now=11.0) is None  # another version: rebuild
    assert cache.confirm("a", 1, now=11.0) == b"x" * 60 and cache.fresh("a", now=12.0) is not None
    cache.expire_all()
    assert cache.fresh("a", now=12.0) is None and cache.confirm("a", 1, now=12.0) == b"x" * 60
    cache.put("huge", 1, b"h" * 101, now=0.0)  # larger than the whole cache: served, not kept
    assert cache.fresh("huge", now=0.0) is None


def test_cached_curves_are_confirmed_in_the_background(client, settings, ingest_token):
    """The poller keeps hot curves confirmed with no read waiting on the database, and drops a
    curve whose version another process moved before anyone reads it."""
    import time

    from fastapi.testclient import TestClient

    from gac.service.app import create_app

    plat = f.platform(device_name="Poller")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 33)))
    curve_id = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]["id"]
    reader = create_app(settings.model_copy(update={"read_cache_seconds": 0.3}))
    try:
        with TestClient(reader) as c:
            c.get(f"/v1/curves/{curve_id}")
            cache = reader.state.responses
            read_at = time.monotonic()
            # Polls until one confirms the entry after the read: then it is fresh past the read's
            # own freshness window, which only the poller can have done.
            assert cache.wait_for_polls(cache.polls + 2, timeout=30)
            confirmed = cache.fresh(("curve", curve_id), read_at + 0.3 + 1e-3)
            assert confirmed is not None
            post(client, ingest_token, staircase_batch(plat, 16, range(33, 49)))  # another "worker"
            # Counted from after the write (a poll that ends during it may have read before it).
            assert cache.wait_for_polls(cache.polls + 2, timeout=30)
            assert cache.stamp()[0] == set()  # dropped: the next read rebuilds it
            assert c.get(f"/v1/curves/{curve_id}").json()["curve"]["points"] == 48
    finally:
        reader.state.engine.dispose()


def test_each_curve_version_is_analysed_once_and_kept_as_bytes(client, ingest_token, monkeypatch):
    """Every cliffs read of one curve version (its own, its platform's, the rules) reuses one
    analysis, held as bytes the cyclic collector does not walk: a thousand analyses held as
    object graphs made its full passes take 0.1-0.2 s under load (benchmarks/queries.py)."""
    import gc

    from gac.service.cache import VersionedCache
    from gac.service.cliffs import service as cliffs

    # A cache of this test's own: Postgres test databases restart ids, so another test's
    # curve 1, version 1 could otherwise be served.
    monkeypatch.setattr(cliffs, "_ANALYSES", VersionedCache())
    analysed = []
    real = cliffs.analyze
    monkeypatch.setattr(cliffs, "analyze", lambda points: analysed.append(len(points)) or real(points))
    plat = f.platform(device_name="AnalysedOnce")
    post(client, ingest_token, staircase_batch(plat, 16, range(1, 65)))
    summary = client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json()[0]
    for _ in range(3):
        assert client.get(f"/v1/curves/{summary['id']}/cliffs").json()["frontier"] == [16, 32, 48, 64]
        assert client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs").json()[0]["frontier"] == [16, 32, 48, 64]
        assert client.get(f"/v1/platforms/{plat.fingerprint()}/rules").json()[0]["modulus"] == 16
    assert analysed == [64]
    cached = cliffs._ANALYSES.get((str(client.app.state.engine.url), summary["id"]), summary["version"])
    assert isinstance(cached, bytes) and not gc.is_tracked(cached)

    post(client, ingest_token, staircase_batch(plat, 16, range(65, 81)))  # a new version: analysed once more
    for _ in range(2):
        assert client.get(f"/v1/platforms/{plat.fingerprint()}/cliffs").json()[0]["frontier"][-1] == 80
    assert analysed == [64, 80]


def test_confirming_cached_bodies_makes_no_new_objects():
    """The poller confirms every cached body several times a second: a new object per entry per
    poll aged into the collector's oldest generation and set off its full passes (counted in
    the collector's youngest generation, with the collector off so none is moved on)."""
    import gc

    from gac.service.cache import ResponseCache

    cache = ResponseCache(freshness=1.0, max_bytes=2**20)
    for i in range(1000):
        cache.put(("cliffs", i), 1, b"{}", now=0.0)
    ids, generation = cache.stamp()
    versions = dict.fromkeys(ids, 1)
    gc.collect()
    gc.disable()
    try:
        young = len(gc.get_objects(generation=0))
        cache.confirm_all(ids, versions, generation, now=0.5)
        made = len(gc.get_objects(generation=0)) - young
    finally:
        gc.enable()
    assert made < 10, made
    assert cache.fresh(("cliffs", 999), now=1.4) == (1, b"{}")  # confirmed at 0.5: fresh until 1.5
