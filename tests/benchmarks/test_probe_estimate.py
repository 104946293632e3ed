"""benchmarks/probe_estimate.py: rounds read back from a run's stamps, and the estimate of each rule."""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta

import pytest

from benchmarks.probe_estimate import ratios, round_times


def _run_db(path, rounds_s: list[float], per_round: int = 8) -> str:
    """A measurements table as a --profile-missing run leaves it: each round's points stamped together."""
    con = sqlite3.connect(path)
    con.execute("create table measurements (run_id text, measured_at text)")
    t = datetime(2026, 11, 27, 19, 0, 0)
    rows = []
    for seconds in [0.1, *rounds_s]:  # the first round has no round before it to time it from
        t += timedelta(seconds=seconds)
        rows += [("r1", (t + timedelta(microseconds=50 * i)).isoformat(" ")) for i in range(per_round)]
    rows += [("r0", t.isoformat(" "))]  # another, smaller run in the same file
    con.executemany("insert into measurements values (?, ?)", rows)
    con.commit()
    con.close()
    return str(path)


def test_each_rounds_time_is_read_back_from_the_stamps(tmp_path):
    rounds = [0.05, 0.4, 0.08, 0.06, 0.9]
    run, times, points, per_round = round_times(_run_db(tmp_path / "gac.db", rounds), None)
    assert run == "r1" and points == 8 * (len(rounds) + 1) and per_round == 8
    assert times == pytest.approx(rounds, abs=1e-6)  # last stamp to last stamp: the spread within a round cancels


def test_more_rounds_estimate_closer_to_the_truth():
    times = [0.05] * 30 + [0.6] * 5  # most rounds quick, a few slow: one round usually reads low
    rng = random.Random(1)
    one, all_ = ratios(times, 1, 2000, rng), ratios(times, len(times), 10, rng)
    assert all(abs(r - 1) < 1e-9 for r in all_)
    assert one[len(one) // 2] < 0.5  # the median draw of one round: under half the mean
    sixteen = ratios(times, 16, 2000, rng)
    assert sixteen[len(sixteen) // 2] > one[len(one) // 2] and sixteen[-1] - sixteen[0] < one[-1] - one[0]
