"""The noise-aware curve model on synthetic platforms with a hidden staircase (period 24, which no
rule assumes), measured with per-sample noise, jittery medians, spikes, or no cliffs at all.

The main figure: the fraction of the robust frontier's dims that are step tops (the dims right
before a jump, the only ones worth choosing). Raw medians compared with zero tolerance score
about 0.25 on these curves; each test checks every seed, so one bad curve fails it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from gac.solver.cliffs import analyze
from gac.solver.curve_model import (
    SMOOTH_NOTE,
    CliffOptions,
    Point,
    _project_out,
    _RunningSums,
    frontier_from_estimates,
    model_curve,
    model_lookup_curve,
    segment,
)
from gac.solver.frontier import cliff_free_frontier
from gac.solver.lookup import FileLookup, PointLatency
from tests.solver.synthetic import Measure, measure, smooth, spike_dims, staircase, step_tops

SEEDS = range(8)
PERIOD = 24
XS = list(range(1, 12 * PERIOD + 1))  # 12 steps; the last dim is a step top too
TOPS = step_tops(XS, PERIOD)


def on_tops(frontier: list[int], tops: set[int]) -> float:
    return sum(d in tops for d in frontier) / len(frontier)


def step_best(frontier: list[int], latency: dict[int, float], period: int) -> float:
    """Per step (the dims between two step tops), the frontier dim with the most dims per
    microsecond: the fraction of steps where that is the step's top."""
    hits = []
    for top in sorted(step_tops(latency, period)):
        in_step = [d for d in frontier if top - period < d <= top]
        hits.append(max(in_step, key=lambda d: d / latency[d]) == top)
    return float(np.mean(hits))


# -- the targets -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_sample_noise_keeps_the_frontier_on_step_tops(seed):
    pts = measure(staircase(PERIOD, step=0.10, rise=0.005), XS, Measure(sample_noise=0.05, n=20, seed=seed))
    model = model_curve(pts)
    assert on_tops(model.frontier, TOPS) >= 0.95
    assert model.period is not None and model.period.m == PERIOD
    # The same curve through raw medians: noise invents most of its frontier.
    raw = cliff_free_frontier({p.x: p.median_us for p in pts})
    assert on_tops(raw, TOPS) < 0.5


@pytest.mark.parametrize("seed", SEEDS)
def test_jittery_medians_keep_the_frontier_on_step_tops(seed):
    # Each point's median moves by 5 % while its own p10..p90 says it is exact: only the
    # curve itself shows the noise, and single 10 % steps are just 2 sigma.
    pts = measure(staircase(PERIOD, step=0.10, rise=0.005), XS, Measure(jitter=0.05, seed=seed))
    model = model_curve(pts)
    assert on_tops(model.frontier, TOPS) >= 0.90
    assert 3.5 < model.noise_pct < 7.0


@pytest.mark.parametrize("how", [Measure(sample_noise=0.05), Measure(sample_noise=0.05, jitter=0.03)], ids=["samples", "jitter"])
@pytest.mark.parametrize("seed", SEEDS)
def test_spikes_never_reach_the_frontier(seed, how):
    spikes = spike_dims(XS, 8, seed)  # 30 % slower than their neighbours; some are step tops
    pts = measure(staircase(PERIOD, step=0.10, rise=0.005), XS, Measure(**{**vars(how), "seed": seed}), spikes=spikes)
    model = model_curve(pts)
    assert not set(spikes) & set(model.frontier)
    lone = {s.x_first for s in model.segments if s.points == 1}
    assert set(spikes) <= lone  # each spike is a segment of its own ...
    for x in spikes:  # ... and keeps its own (slow) latency
        assert model.estimates[x] == pytest.approx(pts[x - 1].median_us)
    # Where a spike sits on a step top, the dim below it is the best of that step.
    best = TOPS - set(spikes) | {t - 1 for t in TOPS & set(spikes)}
    assert on_tops(model.frontier, best) >= 0.9


