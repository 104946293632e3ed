"""Sweep-plan documents: expansion, built-in plans, and errors that name the field."""

from __future__ import annotations

import json

import pytest

from gac.agent.plan_library import BUILTIN_PLANS, cliff_map_plan, paper_plan, quick_plan, resolve_plan
from gac.contracts.measurements import Dtype, Op
from gac.contracts.plans import (
    MAX_PLAN_POINTS,
    PlanError,
    SweepPlan,
    load_plan,
    loads_plan,
    parse_plan,
    plan_for_points,
)

YAML_PLAN = """
name: tiny
timing: {time_cap_ms: 100}
sweeps:
  - op: gemm
    dtypes: [bfloat16, float32]
    axis: n
    fixed: {m: 64, k: 128}
    values: {start: 64, stop: 96, step: 8}
  - op: sdpa
    dtypes: [float16]
    axis: head_dim
    fixed: {b: 1, h: 2, s: 32}
    values: [64, 80, 128]
    timing: {target_spread: 0.1}
"""


def test_yaml_and_json_load_to_the_same_plan(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text(YAML_PLAN)
    plan = load_plan(y)
    j = tmp_path / "p.json"
    j.write_text(json.dumps(plan.to_document()))
    assert load_plan(j) == plan
    assert plan.n_points() == 5 * 2 + 3
    pts = plan.points()
    assert len(pts) == 13
    assert pts[0].shape == {"m": 64, "n": 64, "k": 128} and pts[0].dtype is Dtype.bfloat16
    assert pts[4].shape["n"] == 96  # stop is inclusive
    assert pts[-1].op is Op.sdpa and pts[-1].shape == {"b": 1, "h": 2, "s": 32, "head_dim": 128}
    assert plan.timing_for(0).time_cap_ms == 100
    assert plan.timing_for(1).target_spread == 0.1


def test_document_round_trips_through_the_model():
    plan = loads_plan(YAML_PLAN)
    assert SweepPlan.model_validate(plan.to_document()) == plan
    assert plan.to_document()["schema"] == "gac.plan/v1"


@pytest.mark.parametrize(
    ("mutation", "needle"),
    [
        (lambda d: d["sweeps"][0].update(axis="q"), "sweeps.0: Value error, axis 'q'"),
        (lambda d: d["sweeps"][0]["fixed"].pop("k"), "fixed is missing ['k']"),
        (lambda d: d["sweeps"][0]["fixed"].update(x=3), "fixed has unknown fields ['x']"),
        (lambda d: d["sweeps"][0].update(dtypes=["float8"]), "sweeps.0.dtypes.0"),
        (lambda d: d["sweeps"][0].update(dtypes=[]), "sweeps.0.dtypes"),
        (lambda d: d["sweeps"][0].update(op="conv"), "sweeps.0.op"),
        (lambda d: d["sweeps"][1].update(values=[64, 2.5]), "sweeps.1.values.list.1"),
        (lambda d: d["sweeps"][1].update(values=[64, 0]), "sweeps.1.values.list.1"),
        (lambda d: d["sweeps"][1].update(values=[]), "sweeps.1.values"),
        (lambda d: d["sweeps"][0].update(values={"start": 9, "stop": 3}), "sweeps.0.values.range"),
        (lambda d: d["sweeps"][0].update(values={"start": 1, "stop": 10**6}), "sweeps.0.values.range: Value error, range 1..1000000"),
        (lambda d: d["sweeps"][0].update(colour="red"), "sweeps.0.colour"),
        (lambda d: d.update(sweeps=[]), "sweeps"),
        (lambda d: d.pop("name"), "name"),
        (lambda d: d.update(timing={"min_samples": 3}), "timing.min_samples"),
        (lambda d: d.update(timing={"min_samples": 50, "max_samples": 20}), "max_samples (20) must be >= min_samples"),
        (lambda d: d["sweeps"][1].update(adaptive={"coarse_step": 8}), "adaptive needs values as a range"),
    ],
)
def test_invalid_plans_name_the_field(mutation, needle):
    doc = loads_plan(YAML_PLAN).to_document()
    mutation(doc)
    with pytest.raises(PlanError) as err:
        parse_plan(doc)
    assert needle in str(err.value)


def test_syntax_errors_and_wrong_top_level(tmp_path):
    with pytest.raises(PlanError, match="not valid"):
        loads_plan("name: [unclosed")
    with pytest.raises(PlanError, match="must be a mapping"):
        loads_plan("- a\n- b")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(PlanError, match=r"bad\.json.*sweeps"):
        load_plan(bad)
    with pytest.raises(FileNotFoundError, match="no built-in plan"):
        resolve_plan(str(tmp_path / "missing.yaml"))


def test_builtin_plans_are_valid_and_as_specified():
    for name in BUILTIN_PLANS:
        assert resolve_plan(name).name == name
    quick = quick_plan()
    assert {s.op for s in quick.sweeps} == set(Op)  # every op exercised
    assert quick.n_points() < 120
    paper = paper_plan()
    sdpa = [s for s in paper.sweeps if s.op is Op.sdpa][0]
    assert sdpa.fixed == {"b": 4, "s": 2048, "h": 32} and sdpa.value_list()[0] == 64 and sdpa.value_list()[-1] == 256
    gemm_2048 = [s for s in paper.sweeps if s.op is Op.gemm and set(s.fixed.values()) <= {2048, 128} and len(s.fixed) == 2]
    assert sorted(s.axis for s in gemm_2048) == ["k", "m", "n"]
    assert any(s.op is Op.gemv for s in paper.sweeps)
    assert cliff_map_plan(adaptive=True).sweeps[0].coarse_values()[:3] == [64, 72, 80]


def test_quick_plan_is_built_in_the_dtype_asked_for():
    default = quick_plan()  # bfloat16 with a float32 N sweep as the contrast, as before platforms said
    assert [s.dtypes for s in default.sweeps].count([Dtype.float32]) == 1
    assert all(s.dtypes == [Dtype.bfloat16] for s in default.sweeps if s.dtypes != [Dtype.float32])
    fp32 = resolve_plan("quick", ["float32"])  # an AVX2 CPU's fast dtype: every sweep float32, no contrast needed
    assert all(s.dtypes == [Dtype.float32] for s in fp32.sweeps) and {s.op for s in fp32.sweeps} == set(Op)
    assert fp32.n_points() < default.n_points() < 120
    both = quick_plan(["bfloat16", "float32", "bfloat16"])
    assert both.sweeps[0].dtypes == [Dtype.bfloat16, Dtype.float32] and all(len(s.dtypes) == 2 for s in both.sweeps)
    with pytest.raises(ValueError):
        quick_plan(["float64"])


def test_restricted_and_plan_for_points():
    plan = loads_plan(YAML_PLAN)
    only_bf16 = plan.restricted(["bfloat16"])
    assert [s.dtypes for s in only_bf16.sweeps] == [[Dtype.bfloat16]]
    with pytest.raises(ValueError, match="no sweep"):
        plan.restricted(["float16"]).restricted(["bfloat16"])
    pts = [(p.op, p.dtype, p.shape, p.axis) for p in plan.points()]
    rebuilt = plan_for_points("missing", pts)
    assert sorted(p.key() for p in rebuilt.points()) == sorted(p.key() for p in plan.points())
    assert len(rebuilt.sweeps) == 2  # bf16 and fp32 share the same values: one sweep
    with pytest.raises(ValueError, match="missing"):
        plan_for_points("x", [("gemm", "float16", {"m": 1, "n": 2}, "n")])


def test_point_limit_is_enforced():
    doc = {
        "name": "big",
        "sweeps": [
            {
                "op": "gemv",
                "dtypes": ["float16", "bfloat16", "float32"],
                "axis": "k",
                "fixed": {"n": 8},
                "values": {"start": 1, "stop": MAX_PLAN_POINTS},
            }
        ],
    }
    with pytest.raises(PlanError, match="more than"):
        parse_plan(doc)


def test_a_plan_too_big_is_counted_not_listed(monkeypatch):
    """An admin's plan of 1,000 ranges of 100,000 values: refused from its counts (listing them took seconds of the
    service's CPU per request)."""
    from gac.contracts.plans import ValueRange

    def listed(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the range was listed to be counted")

    monkeypatch.setattr(ValueRange, "expand", listed)
    sweep = {"op": "gemm", "dtypes": ["float32", "bfloat16"], "axis": "n", "fixed": {"m": 8, "k": 8}}
    sweep["values"] = {"start": 1, "stop": 100_000}
    with pytest.raises(PlanError, match=f"plan expands to {1000 * 2 * 100_000} points"):
        parse_plan({"name": "big", "sweeps": [sweep] * 1000})
    assert SweepPlan.model_validate({"name": "ok", "sweeps": [sweep | {"values": {"start": 8, "stop": 64, "step": 8}}]}).n_points() == 16


def test_a_plan_file_that_is_not_text_or_not_yaml_is_one_line_naming_it(tmp_path):
    """PyYAML's own message is eight lines (its context and a quote); a binary file raised UnicodeDecodeError unnamed."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nsweeps: [\n  - {op: gemm\n")
    with pytest.raises(PlanError) as err:
        load_plan(broken)
    assert "\n" not in str(err.value) and str(broken) in str(err.value) and "at line 3, column 3" in str(err.value)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe")
    with pytest.raises(PlanError, match="binary.yaml: a plan is UTF-8 text"):
        load_plan(binary)
