"""Sparse needs (solver/sparse_needs.py, solver/lattice.py): a GPU's lattice is measured with a
sample of the other dims, then only the dims the lattice cannot rule out; the answer is the one
dense profiling gives. The profile-missing loop is simulated on real H100 curves."""

from __future__ import annotations

import csv
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import gac.solver.lattice as lattice
import gac.solver.sparse_needs as sparse
from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import parse_shape_key
from gac.solver.align import AlignOptions, align
from gac.solver.candidates import FIRST_PASS, CandidateOptions, LatencyModel, build_candidates, build_items, lookahead
from gac.solver.curve_model import Point, frontier_of_sum
from gac.solver.lattice import fit_lattice, measured_bounds, model_by_class, relative_noise
from gac.solver.lookup import FileLookup
from tests.solver.synthetic import Measure, measure, staircase

# Our own measurements: NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0 (cuBLAS 13.1.0), 2026-11-26, by the
# agent (cuda-events+l2-flush): the dense q_proj curves of Llama-3-8B (fp16 GEMM M=1024, N or K swept, 1216..1421,
# and N=4096) and fp16 SDPA head_dim 64..160 (B=1, H=32, S=2048). /work/shared/data/h100-2026-11-26, db_run 2 and sdpa-hd.
H100 = Path(__file__).parent / "data" / "h100_lattice.csv"
MAX_ROUNDS = 3  # as gac/commands/profile_missing.py


@cache
def h100_rows() -> tuple[tuple, ...]:
    with open(H100, newline="") as fh:
        return tuple(
            (r["op"], r["dtype"], {**parse_shape_key(r["fixed"]), r["axis"]: int(r["x"])}, r["axis"],
             float(r["median_us"]), float(r["p10_us"]), float(r["p90_us"]), int(r["n"]))
            for r in csv.DictReader(fh)
        )  # fmt: skip


def _key(op: str, dtype: str, shape: dict[str, int], axis: str) -> tuple:
    return op, dtype, tuple(sorted(shape.items())), axis


def q_projs(*dims: tuple[float, float]) -> Manifest:
    """Llama-3-8B q_proj ranks (ASVD: low-rank 4096 x 4096) at 1024 tokens, (dim, importance) each; the budget their params."""
    weights = [{"name": f"layers.{i}.q_proj", "kind": "lowrank", "out_features": 4096, "in_features": 4096, "dim": d,
                "importance": s} for i, (d, s) in enumerate(dims)]  # fmt: skip
    return Manifest.model_validate({"model": "q", "budget": {"params": int(sum(8192 * d for d, _ in dims))},
                                    "workload": {"tokens": [1024], "dtype": "float16"}, "weights": weights})  # fmt: skip


def profile_loop(manifest: Manifest, opts: AlignOptions) -> tuple[AlignmentResult, list[int], FileLookup]:
    """`gac align --profile-missing` from an empty database, timing from the H100's measurements: align, measure
    what is missing, align again (MAX_ROUNDS). The result, the points measured per round, the lookup at the end."""
    index = {_key(*r[:4]): r for r in h100_rows()}
    have: list[tuple] = []
    lookup: FileLookup | None = None
    rounds: list[int] = []
    result = align(manifest, None, opts)
    for _ in range(MAX_ROUNDS):
        points = [(mc.op, mc.dtype, {**mc.fixed_shape, mc.axis: d}, mc.axis) for mc in result.missing for d in mc.dims]
        if not points:
            break
        lacking = [p for p in points if _key(*p) not in index]
        assert not lacking, f"asks for points the H100 did not measure: {lacking[:3]}"
        rounds.append(len(points))
        have += [index[_key(*p)] for p in points]
        lookup = FileLookup(have, "h100")
        result = align(manifest, lookup, opts)
    assert lookup is not None
    return result, rounds, lookup


# One rank at +/-5 % (its span is what the H100 measured), and four at +/-2 % whose spans overlap.
ONE = (q_projs((1291, 1.0)), CandidateOptions(sparse=True))
FOUR = (q_projs((1291, 1.3), (1302.5, 1.0), (1318, 0.75), (1327, 1.6)), CandidateOptions(window_rel=0.02, sparse=True))


def _options(copts: CandidateOptions, objective: str, exhaustive: bool = False) -> AlignOptions:
    return AlignOptions(candidates=replace(copts, sparse=not exhaustive), objective=objective, cross_check="none")


