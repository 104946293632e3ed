"""Ties in kept importance go to the compressor's own dims (gac.solver.ties), against brute force."""

from __future__ import annotations

import functools
import importlib
import json
import statistics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, BudgetBelowFeasible, align, integer_instance
from gac.solver.candidates import CandidateOptions, LatencyModel, build_candidates, build_items
from gac.solver.lookup import FileLookup
from gac.solver.ties import distance_units
from tests.solver.brute import brute_nearest
from tests.solver.test_align_fallback import quick_plan_lookup

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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.floats(100, 120, allow_nan=False), min_size=1, max_size=3),
    st.lists(st.floats(130, 200, allow_nan=False), min_size=2, max_size=4),
    st.floats(0.9, 1.05),
)
def test_the_latency_objective_splits_unmeasured_weights_nearest_the_compressors_dims(measured, unmeasured, frac):
    """Weights the platform has not measured cost no time at any dim: the latency objective spends what it
    must on them, and which of them got it was input order (150, 155, 160, 165 -> 160, 168, 160, 152)."""
    ws = [
        {"name": f"m{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": round(d, 1), "importance": 1.0}
        for i, d in enumerate(measured)
    ] + [
        {"name": f"r{i}", "kind": "lowrank", "out_features": 512, "in_features": 512, "dim": round(d, 1), "importance": 2.0}
        for i, d in enumerate(unmeasured)
    ]
    budget = int(frac * sum((w["out_features"] + w["in_features"]) * w["dim"] for w in ws))
    body = {"model": "t", "budget": {"params": budget}, "workload": {"tokens": [256], "dtype": "bfloat16"}, "weights": ws}
    try:
        res = align(Manifest.model_validate(body), quick_plan_lookup(64), AlignOptions(objective="latency", cross_check="none"))
    except BudgetBelowFeasible:
        return
    rules = [w for w in res.weights if w.name.startswith("r")]
    assert {w.name for w in rules} <= set(res.rule_items)
    dims = [[c.dim for c in w.candidates] for w in rules]
    costs = [[1024 * d for d in ds] for ds in dims]
    distances = [distance_units(ds, w.dim_before) for ds, w in zip(dims, rules)]
    spent = sum(1024 * w.dim for w in rules)
    got = sum(d[ds.index(w.dim)] for d, ds, w in zip(distances, dims, rules))
    assert (spent, got) == brute_nearest(costs, costs, distances, spent)[1:]


@functools.cache
def linear_lookup() -> FileLookup:
    """Latency linear in d, 4 µs more off multiples of 8, on both GEMMs of a 256 x 256 low-rank pair at 256 tokens:
    two dims of one step sum as fast as any other two with the same sum."""
    rows = []
    for d in range(1, 300):
        lat = 10 + 0.1 * d + (4.0 if d % 8 else 0.0)
        rows.append(("gemm", "bfloat16", {"m": 256, "k": 256, "n": d}, "n", lat, lat * 0.99, lat * 1.01, 20))
        rows.append(("gemm", "bfloat16", {"m": 256, "n": 256, "k": d}, "k", lat, lat * 0.99, lat * 1.01, 20))
    return FileLookup(rows, "linear")


def _latency_answer(dims: list[float]):  # type: ignore[no-untyped-def]
    ws = [
        {"name": f"w{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": d, "importance": 1.0}
        for i, d in enumerate(dims)
    ]
    body = {"model": "t", "budget": {"params": int(512 * sum(dims))}, "workload": {"tokens": [256], "dtype": "bfloat16"}, "weights": ws}
    return align(Manifest.model_validate(body), linear_lookup(), AlignOptions(objective="latency", cross_check="none"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([92.0, 97.5, 100.0, 103.0, 110.0, 121.0]), min_size=2, max_size=5))
def test_the_latency_objective_trades_exact_ties_toward_the_compressors_dims(monkeypatch, dims):
    """Four weights of one shape at 100: 120, 104, 88, 88 was as fast as 96, 104, 104, 96, and input order chose it.
    The answer keeps the solver's latency, importance and parameters, and no two weights can move nearer at no cost."""
    align_module = importlib.import_module("gac.solver.align")  # the package's name `align` is the function

    res = _latency_answer(dims)
    with monkeypatch.context() as m:
        m.setattr(align_module, "swapped_nearer", lambda cands, items, choice: list(choice))
        raw = _latency_answer(dims)
    assert (res.latency.aligned_us, res.objective, res.total_params) == pytest.approx(
        (raw.latency.aligned_us, raw.objective, raw.total_params)
    )
    lat = {d: 2 * (10 + 0.1 * d + (4.0 if d % 8 else 0.0)) for d in range(1, 300)}
    far = lambda d, w: abs(d - w.dim_before) / w.dim_before  # noqa: E731
    for a, wa in enumerate(res.weights):
        for wb in res.weights[a + 1 :]:
            for da in (c.dim for c in wa.candidates):
                db = wb.dim - (da - wa.dim)
                if db in {c.dim for c in wb.candidates} and lat[da] + lat[db] == pytest.approx(lat[wa.dim] + lat[wb.dim]):
                    assert far(da, wa) + far(db, wb) >= far(wa.dim, wa) + far(wb.dim, wb) - 1e-9, (wa, wb, da, db)


def test_four_equal_weights_stay_on_the_two_steps_around_their_dim():
    assert sorted(w.dim for w in _latency_answer([100.0] * 4).weights) == [96, 96, 104, 104]


def test_a_dim_below_one_counts_its_moves_relative_to_itself():
    """The tie rule's distance is |d - d*| / d*, below d* = 1 too: a weight at 0.5 that moves to 8 has moved 15 times
    its dim, not 7.5 (the centre was floored at 1), and the answer split the tie the other way (1, 16, 8)."""
    ws = [
        {"name": "a", "kind": "linear_out", "out_features": 40, "in_features": 32, "dim": 1, "importance": 1},
        {"name": "m", "kind": "mlp_width", "hidden": 8, "full": 32, "dim": 32, "importance": 0.5},
        {"name": "b", "kind": "linear_out", "out_features": 16, "in_features": 32, "dim": 0.5, "importance": 1},
    ]
    res = align(Manifest.model_validate({"model": "t", "budget": {"params": 816}, "weights": ws}), None, AlignOptions(cross_check="none"))
    assert [w.dim for w in res.weights] == [8, 16, 1] and res.total_params == 672
    assert distance_units([1, 2], 0.5) == (1 << 20, 3 << 20)  # a move of 0.5 from 0.5 is the dim itself
    assert distance_units([1, 8], 0.0) == distance_units([1, 1 << 20], 1e-9) == (1 << 40,) * 2  # capped: sums stay in int64
