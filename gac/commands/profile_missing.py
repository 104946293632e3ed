"""`gac align --profile-missing`: measure exactly the points an alignment lacked, then align again.

On this machine when it is the alignment's platform (or when none was named):
the points go into the local database, or with --server to the service as
ingest batches. For another platform, the service queues them as a profiling
job for that platform's agents instead. The user sees how many points and how
long they should take before anything is timed, and confirms above a threshold.
"""

from __future__ import annotations

import functools
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line

CONFIRM_ABOVE_S = 120.0  # ask before timing for longer than this (unless --yes)
MAX_ROUNDS = 3  # measure, align, and again while the new points ask for more
# Some points are timed first, before the rest: the estimate is then this machine's rate on the work itself.
PROBE_WARMUP = 8  # the first ones only warm up (clocks, libraries): their time is left out of the rate
# Then as many as take about PROBE_SECONDS at the warm-up's rate, in whole rounds of the timer (the GPU
# timer's 8 points share one host round trip), at least PROBE_MIN_ROUNDS of them. A round's time is set
# by its slowest point, so one round is a poor sample of the mean: replayed from an H100's alignment of
# Llama-3-8B, one round's rate put the run's time outside 0.5-2x of the truth in 55 % of draws, 8 rounds
# in 6 %, 16 in 0.6 % (benchmarks/probe_estimate.py). The probe's points are stored like the rest: only
# the prompt waits for them.
PROBE_SECONDS = 5.0
PROBE_MIN_ROUNDS = 8
PROBE_MAX = 128  # points, unless PROBE_MIN_ROUNDS of the timer's rounds hold more
PROBE_SHARE = 4  # ... and at most 1 / PROBE_SHARE of the points after the warm-up
RULES_ONLY = "rules only"


Point = tuple[str, str, dict[str, int], str]  # (op, dtype, shape, axis)


@dataclass
class Measured:
    points: int
    failures: int
    seconds: float
    estimated_seconds: float  # this round's points
    platform: str  # fingerprint of this machine, to align against next
    failed: frozenset = frozenset()  # point_key of each point that could not be timed
    estimated_total: float = 0.0  # with the points later rounds are expected to ask for (a first pass's)


def point_key(op: str, dtype: str, shape: dict[str, int]) -> tuple:
    """A point's identity across rounds: its kernel, dtype and shape."""
    return (op, dtype, tuple(sorted(shape.items())))


