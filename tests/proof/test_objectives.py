"""The proof's GAC variants per objective (importance-only, latency-aware, frontier within 1 %) and
the predicted vs measured speed-ups, on a tiny decoder with a synthetic staircase profile."""

from __future__ import annotations

import json
import re
import uuid

import numpy as np
import pytest

from gac.contracts.measurements import Measurement
from gac.proof.latency import LatencyRun, Setting
from gac.proof.llama import LlamaConfig
from gac.proof.objectives import EPSILON, FRONTIER, IMPORTANCE, LATENCY, point_dims
from gac.proof.pipeline import (
    GAC_FRONTIER,
    GAC_IMPORTANCE,
    GAC_LATENCY,
    ORIGINAL,
    ROUND8,
    UNALIGNED,
    VARIANTS,
    ProofConfig,
    profile_lookup,
    run_proof,
)
from gac.proof.predict import FLAG, predict
from gac.proof.profile import align_measured, align_options, dims_of
from gac.proof.report import _in_place
from gac.solver.align import align
from gac.solver.candidates import LatencyModel
from gac.solver.kinds import kernels
from gac.solver.lookup import FileLookup

TINY = LlamaConfig(vocab_size=512, hidden=64, intermediate=176, heads=4, kv_heads=2, layers=3, max_positions=128)
NOISE = 0.03


