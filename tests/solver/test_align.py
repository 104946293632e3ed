"""align(): the whole path from manifest to result, against brute force and OR-Tools."""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Batch, Dtype, Measurement, Op, PlatformDescriptor, RunInfo
from gac.solver.align import RULES_ONLY, AlignOptions, BudgetBelowFeasible, align, importance_units, integer_instance, objective
from gac.solver.candidates import CandidateOptions, LatencyModel, build_candidates, build_items
from gac.solver.kinds import unit_params
from gac.solver.lookup import FileLookup
from tests.solver.brute import brute_force

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = CandidateOptions(window=12, align=8)


@st.composite
def weights(draw, name: str):
    kind = draw(st.sampled_from(["lowrank", "linear_out", "mlp_width", "head_dim"]))
    imp = draw(st.floats(0, 10, allow_nan=False))
    group = draw(st.sampled_from([None, None, "g1", "g2"]))
    if kind == "lowrank":
        out, inp = draw(st.sampled_from([64, 96, 128])), draw(st.sampled_from([32, 64, 160]))
        full, shape = min(out, inp), {"out_features": out, "in_features": inp}
    elif kind == "linear_out":
        out, inp = draw(st.sampled_from([64, 100, 128])), draw(st.sampled_from([16, 48]))
        full, shape = out, {"out_features": out, "in_features": inp}
    elif kind == "mlp_width":
        full = draw(st.sampled_from([96, 172]))
        shape = {"hidden": draw(st.sampled_from([32, 64])), "full": full, "gated": draw(st.booleans())}
    else:
        full = draw(st.sampled_from([64, 128]))
        shape = {"heads": 4, "kv_heads": draw(st.sampled_from([1, 2, 4])), "hidden": 64, "full": full}
    dim = draw(st.floats(20, full, allow_nan=False))
    return {"name": name, "kind": kind, **shape, "dim": round(dim, 1), "importance": imp, "group": group}


@st.composite
def manifests(draw):
    n = draw(st.integers(1, 5))
    ws = [draw(weights(f"w{i}")) for i in range(n)]
    frac = draw(st.floats(0, 1))
    return _shareable(ws), frac


def _shareable(ws: list[dict]) -> list[dict]:
    """Weights of a group that cannot share one dim (the manifest refuses it) stand alone instead."""
    for group in {w["group"] for w in ws} - {None}:
        members = [w for w in ws if w["group"] == group]
        try:
            Manifest.model_validate({"model": "t", "budget": {"params": 1}, "weights": members})
        except ValidationError:
            for w in members:
                w["group"] = None
    return ws


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.sampled_from(["cp-sat", "scip"]))
def test_align_is_optimal_within_budget(case, backend):
    ws, frac = case
    probe = Manifest.model_validate({"model": "t", "budget": {"params": 1}, "weights": ws})
    cands = [build_candidates(it, LatencyModel(None, probe), SMALL) for it in build_items(probe)]
    costs, values = integer_instance(cands)
    lo, hi = sum(min(c) for c in costs), sum(max(c) for c in costs)
    budget = lo + int(frac * (hi - lo))
    m = Manifest.model_validate({"model": "t", "budget": {"params": budget}, "weights": ws})
    res = align(m, None, AlignOptions(candidates=SMALL, cross_check=backend))
    assert res.total_params <= budget == res.budget
    assert res.total_params == sum(w.params for w in res.weights)
    chosen = [w.dim for w in res.weights]
    value = sum(vals[[c.dim for c in ic.candidates].index(d)] for vals, ic, d in zip(values, cands, chosen))
    assert (value, res.total_params) == brute_force(costs, values, budget)
    assert res.solver.cross_check.agrees is True and res.solver.cross_check.status == "OPTIMAL"
    assert res.objective == pytest.approx(objective(build_items(m), chosen))
    assert res.solver.cross_check.objective == pytest.approx(res.objective, rel=1e-9, abs=1e-6)
    assert res.platform == RULES_ONLY and all(c.source == "rule" for w in res.weights for c in w.candidates)
    AlignmentResult.model_validate_json(res.model_dump_json(by_alias=True))  # the document round-trips


def test_budget_below_smallest_feasible_names_it():
    ws = [{"name": "a", "kind": "linear_out", "out_features": 64, "in_features": 10, "dim": 30, "importance": 1}]
    m = Manifest.model_validate({"model": "t", "budget": {"params": 100}, "weights": ws})
    with pytest.raises(BudgetBelowFeasible) as err:
        align(m, None, AlignOptions(candidates=SMALL, cross_check="none"))
    # window 18..42 -> smallest multiple of 8 is 24 -> 240 params
    assert err.value.smallest_feasible == 240 and "240" in str(err.value)