@pytest.mark.parametrize("how", [Measure(), Measure(sample_noise=0.05), Measure(jitter=0.05)], ids=["clean", "samples", "jitter"])
@pytest.mark.parametrize("seed", range(4))
def test_a_smooth_curve_has_no_cliffs(seed, how):
    xs = list(range(16, 400))
    model = model_curve(measure(smooth(per_dim_us=0.05, const_us=20.0), xs, Measure(**{**vars(how), "seed": seed})))
    assert model.smooth and model.steps == [] and model.period is None
    assert SMOOTH_NOTE in model.notes
    assert model.frontier == xs  # every dim is as fast as its size allows


@pytest.mark.parametrize("period, steps", [(24, 12), (48, 8), (96, 6)])
@pytest.mark.parametrize("how", [Measure(sample_noise=0.05), Measure(jitter=0.05)], ids=["samples", "jitter"])
@pytest.mark.parametrize("seed", range(4))
def test_the_period_comes_from_the_data(period, steps, how, seed):
    xs = list(range(1, steps * period + 1))
    pts = measure(staircase(period, step=0.12, rise=0.005), xs, Measure(**{**vars(how), "seed": seed}))
    a = analyze(pts)
    assert a.modulus is not None and a.modulus.m == period and a.modulus.agreement >= 0.8
    assert any(f"multiples of {period}" in note for note in a.notes)


# -- what the model reports ---------------------------------------------------------------------


