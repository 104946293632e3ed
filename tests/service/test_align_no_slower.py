"""POST /v1/align with the manifest's `no_slower`: no token count predicted slower than at the compressor's
dims, the per-token-count prediction beside it, and a different stored answer from the same manifest without it."""

from __future__ import annotations

import uuid

from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f
from tests.solver.test_no_slower import prefill_fast_decode_slow

DIMS = (100, 60)


def measured_platform(client, token):  # type: ignore[no-untyped-def]
    """GEMMs (M = 64 and 1, K = 64) where multiples of 8 save 3 us at M = 64 and cost 2 us at M = 1."""
    plat = f.platform(device_name="Prefill-fast decode-slow CPU")
    rows = []
    for m in (64, 1):
        for n in range(1, 257):
            us = prefill_fast_decode_slow(m, n)
            common = {"op": "gemm", "dtype": "float16", "median_us": us, "p10_us": us, "p90_us": us, "mean_us": us}
            rows.append(f.measurement(**common, n=10, timer="test", id=uuid.uuid4(), shape={"m": m, "n": n, "k": 64}, sweep_axis="n"))
    b = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    assert client.post("/v1/batches", json=f.body(b), headers=f.auth(token)).status_code == 201
    return plat


def manifest(target: str, **goal: object) -> dict:
    weights = [{"name": f"w{i}", "kind": "linear_out", "out_features": 256, "in_features": 64, "dim": d, "importance": 1}
               for i, d in enumerate(DIMS)]  # fmt: skip
    return {"schema": "gac.manifest/v1", "model": "tiny", "budget": {"params": sum(DIMS) * 64},
            "target": {"platform": target}, "workload": {"tokens": [64, 1], "dtype": "float16"},
            "weights": weights, "objective": "latency", **goal}  # fmt: skip


def by_tokens(res: dict) -> dict[int, tuple[float, float]]:
    return {t["tokens"]: (t["unaligned_us"], t["aligned_us"]) for t in res["latency"]["by_tokens"]}


def test_no_slower_holds_decode_and_is_its_own_answer(client, ingest_token):
    plat = measured_platform(client, ingest_token)
    free = client.post("/v1/align", json=manifest(plat.fingerprint()), headers=f.auth(ingest_token))
    held = client.post("/v1/align", json=manifest(plat.fingerprint(), no_slower=True), headers=f.auth(ingest_token))
    assert free.status_code == 201 and held.status_code == 201, (free.text, held.text)
    free_res, held_res = free.json()["result"], held.json()["result"]
    assert not free_res["no_slower"] and held_res["no_slower"]
    before, after = by_tokens(free_res), by_tokens(held_res)
    assert set(before) == set(after) == {64, 1}
    assert before[1][1] > before[1][0] and before[64][1] < before[64][0]  # the plain objective's trade: decode slower
    assert all(aligned <= unaligned for unaligned, aligned in after.values())
    assert [w["dim"] for w in free_res["weights"]] != [w["dim"] for w in held_res["weights"]]
    # Asked again, each manifest gets its own stored answer back, not the other's.
    again = client.post("/v1/align", json=manifest(plat.fingerprint(), no_slower=True), headers=f.auth(ingest_token))
    assert [w["dim"] for w in again.json()["result"]["weights"]] == [w["dim"] for w in held_res["weights"]]


def test_no_slower_must_be_a_boolean(client, ingest_token):
    r = client.post("/v1/align", json=manifest("any", no_slower="sometimes"), headers=f.auth(ingest_token))
    assert r.status_code == 422 and "no_slower" in r.text, r.text
