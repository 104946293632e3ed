"""A fleet-sized platform (six GEMM curves, 38,144 measured points, tests/solver/synthetic.py) in
the service's database: a curve's model is computed once per curve version and shared by the
alignments of this process, and pending checks run on the answer's own candidates."""

from __future__ import annotations

import uuid

import pytest

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.service.align import service as svc
from gac.service.ingest.service import Incoming, ingest_batch
from gac.service.models import Alignment
from gac.solver import candidates, lattice, model_cache
from tests.solver.synthetic import fleet_batches, fleet_manifest, fleet_rows, weight_unit

WEIGHTS = 96  # above INLINE_CHECK_MAX_ITEMS: the answer leaves its checks pending


@pytest.fixture
def counted(monkeypatch):  # type: ignore[no-untyped-def]
    """Calls of model_curve (every curve model the candidates read) and of build_candidates."""
    calls = {"model_curve": 0, "build_candidates": 0}

    def counting(name, real):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(candidates, "model_curve", counting("model_curve", candidates.model_curve))
    monkeypatch.setattr(lattice, "model_curve", counting("model_curve", lattice.model_curve))
    monkeypatch.setattr(model_cache, "build_candidates", counting("build_candidates", model_cache.build_candidates))
    monkeypatch.setattr(model_cache, "MODELS", model_cache.ModelCache())
    monkeypatch.setattr(svc, "MODELS", model_cache.MODELS)
    return calls


@pytest.fixture
def fleet(app, session):  # type: ignore[no-untyped-def]
    """The fleet platform stored through the ingest path; a manifest of WEIGHTS of its weights targeting it."""
    fingerprint, batches = fleet_batches(fleet_rows())
    for b in batches:
        ingest_batch(session, Incoming.from_rows(b), token_id=None, max_rows=10_000)
    doc = fleet_manifest()
    doc["weights"] = doc["weights"][:WEIGHTS]
    doc["budget"] = {"params": int(sum(weight_unit(w) * w["dim"] for w in doc["weights"]))}
    return Manifest.model_validate(doc | {"target": {"platform": fingerprint}, "objective": "importance"})


def test_a_second_alignment_models_no_curve_and_its_checks_reuse_the_candidates(settings, session, fleet, counted):
    first = svc.align_and_store(session, settings, fleet, None, False)
    assert first.status == 201 and first.pending and counted["model_curve"] > 0 and counted["build_candidates"] > 0
    built = counted["build_candidates"]

    counted["model_curve"] = 0
    second = svc.align_and_store(session, settings, fleet, None, False)
    assert counted["model_curve"] == 0 and counted["build_candidates"] == built  # every model and candidate list reused
    assert model_cache.MODELS.hits == 1 and model_cache.MODELS.misses == 1

    assert svc.complete_pending(settings, second.alignment_id) == ["cross_check", "baselines"]
    assert counted["model_curve"] == 0 and counted["build_candidates"] == built
    stored = [AlignmentResult.model_validate(session.get(Alignment, a.alignment_id).result) for a in (first, second)]
    session.expire_all()
    done = AlignmentResult.model_validate(session.get(Alignment, second.alignment_id).result)
    assert done.pending == [] and done.solver.cross_check.agrees is True
    assert {"paper-dp", "paper-dp-64"} <= {b.method for b in done.baselines}
    assert [w.dim for w in done.weights] == [w.dim for w in stored[0].weights] == [w.dim for w in stored[1].weights]


def test_a_new_curve_version_is_modelled_again(settings, session, fleet, counted):
    svc.align_and_store(session, settings, fleet, None, False)
    _, (b,) = fleet_batches(fleet_rows()[:10])  # ten points measured again: the first curve's version changes
    again = b.model_copy(update={"id": uuid.uuid4(), "measurements": [m.model_copy(update={"id": uuid.uuid4()}) for m in b.measurements]})
    ingest_batch(session, Incoming.from_rows(again), token_id=None, max_rows=10_000)
    counted["model_curve"] = 0
    svc.align_and_store(session, settings, fleet, None, False)
    assert counted["model_curve"] > 0 and model_cache.MODELS.misses == 2 and model_cache.MODELS.hits == 0
