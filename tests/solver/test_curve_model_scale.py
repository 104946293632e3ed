"""The curve model at scale: its fast parts read exactly what their plain forms read, and long
curves take about linear time.

The plain forms are written out here: the segmentation one end at a time (the model's before
it took ends in blocks and bounded old starts in chunks), the pattern scan with every template
built as a column, the period's and the frontier's tests with every m and every pair."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gac.solver.curve_model import (
    COMB_TEETH,
    MIN_LINE_POINTS,
    CliffOptions,
    Point,
    _best_templates,
    _frontier,
    _RunningSums,
    find_period,
    model_curve,
    segment,
)
from gac.solver.multiples import measured_counts, multiples
from tests.solver.synthetic import Measure, measure, measure_fast, smooth, spike_dims, staircase, tiled


def one_end_at_a_time(u: np.ndarray, y: np.ndarray, w: np.ndarray, penalty: np.ndarray, slope_price: float) -> list[tuple[int, int]]:
    """Optimal partitioning with PELT pruning, each end on its own: the first cheapest live start."""
    n = len(y)
    sums = _RunningSums(u, y, w, slope_price)
    pay = np.concatenate([[0.0], penalty[1:], [0.0]])
    most = float(pay.max()) + slope_price
    start_cost, cut = np.zeros(n + 1), np.zeros(n + 1, dtype=int)
    live, expires = np.array([0]), np.full(n + 1, n + 1)
    for end in range(1, n + 1):
        costs = start_cost[live] + sums.rss(live, end)
        k = int(np.argmin(costs))
        cut[end], start_cost[end] = live[k], costs[k] + pay[end]
        lost = (costs > costs[k] + most) & (end - live >= MIN_LINE_POINTS)
        expires[live[lost]] = np.minimum(expires[live[lost]], end + MIN_LINE_POINTS - 1)
        live = np.append(live[expires[live] > end], end)
    runs, end = [], n
    while end > 0:
        runs.append((int(cut[end]), end))
        end = int(cut[end])
    return runs[::-1]


def curves() -> list[tuple[str, list[Point]]]:
    out = []
    xs = list(range(1, 601))
    for seed in range(3):
        spikes = spike_dims(xs, 6, seed)
        out.append((f"stairs-{seed}", measure(staircase(24, 0.1, 0.02), xs, Measure(sample_noise=0.03, seed=seed), spikes=spikes)))
        out.append((f"smooth-{seed}", measure_fast(smooth(), range(1, 1501), Measure(sample_noise=0.02, seed=seed))))  # one long run
        out.append((f"tiled-{seed}", measure_fast(tiled(24, 0.05, 20.0), range(1, 1201), Measure(sample_noise=0.01 * seed, seed=seed))))
    # No noise at all: where a start is free (penalty 0) inside a run, it ties with the run's first.
    out.append(("exact-flat", [Point(x, 10.0 + (x - 1) // 50) for x in range(1, 400)]))
    out.append(("exact-line", [Point(x, 10.0 + 0.01 * x) for x in range(1, 3000)]))
    return out


@pytest.mark.parametrize("name, pts", curves(), ids=[name for name, _ in curves()])
def test_the_blocked_segmentation_cuts_where_one_end_at_a_time_does(name: str, pts: list[Point]) -> None:
    rng = np.random.default_rng(len(name))
    y = np.array([p.median_us for p in pts])
    u = np.linspace(0, 1, len(y))
    w = 1 / np.maximum(np.array([p.median_sigma() for p in pts]), 1e-3 * y) ** 2
    beta = 3 * np.log(len(y))
    for penalty in (np.full(len(y), beta), np.where(rng.random(len(y)) < 0.05, 0.0, beta)):
        assert segment(u, y - np.median(y), w, penalty, 16.0) == one_end_at_a_time(u, y - np.median(y), w, penalty, 16.0)


def test_multiples_are_every_multiple_between_the_first_and_last_dim() -> None:
    xs = np.array([3, 4, 6, 9, 10, 12, 20, 21, 40])
    ms = np.arange(2, 25)
    found = multiples(xs, ms)
    for j, m in enumerate(ms):
        values = sorted(int(k) * int(m) for k in found.k[found.j == j])
        assert values == [v for v in range(3, 41) if v % m == 0]
    assert list(measured_counts(xs, ms)) == [int((xs % m == 0).sum()) for m in ms]


def plain_templates(xs: np.ndarray, x: np.ndarray, y: np.ndarray, sigma: np.ndarray, pieces: int, ms: np.ndarray) -> dict[str, np.ndarray]:
    """Each m's t, its templates built as columns and detrended by a least-squares fit per piece."""
    sw = y / sigma
    labels = np.minimum(((x - x[0]) * pieces / float(x[-1] - x[0] + 1)).astype(int), pieces - 1)

    def detrend(v: np.ndarray) -> np.ndarray:
        v = v * (sw if v.ndim == 1 else sw[:, None])
        out = np.empty_like(v)
        for p in np.unique(labels):
            on = labels == p
            u = (x[on] - x[on][0]) / max(1.0, x[on][-1] - x[on][0])
            cols = np.column_stack([np.ones_like(u), u, u * u])[:, : on.sum()] * sw[on, None]
            out[on] = v[on] - cols @ np.linalg.lstsq(cols, v[on], rcond=None)[0]
        return out

    resid = detrend(np.log(y))
    scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    resid = np.clip(resid, -4 * scale, 4 * scale)
    out = {}
    for kind, cols in (("steps", -((xs[:, None] - 1) % ms) / ms), ("comb", -(xs[:, None] % ms == 0).astype(float))):
        c = detrend(cols)
        t = c.T @ resid / np.sqrt((c * c).sum(axis=0))
        out[kind] = np.where((xs[:, None] % ms == 0).sum(axis=0) >= COMB_TEETH, np.abs(t), -np.inf) if kind == "comb" else t
    return out


