"""The pending checks at fleet size: the paper's DP with sliding-window maxima over runs of consecutive
dims (the same picks as the one-by-one DP), and the point cross-check on the candidates an exact LP
bound leaves (the same proof on a smaller instance)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gac.solver import baselines as bl
from gac.solver.crosscheck import crosscheck_point, reduce_point
from gac.solver.tradeoff import Point, TradeoffItem


def one_by_one(costs, values, budget: int, u: int) -> list[int]:
    """The paper's DP as it ran before the sliding windows: each candidate over every cell, strict > in order."""
    q = [np.asarray(c, dtype=np.int64) // u for c in costs]
    qo = [x - x.min() for x in q]
    cap = min(budget // u - sum(int(x.min()) for x in q), sum(int(x.max()) for x in qo))
    best = np.full(cap + 1, -np.inf)
    best[0] = 0.0
    pick = np.zeros((len(costs), cap + 1), dtype=np.int64)
    for i, (qi, vi) in enumerate(zip(qo, values)):
        new = np.full(cap + 1, -np.inf)
        for j, (c, v) in enumerate(zip(qi.tolist(), vi)):
            if c > cap:
                continue
            cand = best[: cap + 1 - c] + v
            better = cand > new[c:]
            new[c:][better] = cand[better]
            pick[i, c:][better] = j
        best = new
    b = int(np.argmax(best))
    raw = [0] * len(costs)
    for i in range(len(costs) - 1, -1, -1):
        raw[i] = int(pick[i, b])
        b -= int(qo[i][raw[i]])
    return raw


def instance(rng: np.random.Generator, integer: bool, gaps: bool):
    costs, values = [], []
    for _ in range(int(rng.integers(2, 9))):
        unit = int(rng.choice([4352, 18432, 5120, 12288, 300, 77]))
        lo, count = int(rng.integers(1, 60)), int(rng.integers(1, 90))
        stride = int(rng.choice([1, 1, 8]))
        dims = list(range(lo, lo + count * stride, stride))
        if gaps and count > 3:
            dims = sorted(rng.choice(np.arange(lo, lo + 300), size=count, replace=False).tolist())
        s = float(rng.integers(1, 4)) if integer else float(rng.lognormal())
        centre = dims[len(dims) // 2] + (0.0 if integer else 0.3)
        costs.append([unit * d for d in dims])
        values.append([s * unit * (d - centre) for d in dims])
    return costs, values, int(sum(np.mean(c) for c in costs)), int(rng.choice([64, 256, 2048]))


@pytest.mark.parametrize("integer", [False, True])  # integer values: exact ties, broken towards the earlier dim
def test_paper_dp_picks_what_the_one_by_one_dp_picks(monkeypatch, integer):
    runs = {"n": 0}
    real = bl._merge_progression

    def counted(*args):  # type: ignore[no-untyped-def]
        runs["n"] += 1
        return real(*args)

    monkeypatch.setattr(bl, "_merge_progression", counted)
    monkeypatch.setattr(bl, "PROGRESSION_MIN", 3)  # small instances: long runs go through the windows too
    rng = np.random.default_rng(7 if integer else 8)
    compared = 0
    for trial in range(120):
        costs, values, budget, u = instance(rng, integer, gaps=trial % 4 == 3)
        try:
            expected = one_by_one(costs, values, budget, u)
        except ValueError:
            continue
        got = bl.paper_dp(costs, values, budget, u)
        assert got.raw_picks == expected, trial
        assert got.picks == bl.repair(costs, values, budget, expected)
        compared += 1
    assert compared > 80 and runs["n"] > 100


def test_window_argmax_is_the_latest_maximum_of_each_window():
    rng = np.random.default_rng(3)
    for k in (1, 2, 5, 13):
        for rows in (1, 7, 40):
            key = rng.integers(0, 4, size=(rows, 3)).astype(float)  # many ties
            key[rng.random(key.shape) < 0.2] = -np.inf
            w = k + 1
            blocks = -(-(rows + k) // w) + 1
            y = np.full((blocks * w, 3), -np.inf)
            y[k : k + rows] = key
            back = bl._window_argmax(y, k, blocks)[: rows * 3].reshape(rows, 3)
            for t, c in itertools.product(range(rows), range(3)):
                window = [key[s, c] if s >= 0 else -np.inf for s in range(t - k, t + 1)]
                top = max(window)
                latest = max(i for i, x in enumerate(window) if x == top)
                if top > -np.inf:
                    assert back[t, c] == k - latest, (k, rows, t, c)


def test_paper_dp_finds_runs_only_where_values_are_linear():
    q = np.array([2 * d + d // 8 for d in range(40)])  # floor(17 d / 8): runs of every 8th dim
    v = 3.0 * np.arange(40)
    runs = bl._progressions(q, v)
    assert len(runs) == 8 and {step for _, step in runs} == {17}
    bent = v.copy()
    bent[20] += 1.0
    assert bl._progressions(q, bent) == [] or all(step == 0 for _, step in bl._progressions(q, bent))


def brute(items, budget: int, need_value: int):
    best = None
    for choice in itertools.product(*[range(len(it.dims)) for it in items]):
        cost = sum(it.unit * it.dims[j] for it, j in zip(items, choice))
        value = sum(it.worth * it.dims[j] for it, j in zip(items, choice))
        if cost <= budget and value >= need_value:
            lat = sum(it.latency[j] for it, j in zip(items, choice))
            if best is None or lat < best[0]:
                best = (lat, choice, value, cost)
    return best


def test_the_reduced_point_check_keeps_every_choice_as_fast_and_proves_the_optimum():
    rng = np.random.default_rng(11)
    proved = smaller = 0
    for _ in range(25):
        items = []
        for _ in range(5):
            dims = tuple(range(int(rng.integers(20, 40)), 48))[:: int(rng.integers(1, 4))]
            lat = tuple(int(x) for x in rng.integers(100, 1000, size=len(dims)))
            items.append(TradeoffItem(unit=int(rng.integers(3, 9)), worth=int(rng.integers(1, 9)), dims=dims, latency=lat))
        budget = sum(it.unit * it.dims[len(it.dims) // 2] for it in items)
        need_value = sum(it.worth * it.dims[len(it.dims) // 3] for it in items)
        found = brute(items, budget, need_value)
        if found is None:
            continue
        lat, choice, value, cost = found
        point = Point(choice, lat, value, cost)
        cost_rows = [[it.unit * d for d in it.dims] for it in items]
        value_rows = [[it.worth * d for d in it.dims] for it in items]
        keep = reduce_point(cost_rows, budget, value_rows, need_value, [list(it.latency) for it in items], lat)
        assert keep is not None and all(j in k for j, k in zip(choice, keep))
        smaller += sum(len(k) for k in keep) < sum(len(it.dims) for it in items)
        stats: dict = {}
        agrees, theirs, status, _ = crosscheck_point(items, budget, point, time_limit_s=30.0, workers=1, stats=stats)
        assert status == "OPTIMAL" and agrees is True and theirs == lat and stats["kept"] <= stats["candidates"]
        proved += 1
        slower = Point(choice, lat + 1, value, cost)  # a claimed optimum that is not the least: refuted
        agrees, theirs, status, _ = crosscheck_point(items, budget, slower, time_limit_s=30.0, workers=1)
        assert agrees is False and theirs == lat
    assert proved >= 15 and smaller >= 5
