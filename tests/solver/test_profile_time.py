"""How long profiling the missing points will take (solver/profile_time.py)."""

from __future__ import annotations

import pytest

from gac.contracts.alignment import MissingCurve
from gac.contracts.measurements import Dtype, Op
from gac.contracts.plans import Timing
from gac.solver.lookup import FileLookup, PointLatency
from gac.solver.profile_time import MIN_SAMPLE_US, POINT_OVERHEAD_S, estimate, point_seconds, samples_needed

QUICK = Timing(time_cap_ms=400, warmup_ms=10)  # a short plan's cap: its points stop early
DEFAULT = Timing()  # what --profile-missing times with


def _curve(spread: float, n: int, dims=range(96, 128, 4)) -> FileLookup:
    """A bf16 GEMM curve (N swept) of 30-us points with the given relative p10..p90 spread and sample count."""
    rows = [
        (Op.gemm, Dtype.bfloat16, {"m": 256, "k": 256, "n": d}, "n", 30.0, 30.0 * (1 - spread / 2), 30.0 * (1 + spread / 2), n)
        for d in dims
    ]
    return FileLookup(rows, "test")


def _missing(dims, shape=None) -> list[MissingCurve]:
    return [MissingCurve(op="gemm", dtype="bfloat16", fixed_shape=shape or {"m": 256, "k": 256}, axis="n", dims=list(dims))]


def test_noisy_points_measured_under_a_short_cap_are_estimated_at_the_noise_not_at_their_count():
    # A loaded machine: 30 % spread. The quick plan stopped each point at its 400 ms cap (400
    # samples of 1 ms); the default plan keeps sampling until the median is pinned to +-1 %.
    lookup = _curve(spread=0.30, n=400)
    need = samples_needed(PointLatency(30.0, p10_us=25.5, p90_us=34.5, n=400), DEFAULT)
    assert need is not None and 400 < need <= DEFAULT.max_samples
    est = estimate(_missing([100, 101, 102, 103]), lookup, DEFAULT)
    per_point = est.seconds / 4
    by_count = point_seconds(30.0, 400, DEFAULT)  # what the recorded sample count alone would say
    assert per_point > 1.5 * by_count
    assert per_point <= (DEFAULT.warmup_ms + DEFAULT.time_cap_ms) / 1e3 + POINT_OVERHEAD_S
    assert per_point == pytest.approx((DEFAULT.warmup_ms + need * MIN_SAMPLE_US / 1e3) / 1e3 + POINT_OVERHEAD_S, rel=0.01)


def test_quiet_points_take_what_they_took():
    lookup = _curve(spread=0.02, n=10)
    est = estimate(_missing([100, 101]), lookup, DEFAULT)
    assert est.seconds == pytest.approx(2 * point_seconds(30.0, DEFAULT.min_samples, DEFAULT), rel=0.01)
    # Under the timing that recorded them, a point's own count is never undercut.
    assert samples_needed(PointLatency(30.0, p10_us=29.7, p90_us=30.3, n=57), QUICK) == 57


def test_a_curve_not_measured_yet_takes_the_noise_of_the_alignments_other_curves():
    lookup = _curve(spread=0.30, n=400)
    # Two curves the alignment lacks points on: k = 256 (measured around them), k = 512 (nothing yet).
    missing = _missing([101]) + _missing([200, 201], shape={"m": 256, "k": 512})
    est = estimate(missing, lookup, DEFAULT)
    need = samples_needed(PointLatency(30.0, p10_us=25.5, p90_us=34.5, n=400), DEFAULT)
    assert need is not None
    assert "time per FLOP" in est.basis
    # Twice the work per call (k doubles): 60-us calls, still in 1-ms samples, as many as the noise needs.
    assert est.per_curve[1] == pytest.approx(2 * point_seconds(60.0, need, DEFAULT), rel=0.01)


@pytest.mark.parametrize("spread", [0.02, 0.3, 0.9])
def test_the_estimate_never_passes_the_time_cap_bound(spread):
    from gac.solver.profile_time import most_seconds

    lookup = _curve(spread=spread, n=100)
    dims = [100, 101, 102, 103, 131, 257]
    est = estimate(_missing(dims), lookup, DEFAULT)
    assert est.seconds <= most_seconds(len(dims), DEFAULT) * (1 + 1e-12)
    # Nothing measured: every point is taken to its cap, which is the bound itself.
    assert estimate(_missing(dims), None, DEFAULT).seconds == pytest.approx(most_seconds(len(dims), DEFAULT))


def test_a_point_just_noisier_than_the_target_takes_the_batch_means_minimum():
    # 6 % spread against a 5 % target: the normal-theory count is ~34, but the rule stops on the median only
    # once its batch-means interval exists (MEDIAN_BATCHES batches of MIN_BATCH_SAMPLES).
    from gac.contracts.plans import MEDIAN_BATCHES, MIN_BATCH_SAMPLES

    need = samples_needed(PointLatency(30.0, p10_us=29.1, p90_us=30.9, n=10), DEFAULT)
    assert need == MEDIAN_BATCHES * MIN_BATCH_SAMPLES


def test_a_first_pass_adds_a_share_for_the_points_it_calls_for():
    """Sparse profiling's first pass (gac.solver.sparse_needs) is followed by the dims its fit cannot rule out: the estimate says so."""
    from gac.solver.profile_time import LATER_PASSES
    from gac.solver.sparse_needs import FIRST_PASS

    lookup = _curve(spread=0.02, n=10)
    plain = estimate(_missing([100, 101]), lookup, DEFAULT)
    first = estimate([mc.model_copy(update={"reasons": ["window", FIRST_PASS]}) for mc in _missing([100, 101])], lookup, DEFAULT)
    assert first.points == plain.points and first.seconds == pytest.approx(plain.seconds * (1 + LATER_PASSES))
    assert "first pass" in first.basis and "first pass" not in plain.basis


def test_a_first_pass_with_nothing_measured_bounds_the_later_passes_too():
    """Nothing measured: the estimate is an upper bound, so it covers the rest of the first pass's windows, which the
    later passes ask for where the curves are no lattice (a CPU's)."""
    from gac.solver.profile_time import most_seconds
    from gac.solver.sparse_needs import FIRST_PASS

    first = [mc.model_copy(update={"reasons": [FIRST_PASS]}) for mc in _missing([96, 100, 104])]
    est = estimate(first, None, DEFAULT, later=[20])
    assert est.points == 3 and est.seconds == pytest.approx(most_seconds(3 + 20, DEFAULT)) and "at most" in est.basis
    assert est.capped_per_curve == (3,)


def test_the_estimate_counts_the_dims_it_put_at_the_time_cap_per_curve():
    lookup = _curve(spread=0.02, n=10)
    other = _missing([100, 101])[0].model_copy(update={"fixed_shape": {"m": 7, "k": 999}})  # a curve nothing measured
    est = estimate([*_missing([100, 101]), other], lookup, DEFAULT)
    assert est.capped_per_curve == (0, 0)  # the measured curve from its dims, the other from the op's time per FLOP
    assert estimate([*_missing([100, 101]), other], None, DEFAULT).capped_per_curve == (2, 2)