def duration(seconds: float) -> str:
    """'45 s', '7.5 min', '6.8 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def missing_points(result: dict[str, Any]) -> list[Point]:
    return [(m["op"], m["dtype"], {**m["fixed_shape"], m["axis"]: d}, m["axis"]) for m in result.get("missing", []) for d in m["dims"]]


ESTIMATE_BASIS = "if they are as quiet as the platform's measured points (an upper bound where it has none)"


def confirm(points: int, curves: int, estimated: float, where: str, yes: bool, basis: str = ESTIMATE_BASIS, queue: bool = False) -> None:
    """Say what will be timed (here, or with `queue` by the platform's agents); ask above the threshold.
    Exits when the user (or a non-interactive run) declines."""
    from gac.contracts.plans import Timing
    from gac.solver.profile_time import most_seconds

    cap, bound = Timing().time_cap_ms / 1e3, most_seconds(points)
    # An estimate over the bound holds an allowance for the points a first pass calls for next (say_first_pass).
    rest = "; the rest of the estimate is for the points they call for next" if estimated > bound else ""
    console.print(
        f"{'queueing' if queue else 'profiling'} {points} missing points on {curves} curves {where}: about {duration(estimated)} "
        f"{basis}; these {points} at most about {duration(bound)} (each point to its {cap:g} s time cap){rest}"
    )
    if yes or estimated <= CONFIRM_ABOVE_S:
        return
    if not sys.stdin.isatty():
        action = "queue" if queue else "profile"
        console.print(f"[red]that is more than {duration(CONFIRM_ABOVE_S)}: pass --yes to {action} without asking[/red]")
        raise typer.Exit(2)
    if not typer.confirm("go ahead?", default=True, err=True):
        raise typer.Exit(1)


def say_first_pass(later: int | None = None) -> None:
    """What a first pass's estimate counts: the points it calls for next, which the alignment asks for after it.
    later: the points the estimate counted for them (a CPU's: every other dim of the windows); None: the solver's allowance."""
    from gac.solver.profile_time import LATER_PASSES

    if later is not None:
        console.print(
            f"these are each window's lattice and a sample; a CPU's curves are seldom a lattice, so the next round should ask for "
            f"up to the other {later} dims of their windows (counted in the estimate; `--exhaustive` measures every dim at once)"
        )
        return
    console.print(
        f"these are each window's lattice and a sample: the estimate allows {LATER_PASSES:.0%} for the points "
        "they call for next (where nothing is measured yet, every other dim of their windows at its time cap), "
        "and a curve they do not explain as a lattice calls for every dim (`--exhaustive` measures every dim at once)"
    )


def later_points_expected(missing: list[dict[str, Any]], points: int, device_kind: str) -> int:
    """How many points the rounds after a first pass should ask for: on a CPU, whose curves are no lattice,
    every other dim of the first passes' windows (`later_dims`); elsewhere the solver's allowance
    (LATER_PASSES of this pass), never more than those dims."""
    from gac.solver.profile_time import LATER_PASSES

    at_most = sum(m.get("later_dims") or 0 for m in missing)
    return at_most if device_kind == "cpu" else min(at_most, math.ceil(LATER_PASSES * points))


def this_machine(device: str | None, threads: int | None, timing: bool = True, pinned: str | None = None):  # noqa: ANN201 - the agent's session object
    """The agent's session here; `timing` False only looks (no thread count chosen for the load, no load
    warning); `pinned`: why `threads` is not this run's to choose (the platform being extended was timed with it)."""
    from gac.agent.cli import open_session

    return open_session(device, threads, timing, pinned)


def measure(
    result: dict[str, Any],
    session,  # noqa: ANN001 - the agent's session object
    yes: bool,
    server: str | None,
    token: str | None,
    db: str | None,
    probe: bool = True,
    kept_before: int = 0,
    skip: frozenset = frozenset(),
) -> Measured:
    """Time the result's missing points here, storing them as they are measured (local database, or the service).

    Points this platform already has are left out: an alignment made without a platform (rules
    only) lists every point, those an earlier, interrupted run stored included. Stopped by Ctrl-C
    or SIGTERM, what was measured is kept (the message counts `kept_before`, an earlier round's),
    and the same command continues from there. `probe`: time some points first for the estimate
    (a later round, which the first round's estimate covered, does not). `skip`: the point_key of
    points not to time (an earlier round could not: they would only fail again)."""
    from gac.agent.cli import left_to_time, run_info, run_keeping
    from gac.contracts.plans import plan_for_points
    from gac.solver.sparse_needs import FIRST_PASS

    missing = _without(result.get("missing", []), skip)
    points = missing_points({"missing": missing})
    estimated = sum(m.get("estimated_seconds") or 0.0 for m in missing)
    label, fingerprint = session.platform.label(), session.platform.fingerprint()
    if not points:
        return Measured(0, 0, 0.0, 0.0, fingerprint)
    plan = plan_for_points(f"missing for {result['model']}"[:200], points)  # the default timing, as the estimate assumed
    with _destination(server, token, db, session.platform, plan) as (known, open_sink):
        todo = left_to_time(plan, known, adaptive=False).plan
        if todo is None:
            return Measured(0, 0, 0.0, 0.0, fingerprint)
        if stored := sum(len(points) for points in known.values()):
            # The alignment asks only for what is missing: an earlier, stopped run's points stay.
            console.print(f"{stored} points of these curves are stored already (kept, not measured again)")
        n = todo.n_points()
        curves = sum(len(sw.dtypes) for sw in todo.sweeps)  # plan_for_points: one dtype of a sweep is one curve
        estimated = estimated * n / len(points)
        started = time.perf_counter()
        measured = failed = 0
        failed_keys: set[tuple] = set()
        sinks = []
        first_pass = any(FIRST_PASS in m.get("reasons", ()) for m in missing)
        estimated_total, later = 0.0, None  # the probe's figures, where it runs
        keep = functools.partial(run_keeping, session, adaptive=False, first_pass=first_pass)  # stopped, it says more may follow
        if probe and n > PROBE_WARMUP + PROBE_MIN_ROUNDS and (yes or sys.stdin.isatty()):
            # The solver's figure is a bound (each point to its time cap, where nothing near it is measured):
            # this machine's rate now, on the work itself, is a better one.
            order = probe_order(todo)
            console.print(f"timing some of the {n} points first, for the estimate")
            # The first points pay once for what the rest do not (a GPU's clocks ramping, library set-up):
            # the rate is that of the points after them.
            warm_from = time.perf_counter()
            sinks.append(open_sink(run_info(plan.name, session.device)))
            warmup = points_plan(todo, order[:PROBE_WARMUP])
            run = keep(warmup, sinks[-1], quiet=True, kept_before=kept_before, left_after=n - PROBE_WARMUP)
            measured, failed = len(run.measurements), len(run.failures)
            failed_keys |= failed_in(run)
            rate_from = time.perf_counter()
            per_round = max(1, int(getattr(session.timer, "points_per_round", 1)))
            k = probe_size((rate_from - warm_from) / PROBE_WARMUP, n - PROBE_WARMUP, per_round)
            sinks.append(open_sink(run_info(plan.name, session.device)))
            probe_plan = points_plan(todo, order[PROBE_WARMUP : PROBE_WARMUP + k])
            kept, left = kept_before + measured, n - PROBE_WARMUP - k
            run = keep(probe_plan, sinks[-1], quiet=True, kept_before=kept, left_after=left)
            measured, failed = measured + len(run.measurements), failed + len(run.failures)
            failed_keys |= failed_in(run)
            per_point = (time.perf_counter() - rate_from) / k
            probed = PROBE_WARMUP + k
            estimated = per_point * n
            # A first pass calls for more points, timed at the same rate: the estimate counts them.
            later = later_points_expected(missing, n, session.platform.device_kind) if first_pass else 0
            estimated_total = per_point * (n + later)
            todo = points_plan(todo, order[probed:])
            asking = time.perf_counter()
            confirm(
                n - probed,
                curves,
                per_point * (n - probed + later),
                f"on this machine ({label})",
                yes,
                basis=f"at the rate of the last {k} of the {probed} points just timed"
                + (f", with the {later} points the next round should ask for" if later else ""),
            )
            started += time.perf_counter() - asking  # the time the question waited for an answer is no timing
        else:
            confirm(n, curves, estimated, f"on this machine ({label})", yes)
            started = time.perf_counter()
        if first_pass:
            say_first_pass(later if later and session.platform.device_kind == "cpu" else None)
        sinks.append(open_sink(run_info(plan.name, session.device)))
        run = keep(todo, sinks[-1], kept_before=kept_before + measured)
        measured, failed = measured + len(run.measurements), failed + len(run.failures)
        failed_keys |= failed_in(run)
        seconds = time.perf_counter() - started
    if server:
        for sink in sinks:
            _check_delivered(sink, sink.committed)
    console.print(f"measured {measured} points in {duration(seconds)} (estimated {duration(estimated)}); {failed} failed")
    return Measured(measured, failed, seconds, estimated, fingerprint, frozenset(failed_keys), estimated_total or estimated)


def _without(missing: list[dict[str, Any]], skip: frozenset) -> list[dict[str, Any]]:
    """The missing curves without the skipped points: a curve keeps the share of its estimate its
    other dims make up, and goes when none is left."""
    kept = []
    for m in missing:
        dims = [d for d in m["dims"] if point_key(m["op"], m["dtype"], {**m["fixed_shape"], m["axis"]: d}) not in skip]
        if dims:
            share = len(dims) / len(m["dims"])
            kept.append({**m, "dims": dims, "estimated_seconds": (m.get("estimated_seconds") or 0.0) * share})
    return kept


def failed_in(run) -> set[tuple]:  # noqa: ANN001 - the agent's RunResult
    """The point_key of each point the run could not time."""
    return {point_key(o.point.op.value, o.point.dtype.value, o.point.shape) for o in run.failures}


def probe_size(warm_per_point_s: float, left: int, per_round: int = 1) -> int:
    """How many points to time for the estimate after the warm-up: about PROBE_SECONDS at the warm-up's
    rate (which holds one-time costs, so this errs short), in whole rounds of `per_round` points, from
    PROBE_MIN_ROUNDS rounds to PROBE_MAX points, and at most a quarter of the `left` points: a sample
    of the work, which stays the main run's (a small plan is estimated from fewer)."""
    least = PROBE_MIN_ROUNDS * per_round
    wanted = PROBE_SECONDS / warm_per_point_s if warm_per_point_s > 0 else PROBE_MAX
    k = min(max(PROBE_MAX, least), max(least, math.ceil(wanted / per_round) * per_round))
    return max(1, min(k, left // PROBE_SHARE))


def probe_order(plan):  # noqa: ANN001, ANN201 - SweepPlan in, its points out
    """The plan's points in a seeded random order: the probe takes them from the front."""
    points = [(p.op, p.dtype, p.shape, p.axis) for p in plan.iter_points()]
    random.Random(0).shuffle(points)
    return points


def points_plan(plan, points):  # noqa: ANN001, ANN201 - (SweepPlan, points) in, SweepPlan out
    """These points as a plan with the plan's name and timing."""
    from gac.contracts.plans import plan_for_points

    return plan_for_points(plan.name, points, plan.timing)


@contextmanager
def _destination(server: str | None, token: str | None, db: str | None, platform, plan) -> Iterator[tuple[Any, Callable]]:  # noqa: ANN001
    """(what this platform has stored on the plan's curves, a function making a sink for a run's rows):
    the local database, or with --server the service (and the points waiting for it in the spool)."""
    if not server:
        from gac.commands.local_store import LocalStore, stored_points
        from gac.service.cli import database_said
        from gac.service.ingest.service import LocalDatabase

        with database_said(db):
            opened = LocalDatabase(db)
        with opened as local:
            yield stored_points(local, platform, plan), lambda run: LocalStore(local, platform, run)
        return
    from gac.agent.delivery import Deliverer, Spool
    from gac.agent.http_client import StopSafeClient
    from gac.agent.interrupt import commit_every_s
    from gac.agent.resume import known_in_spool, known_on_server, merge, plan_curves

    if not token:
        console.print("[red]sending measurements to --server needs an ingest token (--token or GAC_TOKEN)[/red]")
        raise typer.Exit(2)
    fingerprint, spool = platform.fingerprint(), Spool()
    with StopSafeClient(timeout=30.0) as client:
        stored = known_on_server(client, server, token, fingerprint, plan_curves(plan))
        known = merge(stored or {}, known_in_spool(spool, server, fingerprint))
        yield (
            known,
            lambda run: Deliverer(
                server,
                token,
                platform,
                run,
                spool=spool,
                client=client,
                commit_every_s=commit_every_s(),
                log=lambda msg: console.print(f"[yellow]{escape(msg)}[/yellow]"),
            ),
        )


def _check_delivered(deliverer, rows: int) -> None:  # noqa: ANN001
    s = deliverer.stats
    if s.rejected_batches or s.waiting:
        console.print(
            f"[red]the service took {s.inserted + s.duplicates} of {rows} rows: {s.rejected_rows} rejected, "
            f"{s.waiting_rows} spooled (`gac agent flush` resends them)[/red]"
        )
        for e in s.errors[:5]:
            console.print(f"[red]{escape(str(e))}[/red]")
        raise typer.Exit(1)