def staircase_us(shape: dict[str, int], axis: str, tile: int = 16) -> float:
    """A GEMM that pads its swept axis up to a tile (a step every 16) and rises a little inside each tile."""
    x = shape[axis]
    rest = shape["m"] * shape["n"] * shape["k"] / x
    return 2.0 + rest * (-(-x // tile) * tile + 0.2 * x) / 2e4


def synthetic_measurements(missing, seed: int = 0) -> list[Measurement]:
    rng = np.random.default_rng(seed)
    out = []
    for mc in missing:
        for d in mc.dims:
            shape = {**mc.fixed_shape, mc.axis: d}
            med = staircase_us(shape, mc.axis) * (1 + NOISE * rng.standard_normal())
            out.append(
                Measurement(
                    id=uuid.uuid4(),
                    op=mc.op,
                    dtype=mc.dtype,
                    shape=shape,
                    sweep_axis=mc.axis,
                    median_us=med,
                    p10_us=med * (1 - NOISE),
                    p90_us=med * (1 + NOISE),
                    mean_us=med,
                    n=50,
                    timer="synthetic",
                )
            )
    return out


# The toy model's dims are 16-64: the paper's +/-64 would span each from 8 to twice its size. Scaled down.
TOY_RADIUS = 2


def synthetic_aligner(manifest):
    """Stands in for the profiled aligner: the points the rules-only alignment asks for, from a noisy staircase."""
    opts = align_options(16, paper_radius=TOY_RADIUS)
    rules = align(manifest, None, opts)
    ms = synthetic_measurements(rules.missing)
    lookup = FileLookup.from_measurements(ms, "synthetic-cpu")
    manifest, measured, notes = align_measured(manifest, lookup, opts)
    return manifest, measured, None, notes, ms


@pytest.fixture(scope="module")
def run():
    cfg = ProofConfig(
        model="llama",
        llama=TINY,
        llama_data=((2, 32), (2, 16)),
        seqs=(16,),
        decode_context=8,
        rounds=2,
        passes=1,
        paper_radius=TOY_RADIUS,
    )
    return run_proof(cfg, log=lambda _m: None, aligner=synthetic_aligner)


def test_every_objective_is_a_variant(run) -> None:
    for r in run.results:
        assert list(r.variants) == list(VARIANTS)
        kinds = {k: a.objective_kind for k, a in r.alignments.items()}
        assert kinds == {IMPORTANCE: "importance", LATENCY: "latency", FRONTIER: "frontier"}
        assert r.alignments[LATENCY].epsilon == r.alignments[FRONTIER].epsilon == EPSILON
        assert r.variants[GAC_IMPORTANCE].dims == dims_of(r.alignments[IMPORTANCE])
        assert r.variants[GAC_LATENCY].dims == dims_of(r.alignments[LATENCY])
        assert all(r.variants[v].within_budget for v in (UNALIGNED, GAC_IMPORTANCE, GAC_LATENCY, GAC_FRONTIER))
        assert len(r.alignments[FRONTIER].frontier) > 1
        lat = r.alignments[LATENCY].latency
        # latency-aware: never slower than the importance-only optimum, and keeps >= 1 - epsilon of its importance
        assert lat.aligned_us <= lat.importance_only_us + 1e-9 and lat.importance_kept >= 1 - EPSILON - 1e-12


def test_dims_differ_where_they_should(run) -> None:
    asvd, prune = run.results
    # The epsilon's trade buys less than the timing noise on both (ASVD 0.08 %, pruning 0.5 %): no importance
    # is given up. ASVD's measured dims still hold a faster choice at the same importance; pruning's do not.
    for r in (asvd, prune):
        assert r.alignments[LATENCY].latency.importance_kept >= 1.0
        assert any("it must save (min_gain" in w for w in r.alignments[LATENCY].warnings)
        assert r.variants[GAC_LATENCY].dims != r.variants[UNALIGNED].dims
    assert asvd.variants[GAC_LATENCY].dims != asvd.variants[GAC_IMPORTANCE].dims
    assert asvd.alignments[LATENCY].latency.aligned_us < asvd.alignments[IMPORTANCE].latency.aligned_us
    assert prune.variants[GAC_LATENCY].dims == prune.variants[GAC_IMPORTANCE].dims
    # ASVD: the binary search found a frontier point faster than the latency-aware choice within 1 % quality
    f = asvd.frontier
    assert f is not None and f.picked is not None and f.search == "bisect" and len(f.tries) <= f.cap == 6
    picked = f.tries[f.picked]
    assert picked.qualifies and asvd.variants[GAC_FRONTIER].dims != asvd.variants[GAC_LATENCY].dims
    assert asvd.variants[GAC_FRONTIER].quality.no_worse_than(asvd.variants[UNALIGNED].quality, 0.01)
    assert all(not t.qualifies for t in f.tries if t.rank < picked.rank)  # every faster point scored failed
    assert picked.latency_us <= asvd.alignments[LATENCY].latency.aligned_us + 1e-9
    # Pruning: no point scored qualifies, so the variant falls back to the latency-aware dims and says so.
    assert prune.frontier.picked is None and "latency-aware choice instead" in prune.frontier.note
    assert prune.variants[GAC_FRONTIER].dims == prune.variants[GAC_LATENCY].dims


def test_frontier_points_realign_to_themselves(run) -> None:
    r = run.results[0]
    lookup = profile_lookup(r.measurements, r.alignment)
    opts = align_options(16, paper_radius=TOY_RADIUS)
    # The slowest points too: those keeping more than the importance objective's optimum (its
    # candidates are the cliff-free dims only) are reached with a negative epsilon.
    front = r.alignments[FRONTIER].frontier
    reachable = [p for p in front if 0.5 <= p.importance_kept <= 1.0][-3:] + [p for p in front if p.importance_kept > 1.0][-2:]
    assert reachable and reachable[-1].importance_kept > 1.0
    model = LatencyModel(lookup, r.manifest)
    for pt in reachable:
        dims, why = point_dims(r.manifest, lookup, opts, pt)
        assert dims is not None, why
        total = sum(
            w * k.count * model.estimate(k, k.scale * dims[wt.name])
            for wt in r.manifest.weights
            for m, w in model.tokens
            for k in kernels(wt, m)
        )
        assert total == pytest.approx(pt.latency_us, rel=1e-9)


def _raw_total(lookup, manifest, dims, tokens) -> float:
    return sum(
        w * k.count * lookup.curve(k.op, manifest.workload.dtype, k.fixed_shape, k.axis)[k.scale * dims[wt.name]].latency_us
        for wt in manifest.weights
        for m, w in tokens
        for k in kernels(wt, m)
    )


def test_predictions_come_from_the_denoised_estimates(run) -> None:
    for r in run.results:
        lookup = profile_lookup(r.measurements, r.alignment)
        model = LatencyModel(lookup, r.manifest)
        for name, kind in ((GAC_IMPORTANCE, IMPORTANCE), (GAC_LATENCY, LATENCY)):
            p = r.predictions[name]
            assert p.complete and p.kernel_speedup is not None
            # the same figures the alignment predicted (its estimates), not the raw medians of the profile
            assert p.kernel_us == pytest.approx(r.alignments[kind].latency.aligned_us, rel=1e-9)
            assert p.kernel_unaligned_us == pytest.approx(r.alignments[kind].latency.unaligned_us, rel=1e-9)
            raw = _raw_total(lookup, r.manifest, r.variants[name].dims, model.tokens)
            assert abs(raw - p.kernel_us) > 1e-6 * raw
            for sp in p.settings:
                u = sp.measured_unaligned_us
                # on a CPU the saving is scaled as the unaligned modules took in place against their profile
                assert sp.in_place_us == pytest.approx(r.latency.in_place_us(sp.label)) and sp.in_place_us > 0
                assert not sp.on_gpu and sp.in_place_factor == pytest.approx(sp.in_place_us / sp.kernel_unaligned_us)
                # ASVD's and pruning's weights each have a module in the original: it is clocked too, and the
                # two points' fit is reported (not applied)
                assert sp.original_in_place_us == r.latency.in_place_us(sp.label, ORIGINAL) and sp.original_in_place_us > 0
                if sp.calibration is not None:
                    p_u, p_o, t_u, t_o = sp.in_place_us, sp.original_in_place_us, sp.kernel_unaligned_us, sp.kernel_original_us
                    a = (p_u * sp.launches_original - p_o * sp.launches) / (t_u * sp.launches_original - t_o * sp.launches)
                    assert sp.calibration[0] == pytest.approx(a)
                assert sp.speedup == pytest.approx(u / (u - sp.saving_us * sp.in_place_factor))
                assert sp.lo <= sp.speedup <= sp.hi and sp.saving_sigma_us > 0
                assert sp.flagged == (abs(sp.speedup - sp.measured.median) > FLAG)
        assert UNALIGNED not in r.predictions
    assert "n/a" in run.results[0].predictions[ORIGINAL].note  # ASVD's original runs dense weights
    assert run.results[1].predictions[ORIGINAL].complete  # pruning's original width is profiled


def test_prediction_arithmetic_and_missing_points() -> None:
    """Two weights on one synthetic curve, a known run: saving, interval, flags, and a point the profile lacks."""
    from gac.proof.compress import compress_prune
    from gac.proof.llama import random_llama
    from gac.proof.subjects import TokenCalibration, random_ids

    model = random_llama(TINY, 0)
    cal = TokenCalibration(model, random_ids(512, (2, 16), 1), random_ids(512, (1, 16), 2))
    manifest = compress_prune(model, cal, 0.25, [16], "bfloat16").manifest
    res = align(manifest, None, align_options(8))
    lookup = FileLookup.from_measurements(synthetic_measurements(res.missing), "synthetic")
    un = {w.name: int(w.dim) for w in manifest.weights}
    var = {n: d - 1 for n, d in un.items()}
    far = {n: 8 for n in un}  # far below every window: not profiled
    lat = LatencyRun([Setting("prefill", 16)], rounds=3, passes=1, threads=1)
    base = [1000.0, 1010.0, 990.0]
    for name, f in (("unaligned", 1.0), ("v", 1.2), ("far", 1.0)):
        lat.medians[(name, "S=16")] = [b / f for b in base]
    out = predict(manifest, lookup, {"unaligned": un, "v": var, "far": far}, lat)
    lm = LatencyModel(lookup, manifest)
    expect = sum(
        k.count * (lm.estimate(k, k.scale * un[w.name]) - lm.estimate(k, k.scale * var[w.name]))
        for w in manifest.weights
        for k in kernels(w, 16)
    )
    sp = out["v"].settings[0]
    assert sp.saving_us == pytest.approx(expect) and sp.measured_unaligned_us == 1000.0
    assert sp.in_place_us is None and sp.in_place_factor == 1.0  # not clocked: the profile's saving as it is
    assert sp.speedup == pytest.approx(1000.0 / (1000.0 - expect)) and sp.lo <= sp.speedup <= sp.hi
    assert sp.measured.median == pytest.approx(1.2) and sp.flagged and "GEMMs are" in sp.misses()
    # Clocked in place at twice the profile's time: the predicted saving doubles, and the misses say so.
    lat.in_place_variant, lat.modules["unaligned", "S=16"] = "unaligned", [2 * sp.kernel_unaligned_us] * 3
    sp2 = predict(manifest, lookup, {"unaligned": un, "v": var}, lat)["v"].settings[0]
    assert sp2.in_place_factor == pytest.approx(2.0) and sp2.speedup == pytest.approx(1000.0 / (1000.0 - 2 * expect))
    assert sp2.lo <= sp2.speedup <= sp2.hi and "2.00x the profile" in sp2.misses()
    # The original's modules clocked too: in place = a x profile + c per launch through the two points,
    # reported and not applied. Here each launch sheds 3 us in place and kernel time is unchanged (a = 1).
    t_u, t_o, n = sp.kernel_unaligned_us, sp.kernel_original_us, sp.launches
    assert t_o is not None and t_o > 1.2 * t_u and sp.launches_original == n  # pruning: the original's full widths
    lat.modules["unaligned", "S=16"] = [t_u - 3.0 * n] * 3
    lat.modules["original", "S=16"] = [t_o - 3.0 * n] * 3
    sp3 = predict(manifest, lookup, {"unaligned": un, "v": var}, lat)["v"].settings[0]
    assert sp3.calibration == pytest.approx((1.0, -3.0)) and sp3.in_place_factor == pytest.approx((t_u - 3.0 * n) / t_u)
    assert "the in-place ratio" in sp3.misses()
    assert "saving scaled" in _in_place(sp3) and "in place = 1.00 x profile -3.0 us per launch, not applied" in _in_place(sp3)
    # A slope far outside what a cache or a clock can do is noise: no fit.
    lat.modules["original", "S=16"] = [t_u - 3.0 * n + 5.0 * (t_o - t_u)] * 3
    assert predict(manifest, lookup, {"unaligned": un, "v": var}, lat)["v"].settings[0].calibration is None
    # Timed on a GPU, the saving counts as the profile says, whatever the in-place clocks read (the fit is still reported).
    lat.device, lat.modules["original", "S=16"] = "cuda:0", [t_o - 3.0 * n] * 3
    sp5 = predict(manifest, lookup, {"unaligned": un, "v": var}, lat)["v"].settings[0]
    assert sp5.on_gpu and sp5.calibration == pytest.approx((1.0, -3.0)) and sp5.in_place_factor == 1.0
    assert sp5.speedup == pytest.approx(1000.0 / (1000.0 - expect)) and "on a GPU: unscaled" in sp5.misses()
    assert "saving unscaled (a GPU)" in _in_place(sp5) and "not applied" in _in_place(sp5)
    lat.device = "cpu"
    assert not out["far"].complete and out["far"].missing and "not in the profile" in out["far"].missing[0]
    assert predict(manifest, None, {"unaligned": un, "v": var}, lat)["v"].note.startswith("no latency data")


def test_report_names_cpu_and_has_the_new_columns(run, tmp_path) -> None:
    from gac.proof.report import render
    from gac.proof.retime import load_run, save_run

    text = render(run)
    assert "CPU (the agent's platform):" in text and ", ISA " in text and f"dtype {run.config.dtype}" in text
    for col in ("kernel pred", "S=16 pred [95%]", "S=16 meas [95% CI]", "S=16 diff", "decode@8 pred [95%]"):
        assert col in text
    for v in (GAC_IMPORTANCE, GAC_LATENCY, GAC_FRONTIER, ROUND8):
        assert v in text
    assert f"target: {GAC_LATENCY} faster than {GAC_IMPORTANCE}" in text
    assert "target: quality within 1% of unaligned" in text
    assert "llama prune, 'no change' before:" in text
    assert re.search(r"frontier: \d+ Pareto points", text) and "cap 6" in text
    saved = load_run(save_run(run, tmp_path / "run.json"))
    r0 = saved["results"][0]
    assert set(r0["alignments"]) == {IMPORTANCE, LATENCY, FRONTIER} and r0["frontier_pick"]["cap"] == 6
    assert r0["predictions"][GAC_LATENCY]["settings"]["S=16"]["predicted"] > 0
    assert r0["predictions"][GAC_LATENCY]["settings"]["S=16"]["in_place_factor"] > 0
    assert len(r0["latency"]["in_place_us_per_round"]["S=16"]) == run.config.rounds and "in place: S=16 " in text
    assert r0["latency"]["instances"] == 1 and "builds of every model" not in text  # a CPU times one build
    lat = run.results[0].latency
    try:
        lat.instances = 2
        assert "; 2 builds of every model, built in a shuffled order, round r timing build r mod 2;" in render(run)
    finally:
        lat.instances = 1
    json.dumps(saved)


def test_retime_recomputes_predictions_from_the_saved_profile(run, tmp_path) -> None:
    from gac.proof.report import render
    from gac.proof.retime import retime, save_run

    path = save_run(run, tmp_path / "run.json")
    again = retime(path, log=lambda _m: None, rounds=2)
    for a, b in zip(run.results, again.results):
        assert list(b.variants) == list(VARIANTS) and b.alignments.keys() == a.alignments.keys()
        assert b.frontier is not None and b.frontier.picked == a.frontier.picked
        for v in (GAC_IMPORTANCE, GAC_LATENCY):
            assert b.predictions[v].kernel_us == pytest.approx(a.predictions[v].kernel_us)
    assert "kernel pred" in render(again)