@pytest.mark.parametrize("pieces", [1, 2, 4])
def test_the_pattern_scan_picks_the_m_the_plain_templates_pick(pieces: int) -> None:
    stairs = staircase(16, 0.08, 0.01)
    pts = measure(lambda x: stairs(x) * (0.9 if x % 6 == 0 else 1.0), range(5, 700), Measure(sample_noise=0.03, seed=pieces))
    x = np.array([p.x for p in pts], dtype=float)
    y = np.array([p.median_us for p in pts])
    sigma = 0.03 * y / np.sqrt(20)
    ms = np.arange(3, 40)
    plain = plain_templates(x.astype(int), x, y, sigma, pieces, ms)
    for found in _best_templates(x.astype(int), x, y, sigma, pieces, ms):
        assert found.m == ms[int(np.argmax(plain[found.kind]))]


def test_the_period_is_the_one_every_m_tried_one_by_one_gives() -> None:
    rng = np.random.default_rng(3)
    xs = sorted(set(rng.integers(1, 500, 300).tolist()))
    for marked in ([x for x in xs if x % 12 == 0], [x for x in xs if x % 8 == 0 or rng.random() < 0.05], xs[:2]):
        scores = []
        for m in range(2, max(xs) // 3 + 1):
            multiple = {x for x in xs if x % m == 0}
            if 3 <= len(multiple) < len(xs):
                scores.append((m, len(multiple & set(marked)) / len(multiple | set(marked))))
        top = max(a for _, a in scores)
        m, agreement = min((m, a) for m, a in scores if a >= top - 0.02)
        got = find_period(marked, xs)
        assert (got.m, got.agreement) == (m, agreement) if agreement >= 0.75 else got is None


def test_the_frontier_is_the_one_every_pair_gives() -> None:
    rng = np.random.default_rng(5)
    n = 3000
    x = np.arange(1.0, n + 1)
    u = (x - 1) / (n - 1)
    run = np.repeat(np.arange(n // 30), 30)  # runs of 30 dims: flat, rising or falling, a step between
    slope = rng.choice([0.0, 0.0, 5.0, -3.0], n // 30)
    est = 100 + 50 * u + rng.normal(0, 0.3, n // 30)[run] + slope[run] * u + rng.normal(0, 0.05, n)
    var = rng.uniform(0.001, 0.05, n)
    slope_se = rng.uniform(0.0, 0.1, n // 30)
    for opts in (CliffOptions(), CliffOptions(frontier_tol_min=0.001)):
        later = np.arange(n)[None, :] > np.arange(n)[:, None]
        same = run[None, :] == run[:, None]
        sd = np.where(same, slope_se[run][:, None] * np.abs(u[None, :] - u[:, None]), np.sqrt(var[:, None] + var[None, :]))
        margin = np.maximum(opts.frontier_z * sd, opts.frontier_tol_min * est[:, None])
        every_pair = [int(d) for d in x[np.all(~later | (est[None, :] - est[:, None] > margin), axis=1)]]
        assert _frontier(x, u, est, var, run, slope_se, opts) == every_pair


@pytest.mark.serial  # compares two wall-clock timings: alone on the cores
def test_long_curves_take_about_linear_time() -> None:
    """Doubling the points about doubles the time (clean and noisy staircases, a smooth curve),
    where the plain forms took four to eight times as long."""
    for truth, noise in ((tiled(24, 0.05, 20.0), 0.0), (tiled(24, 0.05, 20.0), 0.01), (smooth(), 0.01)):
        seconds = []
        for n in (2000, 8000):
            pts = measure_fast(truth, range(1, n + 1), Measure(sample_noise=noise, seed=1))
            start = time.perf_counter()
            model_curve(pts)
            seconds.append(time.perf_counter() - start)
        assert seconds[1] < 10 * seconds[0] + 0.5
