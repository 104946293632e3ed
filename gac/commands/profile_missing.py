"""`gac align --profile-missing`: measure exactly the points an alignment lacked, then align again.

On this machine when it is the alignment's platform (or when none was named):
the points go into the local database, or with --server to the service as
ingest batches. For another platform, the service queues them as a profiling
job for that platform's agents instead. The user sees how many points and how
long they should take before anything is timed, and confirms above a threshold.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console

console = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line

CONFIRM_ABOVE_S = 120.0  # ask before timing for longer than this (unless --yes)
MAX_ROUNDS = 3  # measure, align, and again while the new points ask for more
RULES_ONLY = "rules only"


@dataclass
class Measured:
    points: int
    failures: int
    seconds: float
    estimated_seconds: float
    platform: str  # fingerprint of this machine, to align against next


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def missing_points(result: dict[str, Any]) -> list[tuple[str, str, dict[str, int], str]]:
    return [
        (m["op"], m["dtype"], {**m["fixed_shape"], m["axis"]: d}, m["axis"])
        for m in result.get("missing", [])
        for d in m["dims"]
    ]


def confirm(points: int, curves: int, estimated: float, where: str, yes: bool) -> None:
    """Say what will be timed; ask above the threshold. Exits when the user (or a non-interactive run) declines."""
    from gac.contracts.plans import Timing
    from solver.profile_time import most_seconds

    cap = Timing().time_cap_ms / 1e3
    console.print(f"profiling {points} missing points on {curves} curves {where}: about {_duration(estimated)} "
                  f"if they are as quiet as the platform's measured points (an upper bound where it has none), "
                  f"at most about {_duration(most_seconds(points))} (each point to its {cap:g} s time cap)")
    if yes or estimated <= CONFIRM_ABOVE_S:
        return
    if not sys.stdin.isatty():
        console.print(f"[red]that is more than {_duration(CONFIRM_ABOVE_S)}: pass --yes to profile without asking[/red]")
        raise typer.Exit(2)
    if not typer.confirm("go ahead?", default=True, err=True):
        raise typer.Exit(1)


def this_machine(device: str, threads: int | None):  # noqa: ANN201 - the agent's session object
    from profiler_agent.cli import open_session

    return open_session(device, threads)


def measure(result: dict[str, Any], session, yes: bool, server: str | None, token: str | None, db: str | None) -> Measured:  # noqa: ANN001
    """Time the result's missing points here and store them (local database, or the service)."""
    from gac.contracts.plans import plan_for_points
    from profiler_agent.cli import run_info, run_with_progress

    missing = result.get("missing", [])
    points = missing_points(result)
    estimated = sum(m.get("estimated_seconds") or 0.0 for m in missing)
    label = session.platform.label()
    confirm(len(points), len(missing), estimated, f"on this machine ({label})", yes)
    plan = plan_for_points(f"missing for {result['model']}"[:200], points)  # the default timing, as the estimate assumed
    rows: list = []
    started = time.perf_counter()
    run = run_with_progress(session, plan, rows.append, adaptive=False)
    seconds = time.perf_counter() - started
    info = run_info(plan.name)
    if server:
        _send(server, token, session.platform, info, rows)
    else:
        _store_locally(db, session.platform, info, rows)
    console.print(f"measured {len(rows)} points in {_duration(seconds)} (estimated {_duration(estimated)}); {len(run.failures)} failed")
    return Measured(len(rows), len(run.failures), seconds, estimated, session.platform.fingerprint())


def _store_locally(db: str | None, platform, info, rows: list) -> None:  # noqa: ANN001
    from profiler_agent.delivery import make_batches
    from service.ingest.service import ingest_local

    for batch in make_batches(platform, info, rows):
        ingest_local(batch, db)


def _send(server: str, token: str | None, platform, info, rows: list) -> None:  # noqa: ANN001
    from profiler_agent.delivery import Deliverer

    if not token:
        console.print("[red]sending measurements to --server needs an ingest token (--token or GAC_TOKEN)[/red]")
        raise typer.Exit(2)
    deliverer = Deliverer(server, token, platform, info, log=lambda msg: console.print(f"[yellow]{msg}[/yellow]"))
    for m in rows:
        deliverer.add(m)
    deliverer.close()
    s = deliverer.stats
    if s.rejected_batches or s.spooled_batches:
        console.print(
            f"[red]the service took {s.inserted + s.duplicates} of {len(rows)} rows: {s.rejected_rows} rejected, "
            f"{s.spooled_rows} spooled (`gac agent flush` resends them)[/red]"
        )
        for e in s.errors[:5]:
            console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
