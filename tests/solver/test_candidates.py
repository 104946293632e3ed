"""Candidate building: measured frontier from a file-backed lookup, rule fallback, kinds."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Batch, Dtype, Measurement, Op, PlatformDescriptor, RunInfo
from gac.solver.candidates import CandidateOptions, LatencyModel, build_candidates, build_items, missing_curves
from gac.solver.frontier import cliff_free_frontier
from gac.solver.kinds import kernels, original_params, params, unit_params
from gac.solver.lookup import FileLookup, write_jsonl

PLATFORM = PlatformDescriptor(device_kind="cpu", device_name="test-cpu", cores=2)


def _m(op: Op, shape: dict[str, int], axis: str, lat: float) -> Measurement:
    return Measurement(id=uuid.uuid4(), op=op, dtype=Dtype.float16, shape=shape, sweep_axis=axis,
                       median_us=lat, p10_us=lat, p90_us=lat, mean_us=lat, n=10, timer="test")  # fmt: skip


def _lookup(tmp_path, rows: list[Measurement]) -> FileLookup:
    batch = Batch(id=uuid.uuid4(), platform=PLATFORM, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows)
    path = tmp_path / "m.jsonl"
    write_jsonl([batch], path)
    return FileLookup.from_jsonl(path)


def _manifest(weights, tokens=(64,), **kw) -> Manifest:
    return Manifest.model_validate({"model": "t", "budget": {"ratio": 0.2},
                                    "workload": {"tokens": list(tokens), "dtype": "float16"},
                                    "weights": weights, **kw})  # fmt: skip


def staircase(d: int, step: int, cliff_every: int) -> float:
    """Tile-quantized latency, plus a penalty on dims that are not multiples of cliff_every."""
    return 5.0 + 1.0 * ((d + step - 1) // step) + (3.0 if d % cliff_every else 0.0)


def rises(curve: dict[int, float], e: int) -> bool:
    """The curve steps up after e: it rises to e + 1 and does not fall straight back to e's level or below."""
    if not curve[e + 1] > curve[e]:
        return False
    after = curve.get(e + 2)
    return after is None or after >= curve[e + 1] or after > curve[e]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([4, 8, 16]), st.sampled_from([2, 4, 8]), st.integers(40, 200))
def test_measured_candidates_are_exactly_the_frontier(tmp_path_factory, step, cliff, d_star):
    tmp = tmp_path_factory.mktemp("lk")
    w = {"name": "w", "kind": "linear_out", "out_features": 256, "in_features": 64, "dim": d_star, "importance": 1}
    m = _manifest([w])
    opts = CandidateOptions(window=16)
    lo, hi = max(1, d_star - 16), min(256, d_star + 16)
    curve = {d: staircase(d, step, cliff) for d in range(1, 257)}
    rows = [_m(Op.gemm, {"m": 64, "n": d, "k": 64}, "n", lat) for d, lat in curve.items()]
    lookup = _lookup(tmp, rows)
    (item,) = build_items(m)
    got = build_candidates(item, LatencyModel(lookup, m), opts)
    # Dims up to one window above are compared too, so the window's top is not taken on trust.
    seen = {d: curve[d] for d in range(lo, min(256, hi + 16) + 1)}
    # A window top inside a step reaches the step's top (the last dim before the curve steps up; a comb's
    # lone slow dim is no step unless the dim after it stays above the one before), within the half width.
    reach = next((e for e in range(hi, min(256, hi + 16)) if rises(curve, e)), hi)
    window = {d: curve[d] for d in range(lo, reach + 1)}
    expect = [d for d in window if all(curve[e] > curve[d] for e in seen if e > d)]
    assert [c.dim for c in got.candidates] == expect
    assert expect == [d for d in cliff_free_frontier(seen) if d <= reach]
    assert all(c.source == "measured" for c in got.candidates)
    assert [c.latency_us for c in got.candidates] == [window[c.dim] for c in got.candidates]


def test_latency_sums_kernels_weighted_by_tokens(tmp_path):
    w = {"name": "w", "kind": "lowrank", "out_features": 32, "in_features": 16, "dim": 8, "importance": 1}
    m = _manifest(
        [w],
        tokens=(4, 8),
    )
    m = Manifest.model_validate({**m.model_dump(by_alias=True), "workload": {"tokens": [4, 8], "token_weights": [3, 1]}})
    rows = []
    for tok in (4, 8):
        for d in range(1, 17):
            rows.append(_m(Op.gemm, {"m": tok, "n": d, "k": 16}, "n", 1.0 * d * tok))
            rows.append(_m(Op.gemm, {"m": tok, "n": 32, "k": d}, "k", 2.0 * d * tok))
    lookup = _lookup(tmp_path, rows)
    (item,) = build_items(m)
    model = LatencyModel(lookup, m)
    # 0.75 * (d*4 + 2*d*4) + 0.25 * (d*8 + 2*d*8)
    assert model.latency(item, 8) == pytest.approx(0.75 * 96 + 0.25 * 192)
    got = build_candidates(item, model, CandidateOptions(window=4))
    assert [c.dim for c in got.candidates] == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    # Within the window, the frontier on its own definition: all kept since latency rises with d.
    assert got.candidates == sorted(got.candidates, key=lambda c: c.dim)  # strictly increasing: all kept


