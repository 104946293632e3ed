"""An alignment never fails for lack of data: items whose compressor's dim (or whole window) the
platform has not measured fall back to rule candidates and their own dim, and the result names
them. Only a budget below what the compressor's own dims allow is infeasible, and it says so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, BudgetBelowFeasible, align
from gac.solver.candidates import CandidateOptions
from gac.solver.lookup import FileLookup

DEMO = Path(__file__).resolve().parents[2] / "examples" / "cpu-demo-lowrank.json"
# The quick plan's GEMM sweeps around the demo's shapes: N every 4 and K every 8 in 56..200, so the
# compressor's dims (97, 113, ...) are never among them.
N_DIMS, K_DIMS = range(56, 201, 4), range(56, 201, 8)


def demo(**changes) -> Manifest:
    return Manifest.model_validate({**json.loads(DEMO.read_text()), **changes})


def quick_plan_lookup(period: int, stalls: dict[tuple[str, int], float] | None = None, dtype: str = "bfloat16") -> FileLookup:
    """A staircase of `period` along N and K, measured where the quick plan measures it; a stalled
    point (a busy machine's) is `stalls[(axis, dim)]` times slower, with the huge spread it shows."""
    rows = []
    for axis, dims in (("n", N_DIMS), ("k", K_DIMS)):
        for d in dims:
            lat = 90.0 * -(-d // period) * (stalls or {}).get((axis, d), 1.0)
            shape = {"m": 256, "k": 256, "n": d} if axis == "n" else {"m": 256, "n": 256, "k": d}
            rows.append(("gemm", dtype, shape, axis, lat, lat * 0.97, lat * 1.03, 20))
    return FileLookup(rows, "quick-plan-cpu")


def test_unmeasured_compressor_dims_fall_back_to_rules_and_are_named():
    """On one plateau up to 128 the cliff-free dims are the windows' tops; the compressor's dims were
    never measured, so before this fell back the demo's first alignment was 'infeasible'."""
    m = demo()
    for objective in ("importance", "latency"):
        res = align(m, quick_plan_lookup(64), AlignOptions(objective=objective, cross_check="cp-sat"))
        assert res.total_params <= res.budget
        assert res.solver.cross_check.agrees is not False
        fell = [w for w in res.weights if w.name in res.rule_items]
        if objective == "importance":  # the latency objective prices every measured dim: it fits without
            assert fell
        for w in fell:
            own = math.floor(w.dim_before)
            assert {c.source for c in w.candidates} == {"rule"} and own in [c.dim for c in w.candidates], w
        assert any("has not measured" in x for x in res.warnings), res.warnings
        assert res.missing  # what would price them: --profile-missing measures it


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    period=st.sampled_from([8, 16, 32, 64]),
    stalls=st.dictionaries(
        st.one_of(st.tuples(st.just("n"), st.sampled_from(list(N_DIMS))), st.tuples(st.just("k"), st.sampled_from(list(K_DIMS)))),
        st.floats(20.0, 300.0),
        max_size=12,
    ),
    objective=st.sampled_from(["importance", "latency"]),
)
def test_a_busy_machines_profile_never_makes_the_demo_infeasible(period, stalls, objective):
    """Whatever the stalls of a loaded machine did to the quick plan's points, the demo's manifest
    (its budget is its compressor's own dims) aligns within its budget."""
    res = align(
        demo(),
        quick_plan_lookup(period, stalls),
        AlignOptions(
            objective=objective,
            cross_check="none",
            baselines=False,
            candidates=CandidateOptions(sparse=True),
        ),
    )
    assert res.total_params <= res.budget
    assert set(res.rule_items) <= {w.name for w in res.weights}


def test_tiny_dims_whose_window_holds_no_multiple_below_them_still_fit():
    """d* = 5: the window 3..21 has the multiples 8 and 16 only, both above 5; the own dim keeps it feasible."""
    ws = [{"name": "tiny", "kind": "linear_out", "out_features": 64, "in_features": 10, "dim": 5.5, "importance": 1}]
    res = align(Manifest.model_validate({"model": "t", "budget": {"params": 55}, "weights": ws}), None, AlignOptions(cross_check="none"))
    assert [w.dim for w in res.weights] == [5] and res.total_params == 50 and res.rule_items == ["tiny"]


def test_only_a_budget_below_the_compressors_own_dims_is_infeasible_and_it_says_so():
    m = demo(budget={"params": 600_000})  # the compressor's dims, rounded down, take 665,600
    with pytest.raises(BudgetBelowFeasible) as err:
        align(m, quick_plan_lookup(64), AlignOptions(cross_check="none"))
    assert err.value.own_params == 665_600 and "compressor's own dims" in str(err.value)
    assert err.value.smallest_feasible > 600_000 and f"{err.value.smallest_feasible}" in str(err.value)
