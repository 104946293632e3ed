"""How well the first points of `gac align --profile-missing` estimate the whole run's time, replayed
from a run's stored measurements.

The GPU timer times points in rounds of POINTS_PER_ROUND that share one host round trip; a round's
points are stamped within a few ms of each other, so the stamps give each round's time (from the last
stamp of the round before). The estimate is the mean time per point of the probe's rounds; the truth,
that of all rounds. Drawn many times at random, each rule's estimate over the truth:

    python benchmarks/probe_estimate.py RUN.db [--run RUN_ID] [--draws 20000]

The baseline is the rule before (8 points after the warm-up: one round on a GPU, 8 on a CPU); the other,
how many rounds the probe now times (gac.commands.profile_missing.probe_size at the run's own rate), and
fixed counts beside them.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
from datetime import datetime

from gac.commands.profile_missing import PROBE_WARMUP, probe_size

ROUND_GAP_S = 0.003  # stamps further apart than this belong to different rounds
PROBE_BEFORE = 8  # the rule before: the rate of 8 points after the warm-up (one round of the GPU timer's)


def round_times(db: str, run: str | None) -> tuple[str, list[float], int, int]:
    """(the run's id, each round's seconds after the first, points, points a round): the run with most
    points unless named; points a round is the usual size of a round (1 on a CPU, the GPU timer's 8)."""
    con = sqlite3.connect(db)
    if run is None:
        run = con.execute("select run_id from measurements group by run_id order by count(*) desc limit 1").fetchone()[0]
    rows = con.execute("select measured_at from measurements where run_id = ? order by measured_at", (run,))
    stamps = [datetime.fromisoformat(r[0]) for r in rows]
    con.close()
    cut = [i for i in range(1, len(stamps)) if (stamps[i] - stamps[i - 1]).total_seconds() > ROUND_GAP_S]
    ends = [stamps[i - 1] for i in cut] + [stamps[-1]]
    sizes = [b - a for a, b in zip([0, *cut], [*cut, len(stamps)])]
    return run, [(b - a).total_seconds() for a, b in zip(ends, ends[1:])], len(stamps), max(1, round(statistics.median(sizes)))


def ratios(times: list[float], rounds: int, draws: int, rng: random.Random) -> list[float]:
    truth = statistics.fmean(times)
    return sorted(statistics.fmean(rng.sample(times, rounds)) / truth for _ in range(draws))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="a gac.db (SQLite) that a --profile-missing run stored its points in")
    ap.add_argument("--run", help="the run's id (default: the run with most points)")
    ap.add_argument("--draws", type=int, default=20_000)
    args = ap.parse_args()
    run, times, points, per_round = round_times(args.db, args.run)
    per_point = sum(times) / max(1, points - per_round)
    print(
        f"run {run}: {points} points in {len(times) + 1} rounds of {per_round}; a round {statistics.fmean(times):.3f} s on average "
        f"(median {statistics.median(times):.3f}, CV {statistics.pstdev(times) / statistics.fmean(times):.2f})"
    )
    before = max(1, PROBE_BEFORE // per_round)
    now = probe_size(per_point, 10**9, per_round) // per_round
    print(f"the probe now: {now} rounds after a warm-up of {PROBE_WARMUP} points at this run's rate ({per_point * 1e3:.1f} ms a point)")
    print("estimate / truth, by the rounds the probe times:")
    print(f"{'rounds':>6}  {'p5':>5}  {'median':>6}  {'p95':>5}  {'outside 0.5-2x':>14}")
    rng = random.Random(0)
    base = ratios(times, before, args.draws, rng)
    base_out = sum(x < 0.5 or x > 2 for x in base) / len(base)
    for rounds in sorted({1, 2, 4, 8, 16, before, now}):
        r = ratios(times, rounds, args.draws, rng)
        out = sum(x < 0.5 or x > 2 for x in r) / len(r)
        tag = "  (the rule before)" if rounds == before else ("  (now)" if rounds == now else "")
        vs = f", {out / base_out:.2f}x the rule before's" if base_out and rounds != before else ""
        print(f"{rounds:>6}  {r[len(r) // 20]:>5.2f}  {r[len(r) // 2]:>6.2f}  {r[len(r) * 19 // 20]:>5.2f}  {out:>14.1%}{vs}{tag}")


if __name__ == "__main__":
    main()