def test_a_clean_flat_staircase_is_exact():
    pts = measure(staircase(PERIOD, step=0.10, rise=0.0), XS)
    model = model_curve(pts)
    assert model.frontier == sorted(TOPS)
    assert [s.x_before for s in model.steps] == sorted(TOPS)[:-1]
    assert all(s.x == s.x_before + 1 and s.size_pct == pytest.approx(10.0) for s in model.steps)
    assert model.estimates == {p.x: pytest.approx(p.median_us) for p in pts}
    assert model.period is not None and (model.period.m, model.period.agreement) == (PERIOD, 1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_rising_plateaus_keep_their_dims_but_the_best_is_still_the_top(seed):
    # A 6 % rise across each step, measured to 0.7 %: the rise is real, every dim of a plateau is
    # faster than the next, so all stay; dims per microsecond still peak at the top.
    pts = measure(staircase(PERIOD, step=0.10, rise=0.06), XS, Measure(sample_noise=0.05, n=80, seed=seed))
    model = model_curve(pts)
    assert len(model.frontier) > 3 * len(TOPS)
    assert step_best(model.frontier, model.estimates, PERIOD) == 1.0
    raw = {p.x: p.median_us for p in pts}  # noise makes raw dips that look like a better deal
    assert step_best(cliff_free_frontier(raw), raw, PERIOD) < 0.9
    # The frontier no longer names the period; the steps' positions still do.
    assert model.period is not None and model.period.m == PERIOD


@pytest.mark.parametrize("seed", SEEDS)
def test_estimates_are_closer_to_the_truth_than_the_medians(seed):
    truth = staircase(PERIOD, step=0.10, rise=0.0)
    pts = measure(truth, XS, Measure(sample_noise=0.05, seed=seed))
    model = model_curve(pts)
    raw_err = np.array([abs(p.median_us / truth(p.x) - 1) for p in pts])
    est_err = np.array([abs(model.estimates[p.x] / truth(p.x) - 1) for p in pts])
    assert est_err.mean() < raw_err.mean() / 3
    # The reported uncertainty is honest: the truth lies within 3 sigma almost everywhere.
    within = [abs(model.estimates[x] - truth(x)) <= 3 * model.sigma[x] for x in XS]
    assert np.mean(within) >= 0.95


def test_a_drop_is_a_step_down_and_hides_the_dims_before_it():
    # A faster kernel takes over at 200: everything from 180 to 199 is beaten by 200.
    truth = lambda x: (50.0 + 0.1 * x) * (0.75 if x >= 200 else 1.0)  # noqa: E731
    pts = measure(truth, range(100, 301), Measure(sample_noise=0.05, seed=3))
    model = model_curve(pts)
    assert [(s.x_before, s.x) for s in model.steps] == [(199, 200)]
    assert model.steps[0].size_pct == pytest.approx(-25, abs=3) and model.steps[0].z < -4
    assert not model.smooth
    assert not [d for d in model.frontier if 166 <= d < 200]  # truth(d) >= truth(200) there


@pytest.mark.parametrize("seed", range(4))
def test_a_fast_aligned_dim_is_kept_as_a_dip(seed):
    # Multiples of 24 take a kernel 25 % faster than their neighbours (a misalignment penalty).
    truth = lambda x: (20.0 + 0.2 * x) * (0.75 if x % 24 == 0 else 1.0)  # noqa: E731
    pts = measure(truth, XS, Measure(sample_noise=0.05, seed=seed))
    model = model_curve(pts)
    # Only dips stay; one whose next dip is not clearly slower gives way to it.
    assert set(model.frontier) <= TOPS and len(model.frontier) >= 0.75 * len(TOPS)
    assert model.period is not None and model.period.m == PERIOD
    assert [s.x for s in model.steps if s.size_pct < 0] == sorted(TOPS)  # each dip is a step down
    # Every dip is one kernel: its estimate pools all of them (a comb), closer to the truth than its own median.
    assert model.comb is not None and model.comb.m == PERIOD
    assert model.comb.log_offset == pytest.approx(np.log(0.75), abs=0.02)
    est_err = np.mean([abs(model.estimates[t] / truth(t) - 1) for t in TOPS])
    raw_err = np.mean([abs(pts[t - 1].median_us / truth(t) - 1) for t in TOPS])
    assert est_err < raw_err


@pytest.mark.parametrize("seed", SEEDS)
def test_a_comb_lifted_by_noise_bursts_is_read_from_all_its_teeth(seed):
    # A CPU GEMM: widths that are multiples of 8 run 7 % faster than their neighbours, and each
    # point is timed in one burst, so whole points jitter by 5 % (more than the comb's depth
    # divided by two). Read one by one, half the teeth look no faster than a neighbour; the
    # comb pools them and puts every tooth below both neighbours.
    truth = lambda x: (200.0 + 2.0 * x) * (0.93 if x % 8 == 0 else 1.0)  # noqa: E731
    teeth = step_tops(XS, 8)
    pts = measure(truth, XS, Measure(sample_noise=0.02, jitter=0.05, seed=seed))
    model = model_curve(pts)
    assert model.comb is not None and model.comb.m == 8
    assert abs(model.comb.log_offset - np.log(0.93)) < 3 * model.comb.se < 0.05  # as sure as it says
    assert any("multiples of 8 take" in note and "less time" in note for note in model.notes)
    inner = [t for t in teeth if t + 1 in model.estimates]
    assert all(model.estimates[t] < min(model.estimates[t - 1], model.estimates[t + 1]) for t in inner)
    raw = {p.x: p.median_us for p in pts}
    assert sum(raw[t] < min(raw[t - 1], raw[t + 1]) for t in inner) < 0.9 * len(inner)  # what noise alone shows
    assert on_tops(model.frontier, teeth) >= 0.95
    err = lambda v: np.median([abs(v[t] / truth(t) - 1) for t in teeth])  # noqa: E731
    assert err(model.estimates) < 0.5 * err(raw)


LADDER = {32: 0.78, 16: 0.83, 8: 0.89, 4: 0.95}  # the deepest divisor decides


@pytest.mark.parametrize("how", [Measure(sample_noise=0.03), Measure(sample_noise=0.02, jitter=0.02)], ids=["samples", "jitter"])
@pytest.mark.parametrize("seed", range(4))
def test_a_ladder_comb_is_read_level_by_level(seed, how):
    # A CPU's bf16 GEMM along K on 32-wide tiles (as AMX): multiples of 4 run 5 % faster than the
    # widths around them, of 8 11 %, of 16 17 %, of 32 22 %. One comb would price 304 (a multiple
    # of 16) like 300 (of 4 only); the ladder keeps each level's own speed.
    truth = lambda x: (200.0 + 2.0 * x) * next((f for m, f in LADDER.items() if x % m == 0), 1.0)  # noqa: E731
    xs = list(range(200, 520))
    model = model_curve(measure(truth, xs, Measure(**{**vars(how), "seed": seed})))
    assert model.comb is not None
    levels = model.comb.levels()
    assert [lv.m for lv in levels][:3] == [4, 8, 16]
    for lv in levels:
        assert abs(math.exp(lv.log_offset) - LADDER[lv.m]) < 3 * lv.se + 0.03
    assert model.notes[0].startswith("multiples of 4 take") and ", of 8 " in model.notes[0]
    teeth = [x for x in xs if x % 4 == 0]
    assert np.median([abs(model.estimates[x] / truth(x) - 1) for x in teeth]) < 0.01
    assert model.estimates[304] < model.estimates[312] < model.estimates[300]  # 16 before 8 before 4


@pytest.mark.parametrize("seed", range(4))
def test_steps_that_stand_out_more_than_the_comb_leave_the_comb_read(seed):
    # Tiles of 32 make 12 % steps (the strongest pattern), and multiples of 4 run 7 % faster on
    # top: both are read (not 64 lone dips), and the frontier stays on the step tops.
    stairs = staircase(32, step=0.12, rise=0.0)
    truth = lambda x: stairs(x) * (0.93 if x % 4 == 0 else 1.0)  # noqa: E731
    xs = list(range(200, 456))
    model = model_curve(measure(truth, xs, Measure(sample_noise=0.03, seed=seed)))
    assert model.comb is not None and model.comb.m == 4 and model.comb.deeper is None
    assert abs(model.comb.log_offset - math.log(0.93)) < 3 * model.comb.se + 0.01
    assert model.period is not None and model.period.m == 32
    assert sum(s.points == 1 for s in model.segments) <= 2
    # Past the last full step only the last tooth is left to be fastest (452 beats 453-455).
    assert [d for d in model.frontier if d <= 448] == sorted(step_tops(xs, 32))


@pytest.mark.parametrize("seed", range(4))
def test_a_few_bursts_that_share_a_divisor_are_no_comb(seed):
    # Five noise bursts (30 % slow) that happen to land on multiples of 64, with the sixth multiple
    # measured plain: too few teeth, and they disagree. Read as a comb they would call 256 slow too
    # and move the frontier; read as what they are, only the five dims themselves leave it.
    xs = list(range(16, 400))
    bursts = [x for x in xs if x % 64 == 0 and x != 256]
    model = model_curve(measure(smooth(per_dim_us=0.05, const_us=20.0), xs, Measure(sample_noise=0.02, seed=seed), spikes=bursts))
    assert model.comb is None
    assert not any("multiples of" in note for note in model.notes)
    assert model.frontier == [x for x in xs if x not in bursts]


@pytest.mark.parametrize("seed", range(4))
def test_a_comb_on_a_staircase_leaves_the_step_tops(seed):
    # A GPU GEMM along K: tiles of 64 make a staircase, and a K that is not a multiple of 8 falls
    # off the vectorised kernel (30 % slower). Both shapes at once: the frontier is the tops.
    stairs = staircase(64, step=0.10, rise=0.005)
    truth = lambda x: stairs(x) * (1.0 if x % 8 == 0 else 1.3)  # noqa: E731
    xs = list(range(1, 12 * 64 + 1))
    model = model_curve(measure(truth, xs, Measure(sample_noise=0.05, seed=seed)))
    assert model.comb is not None and model.comb.m == 8
    assert abs(model.comb.log_offset - np.log(1 / 1.3)) < 3 * model.comb.se + 0.01
    assert model.frontier == sorted(step_tops(xs, 64))
    assert model.period is not None and model.period.m == 64
    assert any(note.startswith("steps follow multiples of 64") for note in model.notes)


def test_segmentation_is_the_exact_optimum():
    """Pruning never drops a start point that could still win: compare with the full search."""
    rng = np.random.default_rng(0)
    for seed in range(12):
        xs = list(range(1, 97))
        truth = staircase(int(rng.choice([8, 24])), 0.1, 0.02)
        pts = measure(truth, xs, Measure(sample_noise=0.08, seed=seed), spikes=spike_dims(xs, 3, seed))
        u = np.linspace(0, 1, len(xs))
        y = np.array([p.median_us for p in pts])
        w = 1 / (0.02 * y) ** 2
        penalty = np.where(rng.random(len(xs)) < 0.1, 0.0, 3 * np.log(len(xs)))
        sums = _RunningSums(u, y, w, 16.0)

        def total(runs, penalty=penalty, sums=sums):  # type: ignore[no-untyped-def]
            return sum((penalty[s] if s else 0.0) + sums.rss(np.array([s]), e)[0] for s, e in runs)

        best = np.zeros(len(xs) + 1)
        for end in range(1, len(xs) + 1):
            starts = np.arange(end)
            best[end] = np.min(best[starts] + np.where(starts > 0, penalty[starts], 0.0) + sums.rss(starts, end))
        assert total(segment(u, y, w, penalty, 16.0)) == pytest.approx(best[-1])


def test_tiny_and_degenerate_curves():
    assert model_curve([]).frontier == []
    one = model_curve([Point(64, 10.0)])
    assert one.frontier == [64] and one.smooth and one.estimates == {64: 10.0}
    flat = model_curve([Point(x, 10.0) for x in range(1, 50)])
    assert flat.frontier == [49] and flat.smooth  # equal latency: the largest dim holds the most
    few = model_curve([Point(8, 5.0), Point(16, 5.0), Point(24, 9.0), Point(32, 9.0)])
    assert few.frontier == [16, 32] and "fewer than 8 points" in few.notes[0]


def test_options_tighten_the_frontier():
    pts = measure(smooth(per_dim_us=0.05, const_us=20.0), range(16, 400), Measure(sample_noise=0.05, seed=1))
    every = model_curve(pts).frontier
    coarse = model_curve(pts, CliffOptions(frontier_tol_min=0.02)).frontier
    assert set(coarse) < set(every) and coarse[-1] == every[-1]


def test_frontier_from_independent_estimates():
    est = {8: 10.0, 16: 10.0, 24: 10.3, 32: 12.0, 40: 11.0}
    sigma = {d: 0.1 for d in est}
    # 16 beats 8 (a tie); 24 is within noise of 16? no: 0.3 > 2 * 0.14; 32 loses to 40.
    assert frontier_from_estimates(est, sigma) == [16, 24, 40]
    assert frontier_from_estimates(est, {d: 0.2 for d in est}) == [24, 40]


def test_lookup_curves_carry_their_spread(tmp_path):
    assert PointLatency(3.0) == PointLatency(3.0, "measured", None, None, None)  # old callers unchanged
    p = tmp_path / "m.csv"
    p.write_text("op,dtype,shape,sweep_axis,median_us,p10_us,p90_us,n\n"
                 "gemm,float16,\"k=64,m=8,n=16\",n,3.0,2.5,3.5,10\n"
                 "gemm,float16,\"k=64,m=8,n=16\",n,5.0,4.0,6.0,20\n"
                 "gemm,float16,\"k=64,m=8,n=24\",n,2.0,,,\n")  # fmt: skip
    curve = FileLookup.from_csv(p).curve("gemm", "float16", {"m": 8, "k": 64}, "n")
    assert curve[16] == PointLatency(4.0, p10_us=3.25, p90_us=4.75, n=30)  # medians of re-runs, n summed
    assert curve[24] == PointLatency(2.0)  # spread unknown
    bad = tmp_path / "bad.csv"
    bad.write_text('op,dtype,shape,sweep_axis,median_us,p10_us\ngemm,float16,"k=64,m=8,n=16",n,3.0,3.5\n')
    with pytest.raises(ValueError, match="bad.csv:2"):
        FileLookup.from_csv(bad)
    # Rows without spread (the old 5-tuples) still work, and the model reads lookup curves.
    rows = [("gemm", "float16", {"m": 8, "k": 64, "n": x}, "n", 10.0 + (x - 1) // 24) for x in XS]
    lk = FileLookup(rows, "synthetic")
    assert model_lookup_curve(lk.curve("gemm", "float16", {"m": 8, "k": 64}, "n")).frontier == sorted(TOPS)


def test_the_generator_is_deterministic():
    how = Measure(sample_noise=0.05, jitter=0.02, seed=5)
    assert measure(staircase(24), XS, how) == measure(staircase(24), XS, how)
    assert measure(staircase(24), XS, how) != measure(staircase(24), XS, Measure(sample_noise=0.05, jitter=0.02, seed=6))
    assert spike_dims(XS, 8, 1) == spike_dims(XS, 8, 1)
    for p in measure(staircase(24), XS, how):
        assert p.p10_us <= p.median_us <= p.p90_us and p.n == 20


@pytest.mark.parametrize("period", [24, 48, 96])
def test_a_long_tiled_gemm_finds_its_period(period):
    # 1..2048: launch-bound at first, then linear; its relative steps shrink to about 1 %. One
    # quadratic trend over the whole curve left a misfit that hid the sawtooth (t 3.5 at P = 24).
    from tests.solver.synthetic import gemm_truth

    pts = measure(gemm_truth({"m": 512, "k": 2048, "n": 1}, "n", period), range(1, 2049), Measure(sample_noise=0.05, seed=1))
    model = model_curve(pts)
    assert model.period is not None and model.period.m == period
    assert on_tops(model.frontier, step_tops(range(1, 2049), period) | {2048}) == 1.0


def test_frontier_of_a_sum_of_curves_knows_which_estimates_move_together():
    from gac.solver.curve_model import frontier_of_sum

    xs = list(range(16, 400))
    line = model_curve(measure(smooth(per_dim_us=0.05, const_us=20.0), xs, Measure(sample_noise=0.05, seed=2)))
    stairs = model_curve(measure(staircase(PERIOD, step=0.10, rise=0.0), XS, Measure(sample_noise=0.05, seed=2)))
    dims = list(range(100, 200))
    # One line: every difference is as sure as its slope, so every dim stays (taken as independent
    # estimates, neighbours would look alike and all but the top would go).
    assert frontier_of_sum(dims, [(line, 1.0, 1)]) == dims
    assert len(frontier_from_estimates({d: line.estimates[d] for d in dims}, {d: line.sigma[d] for d in dims})) < len(dims) / 2
    # Flat plateaus: only their tops (and the largest dim, which nothing beats), also when two curves add up.
    tops = [d for d in dims if d % PERIOD == 0] + [199]
    assert frontier_of_sum(dims, [(stairs, 1.0, 1)]) == tops
    assert frontier_of_sum(dims, [(stairs, 1.0, 1), (stairs, 2.0, 1)]) == tops


def test_projecting_out_a_zero_column_leaves_the_residuals_without_a_warning():
    resid = np.array([0.5, -1.0, 2.0, -0.25])
    with np.errstate(all="raise"):
        assert np.array_equal(_project_out(resid, np.zeros(4)), resid)  # nothing to project out
        col = np.array([1.0, 0.0, -1.0, 2.0])
        left = _project_out(resid, col)
    assert np.array_equal(left, resid - col * (col * resid).sum() / (col * col).sum())
    assert abs(float((left * col).sum())) < 1e-12


def test_a_curve_whose_best_template_detrends_to_zero_models_without_a_warning():
    # Dims 1 + 32k: one of the pattern scan's best templates (a comb of 3) detrends to all zeros, and
    # projecting it out of the residuals divided 0 by 0 (RuntimeWarning: invalid value encountered in divide).
    xs = np.arange(33, 33 + 32 * 30, 32)
    y = 100 + 0.3 * xs + 20 * ((xs - 1) // 24) + np.random.default_rng(1).normal(0, 0.5, len(xs))
    pts = [Point(int(x), float(v), float(v) * 0.99, float(v) * 1.01, 10) for x, v in zip(xs, y)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = model_curve(pts)
    assert len(model.estimates) == len(xs)


def test_a_ladder_whose_fit_cannot_pin_a_coefficient_is_no_ladder(monkeypatch):
    """A near-singular regression leaves a variance at or below zero in the pseudo-inverse's rounding
    (seen on a real CPU curve: `math domain error`); such a coefficient is not determined, so no ladder
    is read from it rather than the model failing."""
    from gac.solver import curve_model as cm

    x = np.arange(64, 193, dtype=float)
    y = np.where(x.astype(int) % 8 == 0, 10.0, 14.0) * (1 + x / 1000)
    rel = np.full(len(x), 0.01)
    comb, z = cm._ladder_fit(x, y, rel, 8, None)
    assert comb is not None and comb.m == 8 and z > cm.LADDER_Z  # the honest fit finds the comb

    honest = cm._LadderRegression.fit

    def rounded(self, w):
        beta, cov = honest(self, w)
        cov = cov.copy()
        np.fill_diagonal(cov, -1e-18)  # what a pseudo-inverse's rounding can leave
        return beta, cov

    monkeypatch.setattr(cm._LadderRegression, "fit", rounded)
    assert cm._ladder_fit(x, y, rel, 8, None) == (None, 0.0)
    assert cm._sd(4.0) == 2.0 and cm._sd(0.0) == math.inf and cm._sd(-1e-18) == math.inf


def _h100_small_bf16() -> dict[str, list[Point]]:
    """A 5 µs bf16 GEMM (256 x N x 256) swept on k and n on an NVIDIA H100 80GB HBM3 (driver 580.159.04,
    CUDA 13.0) by the timer of 2026-11-26, one synchronisation per sample: host stalls moved whole runs
    (medians 5.2-17.9 µs for one kernel, p10..p90 up to 13-31 µs, most points on the 2,000-sample cap)."""
    import csv
    from collections import defaultdict
    from pathlib import Path

    curves: dict[str, list[Point]] = defaultdict(list)
    with (Path(__file__).parent / "data" / "h100_small_bf16.csv").open() as f:
        for row in csv.DictReader(f):
            p = Point(int(row["x"]), float(row["median_us"]), float(row["p10_us"]), float(row["p90_us"]), int(row["n"]))
            curves[f"{row['axis']}-run{row['db_run']}"].append(p)
    return curves


@pytest.mark.parametrize("curve", ["k-run1", "n-run1"])
def test_medians_whose_samples_spread_over_half_of_them_make_no_cliff(curve):
    """Such a point's median can land anywhere among its samples in the next run: its own samples' sigma,
    not the median's standard error over 2,000 of them, is its noise. The same medians with a tight
    spread do make cliffs: the verdict is the spread's, not the medians'."""
    points = _h100_small_bf16()[curve]
    assert sum(p.p90_us - p.p10_us > 0.5 * p.median_us for p in points) >= 3
    model = model_curve(points)
    assert not [s for s in model.steps if abs(s.size_pct) > 20], model.steps
    tight = [Point(p.x, p.median_us, 0.99 * p.median_us, 1.01 * p.median_us, p.n) for p in points]
    assert [s for s in model_curve(tight).steps if abs(s.size_pct) > 20]


def test_a_jump_across_a_wide_gap_of_unmeasured_dims_is_no_step_on_the_dashboard():
    """A dense sweep of 100..139 and one far point (the dense original): where between them the latency changes is
    unknown, so analyze() lists no step there and says why; the steps inside the sweep stay."""
    points = [Point(x, 10.0 * -(-x // 8), 10.0 * -(-x // 8) * 0.99, 10.0 * -(-x // 8) * 1.01, 50) for x in range(100, 140)]
    points.append(Point(1024, 5.0, 4.95, 5.05, 50))
    a = analyze(points)
    assert a.steps and all(s.x - s.x_before == 1 for s in a.steps)
    assert any("139 -> 1024" in n and "884 unmeasured dims" in n for n in a.notes), a.notes
    assert any(s.x == 1024 for s in model_curve(points).steps)  # the model itself still sees the jump
    # A dense stretch and coarse points beyond it: a step between two coarse points is placed within their gap.
    level = [(x, 10.0 if x <= 700 else 13.2) for x in [*range(64, 161), *range(192, 1025, 32)]]
    coarse = analyze([Point(x, y, 0.99 * y, 1.01 * y, 50) for x, y in level])
    assert [(s.x_before, s.x) for s in coarse.steps if s.size_pct > 20] == [(672, 704)]