def test_rule_fallback_says_so_and_lists_missing(tmp_path):
    ws = [
        {"name": "a", "kind": "linear_out", "out_features": 256, "in_features": 64, "dim": 100, "importance": 1},
        {"name": "b", "kind": "linear_out", "out_features": 256, "in_features": 128, "dim": 100.5, "importance": 1},
    ]
    m = _manifest(ws)
    rows = [_m(Op.gemm, {"m": 64, "n": d, "k": 64}, "n", float(d)) for d in range(80, 130)]
    lookup = _lookup(tmp_path, rows)
    model = LatencyModel(lookup, m)
    opts = CandidateOptions(window=10, align=8)
    res = [build_candidates(it, model, opts) for it in build_items(m)]
    assert res[0].measured and {c.source for c in res[0].candidates} == {"measured"}
    assert not res[1].measured
    assert [c.dim for c in res[1].candidates] == [96, 104]  # multiples of 8 in 90..111
    assert all(c.source == "rule" and c.latency_us is None for c in res[1].candidates)
    by_k = {mc.fixed_shape["k"]: mc for mc in missing_curves(res, model, opts)}
    miss = by_k[128]  # b: never measured; the window, 10 dims of look-ahead, the paper's window, the original dim
    assert miss.op == "gemm" and miss.axis == "n" and miss.fixed_shape == {"m": 64, "k": 128}
    paper_b = range(104 - 64, 104 + 65, 8)  # multiples of 8 within +/-64 of round(100.5 / 8) * 8
    assert miss.items == ["b"] and miss.dims == sorted({*range(90, 122), *paper_b, 256})
    assert miss.reasons == ["look-ahead", "original dim", "paper's window", "window"]  # the compressor's 100, 101 lie in the window
    # a is measured in its window (80..129), but its prediction still needs the original dim and the paper's window
    paper_a = [d for d in range(96 - 64, 96 + 65, 8) if not 80 <= d < 130]
    assert by_k[64].items == ["a"] and by_k[64].dims == [*paper_a, 256]
    assert by_k[64].reasons == ["original dim", "paper's window"]


def test_no_lookup_is_rules_only():
    m = _manifest([{"name": "a", "kind": "mlp_width", "hidden": 64, "full": 300, "dim": 3, "importance": 1}])
    (item,) = build_items(m)
    got = build_candidates(item, LatencyModel(None, m), CandidateOptions(window=4, align=8))
    assert [c.dim for c in got.candidates] == [7] and got.candidates[0].source == "rule"  # no multiple of 8 in 1..7


def test_groups_share_one_item():
    ws = [
        {"name": "q", "kind": "linear_out", "out_features": 64, "in_features": 32, "dim": 40, "importance": 1, "group": "g"},
        {"name": "x", "kind": "linear_out", "out_features": 64, "in_features": 32, "dim": 40, "importance": 1},
        {"name": "k", "kind": "linear_out", "out_features": 48, "in_features": 16, "dim": 42, "importance": 2, "group": "g"},
    ]
    items = build_items(_manifest(ws))
    assert [it.name for it in items] == ["g", "x"]
    assert [w.name for w in items[0].members] == ["q", "k"]
    # The window's centre takes the params q and k take at their own dims: their mean weighted by params per dim.
    assert items[0].unit == 32 + 16 and items[0].max_dim == 48 and items[0].d_star == (32 * 40 + 16 * 42) / 48


def test_kinds_params_and_kernels():
    m = _manifest([
        {"name": "lr", "kind": "lowrank", "out_features": 1024, "in_features": 4096, "dim": 100, "importance": 1},
        {"name": "lo", "kind": "linear_out", "out_features": 1024, "in_features": 4096, "dim": 100, "importance": 1},
        {"name": "mg", "kind": "mlp_width", "hidden": 4096, "full": 14336, "dim": 100, "importance": 1},
        {"name": "mp", "kind": "mlp_width", "hidden": 4096, "full": 14336, "gated": False, "dim": 100, "importance": 1},
        {"name": "hd", "kind": "head_dim", "heads": 32, "kv_heads": 8, "hidden": 4096, "full": 128, "dim": 96, "importance": 1},
    ])  # fmt: skip
    lr, lo, mg, mp, hd = m.weights
    assert params(lr, 100) == 100 * 5120 and original_params(lr) == 1024 * 4096
    assert params(lo, 100) == 100 * 4096 and original_params(lo) == 1024 * 4096
    assert unit_params(mg) == 3 * 4096 and unit_params(mp) == 2 * 4096 and original_params(mg) == 3 * 4096 * 14336
    assert unit_params(hd) == 4096 * 2 * (32 + 8) and original_params(hd) == unit_params(hd) * 128
    assert [(k.op, k.axis, k.fixed_shape) for k in kernels(lr, 7)] == [
        (Op.gemm, "n", {"m": 7, "k": 4096}), (Op.gemm, "k", {"m": 7, "n": 1024})]  # fmt: skip
    assert [k.count for k in kernels(mg, 7)] == [2, 1] and [k.count for k in kernels(mp, 7)] == [1, 1]
    ks = kernels(hd, 512)
    assert ks[0].op == Op.sdpa and ks[0].fixed_shape == {"b": 1, "h": 32, "s": 512} and ks[0].axis == "head_dim"
    assert {(k.axis, k.scale, k.count) for k in ks[1:]} == {("n", 32, 1), ("k", 32, 1), ("n", 8, 2)}


