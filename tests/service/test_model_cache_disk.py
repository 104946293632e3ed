"""Latency models shared between the service's processes through a directory (solver/model_cache.py
ModelFiles): each alignment and each pending check runs in a process of its own, which reads the
model an earlier process stored instead of modelling the curves again."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Hashable, Mapping
from pathlib import Path

import httpx
import numpy as np
import pytest

from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Dtype, Op
from gac.solver import model_cache
from gac.solver.align import AlignOptions, align
from gac.solver.lookup import FileLookup
from gac.solver.model_cache import ModelCache, ModelFiles, SharedModel, model_key, stable_hash
from tests.factories import auth
from tests.solver.synthetic import (
    Measure,
    fleet_batches,
    fleet_manifest,
    fleet_rows,
    llama_like_manifest,
    lowrank_curves,
    platform_rows,
    weight_unit,
)

WEIGHTS = 96  # above INLINE_CHECK_MAX_ITEMS: the answer leaves its checks pending


class Versioned(FileLookup):
    """A FileLookup that names its curves' versions (one per curve, as a database would)."""

    version = 1

    def curve_version(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Hashable | None:
        return (self.version,) if self.curve(op, dtype, fixed_shape, axis) else None


@pytest.fixture(scope="module")
def small() -> tuple[Manifest, Versioned]:
    doc = llama_like_manifest(2, hidden=512)
    rows, _ = platform_rows(lowrank_curves(doc), 32, Measure(sample_noise=0.02, n=20))
    return Manifest.model_validate(doc), Versioned(rows, "synthetic")


def _aligned(cache: ModelCache, manifest: Manifest, lookup: Versioned) -> tuple[list[int], str, bool]:
    model, origin = cache.model_from(manifest, lookup)
    result = align(manifest, lookup, AlignOptions(), model)
    return [w.dim for w in result.weights], origin, cache.store(model)


def test_a_model_stored_by_one_cache_is_read_by_another_with_the_same_answer(small, tmp_path):
    manifest, lookup = small
    first, second = ModelCache(), ModelCache()  # two processes' memory levels
    first.attach(tmp_path)
    second.attach(tmp_path)
    dims, origin, stored = _aligned(first, manifest, lookup)
    assert (origin, stored) == ("new", True)
    assert [p.name for p in tmp_path.iterdir()] == [first.files.path(model_key(manifest, lookup)).name]

    again, origin, stored = _aligned(second, manifest, lookup)
    assert (origin, stored, again) == ("disk", False, dims)  # read, filled already: not written again
    loaded = second.model(manifest, lookup)
    assert isinstance(loaded, SharedModel) and loaded.candidate_hits > 0 and second.stats()["disk_hits"] == 1
    # the candidates come back as they were built (shared, frozen pydantic models)
    built = first.model(manifest, lookup)
    assert isinstance(built, SharedModel)
    assert {k: v.candidates for k, v in loaded._candidates.items()} == {k: v.candidates for k, v in built._candidates.items()}


def test_a_new_curve_version_is_another_file(small, tmp_path, monkeypatch):
    manifest, lookup = small
    cache = ModelCache()
    cache.attach(tmp_path)
    _aligned(cache, manifest, lookup)
    monkeypatch.setattr(Versioned, "version", 2)
    fresh = ModelCache()
    fresh.attach(tmp_path)
    _, origin, stored = _aligned(fresh, manifest, lookup)
    assert (origin, stored) == ("new", True) and len(list(tmp_path.iterdir())) == 2


def test_a_damaged_or_foreign_file_is_computed_again(small, tmp_path):
    manifest, lookup = small
    cache = ModelCache()
    cache.attach(tmp_path)
    _aligned(cache, manifest, lookup)
    path = cache.files.path(model_key(manifest, lookup))
    path.write_bytes(path.read_bytes()[:1000])  # cut short
    reader = ModelCache()
    reader.attach(tmp_path)
    assert _aligned(reader, manifest, lookup)[1:] == ("new", True)

    path.write_bytes(pickle.dumps((("another key",), reader.model(manifest, lookup))))  # a hash collision, say
    third = ModelCache()
    third.attach(tmp_path)
    assert third.model_from(manifest, lookup)[1] == "new"


def test_a_directory_that_cannot_be_written_leaves_the_model_in_memory(small, tmp_path):
    manifest, lookup = small
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    cache = ModelCache()
    cache.attach(blocked / "models")
    _, origin, stored = _aligned(cache, manifest, lookup)
    assert (origin, stored) == ("new", False) and cache.model_from(manifest, lookup)[1] == "memory"


def test_the_least_recently_used_files_go_past_the_limits(tmp_path):
    files = ModelFiles(tmp_path, max_files=2)
    for i in range(4):
        (tmp_path / f"{i}{ModelFiles.SUFFIX}").write_bytes(b"x" * 10)
        os.utime(tmp_path / f"{i}{ModelFiles.SUFFIX}", (1000 + i, 1000 + i))
    os.utime(tmp_path / f"0{ModelFiles.SUFFIX}", (2000, 2000))  # read lately
    files.prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"0{ModelFiles.SUFFIX}", f"3{ModelFiles.SUFFIX}"]
    ModelFiles(tmp_path, max_bytes=15).prune()  # the newest stays whatever its size
    assert [p.name for p in tmp_path.iterdir()] == [f"0{ModelFiles.SUFFIX}"]