def _measured_lookup(tmp_path) -> FileLookup:
    """GEMMs whose latency has a cliff at every dim that is not a multiple of 16."""
    plat = PlatformDescriptor(device_kind="cpu", device_name="test-cpu", cores=2)
    rows = []
    for d in range(1, 129):
        lat = 10.0 + d / 16 + (4.0 if d % 16 else 0.0)
        for shape, axis in (({"m": 32, "n": d, "k": 64}, "n"), ({"m": 32, "n": 128, "k": d}, "k")):
            rows.append(Measurement(id=uuid.uuid4(), op=Op.gemm, dtype=Dtype.float16, shape=shape, sweep_axis=axis,
                                    median_us=lat, p10_us=lat, p90_us=lat, mean_us=lat, n=5, timer="t"))  # fmt: skip
    path = tmp_path / "m.jsonl"
    batch = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    path.write_text(batch.model_dump_json(by_alias=True) + "\n")
    return FileLookup.from_jsonl(path)


def test_measured_align_reports_evidence(tmp_path):
    lookup = _measured_lookup(tmp_path)
    ws = [
        {"name": "a", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 50.3, "importance": 2},
        {"name": "b", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 41.7, "importance": 1},
        {"name": "c", "kind": "lowrank", "out_features": 128, "in_features": 100, "dim": 41.7, "importance": 1},
    ]
    m = Manifest.model_validate({"model": "t", "budget": {"params": 200 * 192}, "target": {"platform": "x"},
                                 "workload": {"tokens": [32]}, "weights": ws})  # fmt: skip
    res = align(m, lookup, AlignOptions(candidates=CandidateOptions(window=20), cross_check="cp-sat", objective="importance"))
    a, b, c = res.weights
    assert {x.source for x in a.candidates} == {"measured"} and all(x.dim % 16 == 0 for x in a.candidates)
    assert a.dim % 16 == 0 and b.dim % 16 == 0 and a.latency_us is not None
    assert {x.source for x in c.candidates} == {"rule"}  # k=100 was never measured
    assert res.missing and res.missing[0].fixed_shape == {"m": 32, "k": 100} and res.missing[0].items == ["c"]
    assert any("rule" in w for w in res.warnings)
    assert res.latency.complete is False
    assert res.platform == lookup.platform
    assert res.solver.cross_check.agrees is True


def test_predicted_latency_when_complete(tmp_path):
    lookup = _measured_lookup(tmp_path)
    ws = [{"name": "a", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 50.3, "importance": 1}]
    m = Manifest.model_validate({"model": "t", "budget": {"params": 60 * 192}, "workload": {"tokens": [32]}, "weights": ws})
    res = align(m, lookup, AlignOptions(candidates=CandidateOptions(window=20), cross_check="none", objective="importance"))
    lat = res.latency
    assert lat.complete and lat.aligned_us < lat.unaligned_us  # 50 sits on a cliff; the choice does not
    # The original is one dense GEMM 32x64 -> 128 (n = 128 on the same curve), not the factor pair at full rank.
    assert lat.original_us == pytest.approx(10.0 + 128 / 16)
    assert res.solver.cross_check.method == "none" and res.solver.cross_check.agrees is None


