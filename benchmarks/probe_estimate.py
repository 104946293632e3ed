"""How well the first points of `gac align --profile-missing` estimate the whole run's time, replayed
from a run's stored measurements.

The GPU timer times points in rounds of POINTS_PER_ROUND that share one host round trip; a round's
points are stamped within a few ms of each other, so the stamps give each round's time (from the last
stamp of the round before). The estimate is the mean time per point of the probe's rounds; the truth,
that of all rounds. Drawn many times at random, each rule's estimate over the truth:

    python benchmarks/probe_estimate.py RUN.db [--run RUN_ID] [--draws 20000]

The baseline is the rule before (one round after the warm-up); the other, how many rounds the probe
now times (gac.commands.profile_missing.probe_size at the run's own rate, and fixed counts beside it).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
from datetime import datetime

from gac.agent.timing import POINTS_PER_ROUND
from gac.commands.profile_missing import PROBE_WARMUP, probe_size

ROUND_GAP_S = 0.003  # stamps further apart than this belong to different rounds


def round_times(db: str, run: str | None) -> tuple[str, list[float], int]:
    """(the run's id, each round's seconds after the first, points): the run with most points unless named."""
    con = sqlite3.connect(db)
    if run is None:
        run = con.execute("select run_id from measurements group by run_id order by count(*) desc limit 1").fetchone()[0]
    rows = con.execute("select measured_at from measurements where run_id = ? order by measured_at", (run,))
    stamps = [datetime.fromisoformat(r[0]) for r in rows]
    con.close()
    ends = [stamps[i - 1] for i in range(1, len(stamps)) if (stamps[i] - stamps[i - 1]).total_seconds() > ROUND_GAP_S] + [stamps[-1]]
    return run, [(b - a).total_seconds() for a, b in zip(ends, ends[1:])], len(stamps)


def ratios(times: list[float], rounds: int, draws: int, rng: random.Random) -> list[float]:
    truth = statistics.fmean(times)
    return sorted(statistics.fmean(rng.sample(times, rounds)) / truth for _ in range(draws))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="a gac.db (SQLite) that a --profile-missing run stored its points in")
    ap.add_argument("--run", help="the run's id (default: the run with most points)")
    ap.add_argument("--draws", type=int, default=20_000)
    args = ap.parse_args()
    run, times, points = round_times(args.db, args.run)
    per_point = sum(times) / max(1, points - POINTS_PER_ROUND)
    print(
        f"run {run}: {points} points in {len(times) + 1} rounds; a round {statistics.fmean(times):.3f} s on average "
        f"(median {statistics.median(times):.3f}, CV {statistics.pstdev(times) / statistics.fmean(times):.2f})"
    )
    now = probe_size(per_point, 10**9, POINTS_PER_ROUND) // POINTS_PER_ROUND
    print(f"the probe now: {now} rounds after a warm-up of {PROBE_WARMUP} points at this run's rate ({per_point * 1e3:.1f} ms a point)")
    print("estimate / truth, by the rounds the probe times:")
    print(f"{'rounds':>6}  {'p5':>5}  {'median':>6}  {'p95':>5}  {'outside 0.5-2x':>14}")
    rng = random.Random(0)
    base = None
    for rounds in sorted({1, 2, 4, 8, 16, now}):
        r = ratios(times, rounds, args.draws, rng)
        out = sum(x < 0.5 or x > 2 for x in r) / len(r)
        base = out if rounds == 1 else base
        tag = "  (the rule before)" if rounds == 1 else ("  (now)" if rounds == now else "")
        vs = f", {out / base:.2f}x the rule before's" if base and rounds != 1 else ""
        print(f"{rounds:>6}  {r[len(r) // 20]:>5.2f}  {r[len(r) // 2]:>6.2f}  {r[len(r) * 19 // 20]:>5.2f}  {out:>14.1%}{vs}{tag}")


if __name__ == "__main__":
    main()