@pytest.mark.parametrize("case", [ONE, FOUR], ids=["one", "four"])
@pytest.mark.parametrize("objective", ["importance", "latency"])
def test_h100_few_points_same_answer_as_dense(case, objective):
    manifest, copts = case
    sparse_res, sparse_rounds, _ = profile_loop(manifest, _options(copts, objective))
    dense_res, dense_rounds, _ = profile_loop(manifest, _options(copts, objective, exhaustive=True))
    ratio = sum(sparse_rounds) / sum(dense_rounds)
    print(f"{objective}: sparse {sparse_rounds} points, dense {dense_rounds}: {ratio:.0%}")
    assert ratio < 0.35
    assert sparse_res.missing == [] and sparse_res.latency.complete
    assert [w.dim for w in sparse_res.weights] == [w.dim for w in dense_res.weights]
    # Every candidate is a measured dim, never a modelled one.
    assert all(c.source == "measured" for w in sparse_res.weights for c in w.candidates)
    if case is ONE:  # its span is the H100's whole curve: the same answer as from every point measured
        full = align(manifest, FileLookup(list(h100_rows()), "h100"), _options(copts, objective))
        assert [w.dim for w in sparse_res.weights] == [w.dim for w in full.weights]


def _left_out_candidates(manifest: Manifest, copts: CandidateOptions) -> tuple[int, list[tuple[str, int]]]:
    """How many dims of the items' spans the sparse loop left unmeasured, and those of them that are
    candidates (the cliff-free frontier) on the dense loop's curves."""
    _, _, sparse_lookup = profile_loop(manifest, _options(copts, "latency"))
    _, _, dense_lookup = profile_loop(manifest, _options(copts, "latency", exhaustive=True))
    have, dense = LatencyModel(sparse_lookup, manifest), LatencyModel(dense_lookup, manifest)
    left, wrong = 0, []
    for item in build_items(manifest):
        lo, hi = item.window(copts)
        top = min(item.max_dim, hi + lookahead(item, have, copts))
        unmeasured = {d for d in range(lo, top + 1) for k, _ in have.kernel_terms(item) if k.scale * d not in have.curve(k)}
        frontier = {c.dim for c in build_candidates(item, dense, copts).candidates}
        left += len(unmeasured)
        wrong += [(item.name, d) for d in sorted(unmeasured & frontier)]
    return left, wrong


@pytest.mark.parametrize("case", [ONE, FOUR], ids=["one", "four"])
def test_h100_no_dim_left_out_is_a_dense_candidate(case):
    left, wrong = _left_out_candidates(*case)
    assert left > 50 and wrong == []


def _curve_left_out(pts: dict[int, Point], span: tuple[int, int, int]) -> tuple[set[int], set[int], int]:
    """One curve, one span lo..top (window up to hi): measure its skeleton, fit the lattice, and
    rule dims out as pass 2 does. (The dims left out, the frontier of the curve measured densely
    (modelled class by class, as LatencyModel does), how many dims were unmeasured.)"""
    lo, hi, top = span
    seen = {x: pts[x] for x in sparse.skeleton(lo, top, 8)}
    fit = fit_lattice(list(seen), [p.median_us for p in seen.values()],
                      [relative_noise(p.median_us, p.p10_us, p.p90_us, p.n) for p in seen.values()])  # fmt: skip
    assert fit.sure
    dims = np.arange(lo, top + 1)
    unmeasured = np.array([d not in seen for d in dims.tolist()])
    low, high = fit.bounds_of(dims)
    got = [seen[d] for d in dims[~unmeasured].tolist()]
    low[~unmeasured], high[~unmeasured] = measured_bounds(
        np.array([p.median_us for p in got]), np.array([relative_noise(p.median_us, p.p10_us, p.p90_us, p.n) for p in got])
    )
    out = set(dims[unmeasured & sparse.left_out(dims, low, high, hi)].tolist())
    dense = model_by_class([pts[d] for d in dims.tolist()])
    frontier = {d for d in frontier_of_sum(dims.tolist(), [(dense, 1.0, 1)]) if d <= hi}  # the window's candidates
    return out, frontier, int(unmeasured.sum())


def test_h100_sdpa_lattice_from_a_sample():
    """SDPA along head_dim (multiples of 8 run 60-130 us, every other width 190-390 us, in steps):
    from the skeleton alone, the fit rules out most other widths, and none the dense curve keeps."""
    pts = {r[2]["head_dim"]: Point(r[2]["head_dim"], *r[4:]) for r in h100_rows() if r[0] == "sdpa"}
    out, frontier, unmeasured = _curve_left_out(pts, (64, 128, 160))
    assert len(pts) == 97 and len(out) > 0.8 * unmeasured
    assert frontier and not frontier & out