def test_the_file_name_is_the_same_in_every_process(small):
    manifest, lookup = small
    key = model_key(manifest, lookup)  # frozensets of tuples of strings: their order differs per process
    code = (
        "import pickle, sys; from gac.solver.model_cache import stable_hash; print(stable_hash(pickle.loads(bytes.fromhex(sys.argv[1]))))"
    )
    names = {
        subprocess.run(
            [sys.executable, "-c", code, pickle.dumps(key).hex()],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ | {"PYTHONHASHSEED": seed},
            cwd=Path(model_cache.__file__).parents[1],
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert names == {stable_hash(key)}


# -- through the service: alignments and checks in processes of their own


def _timing(header: str | None) -> dict[str, float]:
    parts = (p.strip().split(";dur=") for p in (header or "").split(",") if ";dur=" in p)
    return {name: float(ms) / 1000 for name, ms in parts}


def _checked(http: httpx.Client, alignment_id: str, headers: dict[str, str]) -> dict:
    # Another process gives no event to wait on: poll the stored alignment until its checks are stored.
    for _ in range(1200):
        result = http.get(f"/v1/alignments/{alignment_id}", headers=headers).json()["result"]
        if not result["pending"]:
            return result
        time.sleep(0.25)
    raise AssertionError(f"the checks of {alignment_id} were not stored")


def test_a_second_alignment_over_http_reads_the_model_the_first_stored(live_service, database):
    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.ingest.service import Incoming, ingest_batch

    fingerprint, batches = fleet_batches(fleet_rows())
    engine = make_engine(database.url)
    with make_sessionmaker(engine)() as session:
        for b in batches:
            ingest_batch(session, Incoming.from_rows(b), token_id=None, max_rows=10_000)
    engine.dispose()
    doc = fleet_manifest()
    doc["weights"] = doc["weights"][:WEIGHTS]
    doc["budget"] = {"params": int(np.sum([weight_unit(w) * w["dim"] for w in doc["weights"]]))}
    doc |= {"target": {"platform": fingerprint}, "objective": "importance"}
    models = live_service.data_dir / "models"
    headers = auth(live_service.read_token)

    with httpx.Client(base_url=live_service.url, timeout=300) as http:
        first = http.post("/v1/align", json=doc, headers=headers)
        assert first.status_code == 201, first.text
        split = _timing(first.headers.get("server-timing"))
        assert "model_store" in split and "model_load" not in split  # modelled here, then stored
        assert len(list(models.glob(f"*{ModelFiles.SUFFIX}"))) == 1
        checked = _checked(http, first.json()["id"], headers)  # its checks' process read it too

        # The same request against the same curve versions: the first's complete answer, checks and all,
        # without the model.
        second = http.post("/v1/align", json=doc, headers=headers)
        assert second.status_code == 201, second.text
        split = _timing(second.headers.get("server-timing"))
        assert "recalled" in split and not {"candidates", "model_load", "model_store"} & set(split)
        assert second.json()["result"]["pending"] == []
        again = _checked(http, second.json()["id"], headers)

        # Anything else in the manifest is another answer, on the model the first stored.
        other = doc | {"budget": {"params": doc["budget"]["params"] - 4096}}
        third = http.post("/v1/align", json=other, headers=headers)
        assert third.status_code == 201, third.text
        split = _timing(third.headers.get("server-timing"))
        assert "model_load" in split and "model_store" not in split and "recalled" not in split  # read, not modelled

        # A new measurement on one of its curves is a new curve version: aligned again.
        fresh = _one_more_point(fleet_rows()[0])
        writer = auth(live_service.ingest_token) | {"content-type": "application/json"}
        stored = http.post("/v1/batches", content=fresh.model_dump_json(by_alias=True), headers=writer)
        assert stored.status_code in (200, 201), stored.text
        fourth = http.post("/v1/align", json=doc, headers=headers)
        assert fourth.status_code == 201, fourth.text
        assert "recalled" not in _timing(fourth.headers.get("server-timing"))

    assert [w["dim"] for w in again["weights"]] == [w["dim"] for w in checked["weights"]]
    assert again["solver"]["cross_check"]["agrees"] is True
    assert again["baselines"] == checked["baselines"]
    assert len(list(models.glob(f"*{ModelFiles.SUFFIX}"))) == 2  # the model of the new curve version too


def _one_more_point(row: tuple):  # noqa: ANN202 - a gac.batch/v1 Batch
    """A batch of one new measurement on the curve of this fleet row, past its widest dim."""
    import uuid

    op, dtype, shape, axis, med, p10, p90, n = row
    curve = [r for r in fleet_rows() if r[:2] == (op, dtype) and r[3] == axis and {**r[2], axis: 0} == {**shape, axis: 0}]
    wider = {**shape, axis: max(r[2][axis] for r in curve) + 1}
    _, (batch,) = fleet_batches([(op, dtype, wider, axis, med, p10, p90, n)])
    fresh = batch.measurements[0].model_copy(update={"id": uuid.uuid4()})
    return batch.model_copy(update={"id": uuid.uuid4(), "measurements": [fresh], "run": batch.run.model_copy(update={"id": uuid.uuid4()})})
