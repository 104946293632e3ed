"""Ties in kept importance go to the compressor's own dims (gac.solver.ties), against brute force."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, align, integer_instance
from gac.solver.candidates import CandidateOptions, LatencyModel, build_candidates, build_items
from gac.solver.ties import distance_units
from tests.solver.brute import brute_nearest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = CandidateOptions(window=12, align=8)


@st.composite
def tied_manifests(draw):
    """2-5 weights of few shapes and two importance levels: most of them share a slope with another. (Two slopes
    cannot cancel: with three, an optimum moving items of different slopes can exist, which the tie-break does not seek.)"""
    levels = draw(st.sampled_from([(0.0, 1.0), (1.0, 2.0), (1.0, 1.0)]))
    ws = []
    for i in range(draw(st.integers(2, 5))):
        out, inp = draw(st.sampled_from([(64, 32), (128, 64), (96, 160)]))
        dim = draw(st.floats(20, min(out, inp), allow_nan=False))
        ws.append(
            {
                "name": f"w{i}",
                "kind": "lowrank",
                "out_features": out,
                "in_features": inp,
                "dim": round(dim, 1),
                "importance": draw(st.sampled_from(levels)),
            }
        )
    return ws, draw(st.floats(0, 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tied_manifests())
def test_among_equal_optima_the_dims_nearest_the_compressors_win(case):
    ws, frac = case
    probe = Manifest.model_validate({"model": "t", "budget": {"params": 1}, "weights": ws})
    cands = [build_candidates(it, LatencyModel(None, probe), SMALL) for it in build_items(probe)]
    costs, values = integer_instance(cands)
    distances = [distance_units([c.dim for c in ic.candidates], ic.item.d_star) for ic in cands]
    lo, hi = sum(min(c) for c in costs), sum(max(c) for c in costs)
    budget = lo + int(frac * (hi - lo))
    m = Manifest.model_validate({"model": "t", "budget": {"params": budget}, "weights": ws})
    res = align(m, None, AlignOptions(candidates=SMALL, cross_check="none"))
    picks = [[c.dim for c in ic.candidates].index(w.dim) for ic, w in zip(cands, res.weights)]
    got = (
        sum(v[j] for v, j in zip(values, picks)),
        sum(c[j] for c, j in zip(costs, picks)),
        sum(d[j] for d, j in zip(distances, picks)),
    )
    assert got == brute_nearest(costs, values, distances, budget)


def test_a_manifest_without_importances_keeps_the_compressors_dims_within_a_step():
    """Llama-3-8B's ASVD ranks, every importance 1.0: input order used to send dims to their windows' ends."""
    body = json.loads((EXAMPLES / "llama3-8b-asvd-r15.json").read_text())
    for w in body["weights"]:
        w["importance"] = 1.0
    res = align(Manifest.model_validate(body), None, AlignOptions(cross_check="none"))
    moves = [abs(w.dim - w.dim_before) for w in res.weights]
    assert res.total_params <= res.budget
    assert max(moves) <= 8, f"median move {statistics.median(moves)}, largest {max(moves)}"