def scattered_class(z: float) -> tuple[set[int], set[int], int]:
    """A lattice (odd widths 3x, 2 mod 4 2x the multiples of 8) whose 4-mod-8 widths run 1.6x, but
    one in four 0.8x (another kernel picked): those are faster than every larger width, candidates
    on the dense curve. The class's scatter in the sample, z sigmas of it, must keep them measured."""
    factor = {1: 3.0, 2: 2.0, 4: 1.6}

    def truth(x: int) -> float:
        dip = x % 8 == 4 and (x // 8) % 4 == 0
        return (20.0 + 0.02 * x) * (0.8 if dip else factor.get(x & -x, 1.0))

    pts = {p.x: p for p in measure(truth, range(1024, 1400), Measure(sample_noise=0.02, n=50, seed=3))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lattice, "Z", z)
        return _curve_left_out(pts, (1100, 1250, 1330))


def test_a_scattered_class_keeps_its_fast_widths_measured():
    out, frontier, _ = scattered_class(lattice.Z)
    assert out and frontier - {d for d in frontier if d % 8 == 0}  # some candidates are off the lattice
    assert not frontier & out
    wrong, frontier0, _ = scattered_class(0.0)  # the same rule without its uncertainty drops some
    assert frontier0 & wrong


def test_a_cpu_staircase_is_no_lattice_and_is_measured_densely():
    """A CPU's tiles: 10 % steps after every multiple of 16, whatever the power of two. The classes
    explain nothing, so the fit is unsure and pass 2 asks for every dim, as exhaustive does."""
    truth = staircase(16, step=0.10)
    pts = measure(truth, sparse.skeleton(200, 360, 8), Measure(sample_noise=0.01, n=50, seed=1))
    fit = fit_lattice([p.x for p in pts], [p.median_us for p in pts], [relative_noise(p.median_us, p.p10_us, p.p90_us, p.n) for p in pts])
    assert not fit.sure and fit.bounds(250) is None

    manifest = Manifest.model_validate({"model": "cpu", "budget": {"params": 300 * 1280}, "workload": {"tokens": [64], "dtype": "float32"},
                                        "weights": [{"name": "w", "kind": "lowrank", "out_features": 640, "in_features": 640,
                                                     "dim": 300, "importance": 1}]})  # fmt: skip
    opts = AlignOptions(candidates=CandidateOptions(sparse=True), cross_check="none")
    first = align(manifest, None, opts)
    rows = [(mc.op, mc.dtype, {**mc.fixed_shape, mc.axis: p.x}, mc.axis, p.median_us, p.p10_us, p.p90_us, p.n)
            for mc in first.missing for p in measure(truth, mc.dims, Measure(sample_noise=0.01, n=50, seed=2))]  # fmt: skip
    assert all(FIRST_PASS in mc.reasons for mc in first.missing)
    second = align(manifest, FileLookup(rows, "cpu"), opts)
    dense = align(manifest, FileLookup(rows, "cpu"), replace(opts, candidates=CandidateOptions()))
    assert second.missing and [mc.dims for mc in second.missing] == [mc.dims for mc in dense.missing]


def test_exhaustive_is_every_dim_and_the_first_pass_its_skeleton():
    manifest, copts = ONE
    dense = align(manifest, None, _options(copts, "latency", exhaustive=True))
    first = align(manifest, None, _options(copts, "latency"))
    (item,) = build_items(manifest)
    lo, hi = item.window(copts)
    span = set(range(lo, hi + lookahead(item, LatencyModel(None, manifest), copts) + 1))
    for d, s in zip(dense.missing, first.missing, strict=True):
        assert d.fixed_shape == s.fixed_shape and FIRST_PASS not in d.reasons and FIRST_PASS in s.reasons
        assert span <= set(d.dims) and set(s.dims) < set(d.dims)
        assert {x for x in d.dims if x % 8 == 0} <= set(s.dims) and 1291 in s.dims  # the lattice and the compressor's dim
        for cls in (1, 2, 4):  # a few of every class off the lattice
            assert sum(1 for x in s.dims if x in span and x & -x == cls) >= sparse.MIN_PER_CLASS
    assert 4096 in first.missing[0].dims  # the original dim


def test_the_sample_is_a_function_of_the_dim():
    """Overlapping spans sample the same dims, so a manifest's many windows add few points."""
    a, b = sparse.skeleton(1000, 1400, 8), sparse.skeleton(1200, 1600, 8)
    assert [d for d in a if d >= 1200] == [d for d in b if d <= 1400]
    off = [d for d in a if d % 8]
    assert 0.04 < len(off) / len(range(1000, 1401)) < 0.1


def test_the_service_asks_in_passes_unless_exhaustive():
    """`gac align` (local database) and the service's alignments, whose `missing` --profile-missing measures or a
    profiling job queues (--enqueue-missing), share gac.service.align.service.run_alignment: sparse, unless exhaustive."""
    from gac.service.align.service import run_alignment

    manifest, _ = ONE
    sparse_res = run_alignment(None, manifest, None)  # no platform: no session used
    dense_res = run_alignment(None, manifest, None, exhaustive=True)
    assert all(FIRST_PASS in mc.reasons for mc in sparse_res.missing) and not any(FIRST_PASS in mc.reasons for mc in dense_res.missing)
    assert sum(len(mc.dims) for mc in sparse_res.missing) < 0.3 * sum(len(mc.dims) for mc in dense_res.missing)