@pytest.mark.parametrize(("dim", "priced_at"), [(47.5, 47), (0.5, 1)])
def test_the_unaligned_model_is_priced_at_the_compressors_dim_rounded_down(tmp_path, dim, priced_at):
    """The dim the budget holds, and the one no_slower holds to: 47.5 is priced at 47 (on a cliff), not at the
    48 it rounds to (off it), and 0.5 at 1: rounded, it was 0, and the prediction went missing with no point to measure."""
    ws = [{"name": "a", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": dim, "importance": 1}]
    m = Manifest.model_validate({"model": "t", "budget": {"params": 48 * 192}, "workload": {"tokens": [32]}, "weights": ws})
    res = align(m, _measured_lookup(tmp_path), AlignOptions(candidates=CandidateOptions(window=20), cross_check="none"))
    pair = 2 * (10.0 + priced_at / 16 + (4.0 if priced_at % 16 else 0.0))  # 32 x 64 -> r (n = r), then r -> 128 (k = r)
    assert res.latency.complete and res.latency.missing_points == 0
    assert res.weights[0].latency_before_us == pytest.approx(pair) and res.latency.unaligned_us == pytest.approx(pair)


def test_budget_below_the_frontier_lets_weights_keep_the_compressors_dim(tmp_path):
    """Latency flat up to 64 (a plateau, as a padded tile gives): in the windows 30..64 of
    d* = 50 and 34..64 of d* = 54 the only cliff-free dim is 64. A budget that fits the
    compressor's dims but not two 64s lets each weight either move to 64 or stay put."""
    plat = PlatformDescriptor(device_kind="cpu", device_name="plateau-cpu", cores=2)
    rows = []
    for d in range(1, 129):
        lat = 10.0 + max(0, d - 64) / 8
        for shape, axis in (({"m": 32, "n": d, "k": 64}, "n"), ({"m": 32, "n": 128, "k": d}, "k")):
            rows.append(Measurement(id=uuid.uuid4(), op=Op.gemm, dtype=Dtype.float16, shape=shape, sweep_axis=axis,
                                    median_us=lat, p10_us=lat, p90_us=lat, mean_us=lat, n=5, timer="t"))  # fmt: skip
    path = tmp_path / "plateau.jsonl"
    batch = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    path.write_text(batch.model_dump_json(by_alias=True))
    lookup = FileLookup.from_jsonl(path)
    ws = [
        {"name": "a", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 50.3, "importance": 1},
        {"name": "b", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 54.2, "importance": 2},
    ]
    opts = AlignOptions(candidates=CandidateOptions(window=20), cross_check="cp-sat", objective="importance")

    def manifest(params: int) -> Manifest:
        return Manifest.model_validate({"model": "t", "budget": {"params": params}, "workload": {"tokens": [32]}, "weights": ws})

    res = align(manifest((50 + 64) * 192), lookup, opts)  # one of the two can move up to 64
    assert [w.dim for w in res.weights] == [50, 64]  # b, the more important, moves; a stays put
    assert [[c.dim for c in w.candidates] for w in res.weights] == [[50, 64], [54, 64]]
    assert "compressor's own dim" in res.warnings[0] and res.solver.cross_check.agrees is True
    res = align(manifest(128 * 192), lookup, opts)  # both 64s fit: only cliff-free dims, no warning
    assert [w.dim for w in res.weights] == [64, 64] and not any("compressor's own dim" in w for w in res.warnings)
    with pytest.raises(BudgetBelowFeasible):  # not even the compressor's dims fit
        align(manifest(103 * 192), lookup, opts)


def test_llama3_8b_example_end_to_end():
    m = Manifest.model_validate_json((EXAMPLES / "llama3-8b-asvd-r15.json").read_text())
    res = align(m, None, AlignOptions(cross_check="cp-sat"))
    assert len(res.weights) == 224 and res.total_params <= res.budget
    assert res.aligned_share_after == 1.0 and res.aligned_share_before < 0.1
    assert res.solver.cross_check.agrees is True
    by = {b.method: b for b in res.baselines}
    assert by["paper-dp"].objective <= res.objective + 1e-6 * abs(res.objective)
    assert by["nearest-8"].objective <= res.objective or not by["nearest-8"].within_budget
    doc = json.loads(res.model_dump_json(by_alias=True))
    assert doc["schema"] == "gac.alignment/v1"
    assert set(doc["weights"][0]) >= {"name", "dim_before", "dim", "params", "candidates"}
    assert set(doc["solver"]["cross_check"]) >= {"method", "objective", "agrees"}


def _staircase_lookup(tmp_path, period: int = 24) -> FileLookup:
    """GEMMs that step up right after every multiple of `period` (a tile), flat inside a tile."""
    plat = PlatformDescriptor(device_kind="cpu", device_name="stair-cpu", cores=2)
    rows = []
    for d in range(1, 257):
        lat = 10.0 * -(-d // period)
        for shape, axis in (({"m": 32, "n": d, "k": 256}, "n"), ({"m": 32, "n": 256, "k": d}, "k")):
            rows.append(Measurement(id=uuid.uuid4(), op=Op.gemm, dtype=Dtype.float16, shape=shape, sweep_axis=axis,
                                    median_us=lat, p10_us=lat, p90_us=lat, mean_us=lat, n=5, timer="t"))  # fmt: skip
    path = tmp_path / "stair.jsonl"
    batch = Batch(id=uuid.uuid4(), platform=plat, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    path.write_text(batch.model_dump_json(by_alias=True))
    return FileLookup.from_jsonl(path)


def _stair_manifest(**kw) -> Manifest:
    ws = [
        {"name": f"w{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": d, "importance": s}
        for i, (d, s) in enumerate([(100.4, 1.0), (131.0, 0.7), (75.2, 1.3), (160.0, 1.0), (50.5, 0.9), (118.0, 1.1)])
    ]
    budget = round(sum(w["dim"] for w in ws) * 512)  # the compressor's own total
    return Manifest.model_validate({"model": "t", "budget": {"params": budget}, "workload": {"tokens": [32]}, "weights": ws, **kw})


def test_latency_objective_is_faster_than_importance_and_keeps_enough(tmp_path):
    lookup = _staircase_lookup(tmp_path)
    m = _stair_manifest()
    opts = AlignOptions(cross_check="cp-sat")
    imp = align(m, lookup, replace(opts, objective="importance"))
    lat = align(m, lookup, replace(opts, objective="latency", epsilon=0.06))  # one step of 24 is ~4 % of the dims
    assert lat.objective_kind == "latency" and lat.epsilon == 0.06 and imp.objective_kind == "importance"
    assert lat.total_params <= lat.budget and lat.latency.complete
    assert lat.latency.aligned_us < imp.latency.aligned_us  # priced latency buys speed ...
    assert lat.latency.importance_only_us == pytest.approx(imp.latency.aligned_us)
    assert lat.latency.importance_kept >= 0.94  # ... within the importance it may give up
    assert lat.latency.speedup == pytest.approx(lat.latency.unaligned_us / lat.latency.aligned_us)
    # Every chosen dim sits on a step top (a multiple of 24) or is the window's cheapest way to pay.
    assert sum(w.dim % 24 == 0 for w in lat.weights) >= len(lat.weights) - 1
    AlignmentResult.model_validate_json(lat.model_dump_json(by_alias=True))


def test_epsilon_zero_keeps_the_importance_answer_and_is_never_slower(tmp_path):
    lookup = _staircase_lookup(tmp_path)
    m = _stair_manifest()
    imp = align(m, lookup, AlignOptions(cross_check="none", objective="importance"))
    lat = align(m, lookup, AlignOptions(cross_check="none", objective="latency", epsilon=0.0))
    assert lat.latency.importance_kept >= 1.0
    assert lat.latency.aligned_us <= imp.latency.aligned_us + 1e-9


def test_frontier_objective_reports_pareto_points_with_the_choice(tmp_path):
    lookup = _staircase_lookup(tmp_path)
    res = align(_stair_manifest(objective="frontier", epsilon=0.01), lookup, AlignOptions(cross_check="none"))
    pts = res.frontier
    assert len(pts) >= 3 and sum(p.chosen for p in pts) <= 1
    lats = [p.latency_us for p in pts]
    kept = [p.importance_kept for p in pts]
    assert lats == sorted(lats) and kept == sorted(kept)  # faster points keep less: none dominated
    assert all(p.params <= res.budget for p in pts)
    assert {b.method for b in res.baselines} >= {"importance-only", "nearest-8", "paper-dp"}
    assert all(b.speedup is not None for b in res.baselines if b.method == "importance-only")


def test_baselines_read_alike_whatever_the_objective(tmp_path):
    """paper-dp solves importance-only GAC's knapsack under every objective (it solved the answer's own
    candidates, so its figures moved with --objective), and each baseline's importance_kept is the summary's
    measure: the share of what importance-only GAC keeps (1.0 for importance-only itself)."""
    from gac.solver.align import complete_pending

    lookup, m = _staircase_lookup(tmp_path), _stair_manifest()
    by = {}
    for kind in ("importance", "latency"):
        res = align(m, lookup, AlignOptions(cross_check="none", objective=kind, epsilon=0.05))
        by[kind] = {b.method: b for b in res.baselines}
        # Left for later (as the service does with large ones), the same baselines come out.
        deferred = align(m, lookup, AlignOptions(cross_check="none", objective=kind, epsilon=0.05, defer_above=0))
        assert "baselines" in deferred.pending
        done = {b.method: b for b in complete_pending(m, deferred, lookup, AlignOptions(cross_check="none")).baselines}
        for name in ("paper-dp", "paper-dp-64"):
            assert done[name].model_dump(exclude={"seconds"}) == by[kind][name].model_dump(exclude={"seconds"})
    assert by["latency"]["paper-dp"].objective == by["importance"]["paper-dp"].objective
    assert by["latency"]["importance-only"].importance_kept == 1.0
    lat = align(m, lookup, AlignOptions(cross_check="none", objective="latency", epsilon=0.05)).latency
    assert lat.importance_kept < 1.0
    for b in (b for b in by["latency"].values() if b.method != "importance-only"):
        assert b.importance_kept == pytest.approx(by["importance"][b.method].importance_kept)  # one measure, one reference


def test_deferred_paper_dp_solves_the_widened_knapsack_too():
    """A budget the cliff-free dims cannot meet widens importance-only GAC's candidates: the deferred paper-dp
    (complete_pending) solves that widened knapsack as the inline one does, not the plain one (which it failed)."""
    from gac.solver.align import complete_pending

    m_, in_, out_, dims = 8, 48, 40, (11.3, 19.6)
    rows = []
    for x in range(1, 129):
        lat = 10.0 + 5.0 * -(-x // 32)  # steps 32 wide: every cliff-free dim is above the compressor's
        rows.append((Op.gemm, Dtype.float32, {"m": m_, "n": x, "k": in_}, "n", lat, lat, lat, 20))
        rows.append((Op.gemm, Dtype.float32, {"m": m_, "n": out_, "k": x}, "k", lat, lat, lat, 20))
    ws = [{"name": f"w{i}", "kind": "lowrank", "out_features": out_, "in_features": in_, "dim": d, "importance": 1.0 + i}
          for i, d in enumerate(dims)]  # fmt: skip
    manifest = Manifest.model_validate({"model": "wide", "budget": {"params": int(sum(dims) * (in_ + out_))}, "objective": "latency",
                                        "workload": {"tokens": [m_], "dtype": "float32"}, "weights": ws})  # fmt: skip
    lookup = FileLookup(rows, "wide")
    inline = align(manifest, lookup, AlignOptions(cross_check="none"))
    assert any("candidates widened" in w for w in inline.warnings)
    done = complete_pending(manifest, align(manifest, lookup, AlignOptions(cross_check="none", defer_above=0)), lookup)
    assert not [w for w in done.warnings if "paper-dp" in w], done.warnings
    (late,) = [b for b in done.baselines if b.method == "paper-dp"]
    (now,) = [b for b in inline.baselines if b.method == "paper-dp"]
    assert late.model_dump(exclude={"seconds"}) == now.model_dump(exclude={"seconds"})


def test_default_objective_is_latency_with_data_and_importance_without(tmp_path):
    m = _stair_manifest()
    assert align(m, _staircase_lookup(tmp_path), AlignOptions(cross_check="none")).objective_kind == "latency"
    rules = align(m, None, AlignOptions(cross_check="none"))
    assert rules.objective_kind == "importance" and rules.frontier == []


def test_a_platform_that_measured_another_dtype_prices_nothing(tmp_path):
    # The staircase is float16 only: asked for latency in float32, there is nothing to price it with.
    m = _stair_manifest(workload={"tokens": [32], "dtype": "float32"}, objective="latency")
    res = align(m, _staircase_lookup(tmp_path), AlignOptions(cross_check="none"))
    assert res.objective_kind == "importance" and not res.latency.complete
    assert any("in float32 for platform" in w and "none of these kernels' curves is measured" in w for w in res.warnings), res.warnings
    assert any("objective 'latency' needs latency data" in w for w in res.warnings)
    assert not any("items lack measurements" in w for w in res.warnings), res.warnings  # said once, above
    assert res.latency.missing_points > 0


def test_a_platform_that_measured_other_shapes_prices_nothing(tmp_path):
    # The weights' own curves exist, but measured from 200 up only: no window near 100 or 131 is measured.
    rows = [(Op.gemm, Dtype.float16, {"m": 32, **shape}, axis, 10.0, 10.0, 10.0, 5)
            for d in range(200, 257) for shape, axis in (({"n": d, "k": 256}, "n"), ({"n": 256, "k": d}, "k"))]  # fmt: skip
    ws = [{"name": f"w{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": d, "importance": 1.0}
          for i, d in enumerate((100.4, 131.0))]  # fmt: skip
    m = Manifest.model_validate({"model": "t", "budget": {"params": 231 * 512}, "workload": {"tokens": [32]}, "weights": ws})
    for kind in ("latency", "frontier"):
        res = align(m, FileLookup(rows, "far"), AlignOptions(cross_check="none", objective=kind))
        assert res.objective_kind == "importance" and res.frontier == [] and res.latency.proven_gap is None
        said = f"objective {kind!r} needs latency data: no item's window is measured in float16"
        assert any(said in w for w in res.warnings), res.warnings
        assert not any("items lack measurements" in w for w in res.warnings), res.warnings  # said once, above
        assert res.rule_items == ["w0", "w1"]


@pytest.mark.parametrize("seed", range(4))
def test_the_frontier_holds_the_chosen_point(seed):
    # The latency objective shows a dozen frontier points beside its answer: the answer is one of
    # them, though the dozen sampled passed it by (on a curve with steps, a slope and slower odd dims).
    rows = []
    for d in range(1, 257):
        lat = 10.0 * -(-d // 24) + 0.01 * d + 3.0 * (d % 2)
        for shape, axis in (({"n": d, "k": 256}, "n"), ({"n": 256, "k": d}, "k")):
            rows.append((Op.gemm, Dtype.float16, {"m": 32, **shape}, axis, lat, lat, lat, 5))
    rnd = random.Random(seed)
    ws = [{"name": f"w{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": round(rnd.uniform(30, 200), 1),
           "importance": round(rnd.uniform(0.2, 2), 2)} for i in range(rnd.randint(5, 14))]  # fmt: skip
    budget = round(sum(w["dim"] for w in ws) * 512)
    m = Manifest.model_validate({"model": "t", "budget": {"params": budget}, "workload": {"tokens": [32]}, "weights": ws,
                                 "epsilon": rnd.choice([0.001, 0.005, 0.02])})  # fmt: skip
    res = align(m, FileLookup(rows, "lattice"), AlignOptions(cross_check="none"))
    (chosen,) = [p for p in res.frontier if p.chosen]
    assert chosen.latency_us == pytest.approx(res.latency.aligned_us)
    assert chosen.importance_kept == pytest.approx(res.latency.importance_kept) and chosen.params == res.total_params
    lats = [p.latency_us for p in res.frontier]
    assert lats == sorted(lats)


def test_an_incomplete_prediction_leaves_every_total_out(tmp_path):
    # importance_only_us summed over the measured items alone read 0.0 beside null totals: a client's ratio divided by it.
    lookup = _measured_lookup(tmp_path)
    ws = [
        {"name": "a", "kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 50.3, "importance": 2},
        {"name": "c", "kind": "lowrank", "out_features": 128, "in_features": 100, "dim": 41.7, "importance": 1},
    ]
    m = Manifest.model_validate({"model": "t", "budget": {"params": 200 * 192}, "target": {"platform": "x"},
                                 "workload": {"tokens": [32]}, "weights": ws})  # fmt: skip
    res = align(m, lookup, AlignOptions(candidates=CandidateOptions(window=20), cross_check="none", objective="latency"))
    lat = res.latency
    assert not lat.complete and lat.missing_points > 0
    assert (lat.unaligned_us, lat.aligned_us, lat.importance_only_us) == (None, None, None)


def test_missing_points_count_each_point_once_even_without_a_platform():
    # A rules-only result listed points under `missing` while missing_points said 0; and two weights
    # of one shape ask for the same points of the same curves: they count once.
    w = {"kind": "lowrank", "out_features": 128, "in_features": 64, "dim": 50.3, "importance": 1}
    one, two = ({"model": "t", "budget": {"params": 192 * 50 * len(ws)}, "workload": {"tokens": [32]}, "weights": ws}
                for ws in ([{**w, "name": "a"}], [{**w, "name": "a"}, {**w, "name": "b"}]))  # fmt: skip
    counts = []
    for doc in (one, two):
        res = align(Manifest.model_validate(doc), None, AlignOptions(cross_check="none"))
        assert res.platform == RULES_ONLY and res.missing
        assert res.latency.missing_points == sum(len(mc.dims) for mc in res.missing) > 0
        # Nothing measured near any of them: each estimated at the time cap, and said to be a bound.
        assert all(mc.capped_dims == len(mc.dims) and mc.later_dims is None for mc in res.missing)
        counts.append(res.latency.missing_points)
    assert counts[0] == counts[1]


@pytest.mark.parametrize("objective_kind", ["importance", "latency"])
def test_a_budget_from_fractional_dims_stays_feasible_when_steps_are_wide(objective_kind):
    """Steps 32 wide put every cliff-free dim above the compressor's (11.3 and 19.6): the budget,
    taken from those fractional dims, must still be met by the compressor's dims rounded down
    (rounding 19.6 to 20 would need 8 parameters more than the budget)."""
    m_, in_, out_ = 8, 48, 40
    rows = []
    for x in range(1, 129):
        lat = 10.0 + 5.0 * -(-x // 32)
        rows.append((Op.gemm, Dtype.float32, {"m": m_, "n": x, "k": in_}, "n", lat, lat, lat, 20))
        rows.append((Op.gemm, Dtype.float32, {"m": m_, "n": out_, "k": x}, "k", lat, lat, lat, 20))
    dims = (11.3, 19.6)
    manifest = Manifest.model_validate(
        {
            "schema": "gac.manifest/v1",
            "model": "wide-steps",
            "budget": {"params": int(sum(dims) * (in_ + out_))},
            "workload": {"tokens": [m_], "dtype": "float32"},
            "objective": objective_kind,
            "weights": [
                {"name": f"w{i}", "kind": "lowrank", "out_features": out_, "in_features": in_, "dim": d, "importance": 1.0 + i}
                for i, d in enumerate(dims)
            ],
        }
    )
    result = align(manifest, FileLookup(rows, "wide"))
    assert result.total_params <= result.budget == 2719
    assert len(result.weights) == 2 and all(w.dim <= 36 for w in result.weights), result.warnings


def test_a_paper_window_baseline_that_keeps_more_says_how_far_it_moved_dims():
    """paper-dp-64 can keep more (linear) importance than GAC only by leaving GAC's window: the warning names the
    widest such move, which is real (outside that item's candidates), and goes once the window is the paper's."""
    from gac.solver.align import PAPER_OWN
    from tests.solver.synthetic import Measure, llama_like_manifest, lowrank_curves, platform_rows

    doc = llama_like_manifest(1, hidden=512, seed=0, tokens=128)
    manifest = Manifest.model_validate({"schema": "gac.manifest/v1", **doc})
    rows, _ = platform_rows(lowrank_curves(doc), 32, Measure(seed=0))
    lookup = FileLookup(rows, "f" * 64)
    ours = align(manifest, lookup, AlignOptions(cross_check="none", objective="latency"))
    theirs = next(b for b in ours.baselines if b.method == PAPER_OWN)
    assert theirs.objective > ours.objective
    (said,) = [w for w in ours.warnings if w.startswith(f"{PAPER_OWN} keeps more importance")]
    name, move = re.search(r"\((\S+): [\d.]+ -> (\d+)\)", said).groups()
    weight = next(w for w in ours.weights if w.name == name)
    assert not min(c.dim for c in weight.candidates) <= int(move) <= max(c.dim for c in weight.candidates)
    wide = align(manifest, lookup, AlignOptions(cross_check="none", objective="latency", window="paper"))
    assert not [w for w in wide.warnings if w.startswith(f"{PAPER_OWN} keeps more importance")]


def test_a_budget_apart_from_the_compressors_own_total_is_said():
    # 231 x 512 params is what dims 100.4 and 131.0 of 256 x 256 low-rank pairs take.
    ws = [{"name": f"w{i}", "kind": "lowrank", "out_features": 256, "in_features": 256, "dim": d, "importance": 1.0 + i}
          for i, d in enumerate((100.4, 131.0))]  # fmt: skip

    def notes(params: int) -> list[str]:
        m = Manifest.model_validate({"model": "t", "budget": {"params": params}, "workload": {"tokens": [32]}, "weights": ws})
        return [w for w in align(m, None, AlignOptions(cross_check="none")).warnings if "the budget (" in w]

    own = round(231.4 * 512)
    assert notes(own) == [] and notes(round(own * 1.009)) == []
    (below,) = notes(round(own * 0.9))
    assert below.startswith(f"the budget ({round(own * 0.9):,} params) is 10.0% below what the compressor's dims take ({own:,})"), below
    assert "shrink to fit it" in below and f'{{"params": {own}}}' in below
    (above,) = notes(round(own * 1.2))
    assert "20.0% above" in above and "grow into the difference" in above


def test_each_weight_says_its_latency_at_the_compressors_dim(tmp_path):
    # Beside the chosen dim's latency, the compressor's: the two columns the unaligned and aligned totals sum.
    res = align(_stair_manifest(), _staircase_lookup(tmp_path), AlignOptions(cross_check="none"))
    assert res.latency.complete
    assert sum(w.latency_before_us or 0 for w in res.weights) == pytest.approx(res.latency.unaligned_us)
    assert sum(w.latency_us or 0 for w in res.weights) == pytest.approx(res.latency.aligned_us)
    assert all(w.latency_before_us == 2 * 10.0 * -(-round(w.dim_before) // 24) for w in res.weights)  # two GEMMs on the stairs at d*
    rules = align(_stair_manifest(), None, AlignOptions(cross_check="none"))
    assert all(w.latency_before_us is None for w in rules.weights)


def test_importance_is_given_up_only_for_a_gain_beyond_the_timing_noise(tmp_path):
    """The epsilon point is the answer only when it is min_gain faster than the fastest choice keeping all
    the importance; else that choice is, and the warnings say what the trade would have bought."""
    lookup, m = _staircase_lookup(tmp_path), _stair_manifest()
    opts = AlignOptions(cross_check="none", objective="latency", epsilon=0.06)
    traded, kept = align(m, lookup, replace(opts, min_gain=0)), align(m, lookup, replace(opts, min_gain=0.5))
    exact = align(m, lookup, replace(opts, epsilon=0.0))  # the fastest choice keeping all of it
    gain = 1 - traded.latency.aligned_us / exact.latency.aligned_us
    assert traded.latency.importance_kept < 1.0 and 0.02 < gain < 0.5
    assert align(m, lookup, opts).weights == traded.weights  # the default (2 %) lets this gain through
    assert [w.dim for w in kept.weights] == [w.dim for w in exact.weights] and kept.latency.importance_kept >= 1.0
    (note,) = [w for w in kept.warnings if "it must save (min_gain)" in w]
    assert f"take {gain:.2%} off the predicted time" in note and "under the 50.0%" in note
    assert [p for p in kept.frontier if p.chosen] == [p for p in exact.frontier if p.chosen]
    assert not [w for w in traded.warnings if "it must save (min_gain)" in w]
    # The manifest's min_gain asks the same; the option, where given, wins over it.
    assert align(_stair_manifest(min_gain=0.5), lookup, opts).weights == kept.weights
    assert align(_stair_manifest(min_gain=0.5), lookup, replace(opts, min_gain=0)).weights == traded.weights
    with pytest.raises(ValueError, match="min_gain"):
        AlignOptions(min_gain=float("nan"))


def test_tied_importances_stay_tied_and_the_tie_takes_the_fewest_params():
    """Importances 3 and 2 rounded to 2^-20 of the largest made 2 a hair larger than 2/3 of 3: [56, 24] and [72, 16]
    keep the same importance, and the solver took the first, 128 params more."""
    ws = [
        {"name": "a", "kind": "linear_out", "out_features": 96, "in_features": 16, "dim": 60, "importance": 3},
        {"name": "b", "kind": "linear_out", "out_features": 40, "in_features": 48, "dim": 24, "importance": 2},
    ]
    res = align(
        Manifest.model_validate({"model": "t", "budget": {"params": 2100}, "weights": ws}), None, AlignOptions(cross_check="cp-sat")
    )
    assert [w.dim for w in res.weights] == [72, 16] and res.total_params == 1920 and res.solver.cross_check.agrees


@pytest.mark.parametrize(
    ("importances", "units"),
    [
        ({3.0, 2.0}, {3.0: 3, 2.0: 2}),
        ({0.3, 0.2, 0.0}, {0.3: 3, 0.2: 2, 0.0: 0}),  # read as the decimals written
        ({0.0}, {0.0: 0}),
        ({2.0**20, 1.5}, {2.0**20: 1 << 20, 1.5: 2}),  # 2^21 and 3 exactly would pass 2^20: rounded
        ({1.0, 1 / 3}, {1.0: 1 << 20, 1 / 3: 349525}),  # no small common scale: rounded
        ({2.2250738585e-313}, {2.2250738585e-313: 1 << 20}),  # a subnormal's denominator has 323 digits
    ],
)
def test_importances_are_exact_integers_where_a_small_scale_holds_them(importances, units):
    assert importance_units(importances) == units


def test_a_group_of_different_shapes_fits_the_budget_its_own_dims_take():
    """a (100 params per dim, at 100) and b (1, at 400) take 10,400 params; sharing the plain mean, 250, they took
    25,250 at the compressor's choice, and their own budget was refused as below the smallest feasible 24,240."""
    ws = [
        {"name": "a", "kind": "linear_out", "out_features": 512, "in_features": 100, "dim": 100, "importance": 1, "group": "g"},
        {"name": "b", "kind": "linear_out", "out_features": 512, "in_features": 1, "dim": 400, "importance": 1, "group": "g"},
    ]
    res = align(
        Manifest.model_validate({"model": "t", "budget": {"params": 10_400}, "weights": ws}), None, AlignOptions(cross_check="none")
    )
    [g] = res.weights
    assert g.dim_before == pytest.approx(10_400 / 101) and res.total_params <= 10_400 and g.dim == 96


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_the_params_the_compressors_dims_take_are_always_a_feasible_budget(case):
    ws, _ = case
    own = sum(unit_params(w) * w.dim for w in Manifest.model_validate({"model": "t", "budget": {"params": 1}, "weights": ws}).weights)
    res = align(
        Manifest.model_validate({"model": "t", "budget": {"params": int(own)}, "weights": ws}), None, AlignOptions(cross_check="none")
    )
    assert res.total_params <= int(own)