def test_csv_lookup(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("op,dtype,shape,sweep_axis,median_us\n"
                 "gemm,float16,\"k=64,m=8,n=16\",n,3.0\n"
                 "gemm,float16,\"k=64,m=8,n=16\",n,5.0\n"
                 "gemm,float16,\"k=64,m=8,n=24\",n,2.0\n")  # fmt: skip
    lk = FileLookup.from_csv(p)
    curve = lk.curve(Op.gemm, Dtype.float16, {"m": 8, "k": 64}, "n")
    assert {d: pt.latency_us for d, pt in curve.items()} == {16: 4.0, 24: 2.0}
    assert lk.curve(Op.gemm, Dtype.float32, {"m": 8, "k": 64}, "n") == {}
    bad = tmp_path / "bad.csv"
    bad.write_text('op,dtype,shape,sweep_axis,median_us\ngemm,float16,"k=64,m=8",n,3.0\n')
    with pytest.raises(ValueError, match="bad.csv:2"):
        FileLookup.from_csv(bad)


def test_csv_with_the_swept_value_in_an_x_column_is_read(tmp_path):
    """A curve download's layout with the swept value in `x` (several curves in one file, as an export of many
    curves has it) is read; a file with neither column says which it lacks."""
    p = tmp_path / "x.csv"
    p.write_text("op,dtype,axis,fixed,x,median_us,p10_us,p90_us,n\n"
                 'gemm,bfloat16,n,"k=256,m=256",88,5.2,5.1,16.0,50\n'
                 'gemm,bfloat16,k,"m=256,n=256",112,5.3,5.0,10.7,50\n')  # fmt: skip
    lk = FileLookup.from_csv(p)
    # The axis is n, and so is the sample count's column: the dim is x's, the count n's.
    assert {x: (p.latency_us, p.p90_us, p.n) for x, p in lk.curve(Op.gemm, Dtype.bfloat16, {"m": 256, "k": 256}, "n").items()} == {
        88: (5.2, 16.0, 50)
    }
    assert list(lk.curve(Op.gemm, Dtype.bfloat16, {"m": 256, "n": 256}, "k")) == [112]
    bad = tmp_path / "neither.csv"
    bad.write_text('op,dtype,axis,fixed,dim,median_us\ngemm,bfloat16,n,"k=256,m=256",88,5.2\n')
    with pytest.raises(ValueError, match=r"neither.csv:2: no column 'n' \(or 'x'\) holds the swept n"):
        FileLookup.from_csv(bad)


_runs = st.lists(
    st.one_of(
        st.builds(range, st.integers(0, 80), st.integers(-5, 120)),
        st.builds(range, st.integers(0, 80), st.integers(0, 120), st.integers(1, 5)),
        st.lists(st.integers(0, 150), max_size=6),
    ),
    max_size=8,
)


@given(_runs, st.booleans())
@settings(max_examples=300, deadline=None)
def test_union_is_every_value_once_sorted(runs, past_the_line):
    """missing_curves merges thousands of windows per curve with union(): on a line, or (values
    too large for one) by sorting; both give each value of any run once, in order."""
    import gac.solver.candidates as candidates

    line = candidates._LINE_MAX
    candidates._LINE_MAX = 10 if past_the_line else line
    try:
        assert candidates.union(runs) == sorted({x for r in runs for x in r})
    finally:
        candidates._LINE_MAX = line


def test_a_small_rank_keeps_at_least_half_of_itself():
    """The +/-16 floor of the window holds a tile edge; below d* it stops at half of d*, so kept
    importance (linear in the dim) cannot trade a rank of 15 down to 1."""
    doc = {
        "model": "m",
        "budget": {"ratio": 0.3},
        "workload": {"tokens": [128]},
        "weights": [
            {"name": "small", "kind": "lowrank", "out_features": 384, "in_features": 384, "dim": 15, "importance": 1.0},
            {"name": "large", "kind": "lowrank", "out_features": 384, "in_features": 384, "dim": 300, "importance": 1.0},
        ],
    }
    small, large = build_items(Manifest.model_validate(doc))
    assert small.window(CandidateOptions()) == (8, 31)
    assert small.window(CandidateOptions(min_keep=0.0)) == (1, 31)
    assert large.window(CandidateOptions()) == large.window(CandidateOptions(min_keep=0.0)) == (284, 316)
